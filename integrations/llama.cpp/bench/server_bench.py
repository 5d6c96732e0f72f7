#!/usr/bin/env python3
"""llama-server under load: tokens per second and output identity, plain against speculative types.

For every server type (plain, `--spec-type ngramspec`, llama.cpp's own n-gram types) the benchmark starts
llama-server on 127.0.0.1 at a free port, waits for /health and runs three phases on it before stopping it:

- cold: --cold requests one after another on the fresh server;
- load: --load requests from --clients clients at once;
- warm: the cold phase's requests again, one after another.

Every request is a greedy /completion (temperature 0, top_k 1, a fixed seed, cache_prompt false so that each
request decodes its prompt afresh) of --n-predict tokens. Request i of a phase asks for prompt i modulo the number
of prompts. A phase's figure is the tokens generated over the phase's wall time. Every answer is compared with the
reference, the plain server's answer to the same prompt when it was alone (its cold phase; prompts it did not reach
there are asked afterwards, one at a time), and the requests whose tokens differ are named.

  server_bench.py --server build/llama-cpp/bin/llama-server --model ../shared/models/stories260K.gguf
                  [--types plain,ngramspec,ngram-mod] [--rounds 2] [--json out.json]

Standard library only. Every request has a timeout, the whole run has a time limit (--time-limit), nothing is
retried, and each server is stopped whatever happens (an error, the limit, Ctrl-C or SIGTERM). Exit status: 0 when
every answer came and equals the reference, 1 when one differs or failed or a server failed, 2 on bad arguments, 3
when the time limit cut the run short, 128 + the signal's number when Ctrl-C or a signal stopped it.
"""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from server_identity_test import Server, TestFailure, free_port  # noqa: E402 (the folder is put on the path above)

DEFAULT_PROMPTS_FILE = os.path.join(HERE, "..", "prompts", "stories20.txt")

# Ten prompts beside stories20.txt's twenty, in TinyStories' style and with the repetition its stories have, so
# that drafts from the text itself and from earlier answers have something to find. prompts/refrains20.txt is
# left out of the defaults so that it can serve as a held-out set (--prompts).
EXTRA_PROMPTS = [
    "The frog jumped on a log. Then the frog jumped on a rock. Then the frog jumped",
    "Sam had a toy car. He pushed the car. Vroom, vroom! He pushed the car again.",
    "Every morning Mia said, \"Good morning, sun!\" and every night she said,",
    "The little duck went to the pond. The big duck went to the pond too.",
    "Ben built a tower of blocks. It fell down. Ben built the tower again. It fell down again.",
    "Once upon a time, there was a little cat named Kitty. Kitty liked to play with her ball.",
    "Lily and her mom went to the shop. They bought milk, bread and eggs.",
    "The dog barked, \"Woof, woof!\" The cat said, \"Meow, meow!\" The cow said,",
    "One day, Tim found a big box in his room. He opened the box and saw",
    "The girl counted the stars. One star, two stars, three stars, four stars,",
]

