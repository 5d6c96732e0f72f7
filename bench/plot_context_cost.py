#!/usr/bin/env python3
"""Plots what each drafter costs against context length from baselines_bench's JSON output.

  build/release/bench/baselines_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \\
    --benchmark_format=json > baselines.json
  /usr/bin/python3 bench/plot_context_cost.py baselines.json            # writes docs/context_cost.png
  ... | /usr/bin/python3 bench/plot_context_cost.py -o /tmp/context_cost.png   # JSON from stdin

Two log-log panels side by side, against the context length (1k to 128k tokens): update (ns
per observed token, the update/<drafter>/ctx:L benchmarks) and the decode step (observe, then
predict k = 4 drafts: ns per step, step/<drafter>/ctx:L/k:4). One line per drafter; each point
is the median aggregate's CPU time (or the single run's, for output without repetitions). The
title names the stream from the benchmarks' label. hot_path_bench's output
(update/<drafter>/<stream>/ctx:L) plots as well, one line per drafter and stream.

Needs matplotlib (Debian: python3-matplotlib, seen by /usr/bin/python3).
"""
import argparse
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAFTS = 4
CONTEXTS = [1024, 8192, 65536, 131072]
# The benchmarks' drafter names (baselines_bench, then hot_path_bench's) and what the legend says,
# in the legend's order.
READABLE = {
    "ngram": "NGramPredictor w512",
    "ngram(w=512)": "NGramPredictor w512",
    "ngram(w=8192)": "NGramPredictor w8192",
    "match": "MatchDrafter",
    "match+corpus": "MatchDrafter + SharedCorpus",
    "match-nogate": "MatchDrafter no gate",
    "prompt-lookup(vllm,1-4)": "vLLM prompt lookup",
    "pld-specbench": "Spec-Bench PLD",
    "ngram-cache(llama.cpp)": "llama.cpp n-gram cache",
}
PANELS = [
    ("update", None, "update: ns per observed token"),
    ("step", DRAFTS, f"decode step (observe + predict k = {DRAFTS}): ns per step"),
]
# kind/drafter[/stream]/ctx:L[/k:K], then the settings the library appends (/min_time:0.100,
# /iterations:16384, /repeats:5, ...).
NAME = re.compile(r"^(?P<kind>update|step|predict)/(?P<rest>.+?)/ctx:(?P<context>\d+)(?:/k:(?P<k>\d+))?"
                  r"(?:/[a-z_]+:[^/]+)*$")
TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", help="Google Benchmark JSON output (default: stdin)")
    parser.add_argument("-o", "--output", default=os.path.join(REPO, "docs/context_cost.png"),
                        help="the PNG to write (default: %(default)s)")
    return parser.parse_args()


def points_of(benchmarks):
    """{(kind, k): {series: {context: ns}}} and the streams named by the labels. A series is a
    drafter, or (drafter, stream) for hot_path_bench's names."""
    aggregated = any(b.get("run_type") == "aggregate" for b in benchmarks)
    points, streams = {}, []
    for b in benchmarks:
        if b.get("error_occurred"):
            continue
        if aggregated and (b.get("run_type") != "aggregate" or b.get("aggregate_name") != "median"):
            continue
        match = NAME.match(b.get("run_name", b["name"]))
        if not match:
            continue
        drafter, _, stream = match["rest"].partition("/")
        series = (drafter, stream) if stream else (drafter, "")
        label_stream = b.get("label", "").split(" ")[0]
        stream_name = stream or label_stream
        if stream_name and stream_name not in streams:
            streams.append(stream_name)
        k = int(match["k"]) if match["k"] else None
        ns = b["cpu_time"] * TO_NS[b.get("time_unit", "ns")]
        points.setdefault((match["kind"], k), {}).setdefault(series, {})[int(match["context"])] = ns
    return points, streams, aggregated


def order(series):
    drafter, stream = series
    known = list(READABLE)
    return (known.index(drafter) if drafter in known else len(known), drafter, stream)


def main():
    args = parse_args()
    try:
        if args.input:
            with open(args.input) as f:
                data = json.load(f)
        else:
            data = json.load(sys.stdin)
    except ValueError as error:
        sys.exit(f"{args.input or 'stdin'}: not Google Benchmark JSON ({error}); run the bench with "
                 "--benchmark_format=json")
    points, streams, aggregated = points_of(data.get("benchmarks", []))
    if not any(points.get((kind, k)) for kind, k, _ in PANELS):
        sys.exit("no update/<drafter>/ctx:L or step/<drafter>/ctx:L/k:4 benchmarks in the input")
    every = sorted({s for kind, k, _ in PANELS for s in points.get((kind, k), {})}, key=order)
    several_streams = len({stream for _, stream in every}) > 1
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^v<>ph*"
    style = {s: (cycle[i % len(cycle)], markers[i % len(markers)]) for i, s in enumerate(every)}

    fig, axes = plt.subplots(1, len(PANELS), figsize=(13, 5.2))
    for ax, (kind, k, title) in zip(axes, PANELS):
        for series in every:
            line = points.get((kind, k), {}).get(series)
            if not line:
                continue
            contexts = sorted(line)
            drafter, stream = series
            name = READABLE.get(drafter, drafter) + (f" ({stream})" if several_streams else "")
            color, marker = style[series]
            ax.plot(contexts, [line[c] for c in contexts], "-", color=color, marker=marker, markersize=5,
                    label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(CONTEXTS)
        ax.set_xticklabels([f"{c // 1024}k" for c in CONTEXTS])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlim(CONTEXTS[0] / 1.4, CONTEXTS[-1] * 1.4)
        ax.set_xlabel("context length (tokens observed)")
        ax.set_ylabel("ns per token" if kind == "update" else "ns per step")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    what = "median of repetitions" if aggregated else "single runs"
    fig.suptitle(f"Drafter cost against context length, {', '.join(streams) or 'unnamed'} stream"
                 f"{'s' if len(streams) > 1 else ''} (CPU time, {what})", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
