#!/usr/bin/env python3
"""Instructions per update() and per predict() of NGramPredictor and MatchDrafter, counted by
callgrind on the recorded streams: the figures of bench/hot_path_bench, free of the timing noise
of a shared machine.

  python3 bench/instructions_per_token.py                       # every drafter, stream and context
  python3 bench/instructions_per_token.py --drafter match --stream long --contexts 1024,8192
  python3 bench/instructions_per_token.py --tokens 4096 --json
  python3 bench/instructions_per_token.py --replay build/release/tools/ngramspec-replay

For each drafter, stream and context of hot_path_bench (the rows its update/ benchmarks list),
it runs hot_path_bench's walk mode under callgrind twice:

  valgrind --tool=callgrind --collect-atstart=no --toggle-collect=<update> \\
      hot_path_bench --walk <drafter> <stream> <L> <tokens>
  valgrind --tool=callgrind --collect-atstart=no --toggle-collect=<predict> \\
      hot_path_bench --walk <drafter> <stream> <L> <tokens> --predict 4

so that each run counts only the instructions spent inside that one function (and what it
calls) over the <tokens> tokens after the context of L tokens, and prints a Markdown table of
instructions per update and per predict (k = 4). hot_path_bench zeroes the preparation's costs
before its walk (it must be built where valgrind's headers are installed).

With --replay it instead runs the replay tool under callgrind over every recorded stream,

  valgrind --tool=callgrind ngramspec-replay --streams <shared>/data/specbench/streams.tsv \\
      --drafter match --k 4 --timing-repeats 1

and reports the calls of ngramspec::MatchDrafter::update(unsigned int) from every caller, their
inclusive instructions and the instructions per call: the cost of an update as the replay's
decode loop makes it; then how much of it the n-gram counts' update and the gate's calibration
take.

Only the standard library is used.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAFTS = 4
SPAN = "std::span<unsigned int, 18446744073709551615ul>"
# The functions each walk counts, as callgrind names them (demangled).
FUNCTIONS = {
    "ngram": {
        "update": "ngramspec::NGramPredictor::update(unsigned int)",
        "predict": f"ngramspec::NGramPredictor::predict({SPAN}) const",
    },
    "match": {
        "update": "ngramspec::MatchDrafter::update(unsigned int)",
        "predict": f"ngramspec::MatchDrafter::predict({SPAN}) const",
    },
}
REPLAY_FUNCTION = FUNCTIONS["match"]["update"]
# What an observed token's update spends in its two largest parts, both called from it alone:
# the n-gram counts' update and the gate's calibration (absent when the compiler inlined it).
REPLAY_PARTS = {
    "the counts' update": "ngramspec::NGramPredictor::update(unsigned int, std::array<unsigned long, 9ul> const&)",
    "the calibration": "ngramspec::MatchDrafter::calibrate(unsigned int)",
}
ROW = re.compile(r"^update/(?P<drafter>[^/]+)/(?P<stream>[^/]+)/ctx:(?P<context>\d+)(/.*)?$")


def comma_list(text):
    return [item for item in text.split(",") if item]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default=os.path.join(REPO, "build/release/bench/hot_path_bench"),
                        help="the hot_path_bench binary (default: %(default)s)")
    parser.add_argument("--drafter", action="append", type=comma_list, default=[],
                        help="only these drafters (ngram, match); repeat or separate with commas")
    parser.add_argument("--stream", action="append", type=comma_list, default=[],
                        help="only these streams (specbench, long; synthetic-mixture without the data)")
    parser.add_argument("--contexts", type=comma_list, default=[],
                        help="only these contexts, e.g. 1024,8192 (a stream keeps those it has)")
    parser.add_argument("--tokens", type=int, default=16384, help="tokens walked after the context (default 16384)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    parser.add_argument("--replay", metavar="PATH_TO_ngramspec-replay",
                        help="count MatchDrafter::update per call over a replay of every recorded stream instead")
    parser.add_argument("--shared", default=os.path.join(os.path.dirname(REPO), "shared"),
                        help="the shared folder with data/specbench/streams.tsv (default: %(default)s)")
    parser.add_argument("--valgrind", default="valgrind", help="the valgrind command (default: %(default)s)")
    args = parser.parse_args()
    args.drafter = [d for group in args.drafter for d in group]
    args.stream = [s for group in args.stream for s in group]
    try:
        args.contexts = [int(c) for c in args.contexts]
    except ValueError:
        parser.error(f"--contexts: expected numbers separated by commas, got {','.join(args.contexts)}")
    if args.tokens < 1:
        parser.error("--tokens must be at least 1")
    for drafter in args.drafter:
        if drafter not in FUNCTIONS:
            parser.error(f"--drafter: unknown drafter '{drafter}' (use {', '.join(FUNCTIONS)})")
    return args


def run(command):
    """Runs `command`; exits with its output when it fails."""
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}")
    return done


def rows_of(bench):
    """(drafter, stream, context) of every update/ benchmark hot_path_bench registers, in its order."""
    if not os.access(bench, os.X_OK):
        sys.exit(f"no hot_path_bench at {bench}: build it (cmake --build BUILD --target hot_path_bench) "
                 "or pass --bench PATH")
    listed = run([bench, "--benchmark_list_tests"])
    sys.stderr.write(listed.stderr)  # why the synthetic stream stands in, when it does
    rows = []
    for name in listed.stdout.split():
        match = ROW.match(name)
        if match:
            rows.append((match["drafter"], match["stream"], int(match["context"])))
    return rows


def read_header_costs(path):
    """Ir of a callgrind output file: its summary: line (the program's total as callgrind_annotate
    reports it), else its totals: line."""
    events, summary, totals = None, None, None
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                summary = line.split()[1:]
            elif line.startswith("totals:"):
                totals = line.split()[1:]
    costs = summary if summary is not None else totals
    if events is None or costs is None:
        sys.exit(f"{path}: no events:, summary: or totals: line")
    index = events.index("Ir")
    return int(costs[index]) if index < len(costs) else 0


def count_walk(args, drafter, stream, context, function, predict):
    """Instructions inside `function` over the walk, and the walk's output."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        command = [args.valgrind, "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={function}",
                   f"--callgrind-out-file={out}", args.bench, "--walk", drafter, stream, str(context),
                   str(args.tokens)]
        if predict:
            command += ["--predict", str(DRAFTS)]
        done = run(command)
        if f"walked {args.tokens} tokens" not in done.stdout:
            sys.exit(f"unexpected output of {' '.join(command)}:\n{done.stdout}")
        if "preparation not zeroed" in done.stdout:
            sys.exit(f"{args.bench} was built without valgrind's headers, so its counts would include the "
                     "preparation: install valgrind (apt-get install valgrind) and build it again")
        return read_header_costs(out), done.stdout


