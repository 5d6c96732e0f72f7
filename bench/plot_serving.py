#!/usr/bin/env python3
"""Plots simulated serving speedup against batch size from `ngramspec-replay --json` (stdin).

  build/release/tools/ngramspec-replay --streams ../shared/data/specbench/streams.tsv --drafter match \\
    --k 1,4,16 --batch 1,2,4,8,16,32,64,128,256 \\
    --cost table:1=1,2=1.25,3=1.71,5=2.77,9=5.06 --cost knee:256 --json \\
    | /usr/bin/python3 bench/plot_serving.py docs/img/serving_speedup.png

One panel per cost curve; one line per policy and k (the overall row of the first drafter). Needs
matplotlib (Debian: python3-matplotlib, seen by /usr/bin/python3).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "plain": ("black", "-", "plain"),
    "fixed": ("tab:orange", "--", "fixed k"),
    "gate": ("tab:blue", ":", "gate (MatchDrafter default)"),
    "cost": ("tab:green", "-", "cost-aware"),
}


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else "serving_speedup.png"
    rows = [r for r in json.load(sys.stdin)["results"] if r["category"] == "overall"]
    drafter = next(r["drafter"] for r in rows if r["policy"] != "plain")
    rows = [r for r in rows if r["drafter"] == drafter or r["policy"] == "plain"]
    costs = list(dict.fromkeys(r["cost"] for r in rows))
    ks = sorted({r["k"] for r in rows if r["policy"] != "plain"})
    fig, axes = plt.subplots(1, len(costs), figsize=(6 * len(costs), 4.5), squeeze=False)
    for ax, cost in zip(axes[0], costs):
        for policy, (color, line, label) in STYLE.items():
            for k in ([0] if policy == "plain" else ks):
                if policy == "gate" and k != 4:
                    continue  # the gate's lines sit on fixed's; k = 4 is the decoders' default
                if policy == "cost" and k != max(ks):
                    continue  # the cost-aware policy's k is only a cap
                points = sorted((r["batch"], r["speedup"]) for r in rows
                                if r["cost"] == cost and r["policy"] == policy and r["k"] == k)
                if not points:
                    continue
                alpha = 1.0 if policy != "fixed" else 0.35 + 0.65 * ks.index(k) / max(1, len(ks) - 1)
                name = label if policy in ("plain", "cost") and k in (0, max(ks)) else f"{label} = {k}" \
                    if policy == "fixed" else f"{label}, k = {k}"
                if policy == "cost":
                    name = f"{label}, k up to {k}"
                ax.plot([b for b, _ in points], [s for _, s in points], line, color=color, alpha=alpha,
                        marker="o", markersize=3, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (sequences decoding at once)")
        ax.set_ylabel("speedup over plain decoding")
        ax.set_title(f"verify cost {cost}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Simulated serving of 560 recorded Vicuna-7B generations (Spec-Bench), MatchDrafter", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
