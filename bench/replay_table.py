#!/usr/bin/env python3
"""Turns `ngramspec-replay --json` output (stdin) into Markdown tables.

  ngramspec-replay --streams S --drafter A --drafter B --k 4,8,16 --json | python3 bench/replay_table.py al
  ... | python3 bench/replay_table.py waste      # AL and rejected drafts per pass, overall
  ... | python3 bench/replay_table.py cost       # drafter ns per token and peak KiB, overall

Only the standard library is used.
"""
import json
import sys


def main() -> int:
    kind = sys.argv[1] if len(sys.argv) > 1 else "al"
    rows = json.load(sys.stdin)["results"]
    categories = []
    for r in rows:
        if r["category"] not in categories:
            categories.append(r["category"])
    groups = []
    for r in rows:
        key = (r["drafter"], r["k"])
        if key not in groups:
            groups.append(key)
    cell = {(r["drafter"], r["k"], r["category"]): r for r in rows}
    overall = "overall" if "overall" in categories else categories[-1]

    if kind == "al":
        print("| drafter | k | " + " | ".join(categories) + " |")
        print("|---|---:|" + "---:|" * len(categories))
        for drafter, k in groups:
            values = [f'{cell[(drafter, k, c)]["mean_accepted_length"]:.3f}' for c in categories]
            print(f"| {drafter} | {k} | " + " | ".join(values) + " |")
    elif kind == "waste":
        print("| drafter | k | AL | acceptance rate | rejected drafts per pass |")
        print("|---|---:|---:|---:|---:|")
        for drafter, k in groups:
            r = cell[(drafter, k, overall)]
            print(f'| {drafter} | {k} | {r["mean_accepted_length"]:.3f} | {r["acceptance_rate"]:.3f} | '
                  f'{r["rejected_per_pass"]:.3f} |')
    elif kind == "cost":
        print("| drafter | k | drafter ns per generated token | peak drafter KiB |")
        print("|---|---:|---:|---:|")
        for drafter, k in groups:
            r = cell[(drafter, k, overall)]
            print(f'| {drafter} | {k} | {r["drafter_ns_per_token"]:.0f} | {r["drafter_peak_bytes"] / 1024:.0f} |')
    else:
        print(f"unknown table '{kind}': use al, waste or cost", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