def walks(args):
    rows = [row for row in rows_of(args.bench)
            if (not args.drafter or row[0] in args.drafter) and (not args.stream or row[1] in args.stream)
            and (not args.contexts or row[2] in args.contexts)]
    if not rows:
        sys.exit("no drafter, stream and context left to count (see --drafter, --stream, --contexts)")
    results = []
    for drafter, stream, context in rows:
        functions = FUNCTIONS[drafter]
        print(f"counting {drafter} {stream} ctx:{context} ...", file=sys.stderr, flush=True)
        update_ir, _ = count_walk(args, drafter, stream, context, functions["update"], predict=False)
        predict_ir, output = count_walk(args, drafter, stream, context, functions["predict"], predict=True)
        drafted = re.search(r"drafted (\d+) tokens", output)
        results.append({
            "drafter": drafter,
            "stream": stream,
            "context": context,
            "tokens": args.tokens,
            "instructions_per_update": update_ir / args.tokens,
            "instructions_per_predict": predict_ir / args.tokens,
            "k": DRAFTS,
            "drafts_per_call": int(drafted[1]) / args.tokens if drafted else None,
        })
    return results


def print_walks(results, as_json):
    if as_json:
        json.dump({"results": results}, sys.stdout, indent=2)
        print()
        return
    print(f"| drafter | stream | context | instructions per update | instructions per predict (k = {DRAFTS}) |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        print(f'| {r["drafter"]} | {r["stream"]} | {r["context"]} | {r["instructions_per_update"]:.0f} | '
              f'{r["instructions_per_predict"]:.0f} |')


