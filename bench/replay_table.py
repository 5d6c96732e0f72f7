#!/usr/bin/env python3
"""Turns `ngramspec-replay --json` output (stdin) into Markdown tables.

  ngramspec-replay --streams S --drafter A --drafter B --k 4,8,16 --json | python3 bench/replay_table.py al
  ... | python3 bench/replay_table.py waste      # AL and rejected drafts per pass, overall
  ... | python3 bench/replay_table.py cost       # drafter ns per token and peak KiB, overall
  ... | python3 bench/replay_table.py speedup    # simulated serving speedup per category
  ... | python3 bench/replay_table.py policies   # per cost and batch: each policy's best k, overall,
                                                 # and the cost policy's lowest category

Rows of a run with several batches, policies or costs (--batch, --policy, --cost) are told
apart by those columns, which the tables then add.

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
    # A configuration: drafter and k, and the serving settings where a run has several.
    serving = [f for f in ("cost", "batch", "policy") if len({r.get(f) for r in rows}) > 1]
    if kind == "speedup":
        serving = [f for f in ("cost", "batch", "policy") if f in rows[0]]

    def config(r):
        return (r["drafter"], r["k"]) + tuple(r.get(f) for f in serving)

    groups = []
    for r in rows:
        if config(r) not in groups:
            groups.append(config(r))
    cell = {config(r) + (r["category"],): r for r in rows}
    overall = "overall" if "overall" in categories else categories[-1]
    head = "| drafter | k | " + "".join(f"{f} | " for f in serving)
    rule = "|---|---:|" + "---|" * len(serving)

    def lead(group):
        return "| " + " | ".join(str(v) for v in group) + " | "

    if kind in ("al", "speedup"):
        field = "mean_accepted_length" if kind == "al" else "speedup"
        print(head + " | ".join(categories) + " |")
        print(rule + "---:|" * len(categories))
        for group in groups:
            values = [f'{cell[group + (c,)][field]:.3f}' for c in categories]
            print(lead(group) + " | ".join(values) + " |")
    elif kind == "waste":
        print(head + "AL | acceptance rate | rejected drafts per pass |")
        print(rule + "---:|---:|---:|")
        for group in groups:
            r = cell[group + (overall,)]
            print(lead(group) + f'{r["mean_accepted_length"]:.3f} | {r["acceptance_rate"]:.3f} | '
                  f'{r["rejected_per_pass"]:.3f} |')
    elif kind == "cost":
        print(head + "drafter ns per generated token | peak drafter KiB |")
        print(rule + "---:|---:|")
        for group in groups:
            r = cell[group + (overall,)]
            print(lead(group) + f'{r["drafter_ns_per_token"]:.0f} | {r["drafter_peak_bytes"] / 1024:.0f} |')
    elif kind == "policies":
        print_policies(rows, overall)
    else:
        print(f"unknown table '{kind}': use al, waste, cost, speedup or policies", file=sys.stderr)
        return 2
    return 0


def print_policies(rows, overall):
    """One line per (cost, batch): plain, then the best k of fixed and gate, and cost at its
    largest k (its cap), overall, with the lowest category speedup of cost at that k."""
    keys = []
    for r in rows:
        if (r["cost"], r["batch"]) not in keys:
            keys.append((r["cost"], r["batch"]))
    print("| cost | batch | plain | fixed, best k | gate, best k | cost | cost, lowest category |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for cost, batch in keys:
        here = [r for r in rows if r["cost"] == cost and r["batch"] == batch]

        def best(policy):
            found = [r for r in here if r["policy"] == policy and r["category"] == overall]
            if not found:
                return "-"
            r = max(found, key=lambda r: r["speedup"])
            return f'{r["speedup"]:.3f} (k {r["k"]})'

        costed = [r for r in here if r["policy"] == "cost"]
        top = max((r["k"] for r in costed), default=None)
        cell, low = "-", "-"
        if top is not None:
            mine = [r for r in costed if r["k"] == top]
            cell = next(f'{r["speedup"]:.3f}' for r in mine if r["category"] == overall)
            worst = min((r for r in mine if r["category"] != overall), key=lambda r: r["speedup"])
            low = f'{worst["speedup"]:.3f} ({worst["category"]})'
        plain = next((f'{r["speedup"]:.3f}' for r in here if r["policy"] == "plain" and r["category"] == overall), "-")
        print(f"| {cost} | {batch} | {plain} | {best('fixed')} | {best('gate')} | {cell} | {low} |")


if __name__ == "__main__":
    sys.exit(main())
