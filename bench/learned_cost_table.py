#!/usr/bin/env python3
"""The learned cost against hidden prices: Spec-Bench replays under --price, at batch 1, 8 and 32.

For each price (a GPU-like knee, a CPU-like steep curve, a staircase, the steep curve with a
shape-change price, each with noise, and a drift from the knee to the steep curve), three
planners: told the price's curve (--cost CURVE), learning from the default start (--cost learn)
and learning from a wrong prior (--cost learn:knee:256, against the steep prices). Prints
tokens per pass and speedup (plain decoding under the same price = 1) and the learned
planner's ratio to the told one and to plain.

  python3 bench/learned_cost_table.py [--replay build/release/tools/ngramspec-replay]
      [--streams ../shared/data/specbench/streams.tsv] [--k 16] [--batches 1,8,32] [--seed K]

--seed K replays the noisy prices under another draw of their noise (the price's seed=K; 1 is the
default's): one draw is one run, so a change to the learner is judged over several seeds.
"""
import argparse
import json
import os
import subprocess
import sys

KNEE = "knee:256"
STEEP = "table:1=1,2=1.25,4=1.7,8=2.6,16=4.4,32=8,64=15.2"
STAIRS = "table:" + ",".join(["1=1", "32=1"] + [f"{32 * t + 1}={t + 1},{32 * (t + 1)}={t + 1}" for t in range(1, 16)]) + ",1024=32"

# name, price, the curve a planner told the truth sees, extra learned priors to try
PRICES = [
    ("knee", KNEE, KNEE, []),
    ("steep", STEEP, STEEP, ["learn:" + KNEE]),
    ("stairs", STAIRS, STAIRS, []),
    ("steep, shape=4", STEEP + ",shape=4", STEEP, []),
    ("knee, noise=0.3", KNEE + ",noise=0.3", KNEE, []),
    ("steep, noise=0.3", STEEP + ",noise=0.3", STEEP, ["learn:" + KNEE]),
    ("stairs, noise=0.3", STAIRS + ",noise=0.3", STAIRS, []),
    ("steep, shape=4, noise=0.3", STEEP + ",shape=4,noise=0.3", STEEP, []),
    ("knee to steep at pass 1000", KNEE + ",drift=1000:" + STEEP, STEEP, []),
]


def run(replay, streams, k, batches, price, costs):
    cmd = [replay, "--streams", streams, "--k", str(k), "--batch", batches, "--policy", "plain,cost", "--price", price,
           "--json"]
    for c in costs:
        cmd += ["--cost", c]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [r for r in json.loads(out)["results"] if r["category"] == "overall"]
    return {(r["batch"], r["policy"], r["cost"]): r for r in rows}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replay", default=os.path.join(root, "build/release/tools/ngramspec-replay"))
    ap.add_argument("--streams", default=os.path.join(root, "../shared/data/specbench/streams.tsv"))
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--seed", type=int, default=1, help="the noise's seed of the noisy prices (default 1)")
    args = ap.parse_args()
    if not 0 <= args.seed <= 4294967295:
        print(f"error: --seed {args.seed}: a seed is a whole number from 0 to 4294967295", file=sys.stderr)
        return 2
    if not os.path.exists(args.streams):
        print(f"skipped: {args.streams} is not there (the Spec-Bench streams live in ../shared/data)")
        return 0
    if not os.path.exists(args.replay):
        print(f"error: {args.replay} is not built (cmake --workflow --preset release)", file=sys.stderr)
        return 2
    batches = [int(b) for b in args.batches.split(",")]
    print(f"Spec-Bench, k {args.k}: speedup over plain decoding under the same price (tokens per pass)"
          + (f"; the noise's seed {args.seed}" if args.seed != 1 else ""))
    print(f"{'price':<28} {'batch':>5} {'told':>14} {'learn':>14} {'learn/told':>10} {'learn/plain':>11}  other priors")
    short = []
    for name, price, told, priors in PRICES:
        if args.seed != 1 and "noise=" in price:
            price += f",seed={args.seed}"
        costs = [told, "learn"] + priors
        rows = run(args.replay, args.streams, args.k, args.batches, price, costs)
        for b in batches:
            t = rows[(b, "cost", rows_name(rows, b, told))]
            l = rows[(b, "cost", "learn")]
            ratio = l["speedup"] / t["speedup"]
            others = []
            for p in priors:
                o = rows[(b, "cost", rows_name(rows, b, p))]
                others.append(f"{p}: {o['speedup']:.3f} ({o['speedup'] / t['speedup']:.3f} of told)")
                if o["speedup"] / t["speedup"] < 0.97 or o["speedup"] < 0.99:
                    short.append(f"{name}, batch {b}, {p}")
            print(f"{name:<28} {b:>5} {t['speedup']:>7.3f} ({t['mean_accepted_length']:.2f}) "
                  f"{l['speedup']:>7.3f} ({l['mean_accepted_length']:.2f}) {ratio:>10.3f} {l['speedup']:>11.3f}  "
                  + "; ".join(others))
            if ratio < 0.97 or l["speedup"] < 0.99:
                short.append(f"{name}, batch {b}")
    print("targets (>= 0.97x told and >= 0.99x plain): " + ("all met" if not short else "short at " + "; ".join(short)))
    return 0


def rows_name(rows, batch, cost):
    """The cost column's name of `cost` (the replay prints curves normalized)."""
    names = {c for (b, p, c) in rows if b == batch and p == "cost"}
    if cost in names:
        return cost
    if cost.startswith("learn:"):
        match = [n for n in names if n.startswith("learn:")]
    else:
        match = [n for n in names if not n.startswith("learn")]
    if len(match) != 1:
        raise SystemExit(f"cannot find the rows of --cost {cost} among {sorted(names)}")
    return match[0]


if __name__ == "__main__":
    sys.exit(main())