# The server types the benchmark knows by name and the flags each adds to llama-server's command line. The n-gram
# types are those of the pinned llama.cpp (common/speculative.cpp's name table), run at their defaults.
KNOWN_TYPES = {
    "plain": [],
    "ngramspec": ["--spec-type", "ngramspec"],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-map-k": ["--spec-type", "ngram-map-k"],
    "ngram-map-k4v": ["--spec-type", "ngram-map-k4v"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
    "ngram-cache": ["--spec-type", "ngram-cache"],
}
DEFAULT_TYPES = "plain,ngramspec,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache"
PHASES = ("cold", "load", "warm")
PHASE_TITLES = {"cold": "cold, one at a time", "load": "{clients} clients", "warm": "warm, one at a time"}


class BenchError(Exception):
    """The run cannot go on (a server that does not start or exits); the message says which and why."""


class TimeLimit(Exception):
    """--time-limit was reached."""


class Stop(BaseException):
    """SIGTERM or SIGHUP: stop like Ctrl-C does."""


class Deadline:
    """The whole run's time limit: remaining() is what is left, in seconds."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def remaining(self):
        return self.end - time.monotonic()

    def check(self, what):
        if self.remaining() <= 0:
            raise TimeLimit(f"the time limit of {self.seconds:g} s was reached {what}")


class BenchServer(Server):
    """One llama-server on 127.0.0.1 with the benchmark's command line. Waiting for /health, requests, the failure
    messages (naming the command, with the log's last lines) and stop(), safe at any time and more than once, are
    the identity test's (tests/server_identity_test.py)."""

    def __init__(self, args, label, flags, log_dir, round_index):
        self.name = label
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, f"{label}-round{round_index}.log")
        self.args = args
        self.command = [args.server, "-m", args.model, "-np", str(args.parallel), "-c", str(args.ctx_size),
                        "-t", str(args.threads), "--host", "127.0.0.1", "--port", str(self.port)] + flags
        self.log = open(self.log_path, "w", encoding="utf-8")
        try:
            # A session of its own: Ctrl-C at a terminal reaches the benchmark alone, which then stops the server.
            self.process = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            self.log.close()
            raise BenchError(f"{label}: cannot start {args.server}: {e}") from e

    def describe(self):
        return " ".join(shlex.quote(a) for a in self.command)

    def start(self, timeout, deadline):
        """Waits for /health within `timeout` seconds and the run's time limit."""
        try:
            self.wait_ready(max(min(timeout, deadline.remaining()), 0))
        except TestFailure as e:
            deadline.check(f"while the {self.name} server was loading")
            raise BenchError(str(e)) from e

    def answer(self, prompt, args, deadline):
        """One greedy completion: (tokens, content, drafted, accepted, None), or (None, None, 0, 0, error)."""
        timeout = min(args.request_timeout, deadline.remaining())
        if timeout <= 0:
            return None, None, 0, 0, "not sent: the time limit was reached"
        body = {"prompt": prompt, "n_predict": args.n_predict, "temperature": 0.0, "top_k": 1,
                "seed": args.seed, "cache_prompt": False, "return_tokens": True, "stream": False}
        try:
            answer = self.post("/completion", body, timeout)
        except TestFailure as e:
            # Its first line names the server, its command and the request; what went wrong comes after those.
            return None, None, 0, 0, str(e).split("\n")[0].split(json.dumps(body)[:200], 1)[-1].lstrip(": ").removeprefix("failed: ")
        tokens = answer.get("tokens")
        if not isinstance(tokens, list):
            return None, None, 0, 0, f"the answer has no token ids: {json.dumps(answer)[:300]}"
        timings = answer.get("timings", {})
        return (tokens, answer.get("content", ""), int(timings.get("draft_n", 0)),
                int(timings.get("draft_n_accepted", 0)), None)


def run_phase(server, args, prompts, count, clients, deadline):
    """`count` requests, request i for prompt i % len(prompts), from `clients` threads; returns the phase's record."""
    results = [None] * count
    next_index = [0]
    lock = threading.Lock()

    def client():
        while deadline.remaining() > 0:
            with lock:
                i = next_index[0]
                if i >= count:
                    return
                next_index[0] += 1
            p = i % len(prompts)
            tokens, content, drafted, accepted, error = server.answer(prompts[p], args, deadline)
            results[i] = {"request": i, "prompt": p, "tokens": tokens, "content": content, "drafted": drafted,
                          "accepted": accepted, "error": error}

    load_before = os.getloadavg()[0]
    start = time.monotonic()
    if clients == 1:
        client()
    else:
        threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            # Joined with a timeout so that Ctrl-C reaches this thread; each request has its own timeout.
            while t.is_alive():
                t.join(0.2)
    wall = time.monotonic() - start
    for i in range(count):
        if results[i] is None:
            results[i] = {"request": i, "prompt": i % len(prompts), "tokens": None, "content": None,
                          "drafted": 0, "accepted": 0, "error": "not sent: the time limit was reached"}
    generated = sum(len(r["tokens"]) for r in results if r["tokens"] is not None)
    return {"requests": results, "wall_s": wall, "generated": generated,
            "load_average": [load_before, os.getloadavg()[0]],
            "tokens_per_s": generated / wall if wall > 0 else 0.0,
            "drafted": sum(r["drafted"] for r in results), "accepted": sum(r["accepted"] for r in results)}


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_phase(phase, reference, prompts):
    """Marks each request of `phase` against the reference; returns the descriptions of those that differ."""
    differ = []
    for r in phase["requests"]:
        ref = reference.get(r["prompt"])
        if r["error"] is not None:
            r["identical"] = False
            differ.append(f"request {r['request']} (prompt {r['prompt'] + 1}): failed: {r['error']}")
        elif ref is None:
            r["identical"] = False
            differ.append(f"request {r['request']} (prompt {r['prompt'] + 1}): no reference to compare with")
        elif r["tokens"] != ref["tokens"] or r["content"] != ref["content"]:
            r["identical"] = False
            n = first_difference(r["tokens"], ref["tokens"])
            differ.append(f"request {r['request']} (prompt {r['prompt'] + 1}, {prompts[r['prompt']][:40]!r}): "
                          f"differs from token {n} on ({len(r['tokens'])} tokens, plain alone "
                          f"{len(ref['tokens'])})")
        else:
            r["identical"] = True
    phase["differ"] = differ
    return differ


def run_type(args, label, flags, prompts, reference, log_dir, round_index, deadline, records):
    """Starts one server, runs the three phases and stops it, adding its record to `records` as it goes (a run
    cut short keeps the phases it finished); fills `reference` when it is the plain server."""
    server = BenchServer(args, label, flags, log_dir, round_index)
    try:
        server.start(args.start_timeout, deadline)
        record = {"type": label, "round": round_index, "command": server.describe(), "phases": {}}
        records.append(record)
        for name, count, clients in (("cold", args.cold, 1), ("load", args.load, args.clients),
                                     ("warm", args.warm, 1)):
            if count == 0:
                continue
            deadline.check(f"before the {label} server's {name} phase")
            if server.process.poll() is not None:
                raise server.fail(f"exited with status {server.process.returncode} before its {name} phase")
            phase = run_phase(server, args, prompts, count, clients, deadline)
            # A phase the time limit cut short is no figure: it is left out.
            deadline.check(f"during the {label} server's {name} phase")
            record["phases"][name] = phase
            if name == "cold" and label == "plain" and not reference:
                for r in phase["requests"]:
                    if r["error"] is None and r["prompt"] not in reference:
                        reference[r["prompt"]] = {"tokens": r["tokens"], "content": r["content"]}
            print(f"round {round_index} {label} {name}: {phase['generated']} tokens in {phase['wall_s']:.2f} s, "
                  f"{phase['tokens_per_s']:.0f} tokens/s", file=sys.stderr, flush=True)
        if label == "plain":
            # The prompts of the other phases that the cold phase did not reach (or whose request failed), asked
            # alone, untimed.
            for p in range(min(len(prompts), max(args.cold, args.load, args.warm))):
                if p not in reference:
                    deadline.check("while the plain server answered the reference prompts")
                    tokens, content, _, _, error = server.answer(prompts[p], args, deadline)
                    if error is None:
                        reference[p] = {"tokens": tokens, "content": content}
        if server.process.poll() is not None:
            raise server.fail(f"exited with status {server.process.returncode} during the run")
    finally:
        server.stop()


def fmt_rate(values):
    return " / ".join(f"{v:.0f}" for v in values)


def fmt_ratio(values):
    """The rounds' range of ratios and, from three rounds on, their median: the figure least moved by one noisy round."""
    lo, hi = min(values), max(values)
    text = f"{lo:.2f}x" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}x"
    return text + (f", median {statistics.median(values):.2f}x" if len(values) >= 3 else "")


