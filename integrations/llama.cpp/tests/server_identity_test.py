#!/usr/bin/env python3
"""llama-server answers greedy completions identically with and without `--spec-type ngramspec`.

Starts llama-server (built with the patch in ../patches and -DLLAMA_NGRAMSPEC=ON) on 127.0.0.1 twice, once
plain and once drafting with ngramspec, sends both the same greedy /completion requests, and checks that
- every answer's text and token ids are the same in both runs, and in a third run under the learned cost (the
  default; its drafts follow the machine's timing, so they are printed, not checked), and
- the ngramspec server (drafts sized by the drafter's own gate, --spec-ngramspec-cost none, here and below)
  drafted tokens and had some of them accepted (the `draft_n` and `draft_n_accepted`
  of each answer's `timings`), so that drafting silently switched off fails the test, and
- with --golden IDS (a file of space-separated token ids generated greedily after BOS), both servers answer
  the prompt [BOS] with exactly those ids;
- with --parallel N slots and every prompt sent twice at once, twice over, each answer is still the plain
  one, and the second round, drafted from the first round's outputs in the shared corpus, has more drafts
  accepted than the first; the corpus saved on exit (--spec-ngramspec-corpus-save) starts another server
  (--spec-ngramspec-corpus) that drafts from it at once;
- a corpus file that cannot be opened stops the server at start, naming it; with --corpus-tool (ngramspec-corpus),
  so does a file recording another vocabulary (naming both sizes), and a file of unknown vocabulary holding
  tokens outside the model's is served with answers equal to plain ones (its foreign tokens never drafted).

  server_identity_test.py --server build/bin/llama-server --model stories260K.gguf
                          [--golden stories260K_greedy256.ids] [--n-predict 200] [--parallel 4]
                          [--corpus-tool build/tools/ngramspec-corpus]

Standard library only. Every wait is bounded, the servers are stopped whatever happens, and the last line
says PASS or FAIL; the exit status is 0 on success, 1 on a failed check, 2 on bad arguments.
"""

import argparse
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# Prompts whose stories260K continuations repeat themselves, so n-gram drafts get accepted.
PROMPTS = [
    "Once upon a time",
    "Lily and Ben were playing in the park.",
    "Tom had a big red ball. He",
    "One day, a little bird",
]


# The servers whose drafts are counted size them by the drafter's own gate: with the learned cost (the default)
# how much is drafted follows the machine's timing, and a count on a busy machine would prove nothing either way.
# The learned cost is checked for identity on its own server (check()).
GATE = ["--spec-ngramspec-cost", "none"]


class TestFailure(Exception):
    """A check of the test failed; the message says which and with what values."""


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path, lines=40):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"(cannot read {path}: {e})"


