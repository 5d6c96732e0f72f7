#!/usr/bin/env python3
"""The batch planner timed on a real forward: the Spec-Bench streams served through BatchSpeculator,
every engine step one batched forward of a random-weight Llama, with real acceptance.

Every engine step is one batched forward (PyTorch, no other library) of a random-weight Llama of a
real size over all running requests, each request feeding its last token and its drafts at its own
cache length, with its own KV cache that grows by the tokens it keeps and rolls back past the ones
it does not, as an engine's would. The model's tokens for a pass are the recording's (as
ngramspec-replay takes them): a greedy model whose output is each request's recorded stream, so
a draft is accepted exactly when the real model accepted it, and the wall clock is that of a real
engine verifying those drafts (the forward's own argmax is computed and copied back each step, as an
engine must, then set aside). Each request's output is checked against its recording.

Requests: `--requests-per-slot` x batch records of streams.tsv (by default
../shared/data/specbench/streams.tsv beside the repository), evenly spaced over the file (so every
category is in), prompts cut to their last `--max-prompt` tokens, outputs to the first
`--max-new-tokens`. Up to `batch` run at once; the next is admitted when one finishes (continuous
batching). A request's prefill is a pass of its own (its prompt alone), as BatchSpeculator's loop
has it; prefills are timed apart, and the figures are those of the decoding steps.

Policies, each with its own BatchSpeculator and SharedCorpus (finished outputs are copied from):
  plain   no drafts: one token per request per step
  k4, k10 MatchDrafter's defaults (its gate on), up to 4 / 10 drafts a request
  cost    the verify cost of this model at this batch, measured on this device at start (passes of
          batch x t tokens, t = 1..12, at context `--cost-context`), up to `--cost-drafts` candidates
          a request, sized by the planner (BatchSpeculator(cost=...)): the fixed curve
  learn   the same, the measured curve the prior of a cost learned from the passes served
          (BatchSpeculator(cost="learn:" + curve), each forward's time reported)

After the table, a line per shape and batch says whether the learned cost kept up: learned >= 0.98x plain
and >= the best fixed k (k4, k10) of the same run.

Shapes: tiny (2 layers of 64, vocabulary 32000; what CI runs on a CPU), 1.1b (TinyLlama-1.1B:
22 x 2048, 32 heads, 4 KV heads, FFN 5632, vocabulary 32000), 8b (Llama-3-8B: 32 x 4096, 32 heads,
8 KV heads, FFN 14336, vocabulary 128256). bf16 on a GPU, fp32 on a CPU. Attention is
scaled_dot_product_attention where torch has it (2.0 and later), else written out.

Output: a table per shape (tokens/s of the decoding steps, speedup against plain in the same run,
tokens per step per request, drafts per step per request) and, with --out, the same as JSON.
Exit status: 0; 1 when an output differs from its recording; 2 for a bad command line; 77 when
torch, ngramspec or the streams are missing.

    NGRAMSPEC_LIBRARY=build/release/libngramspec.so PYTHONPATH=python \\
        python3 python/bench/batch_planner_gpu.py --shapes 1.1b,8b --batches 1,8,32,64 --out planner.json
    python3 python/bench/batch_planner_gpu.py --device cpu --shapes tiny --batches 1,4   # what CI runs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]
SKIP = 77


def skip(message: str) -> NoReturn:
    print(f"SKIPPED: {message}", flush=True)
    sys.exit(SKIP)


try:
    import torch
    import torch.nn.functional as F
except ImportError as error:  # pragma: no cover - what a machine without them sees
    skip(f"{error.name} is not installed (Debian: apt-get install python3-torch)")
try:
    import ngramspec
except ImportError as error:  # pragma: no cover
    skip(f"ngramspec does not import ({error}); set PYTHONPATH=python and NGRAMSPEC_LIBRARY")


@dataclass(frozen=True)
class Shape:
    """A Llama's sizes."""

    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


SHAPES = {
    "tiny": Shape(dim=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=32000),
    "1.1b": Shape(dim=2048, layers=22, heads=32, kv_heads=4, ffn=5632, vocab=32000),
    "8b": Shape(dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256, rope_theta=500000.0),
}