def summarize(records, labels):
    """Per type and phase: tokens/s of each round, ratio to plain of each round, requests that differ."""
    plain = {(r["round"], n): r["phases"][n]["tokens_per_s"] for r in records if r["type"] == "plain"
             for n in r["phases"]}
    summary = {}
    for label in labels:
        rows = [r for r in records if r["type"] == label]
        entry = {}
        for name in PHASES:
            phases = [(r["round"], r["phases"][name]) for r in rows if name in r["phases"]]
            if not phases:
                continue
            rates = [p["tokens_per_s"] for _, p in phases]
            ratios = [p["tokens_per_s"] / plain[(k, name)] for k, p in phases if plain.get((k, name))]
            entry[name] = {
                "tokens_per_s": rates,
                "ratio_to_plain": ratios,
                "median_ratio_to_plain": statistics.median(ratios) if ratios else None,
                "requests": sum(len(p["requests"]) for _, p in phases),
                "differ": sum(len(p["differ"]) for _, p in phases),
                "drafted": sum(p["drafted"] for _, p in phases),
                "accepted": sum(p["accepted"] for _, p in phases),
            }
        summary[label] = entry
    return summary


def table(summary, labels, clients):
    titles = [PHASE_TITLES[n].format(clients=clients) for n in PHASES]
    lines = ["| server | " + " | ".join(titles) + " | outputs equal to plain single-request decoding | drafted / accepted |",
             "|---|" + "---:|" * len(PHASES) + "---|---:|"]
    for label in labels:
        entry = summary.get(label, {})
        cells = []
        for name in PHASES:
            e = entry.get(name)
            if e is None:
                cells.append("-")
            elif label == "plain" or not e["ratio_to_plain"]:
                cells.append(fmt_rate(e["tokens_per_s"]))
            else:
                cells.append(f"{fmt_rate(e['tokens_per_s'])} ({fmt_ratio(e['ratio_to_plain'])})")
        differ = [f"{e['differ']} of {e['requests']} {name}" for name, e in entry.items() if e["differ"]]
        identity = "all" if entry and not differ else ("none run" if not entry else ", ".join(differ) + " differ")
        drafted = sum(e["drafted"] for e in entry.values())
        accepted = sum(e["accepted"] for e in entry.values())
        name = "plain" if label == "plain" else f"`{label}`"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {identity} | "
                     + ("-" if label == "plain" else f"{drafted} / {accepted}") + " |")
    return "\n".join(lines)