class Server:
    """One llama-server process on 127.0.0.1; stop() is safe to call at any time and more than once."""

    def __init__(self, args, name, extra, log_dir, parallel=1):
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.args = args
        command = [
            args.server,
            "--model", args.model,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--ctx-size", str(args.ctx_size * parallel),
            "--parallel", str(parallel),
            "--threads", str(args.threads),
            "--threads-batch", str(args.threads),
            "--seed", "0",
        ] + extra
        self.command = command
        self.log = open(self.log_path, "w", encoding="utf-8")
        try:
            self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        except OSError as e:
            self.log.close()
            raise TestFailure(f"{name}: cannot start {args.server}: {e}") from e

    def fail(self, message):
        return TestFailure(f"{self.name} server ({' '.join(self.command)}): {message}\n"
                           f"--- last lines of {self.log_path} ---\n{log_tail(self.log_path)}")

    def wait_ready(self, timeout):
        """Polls /health until it answers 200 (503 while the model loads), at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise self.fail(f"exited with status {code} before it was ready")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.2)
        raise self.fail(f"not ready after {timeout} s (last /health: {last})")

    def wait_refused(self, timeout, expect):
        """Waits for the server to exit at start, unready, and checks that its log says `expect`."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self.fail(f"still running after {timeout} s; it should have stopped at start saying {expect!r}")
        self.log.flush()
        if code == 0:
            raise self.fail(f"exited with status 0; it should have failed at start saying {expect!r}")
        text = log_tail(self.log_path, 200)
        if expect not in text:
            raise self.fail(f"exited with status {code} without saying {expect!r}")
        return code

    def post(self, path, body, timeout):
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode("utf-8"),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", errors="replace")[:500]
            raise self.fail(f"{path} {json.dumps(body)[:200]}: HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise self.fail(f"{path} {json.dumps(body)[:200]} failed: {e}") from e

    def bos(self, timeout):
        """The model's BOS token: what /tokenize makes of no text with the special tokens added."""
        tokens = self.post("/tokenize", {"content": "", "add_special": True}, timeout).get("tokens")
        if not tokens or len(tokens) != 1 or not isinstance(tokens[0], int):
            raise self.fail(f"/tokenize of no text with special tokens gave {tokens!r}, not one BOS token")
        return tokens[0]

    def complete(self, prompt, n_predict, timeout):
        return self.post("/completion", {
            "prompt": prompt,
            "n_predict": n_predict,
            "temperature": 0.0,
            "seed": 0,
            "cache_prompt": False,
            "return_tokens": True,
            "stream": False,
        }, timeout)

    def stop(self, timeout=10):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        if not self.log.closed:
            self.log.close()


def run_server(args, name, extra, log_dir, golden):
    """The answers of one server to every prompt, after checking its answer to [BOS] against `golden`."""
    server = Server(args, name, extra, log_dir)
    try:
        server.wait_ready(args.timeout)
        if golden:
            answer = server.complete([server.bos(args.timeout)], len(golden), args.timeout)
            tokens = answer.get("tokens", [])
            if tokens != golden:
                n = next((i for i, (x, y) in enumerate(zip(tokens, golden)) if x != y), min(len(tokens), len(golden)))
                raise server.fail(f"its answer to [BOS] ({len(tokens)} tokens) differs from {args.golden} "
                                  f"({len(golden)} tokens) from token {n} on")
            timings = answer.get("timings", {})
            print(f"{name}: [BOS] gives the {len(golden)} golden tokens, drafted {timings.get('draft_n', 0)}, "
                  f"accepted {timings.get('draft_n_accepted', 0)}")
        answers = [server.complete(p, args.n_predict, args.timeout) for p in PROMPTS]
        for prompt, answer in zip(PROMPTS, answers):
            if not answer.get("tokens"):
                raise server.fail(f"the answer to {prompt!r} has no tokens: {json.dumps(answer)[:500]}")
        return answers
    finally:
        server.stop()


def check(args, log_dir, golden):
    plain = run_server(args, "plain", [], log_dir, golden)
    args.plain = plain
    spec = run_server(args, "ngramspec", ["--spec-type", "ngramspec"] + GATE + args.spec_arg, log_dir, golden)
    learned = run_server(args, "ngramspec-learned", ["--spec-type", "ngramspec"] + args.spec_arg, log_dir, golden)
    learned_drafted, learned_accepted = check_same("the learned cost", PROMPTS, learned, dict(zip(PROMPTS, plain)))
    print(f"learned cost: {len(PROMPTS)} answers identical to plain, drafted {learned_drafted}, "
          f"accepted {learned_accepted} (counts follow the machine's timing; not checked)")

    drafted = accepted = 0
    for prompt, a, b in zip(PROMPTS, plain, spec):
        if a["tokens"] != b["tokens"] or a["content"] != b["content"]:
            n = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y),
                     min(len(a["tokens"]), len(b["tokens"])))
            raise TestFailure(f"prompt {prompt!r}: the answers differ from token {n} on "
                              f"(plain {len(a['tokens'])} tokens, ngramspec {len(b['tokens'])})\n"
                              f"plain:     {a['content']!r}\nngramspec: {b['content']!r}")
        if "draft_n" in a.get("timings", {}):
            raise TestFailure(f"prompt {prompt!r}: the plain server drafted: {a['timings']}")
        timings = b.get("timings", {})
        n_drafted = timings.get("draft_n", 0)
        n_accepted = timings.get("draft_n_accepted", 0)
        print(f"prompt {prompt!r}: {len(b['tokens'])} tokens identical, drafted {n_drafted}, "
              f"accepted {n_accepted}")
        drafted += n_drafted
        accepted += n_accepted

    if drafted == 0:
        raise TestFailure("the ngramspec server drafted no token for any prompt: is the type active?\n"
                          f"--- last lines of its log ---\n{log_tail(os.path.join(log_dir, 'ngramspec.log'))}")
    if accepted == 0:
        raise TestFailure(f"the ngramspec server drafted {drafted} tokens and none was accepted")
    return drafted, accepted