def inclusive_calls(path, function):
    """Calls of `function` and their inclusive Ir, summed over every caller in a callgrind file."""
    return inclusive_calls_of(path, [function])[function]


def inclusive_calls_of(path, functions):
    """{function: (calls, inclusive Ir)} for each of `functions`, summed over every caller.

    A call record is `cfn=(id) name` (or `cfn=(id)` once the id is named, the same ids as fn=),
    then `calls=N target`, then a cost line: the caller's position(s), then the inclusive costs
    of the calls, one per event."""
    names = {}
    positions, ir_index = 1, 0
    totals = {function: [0, 0] for function in functions}
    callee = None  # the function of the latest cfn= line
    pending = None  # the number of calls of the record whose cost line comes next
    name_line = re.compile(r"^c?fn=(?:\((\d+)\))?\s*(.*)$")
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if pending is not None:
                if callee in totals:
                    fields = line.split()
                    at = positions + ir_index
                    totals[callee][0] += pending
                    totals[callee][1] += int(fields[at]) if at < len(fields) else 0
                pending = None
                continue
            if line.startswith("positions:"):
                positions = len(line.split()[1:])
            elif line.startswith("events:"):
                ir_index = line.split()[1:].index("Ir")
            elif line.startswith("fn=") or line.startswith("cfn="):
                match = name_line.match(line)
                ident, name = match[1], match[2]
                if ident is not None and name:
                    names[ident] = name
                resolved = names.get(ident, name) if ident is not None else name
                if line.startswith("cfn="):
                    callee = resolved
            elif line.startswith("calls="):
                pending = int(line[len("calls="):].split()[0])
    return {function: tuple(total) for function, total in totals.items()}


def replay(args):
    streams = os.path.join(args.shared, "data/specbench/streams.tsv")
    if not os.path.exists(streams):
        sys.exit(f"no recorded streams at {streams} (see --shared)")
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        command = [args.valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", args.replay,
                   "--streams", streams, "--drafter", "match", "--k", "4", "--timing-repeats", "1"]
        print(f"running {' '.join(command)} ...", file=sys.stderr, flush=True)
        run(command)
        counted = inclusive_calls_of(out, [REPLAY_FUNCTION, *REPLAY_PARTS.values()])
    calls, inclusive = counted[REPLAY_FUNCTION]
    if calls == 0:
        sys.exit(f"no call of {REPLAY_FUNCTION} in the replay's profile")
    parts = {part: counted[function][1] / calls for part, function in REPLAY_PARTS.items() if counted[function][0] > 0}
    if args.json:
        json.dump({"function": REPLAY_FUNCTION, "calls": calls, "instructions": inclusive,
                   "instructions_per_call": inclusive / calls, "parts_per_call": parts}, sys.stdout, indent=2)
        print()
    else:
        print(f"{REPLAY_FUNCTION}: {calls} calls, {inclusive} Ir inclusive, {inclusive / calls:.1f} Ir per call")
        for part, function in REPLAY_PARTS.items():
            share = f"{parts[part]:.1f} Ir per call ({100 * parts[part] * calls / inclusive:.0f} %)" if part in parts \
                else "not a call of its own in this build"
            print(f"  of which {part} ({function}): {share}")


def main():
    args = parse_args()
    if args.replay:
        replay(args)
    else:
        print_walks(walks(args), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