def read_prompts(paths):
    prompts = []
    for path in paths:
        with open(path, "r", encoding="utf-8") as f:
            prompts.extend(line.strip() for line in f if line.strip())
    return prompts


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--server", required=True, help="llama-server (patched for --spec-type ngramspec)")
    parser.add_argument("--model", required=True, help="GGUF model (../shared/models/stories260K.gguf)")
    parser.add_argument("--types", default=DEFAULT_TYPES,
                        help=f"server types, comma-separated; plain always runs first (default {DEFAULT_TYPES}); "
                             f"known: {', '.join(KNOWN_TYPES)}")
    parser.add_argument("--type-args", nargs=2, action="append", default=[], metavar=("TYPE", "ARGS"),
                        help="more llama-server arguments for one type, as one shell-quoted string (repeatable), "
                             "e.g. --type-args ngram-mod '--spec-ngram-mod-n-match 3'")
    parser.add_argument("--add-type", nargs=2, action="append", default=[], metavar=("LABEL", "ARGS"),
                        help="a server type of your own: a label and its llama-server arguments (repeatable), "
                             "e.g. --add-type ngramspec-k8 '--spec-type ngramspec --spec-ngramspec-n-max 8'")
    parser.add_argument("--prompts", action="append", default=[], metavar="FILE",
                        help="a file of prompts, one a line (repeatable); default: prompts/stories20.txt and "
                             "ten prompts of this script")
    parser.add_argument("--n-predict", type=int, default=128, help="tokens per answer (default 128)")
    parser.add_argument("--cold", type=int, default=30, help="requests of the cold phase (default 30)")
    parser.add_argument("--load", type=int, default=160, help="requests of the load phase (default 160)")
    parser.add_argument("--clients", type=int, default=16, help="clients at once in the load phase (default 16)")
    parser.add_argument("--warm", type=int, default=30, help="requests of the warm phase (default 30)")
    parser.add_argument("--rounds", type=int, default=1, help="times every type runs, each on a fresh server (default 1)")
    parser.add_argument("--parallel", "-np", type=int, default=8, help="llama-server's slots, -np (default 8)")
    parser.add_argument("--ctx-size", "-c", type=int, default=8192, help="llama-server's context, -c (default 8192)")
    parser.add_argument("--threads", "-t", type=int, default=2, help="llama-server's threads, -t (default 2)")
    parser.add_argument("--seed", type=int, default=42, help="each request's seed (default 42)")
    parser.add_argument("--request-timeout", type=float, default=120, help="seconds one request may take (default 120)")
    parser.add_argument("--start-timeout", type=float, default=120,
                        help="seconds a server may take to answer /health (default 120)")
    parser.add_argument("--time-limit", type=float, default=3600, help="seconds the whole run may take (default 3600)")
    parser.add_argument("--json", metavar="FILE", help="write every figure and every request's outcome as JSON "
                        "(- for standard output, the table then going to standard error)")
    parser.add_argument("--log-dir", help="keep the servers' logs here (default: a temporary folder, removed)")
    args = parser.parse_args(argv)

    errors = []
    for what, path in (("--server", args.server), ("--model", args.model)):
        if not os.path.isfile(path):
            errors.append(f"{what} {path!r} is not a file")
    for what in ("n_predict", "cold", "load", "clients", "warm", "rounds", "parallel", "ctx_size", "threads"):
        if getattr(args, what) < (0 if what in ("cold", "load", "warm") else 1):
            errors.append(f"--{what.replace('_', '-')} {getattr(args, what)} is out of range")
    for what in ("request_timeout", "start_timeout", "time_limit"):
        if not getattr(args, what) > 0:
            errors.append(f"--{what.replace('_', '-')} {getattr(args, what)} must be positive")
    if args.cold + args.load + args.warm == 0:
        errors.append("--cold, --load and --warm are all 0: nothing to send")

    servers = {}
    labels = [t.strip() for t in args.types.split(",") if t.strip()]
    for label in labels:
        if label not in KNOWN_TYPES:
            errors.append(f"--types: unknown type {label!r} (known: {', '.join(KNOWN_TYPES)}; --add-type for others)")
        elif label in servers:
            errors.append(f"--types names {label!r} twice")
        else:
            servers[label] = list(KNOWN_TYPES[label])
    for label, extra in args.add_type:
        if label in servers or label in KNOWN_TYPES or not label or "," in label:
            errors.append(f"--add-type {label!r}: the label is empty, has a comma or is taken")
        else:
            servers[label] = []
            args.type_args.append([label, extra])
    for label, extra in args.type_args:
        if label not in servers:
            errors.append(f"--type-args {label!r}: not a type of this run ({', '.join(servers)})")
            continue
        try:
            servers[label] += shlex.split(extra)
        except ValueError as e:
            errors.append(f"--type-args {label} {extra!r}: {e}")
    if "plain" not in servers:
        servers = {"plain": [], **servers}  # the reference
    else:
        servers = {"plain": servers.pop("plain"), **servers}

    prompt_files = args.prompts or [DEFAULT_PROMPTS_FILE]
    prompts = []
    try:
        prompts = read_prompts(prompt_files)
    except OSError as e:
        errors.append(f"--prompts: {e}")
    if not args.prompts:
        prompts += EXTRA_PROMPTS
    if not prompts and not errors:
        errors.append(f"--prompts {prompt_files}: no prompt in them")
    return args, servers, prompts, errors