def complete_all(server, prompts, args):
    """The answers to `prompts`, all sent at once (one client thread each)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(lambda p: server.complete(p, args.n_predict, args.timeout), prompts))


def check_same(what, prompts, answers, plain_by_prompt):
    """Checks every answer against the plain one of its prompt; returns the drafts made and accepted."""
    drafted = accepted = 0
    for prompt, answer in zip(prompts, answers):
        plain = plain_by_prompt[prompt]
        if answer.get("tokens") != plain["tokens"] or answer.get("content") != plain["content"]:
            got = answer.get("tokens") or []
            n = next((i for i, (x, y) in enumerate(zip(plain["tokens"], got)) if x != y),
                     min(len(plain["tokens"]), len(got)))
            raise TestFailure(f"{what}, prompt {prompt!r}: the answer differs from the plain one from token {n} on\n"
                              f"plain:     {plain['content']!r}\nngramspec: {answer.get('content')!r}")
        timings = answer.get("timings", {})
        drafted += timings.get("draft_n", 0)
        accepted += timings.get("draft_n_accepted", 0)
    return drafted, accepted


def check_shared_corpus(args, log_dir, plain):
    """Concurrency, the corpus shared by the slots, saved on exit and started from."""
    plain_by_prompt = dict(zip(PROMPTS, plain))
    prompts = PROMPTS * 2
    saved = os.path.join(log_dir, "saved.ngc")
    server = Server(args, "shared", ["--spec-type", "ngramspec", "--spec-ngramspec-corpus-save", saved] + GATE + args.spec_arg,
                    log_dir, parallel=args.parallel)
    try:
        server.wait_ready(args.timeout)
        rounds = []
        for r in (1, 2):
            drafted, accepted = check_same(f"{args.parallel} slots, round {r}", prompts,
                                           complete_all(server, prompts, args), plain_by_prompt)
            print(f"{args.parallel} slots, {len(prompts)} requests at once, round {r}: identical to plain, "
                  f"drafted {drafted}, accepted {accepted}")
            rounds.append(accepted)
        if rounds[1] <= rounds[0]:
            raise server.fail(f"round 2 had {rounds[1]} drafts accepted, not more than round 1's {rounds[0]}: "
                              f"the slots do not draft from each other's earlier outputs")
    finally:
        server.stop()
    if not os.path.isfile(saved) or os.path.getsize(saved) == 0:
        raise server.fail(f"no corpus saved to {saved} on exit")

    again = Server(args, "restarted", ["--spec-type", "ngramspec", "--spec-ngramspec-corpus", saved] + GATE + args.spec_arg, log_dir)
    try:
        again.wait_ready(args.timeout)
        answers = [again.complete(p, args.n_predict, args.timeout) for p in PROMPTS]
        drafted, accepted = check_same("started from the saved corpus", PROMPTS, answers, plain_by_prompt)
    finally:
        again.stop()
    if "the shared corpus starts from '" + saved not in log_tail(again.log_path, 400):
        raise again.fail(f"its log does not say that the shared corpus starts from {saved}")
    print(f"started from the saved corpus ({os.path.getsize(saved)} bytes): identical to plain, drafted {drafted}, "
          f"accepted {accepted} (round 1 from nothing: {rounds[0]})")
    if accepted <= rounds[0] * len(PROMPTS) // len(prompts):
        raise again.fail(f"{accepted} drafts accepted from the saved corpus, not more than round 1 from nothing "
                         f"({rounds[0]} for each prompt twice)")


def check_corpus_files(args, log_dir, plain):
    """Corpus files the server refuses at start, and one of foreign tokens it serves without drafting them."""
    def refused(name, corpus, expect):
        server = Server(args, name, ["--spec-type", "ngramspec", "--spec-ngramspec-corpus", corpus], log_dir)
        try:
            server.wait_refused(args.timeout, expect)
        finally:
            server.stop()

    missing = os.path.join(log_dir, "missing.ngc")
    refused("missing-corpus", missing, f"cannot use the corpus file '{missing}'")
    print("a corpus file that cannot be opened stops the server at start, naming it")
    if not args.corpus_tool:
        return

    def build(name, records, extra):
        ids = os.path.join(log_dir, name + ".ids")
        with open(ids, "w", encoding="utf-8") as f:
            for record in records:
                f.write(" ".join(str(t) for t in record) + "\n")
        out = os.path.join(log_dir, name + ".ngc")
        result = subprocess.run([args.corpus_tool, "build", out, "--from", ids, "--first-stamp", "0"] + extra,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=args.timeout, check=False)
        if result.returncode != 0:
            raise TestFailure(f"{args.corpus_tool} build {out} failed: {result.stdout.decode(errors='replace')}")
        return out

    other = build("other-vocabulary", [plain[0]["tokens"]], ["--vocab-size", "32000"])
    refused("other-vocabulary", other, f"the corpus file '{other}' records a vocabulary of 32000 tokens, the model's has")
    print("a corpus file recording another vocabulary stops the server at start, naming it and both sizes")

    # The plain answers with a token outside any vocabulary before every 16th token from the 8th on: a
    # draft from the corpus would hand the model that token (HTTP 500 "invalid token") unless it is cut.
    foreign = 2130706697
    records = [[t for i, x in enumerate(a["tokens"]) for t in ([foreign, x] if i % 16 == 8 else [x])] for a in plain]
    unknown = build("foreign-tokens", records, [])
    server = Server(args, "foreign-tokens", ["--spec-type", "ngramspec", "--spec-ngramspec-corpus", unknown] + GATE, log_dir)
    try:
        server.wait_ready(args.timeout)
        answers = [server.complete(p, args.n_predict, args.timeout) for p in PROMPTS]
        drafted, accepted = check_same("a corpus of foreign tokens", PROMPTS, answers, dict(zip(PROMPTS, plain)))
    finally:
        server.stop()
    # On exit the server says how many drafted tokens it cut: none cut would mean the check above proved nothing.
    cut = re.search(r"ngramspec: (\d+) drafted tokens were cut for lying outside the model's vocabulary",
                    log_tail(server.log_path, 400))
    if not cut:
        raise server.fail(f"no drafted token was cut from a corpus holding token {foreign} before every 16th")
    print(f"a corpus file holding token {foreign}: answers identical to plain, drafted {drafted}, accepted {accepted}, "
          f"{cut.group(1)} foreign drafted tokens cut")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="path of llama-server built with -DLLAMA_NGRAMSPEC=ON")
    parser.add_argument("--model", required=True, help="GGUF model (stories260K.gguf)")
    parser.add_argument("--golden", help="token ids generated greedily after BOS, space-separated "
                        "(stories260K_greedy256.ids): both servers must answer [BOS] with them")
    parser.add_argument("--n-predict", type=int, default=200, help="tokens per answer (default 200)")
    parser.add_argument("--ctx-size", type=int, default=512,
                        help="context of the server's one slot; stories260K was trained on 512 (default 512)")
    # One thread: llama.cpp's pool spins at every barrier, and two spinning pools on two cores (this test
    # beside another llama.cpp test) slow each token by orders of magnitude; stories260K needs no second thread.
    parser.add_argument("--threads", type=int, default=1, help="llama-server threads (default 1)")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds to wait for a server to load and for each answer (default 120)")
    parser.add_argument("--parallel", type=int, default=4,
                        help="slots of the server that checks concurrency and the shared corpus (default 4)")
    parser.add_argument("--corpus-tool", help="ngramspec-corpus, to make the corpus files the server must refuse or "
                        "serve without drafting foreign tokens (default: those checks are left out)")
    parser.add_argument("--spec-arg", action="append", default=[],
                        help="another argument for the ngramspec server (repeatable), e.g. --spec-arg=--spec-ngramspec-n-max --spec-arg=8")
    args = parser.parse_args()

    for what, path in (("--server", args.server), ("--model", args.model), ("--golden", args.golden),
                       ("--corpus-tool", args.corpus_tool)):
        if path is not None and not os.path.isfile(path):
            print(f"error: {what} {path!r} is not a file", file=sys.stderr)
            return 2
    golden = []
    if args.golden:
        with open(args.golden, "r", encoding="utf-8") as f:
            words = f.read().split()
        try:
            golden = [int(w) for w in words]
        except ValueError as e:
            print(f"error: --golden {args.golden!r} holds something other than token ids: {e}", file=sys.stderr)
            return 2
        if not golden:
            print(f"error: --golden {args.golden!r} holds no token ids", file=sys.stderr)
            return 2
    if args.n_predict < 1 or args.ctx_size < 1 or args.threads < 1 or args.timeout <= 0 or args.parallel < 1:
        print(f"error: --n-predict ({args.n_predict}), --ctx-size ({args.ctx_size}), --threads ({args.threads}), "
              f"--parallel ({args.parallel}) and --timeout ({args.timeout}) must be positive", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="llama-server-identity-") as log_dir:
        try:
            drafted, accepted = check(args, log_dir, golden)
            check_shared_corpus(args, log_dir, args.plain)
            check_corpus_files(args, log_dir, args.plain)
        except TestFailure as e:
            print(f"FAIL: {e}")
            return 1
    print(f"PASS: {len(PROMPTS)} greedy completions identical with and without --spec-type ngramspec"
          f"{' and the golden ids reproduced' if golden else ''}, alone and {args.parallel} slots at once; "
          f"ngramspec drafted {drafted} tokens, {accepted} accepted; the shared corpus drafts across requests, "
          f"is saved and started from; bad corpus files are refused at start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