class Llama:
    """A random-weight Llama (RMSNorm, RoPE, grouped-query attention, SwiGLU) with one KV cache row
    per slot: keys and values of shape (layers, slots, kv_heads, capacity, head_dim)."""

    def __init__(self, shape: Shape, slots: int, capacity: int, device: torch.device, dtype: torch.dtype) -> None:
        self.shape, self.device, self.dtype = shape, device, dtype
        generator = torch.Generator(device="cpu").manual_seed(0)

        def weight(*size: int) -> torch.Tensor:  # N(0, 1/fan_in): activations stay of order 1
            w = torch.empty(*size, device=device, dtype=dtype)
            if device.type == "cpu":
                w.copy_(torch.randn(*size, generator=generator) / math.sqrt(size[-1]))
            else:
                w.normal_(0.0, 1.0 / math.sqrt(size[-1]))
            return w
        s = shape
        self.embedding = weight(s.vocab, s.dim)
        self.layers = [dict(attn_norm=torch.ones(s.dim, device=device, dtype=dtype),
                            wqkv=weight((s.heads + 2 * s.kv_heads) * s.head_dim, s.dim), wo=weight(s.dim, s.dim),
                            ffn_norm=torch.ones(s.dim, device=device, dtype=dtype),
                            w13=weight(2 * s.ffn, s.dim), w2=weight(s.dim, s.ffn)) for _ in range(s.layers)]
        self.norm = torch.ones(s.dim, device=device, dtype=dtype)
        self.classifier = weight(s.vocab, s.dim)
        self.keys = torch.zeros(s.layers, slots, s.kv_heads, capacity, s.head_dim, device=device, dtype=dtype)
        self.values = torch.zeros_like(self.keys)
        self.capacity = capacity
        inverse = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, device=device, dtype=torch.float32)
                                          / s.head_dim))
        self.inverse_frequencies = inverse
        self.sdpa = getattr(F, "scaled_dot_product_attention", None)

    @staticmethod
    def _rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return (x.to(torch.float32) * torch.rsqrt(variance + 1e-5)).to(x.dtype) * weight

    def forward(self, slots: list[int], tokens: list[list[int]], lengths: list[int]) -> list[list[int]]:
        """One batched pass: slot slots[i] feeds tokens[i] at positions lengths[i] onwards (its cache
        holds lengths[i] positions); writes their keys and values there and returns the argmax after
        each fed token. The pass is packed as an engine packs it: the projections, the MLP and the
        classifier run on the fed tokens alone (their sum, not the batch times the longest), and so
        does attention, near enough: the rows are attended in groups of equal length, each group's
        queries side by side against its own caches, so that a row carrying drafts does not widen
        every other row (as variable-length attention kernels do not); each row sees its own cache
        and tokens, causally."""
        s, device = self.shape, self.device
        counts = [len(t) for t in tokens]
        if max(lengths[i] + counts[i] for i in range(len(slots))) > self.capacity:
            raise ValueError(f"a pass reaches position {max(l + c for l, c in zip(lengths, counts))}, past the "
                             f"cache's {self.capacity}")
        flat = torch.tensor([token for t in tokens for token in t], dtype=torch.long).to(device)
        row = torch.tensor([i for i, c in enumerate(counts) for _ in range(c)], dtype=torch.long).to(device)
        column = torch.tensor([j for c in counts for j in range(c)], dtype=torch.long).to(device)
        start = torch.tensor(lengths, dtype=torch.long, device=device)
        position = start[row] + column  # (N,): each fed token's position
        slot = torch.tensor(slots, dtype=torch.long, device=device)[row]
        groups = self._attention_groups(slots, counts, lengths)
        hd = s.head_dim
        x = F.embedding(flat, self.embedding)  # (N, dim)
        for layer, w in enumerate(self.layers):
            h = self._rmsnorm(x, w["attn_norm"])
            q, k, v = F.linear(h, w["wqkv"]).split([s.heads * hd, s.kv_heads * hd, s.kv_heads * hd], -1)
            q = self._rope(q.view(-1, s.heads, hd), position)
            k = self._rope(k.view(-1, s.kv_heads, hd), position)
            self.keys[layer, slot, :, position] = k
            self.values[layer, slot, :, position] = v.view(-1, s.kv_heads, hd)
            out = q.new_empty(q.shape)  # (N, heads, hd)
            for group in groups:
                out[group["tokens"]] = self._attend(layer, q[group["tokens"]], group)
            x = x + F.linear(out.reshape(-1, s.dim), w["wo"])
            h = self._rmsnorm(x, w["ffn_norm"])
            gate, up = F.linear(h, w["w13"]).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, w["w2"])
        logits = F.linear(self._rmsnorm(x, self.norm), self.classifier)
        best = logits.argmax(-1).cpu().tolist()  # the engine needs its tokens back each step
        out_rows, at = [], 0
        for c in counts:
            out_rows.append(best[at:at + c])
            at += c
        return out_rows

    def _attention_groups(self, slots: list[int], counts: list[int], lengths: list[int]) -> list[dict]:
        """The pass's rows grouped by how many tokens they feed: for each group its rows' packed token
        indices (row by row), cache slots, the keys it reads ([0, span)) and its causal mask."""
        s, device = self.shape, self.device
        offsets = [0]
        for c in counts:
            offsets.append(offsets[-1] + c)
        groups = []
        for width in sorted(set(counts)):
            rows = [i for i, c in enumerate(counts) if c == width]
            starts = torch.tensor([lengths[i] for i in rows], dtype=torch.long, device=device)
            span = max(lengths[i] for i in rows) + width
            # Row r's query j (position starts[r] + j) sees cache positions up to its own.
            query_positions = starts[:, None] + torch.arange(width, device=device)[None, :]  # (g, width)
            allowed = torch.arange(span, device=device)[None, None, :] <= query_positions[:, :, None]
            group = s.heads // s.kv_heads
            mask = allowed[:, None, None, :, :].expand(len(rows), 1, group, width, span)
            group_slots = [slots[i] for i in rows]
            contiguous = group_slots == list(range(group_slots[0], group_slots[0] + len(rows)))
            groups.append({
                "tokens": torch.tensor([t for i in rows for t in range(offsets[i], offsets[i + 1])],
                                       dtype=torch.long, device=device),
                "rows": len(rows), "width": width, "span": span,
                "slots": (slice(group_slots[0], group_slots[0] + len(rows)) if contiguous
                          else torch.tensor(group_slots, dtype=torch.long, device=device)),
                "mask": mask.reshape(len(rows), 1, group * width, span)})
        return groups

    def _attend(self, layer: int, q: torch.Tensor, group: dict) -> torch.Tensor:
        """Attention of one group's queries (rows x width tokens, heads, hd) against their caches;
        returns the same shape."""
        s, hd = self.shape, self.shape.head_dim
        n, width, span, kv = group["rows"], group["width"], group["span"], s.kv_heads
        per_kv = s.heads // kv
        keys = self.keys[layer, group["slots"], :, :span]
        values = self.values[layer, group["slots"], :, :span]
        # Queries grouped by their KV head: (rows, kv_heads, group x width, hd).
        queries = q.view(n, width, kv, per_kv, hd).permute(0, 2, 3, 1, 4).reshape(n, kv, per_kv * width, hd)
        if self.sdpa is not None:
            out = self.sdpa(queries, keys, values, attn_mask=group["mask"])
        else:
            scores = torch.matmul(queries, keys.transpose(-1, -2)) / math.sqrt(hd)
            scores = scores.masked_fill(~group["mask"], float("-inf"))
            out = torch.matmul(torch.softmax(scores.float(), -1).to(queries.dtype), values)
        return out.view(n, kv, per_kv, width, hd).permute(0, 3, 1, 2, 4).reshape(n * width, s.heads, hd)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (N, heads, head_dim), rotated by halves at `positions` (N,)."""
        angles = positions.to(torch.float32)[:, None] * self.inverse_frequencies  # (N, hd/2)
        cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :].to(x.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin


@dataclass
class Request:
    prompt: list[int]
    output: list[int]  # the recording, cut to --max-new-tokens


def read_requests(path: Path, count: int, max_prompt: int, max_new_tokens: int) -> list[Request]:
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 4 and fields[3].strip():
                records.append(Request([int(t) for t in fields[2].split()][-max_prompt:],
                                       [int(t) for t in fields[3].split()][:max_new_tokens]))
    if not records:
        raise ValueError(f"{path}: no records")
    stride = max(1, len(records) // count)
    return [records[(i * stride) % len(records)] for i in range(count)]


def serve(model: Llama, requests: list[Request], batch: int, policy: str, cost: str | None,
          cost_drafts: int, synchronize) -> dict:  # type: ignore[no-untyped-def]
    """Serves `requests` `batch` at a time with `policy`; returns its figures (and whether every
    output is its recording)."""
    corpus = ngramspec.SharedCorpus(1 << 22)
    planned = {"cost": cost, "learn": None if cost is None else "learn:" + cost}.get(policy)
    spec = ngramspec.BatchSpeculator(max_sequences=batch, corpus=corpus, cost=planned)
    learns = spec.learns_cost
    max_drafts = {"plain": 1, "k4": 4, "k10": 10, "cost": cost_drafts, "learn": cost_drafts}[policy]
    waiting = list(range(len(requests)))
    free_slots = list(range(batch))
    running: dict[int, int] = {}  # request -> slot
    length = [0] * len(requests)  # positions in its cache
    emitted: list[list[int]] = [[] for _ in requests]
    decode_s = prefill_s = 0.0
    steps = sequence_steps = drafted = 0
    while waiting or running:
        while waiting and free_slots:  # admit: the prefill, a pass of its own
            r = waiting.pop(0)
            slot = free_slots.pop(0)
            request = requests[r]
            spec.begin(r, request.prompt, max_new_tokens=len(request.output), speculate=policy != "plain",
                       max_drafts=max_drafts)
            spec.propose([r])
            synchronize()
            start = time.perf_counter()
            model.forward([slot], [request.prompt], [0])
            synchronize()
            prefill_s += time.perf_counter() - start
            if learns:  # the forward's own time, which the learned cost prices passes by
                spec.report_pass_seconds(max(time.perf_counter() - start, 1e-9))
            result = spec.accept([r], request.output[:1], [0, 1])
            length[r] = len(request.prompt)
            emitted[r].extend(request.output[:1])
            if result["finished"][0]:
                spec.finish(r)
                free_slots.append(slot)
            else:
                running[r] = slot
        if not running:
            continue
        ids = sorted(running, key=lambda r: running[r])
        start = time.perf_counter()
        drafts, offsets = spec.propose(ids)
        fed, model_tokens, model_offsets = [], [], [0]
        for i, r in enumerate(ids):
            mine = drafts[offsets[i]:offsets[i + 1]].tolist()
            fed.append([emitted[r][-1]] + mine)
            done = len(emitted[r])
            truth = requests[r].output[done:done + len(mine) + 1]
            truth += [truth[-1]] * (len(mine) + 1 - len(truth))  # past the recording's end: never emitted
            model_tokens.extend(truth)
            model_offsets.append(len(model_tokens))
            drafted += len(mine)
        began = time.perf_counter()
        model.forward([running[r] for r in ids], fed, [length[r] for r in ids])
        if learns:
            synchronize()
            spec.report_pass_seconds(max(time.perf_counter() - began, 1e-9))
        result = spec.accept(ids, model_tokens, model_offsets)
        for i, r in enumerate(ids):
            e = int(result["emitted"][i])
            emitted[r].extend(model_tokens[model_offsets[i]:model_offsets[i] + e])
            length[r] += e  # the cache keeps the fed tokens that were right: the last token and the accepted drafts
            if result["finished"][i]:
                spec.finish(r)
                free_slots.append(running.pop(r))
        synchronize()
        decode_s += time.perf_counter() - start
        steps += 1
        sequence_steps += len(ids)
    tokens = sum(len(e) - 1 for e in emitted)  # the first token of each comes from its prefill
    identical = all(e == q.output for e, q in zip(emitted, requests))
    learned = spec.describe_cost() if learns else None
    spec.close()
    corpus.close()
    return {"policy": policy, "batch": batch, "requests": len(requests), "tokens": tokens, "steps": steps,
            "decode_s": decode_s, "prefill_s": prefill_s, "tokens_per_s": tokens / decode_s if decode_s else 0.0,
            "tokens_per_request_step": tokens / max(1, sequence_steps),
            "drafts_per_request_step": drafted / max(1, sequence_steps), "identical": identical,
            "learned": learned}


def measure_cost(model: Llama, batch: int, context: int, most_drafts: int,
                 synchronize) -> str:  # type: ignore[no-untyped-def]
    """The verify cost at this batch, timed by VerifyCost.measure through the same forward at context
    `context`: passes of the batch's last tokens plus 1, 2, 4, ... drafts, the drafts carried by as few
    sequences as can hold them (up to `most_drafts` each), as the planner sends them: long drafts
    where the text repeats, none elsewhere. Timing only passes where every sequence carries the same
    number would miss what a pass's first drafts cost, which is more than the next ones (the
    forward's work per distinct row length), and price the planner's passes too cheaply. Its spec."""
    slots = list(range(batch))

    def fed(total: int) -> list[list[int]]:
        extra, rows = total - batch, []
        for _ in slots:
            carried = min(extra, most_drafts)
            extra -= carried
            rows.append([5] * (1 + carried))
        return rows

    def run_pass(total: int) -> None:
        model.forward(slots, fed(total), [context] * batch)
        synchronize()
    most = batch * most_drafts
    extras = sorted({e for e in (1, 2, 4, 8, 16, 32) if e <= most} | {batch * t for t in (1, 2, 4, 8) if batch * t <= most})
    return ngramspec.VerifyCost.measure(run_pass, [batch] + [batch + e for e in extras], repeats=7).spec


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=Path, default=REPO.parent / "shared" / "data" / "specbench" / "streams.tsv",
                        help="the recorded streams (default: ../shared/data/specbench/streams.tsv beside the repository)")
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto (default: cuda when there is one)")
    parser.add_argument("--shapes", default=None,
                        help="comma-separated shapes: tiny, 1.1b, 8b (default: 1.1b,8b on a GPU, tiny on a CPU)")
    parser.add_argument("--batches", default=None, help="comma-separated batch sizes (default: 1,8,32,64 on a GPU, "
                                                        "1,4 on a CPU)")
    parser.add_argument("--policies", default="plain,k4,k10,cost,learn", help="comma-separated: plain, k4, k10, cost, learn "
                                                                         "(default: all four)")
    parser.add_argument("--requests-per-slot", type=int, default=2, help="requests served = this x batch (default 2)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="output tokens per request (default 128)")
    parser.add_argument("--max-prompt", type=int, default=1024, help="prompts cut to their last N tokens "
                                                                      "(default 1024)")
    parser.add_argument("--cost-drafts", type=int, default=16, help="candidates per request for the cost policy "
                                                                     "(default 16)")
    parser.add_argument("--cost-context", type=int, default=512, help="cache length at which the cost is measured "
                                                                       "(default 512)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    for name in ("requests_per_slot", "max_new_tokens", "max_prompt", "cost_drafts", "cost_context"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device not in ("cuda", "cpu"):
        print(f"error: --device must be cuda, cpu or auto, got {args.device!r}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda, but torch sees no GPU", file=sys.stderr)
        return 2
    gpu = args.device == "cuda"
    shapes = (args.shapes or ("1.1b,8b" if gpu else "tiny")).split(",")
    policies = args.policies.split(",")
    try:
        batches = [int(b) for b in (args.batches or ("1,8,32,64" if gpu else "1,4")).split(",")]
    except ValueError:
        print(f"error: --batches must be comma-separated ints, got {args.batches!r}", file=sys.stderr)
        return 2
    for name, values, known in (("--shapes", shapes, SHAPES),
                                ("--policies", policies, ("plain", "k4", "k10", "cost", "learn"))):
        unknown = [v for v in values if v not in known]
        if unknown:
            print(f"error: {name}: unknown {unknown}; known: {', '.join(known)}", file=sys.stderr)
            return 2
    if "plain" not in policies:
        print("error: --policies must include plain (the speedups are against it)", file=sys.stderr)
        return 2
    if any(b < 1 for b in batches):
        print(f"error: --batches must be at least 1, got {batches}", file=sys.stderr)
        return 2
    if not args.streams.is_file():
        skip(f"no streams at {args.streams}")
    device = torch.device(args.device)
    dtype = torch.bfloat16 if gpu else torch.float32
    synchronize = torch.cuda.synchronize if gpu else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = True
    env = {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "torch": torch.__version__,
           "ngramspec": ngramspec.__version__, "dtype": str(dtype).replace("torch.", ""),
           "max_new_tokens": args.max_new_tokens, "max_prompt": args.max_prompt,
           "requests_per_slot": args.requests_per_slot, "cost_drafts": args.cost_drafts}
    print("batch planner:", json.dumps(env), flush=True)
    results: dict = {"env": env, "rows": []}
    all_identical = True
    for shape_name in shapes:
        shape = SHAPES[shape_name]
        most = max(batches)
        capacity = args.max_prompt + args.max_new_tokens + max(args.cost_drafts, 10) + 16
        capacity = max(capacity, args.cost_context + args.cost_drafts + 1)  # the cost's longest row
        started = time.perf_counter()
        with torch.no_grad():
            model = Llama(shape, most, capacity, device, dtype)
            print(f"\n{shape_name}: {shape} (made in {time.perf_counter() - started:.1f} s)", flush=True)
            for batch in batches:
                requests = read_requests(args.streams, batch * args.requests_per_slot, args.max_prompt,
                                         args.max_new_tokens)
                cost = (measure_cost(model, batch, args.cost_context, args.cost_drafts, synchronize)
                        if "cost" in policies or "learn" in policies else None)
                if cost is not None:
                    print(f"  batch {batch}: verify cost {cost}", flush=True)
                rows = [serve(model, requests, batch, policy, cost, args.cost_drafts, synchronize)
                        for policy in policies]
                plain = next(r for r in rows if r["policy"] == "plain")
                for row in rows:
                    row.update(shape=shape_name, cost=cost if row["policy"] in ("cost", "learn") else None,
                               speedup=row["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else 0.0)
                    all_identical &= row["identical"]
                    results["rows"].append(row)
                    print(f"  batch {batch:3d} {row['policy']:5s} {row['tokens_per_s']:10.1f} tok/s "
                          f"{row['speedup']:5.2f}x  {row['tokens_per_request_step']:.2f} tok/step/request  "
                          f"{row['drafts_per_request_step']:.2f} drafts/step/request  decode {row['decode_s']:.2f} s"
                          f"  prefill {row['prefill_s']:.2f} s{'' if row['identical'] else '  OUTPUT DIFFERS'}",
                          flush=True)
                if args.out:
                    args.out.write_text(json.dumps(results, indent=1))
            del model
            if gpu:
                torch.cuda.empty_cache()
    print("\n| shape | batch | " + " | ".join(f"{p} tok/s" for p in policies) + " | "
          + " | ".join(f"{p} x" for p in policies if p != "plain") + " |")
    print("|---|---|" + "---|" * (2 * len(policies) - 1))
    for shape_name in shapes:
        for batch in batches:
            rows = {r["policy"]: r for r in results["rows"] if r["shape"] == shape_name and r["batch"] == batch}
            print(f"| {shape_name} | {batch} | " + " | ".join(f"{rows[p]['tokens_per_s']:.0f}" for p in policies)
                  + " | " + " | ".join(f"{rows[p]['speedup']:.2f}" for p in policies if p != "plain") + " |")
    if "learn" in policies:
        fixed_k = [p for p in policies if p in ("k4", "k10")]
        for shape_name in shapes:
            for batch in batches:
                rows = {r["policy"]: r for r in results["rows"] if r["shape"] == shape_name and r["batch"] == batch}
                learn, plain = rows["learn"]["tokens_per_s"], rows["plain"]["tokens_per_s"]
                best = max(fixed_k, key=lambda p: rows[p]["tokens_per_s"]) if fixed_k else None
                ok_plain = learn >= 0.98 * plain
                ok_k = best is None or learn >= rows[best]["tokens_per_s"]
                print(f"learned, {shape_name}, batch {batch}: {learn / plain:.2f}x plain "
                      f"({'>=' if ok_plain else 'BELOW'} 0.98x)" +
                      (f", {learn / rows[best]['tokens_per_s']:.2f}x the best fixed k ({best}: "
                       f"{'at or above' if ok_k else 'BELOW'})" if best else ""))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if not all_identical:
        print("error: an output differs from its recording", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