def main(argv):
    args, servers, prompts, errors = parse_args(argv)
    if errors:
        for e in errors:
            print(f"error: {e}", file=sys.stderr)
        return 2

    def on_signal(signum, frame):
        raise Stop(signum)

    # Ctrl-C stops the run even where it was started with SIGINT ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    deadline = Deadline(args.time_limit)
    labels = list(servers)
    records, reference = [], {}
    status, stopped = 0, None
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="llama-server-bench-")
    os.makedirs(log_dir, exist_ok=True)
    out = sys.stderr if args.json == "-" else sys.stdout
    started = time.time()
    try:
        for round_index in range(1, args.rounds + 1):
            for label in labels:
                deadline.check(f"before the {label} server of round {round_index}")
                run_type(args, label, servers[label], prompts, reference, log_dir, round_index, deadline, records)
    except TimeLimit as e:
        stopped, status = str(e), 3
    except (BenchError, TestFailure) as e:
        stopped, status = str(e), 1
    except KeyboardInterrupt:
        stopped, status = "interrupted (Ctrl-C)", 128 + signal.SIGINT
    except Stop as e:
        stopped, status = f"stopped by {signal.Signals(e.args[0]).name}", 128 + e.args[0]
    if not args.log_dir and status in (0, 3):
        for name in os.listdir(log_dir):
            os.unlink(os.path.join(log_dir, name))
        os.rmdir(log_dir)

    differ = []
    for record in records:
        for name, phase in record["phases"].items():
            for d in check_phase(phase, reference, prompts):
                differ.append(f"{record['type']}, round {record['round']}, {name}: {d}")
    summary = summarize(records, labels)

    print(f"llama-server -np {args.parallel} -c {args.ctx_size} -t {args.threads}, {os.path.basename(args.model)}, "
          f"{len(prompts)} prompts, {args.n_predict} tokens each, greedy; cold {args.cold}, load {args.load} from "
          f"{args.clients} clients, warm {args.warm}; {args.rounds} round(s) (tokens per second of each round, "
          f"ratio to plain's in the same round)\n", file=out)
    print(table(summary, labels, args.clients), file=out)
    if differ:
        print(f"\n{len(differ)} request(s) whose output is not plain single-request decoding's:", file=out)
        for d in differ:
            print(f"  {d}", file=out)
    loads = [x for r in records for p in r["phases"].values() for x in p["load_average"]]
    if loads:
        # What else ran: the server itself counts for about its threads while it decodes.
        print(f"\nthe machine's 1-minute load average at the phases' starts and ends: {min(loads):.1f} to "
              f"{max(loads):.1f} on {os.cpu_count()} CPUs", file=out)
    if stopped:
        print(f"\nstopped early: {stopped}", file=out)
        if status != 3 and not args.log_dir:
            print(f"(server logs kept in {log_dir})", file=out)
    if status == 0 and differ:
        status = 1
    answers = sum(len(p["requests"]) for r in records for p in r["phases"].values())
    if status == 0:
        print(f"\nPASS: all {answers} answers of {', '.join(labels)} equal plain single-request decoding's", file=out)
    elif differ:
        print(f"\nFAIL: {len(differ)} of {answers} answers are not plain single-request decoding's", file=out)

    if args.json:
        document = {
            "settings": {k: getattr(args, k) for k in ("n_predict", "cold", "load", "clients", "warm", "rounds",
                                                       "parallel", "ctx_size", "threads", "seed")},
            "server": args.server, "model": args.model, "prompts": prompts,
            "types": {label: flags for label, flags in servers.items()},
            "started_unix": started, "stopped_early": stopped, "status": status,
            "summary": summary, "differ": differ,
            "runs": [{**r, "phases": {n: {**{k: v for k, v in p.items() if k != "requests"},
                                         "requests": [{k: v for k, v in q.items() if k != "content"}
                                                      for q in p["requests"]]}
                                      for n, p in r["phases"].items()}} for r in records],
        }
        text = json.dumps(document)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
