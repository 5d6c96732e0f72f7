#!/usr/bin/env python3
"""make_draft_gguf.py writes draft models that llama.cpp loads, and refuses bad arguments by name.

  draft_gguf_test.py --tool make_draft_gguf.py --engine ngramspec-llama --model stories260K.gguf --prompts FILE

Checks, with every draft written into a temporary folder:
- for every L from 1 to the model's block count: the file reads back with block_count L, exactly the tensors of
  blocks 0 .. L-1 and every tensor outside the blocks, each with the input's bytes, and every other metadata key
  unchanged; llama.cpp (through ngramspec-llama) loads it, decodes, and reports the input's vocabulary;
- L = the block count: the file is the input byte for byte, and its greedy tokens on every prompt are the input's;
- a bad --layers (0, above the block count, not a number), a missing or non-GGUF --model, a truncated GGUF, an
  --out that is a folder or the model itself are refused with exit 2 and a message naming the value, writing nothing.

Standard library only. Exit 0 on success, 1 on a failed check, 2 on bad arguments; the last line says PASS or FAIL.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile


class TestFailure(Exception):
    """A check failed; the message says which and with what values."""


def load_tool(path):
    spec = importlib.util.spec_from_file_location("make_draft_gguf", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def greedy(engine, model, prompts, n):
    """Per prompt, the greedy tokens and the vocabulary size llama.cpp reports."""
    r = run([engine, "--model", model, "--prompts", prompts, "--n", str(n), "--threads", "1", "--no-speculate",
             "--json"])
    if r.returncode != 0:
        raise TestFailure(f"ngramspec-llama could not decode with {model!r} (exit {r.returncode}): {r.stderr.strip()}")
    result = json.loads(r.stdout)
    return [o["tokens"] for o in result["outputs"]]


def write(tool, model, layers, out):
    return run([sys.executable, tool, "--model", model, "--layers", str(layers), "--out", out])


def check_structure(gguf, model, draft, layers):
    _, kvs, tensors, data_start, size, _ = gguf.read_gguf(model)
    arch, blocks, _ = gguf.model_shape(model, kvs, tensors)
    _, dkvs, dtensors, ddata_start, dsize, _ = gguf.read_gguf(draft)
    darch, dblocks, dper_block = gguf.model_shape(draft, dkvs, dtensors)
    if (darch, dblocks) != (arch, layers):
        raise TestFailure(f"L = {layers}: the draft says {darch} with {dblocks} blocks")
    expected = [t[0] for t in tensors
                if not (gguf.BLOCK_TENSOR.match(t[0]) and int(gguf.BLOCK_TENSOR.match(t[0]).group(1)) >= layers)]
    if [t[0] for t in dtensors] != expected:
        raise TestFailure(f"L = {layers}: tensors {[t[0] for t in dtensors]}, expected {expected}")
    if sorted(dper_block) != list(range(layers)):
        raise TestFailure(f"L = {layers}: blocks {sorted(dper_block)} in the draft")
    for key, vtype, value in kvs:
        dvtype, dvalue = gguf.metadata(dkvs, key)
        want = layers if key == f"{arch}.block_count" else value
        if dvtype != vtype or dvalue != want:
            raise TestFailure(f"L = {layers}: metadata {key} is {dvalue!r}, expected {want!r}")
    if len(dkvs) != len(kvs):
        raise TestFailure(f"L = {layers}: {len(dkvs)} metadata keys, the model has {len(kvs)}")
    # Every kept tensor's bytes, from its offset to the next one (or the end), as the input's.
    def spans(ts, start, end):
        starts = sorted({t[3] for t in ts})
        ends = dict(zip(starts, starts[1:] + [end - start]))
        return {t[0]: (start + t[3], t[1], t[2], ends[t[3]] - t[3]) for t in ts}
    src, dst = spans(tensors, data_start, size), spans(dtensors, ddata_start, dsize)
    with open(model, "rb") as a, open(draft, "rb") as b:
        for name, (offset, dims, ggml_type, length) in dst.items():
            soffset, sdims, stype, slength = src[name]
            if (dims, ggml_type) != (sdims, stype) or length < 1:
                raise TestFailure(f"L = {layers}: tensor {name} is {dims}/{ggml_type}, the model's {sdims}/{stype}")
            a.seek(soffset)
            b.seek(offset)
            n = min(length, slength)
            if a.read(n) != b.read(n):
                raise TestFailure(f"L = {layers}: tensor {name}'s bytes differ from the model's")


def expect_refused(tool, args, needle, out):
    r = run([sys.executable, tool] + args)
    if r.returncode != 2 or needle not in r.stderr:
        raise TestFailure(f"{args}: exit {r.returncode}, stderr {r.stderr.strip()!r}; expected exit 2 naming {needle!r}")
    if out and os.path.exists(out):
        raise TestFailure(f"{args}: refused, yet {out!r} was written")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool", required=True)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--n", type=int, default=64)
    args = parser.parse_args()
    if not os.path.isfile(args.model):
        print(f"skipped: {args.model} not found (the shared folder is not beside the project)")
        return 77

    gguf = load_tool(args.tool)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _, kvs, tensors, _, _, _ = gguf.read_gguf(args.model)
            _, blocks, _ = gguf.model_shape(args.model, kvs, tensors)
            reference = greedy(args.engine, args.model, args.prompts, args.n)
            for layers in range(1, blocks + 1):
                out = os.path.join(tmp, f"draft{layers}.gguf")
                r = write(args.tool, args.model, layers, out)
                if r.returncode != 0:
                    raise TestFailure(f"L = {layers}: exit {r.returncode}: {r.stderr.strip()}")
                check_structure(gguf, args.model, out, layers)
                tokens = greedy(args.engine, out, args.prompts, args.n if layers == blocks else 8)
                if len(tokens) != len(reference) or not all(tokens):
                    raise TestFailure(f"L = {layers}: decoded {len(tokens)} prompts, some empty")
                if layers == blocks:
                    with open(out, "rb") as a, open(args.model, "rb") as b:
                        if a.read() != b.read():
                            raise TestFailure(f"L = {blocks} (every block): the file differs from the model")
                    if tokens != reference:
                        first = next(i for i, (x, y) in enumerate(zip(tokens, reference)) if x != y)
                        raise TestFailure(f"L = {blocks}: prompt {first + 1}'s greedy tokens differ from the model's")
                print(f"L = {layers}: loads and decodes"
                      + (", greedy tokens identical to the model's on every prompt" if layers == blocks else ""))

            out = os.path.join(tmp, "refused.gguf")
            expect_refused(args.tool, ["--model", args.model, "--layers", "0", "--out", out], "--layers 0", out)
            expect_refused(args.tool, ["--model", args.model, "--layers", str(blocks + 1), "--out", out],
                           f"--layers {blocks + 1} is more than the {blocks} blocks", out)
            expect_refused(args.tool, ["--model", args.model, "--layers", "two", "--out", out], "'two'", out)
            expect_refused(args.tool, ["--model", os.path.join(tmp, "none.gguf"), "--layers", "1", "--out", out],
                           "none.gguf", out)
            expect_refused(args.tool, ["--model", args.tool, "--layers", "1", "--out", out], "is not a GGUF file", out)
            truncated = os.path.join(tmp, "truncated.gguf")
            with open(args.model, "rb") as f, open(truncated, "wb") as g:
                g.write(f.read(2000))
            expect_refused(args.tool, ["--model", truncated, "--layers", "1", "--out", out], "truncated", out)
            expect_refused(args.tool, ["--model", args.model, "--layers", "1", "--out", tmp], "is a folder", None)
            expect_refused(args.tool, ["--model", args.model, "--layers", "1", "--out", args.model], "the --model file", None)
            expect_refused(args.tool, ["--model", args.model, "--layers", "1"], "--out are required", None)
            print("bad arguments: each refused, naming the value, nothing written")
    except (TestFailure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
