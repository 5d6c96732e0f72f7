#!/usr/bin/env python3
"""A small batched inference engine in PyTorch (CPU) that speculates through ngramspec.

The model is the Llama 2 architecture of examples/llama2 (RMSNorm with eps 1e-5, RoPE on adjacent
pairs, grouped-query attention, SwiGLU, a classifier shared with the token embedding), loaded from
a llama2.c checkpoint (by default ../shared/models/stories260K.bin beside the repository) and fed
prompts tokenized with the llama2.c tokenizer (tok512.bin), ported below.

The engine serves several requests at once, the way a server does: up to --batch of them run
together, the next one is admitted when one finishes, and every engine step is one batched
forward over all running requests. Each request owns its KV cache tensor and a length; rolling
back is shortening the length. The speculative engine holds one ngramspec.BatchSpeculator for the
whole batch: propose() gives each request's drafts, the forward verifies them, accept() says how
many tokens each request emits and how far to roll its cache back.

With --tree-nodes N the program also decodes through a tree batch (BatchSpeculator(tree=...)):
propose_trees() gives each request a tree of up to N nodes (fewer as its context fills: each node
takes a cache slot, and no pass writes past seq_len), and one batched forward verifies every
request's tree, its last emitted token (the root) then its nodes, each at position cache length +
depth, attending to the cached positions and to its ancestors in the pass only, its keys and values
written to slot cache length + entry index. accept_trees() takes the model's token after every entry
and its top spec.top_k tokens (which the drafters recycle) and says which entries the path it
follows keeps; Transformer.keep() moves them to the positions that follow the cache.

The program decodes every request twice, plainly (one token per request per step) and
speculatively, checks that each request's output is the same token for token (exit status 1 if
not), checks the plain output of the BOS-only request against the golden 256 tokens that llama2.c
generates (stories260K_greedy256.ids), and prints tokens per pass and the wall-clock speedup
(with --tree-nodes, for chains and trees, each checked against plain decoding).

Greedy identity needs a forward whose result for a position does not depend on how many tokens
the pass carries (batch invariance): a verify pass of five tokens must produce, for each of them,
bitwise the logits that five one-token passes produce. Plain torch matmuls do not promise that
(a one-row product may take a different BLAS kernel than a five-row one), so this forward reduces
in a fixed order per output: products are summed along the innermost axis, (x * W).sum(-1), so
each output row is reduced alone; the token at position p attends over p + 1 positions rounded
up to a multiple of 64 (the rest masked out), a length that depends on p alone; and every exp
runs on a tensor whose size is a multiple of 64, so that no element falls in the scalar tail of a
vectorized loop. A tree pass keeps all of that: a node at position p reduces over the same span(p)
positions in the same order as the token at p of its path fed as a chain, its ancestors' keys and
values gathered into the places their positions hold, so its logits are bitwise the chain's. Run
with --check-invariance to test both (README.md in this folder has more).

Exit status: 0 when every output is identical (and the golden check passes), 1 when not, 2 for
a bad command line, 77 when torch, numpy, ngramspec or the model files are missing.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

BOS = 1  # llama2.c's BOS; generation stops when the model emits it, as run.c does
SPAN = 64  # attention spans a multiple of this many positions (see Transformer._attention)
SKIP = 77  # exit status of a run that cannot happen here (ctest's SKIP_RETURN_CODE)

REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_MODELS = Path(os.environ.get("NGRAMSPEC_SHARED_DIR", REPOSITORY.parent / "shared")) / "models"
DEFAULT_PROMPTS = ["", "Once upon a time", "Lily wanted to", "The little dog", "One day, a boy named Tom",
                   "There was a big tree"]


def skip(message: str) -> NoReturn:
    print(f"skipped: {message}", file=sys.stderr)
    sys.exit(SKIP)


try:
    import numpy as np
    import torch
except ImportError as error:  # pragma: no cover - depends on the machine
    if __name__ == "__main__":
        skip(f"{error.name} is not installed (this example needs numpy and torch)")
    raise


# ---- The llama2.c checkpoint and tokenizer -------------------------------------------------------


@dataclass(frozen=True)
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    shared_classifier: bool

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_size


def read_checkpoint(path: Path) -> tuple[Config, dict[str, np.ndarray]]:
    """The header and weights of a llama2.c checkpoint (float32, version 0), as named arrays."""
    data = path.read_bytes()
    if len(data) < 28:
        raise ValueError(f"checkpoint '{path}' is truncated: {len(data)} bytes, shorter than the 28-byte header")
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack_from("<7i", data)
    config = Config(dim, hidden, layers, heads, kv_heads, abs(vocab), seq_len, vocab > 0)
    if min(dim, hidden, layers, heads, kv_heads, seq_len) <= 0 or vocab == 0 or dim % heads or heads % kv_heads:
        raise ValueError(f"checkpoint '{path}' has an invalid header: {config}")
    c, L, kv = config, layers, config.kv_dim
    shapes = [("token_embedding", (c.vocab_size, dim)), ("rms_att", (L, dim)), ("wq", (L, dim, dim)),
              ("wk", (L, kv, dim)), ("wv", (L, kv, dim)), ("wo", (L, dim, dim)), ("rms_ffn", (L, dim)),
              ("w1", (L, hidden, dim)), ("w2", (L, dim, hidden)), ("w3", (L, hidden, dim)),
              ("rms_final", (dim,)), ("rope_tables", (seq_len * c.head_size,))]
    if not c.shared_classifier:
        shapes.append(("classifier", (c.vocab_size, dim)))
    floats = np.frombuffer(data, dtype="<f4", offset=28)
    expected = sum(math.prod(shape) for _, shape in shapes)
    if floats.size != expected or (len(data) - 28) % 4:
        raise ValueError(f"checkpoint '{path}' is {len(data)} bytes but its header implies 28 + 4 * {expected}")
    weights, at = {}, 0
    for name, shape in shapes:
        size = math.prod(shape)
        weights[name] = floats[at:at + size].reshape(shape)
        at += size
    if c.shared_classifier:
        weights["classifier"] = weights["token_embedding"]
    return config, weights


class Tokenizer:
    """llama2.c's tokenizer: BOS, a dummy-prefix space, UTF-8 characters (or their bytes, ids 3 + byte,
    when a character is not in the vocabulary), then greedy merges of the best-scoring adjacent pair."""

    def __init__(self, path: Path, vocab_size: int) -> None:
        data = path.read_bytes()
        (max_length,) = struct.unpack_from("<i", data, 0)
        at = 4
        self.pieces: list[bytes] = []
        self.scores: list[float] = []
        self.ids: dict[bytes, int] = {}
        for token in range(vocab_size):
            if at + 8 > len(data):
                raise ValueError(f"tokenizer '{path}' ends after {token} tokens; the model has {vocab_size}")
            score, length = struct.unpack_from("<fi", data, at)
            at += 8
            if not 0 <= length <= max_length or at + length > len(data):
                raise ValueError(f"tokenizer '{path}': token {token} has an invalid length {length}")
            piece = data[at:at + length]
            at += length
            self.ids.setdefault(piece, token)  # the first id of a repeated piece
            self.pieces.append(piece)
            self.scores.append(score)
        if self.pieces[3] != b"<0x00>" or self.pieces[258] != b"<0xFF>":
            raise ValueError(f"tokenizer '{path}' lacks the byte tokens <0x00>..<0xFF> at ids 3..258")

    def encode(self, text: str) -> list[int]:
        tokens = [BOS]
        if not text:
            return tokens
        spaced = (" " + text).encode("utf-8")
        i = 0
        while i < len(spaced):  # one UTF-8 character: a lead byte and up to three continuation bytes
            end = i + 1
            while end < len(spaced) and end - i < 4 and spaced[end] & 0xC0 == 0x80:
                end += 1
            piece = spaced[i:end]
            if piece in self.ids:
                tokens.append(self.ids[piece])
            else:
                tokens.extend(3 + b for b in piece)
            i = end
        while True:  # merge the best-scoring adjacent pair (never across BOS) until none is a known piece
            best, best_at = -1, 0
            for i in range(1, len(tokens) - 1):
                merged = self.ids.get(self.pieces[tokens[i]] + self.pieces[tokens[i + 1]])
                if merged is not None and (best < 0 or self.scores[merged] > self.scores[best]):
                    best, best_at = merged, i
            if best < 0:
                return tokens
            tokens[best_at:best_at + 2] = [best]

    def decode(self, tokens: list[int], previous: int = BOS) -> str:
        out = bytearray()
        for token in tokens:
            piece = self.pieces[token]
            if 3 <= token < 259:
                out.append(token - 3)
            else:
                out += piece[1:] if previous == BOS and piece.startswith(b" ") else piece
            previous = token
        return out.decode("utf-8", errors="replace")


# ---- The model ----------------------------------------------------------------------------------


def round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T, each output summed alone along the innermost axis: the same float operations for a
    row whether the pass has one row or many (torch.matmul may pick another kernel per shape)."""
    return (x[:, None, :] * w[None, :, :]).sum(-1)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    ss = (x * x).sum(-1, keepdim=True) / x.shape[-1] + 1e-5
    return weight * ((1.0 / torch.sqrt(ss)) * x)


@dataclass
class KVCache:
    """One request's keys (layers, kv heads, positions, head_size) and values, stored transposed
    (layers, kv heads, head_size, positions) so that attention sums along the innermost axis.
    `length` positions are valid; rolling back shortens it (a later pass overwrites the rest)."""

    keys: torch.Tensor
    values: torch.Tensor
    length: int = 0


@dataclass
class TreeLayout:
    """A tree pass of one request: each entry's position (the cache length + its depth), and its
    entries grouped by attention span: (rows, span, slots, future), `slots` (rows, span) the cache
    slot that each of its span's positions reads, `future` the positions masked out."""

    positions: torch.Tensor
    groups: list[tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]]


class Transformer:
    def __init__(self, path: Path) -> None:
        self.config, w = read_checkpoint(path)
        c = self.config
        tensor = lambda a: torch.from_numpy(np.array(a, dtype=np.float32))  # noqa: E731 (a writable copy)
        # The FFN's hidden width is padded with zero rows (w1, w3) and columns (w2) to a multiple of
        # 64, so the SiLU's exp never has a scalar tail; the padded units contribute exact zeros.
        self.hidden = round_up(c.hidden_dim, 64)
        pad = self.hidden - c.hidden_dim
        self.embedding = tensor(w["token_embedding"])
        self.classifier = tensor(w["classifier"])
        self.rms_att, self.rms_ffn, self.rms_final = tensor(w["rms_att"]), tensor(w["rms_ffn"]), tensor(w["rms_final"])
        self.wq, self.wk, self.wv, self.wo = (tensor(w[n]) for n in ("wq", "wk", "wv", "wo"))
        self.w1 = tensor(np.pad(w["w1"], ((0, 0), (0, pad), (0, 0))))
        self.w3 = tensor(np.pad(w["w3"], ((0, 0), (0, pad), (0, 0))))
        self.w2 = tensor(np.pad(w["w2"], ((0, 0), (0, 0), (0, pad))))
        # RoPE: pair (j, j + 1) of every head turns by pos * 10000^(-j / head_size), as run.c computes it in
        # float; cos and sin rounded to float32 once, per position and pair.
        hs = c.head_size
        freq = [np.float32(1.0) / np.power(np.float32(10000.0), np.float32(j) / np.float32(hs)) for j in range(0, hs, 2)]
        angles = [[np.float32(pos) * f for f in freq] for pos in range(c.seq_len)]
        self.cos = torch.tensor([[math.cos(a) for a in row] for row in angles], dtype=torch.float32)
        self.sin = torch.tensor([[math.sin(a) for a in row] for row in angles], dtype=torch.float32)
        self.inv_sqrt = float(np.float32(1.0) / np.sqrt(np.float32(hs)))
        self.positions = torch.arange(round_up(c.seq_len, SPAN))

    def new_cache(self) -> KVCache:
        """An empty cache for seq_len positions (slots rounded up to SPAN for the attention spans). A tree
        pass writes its entries to slots length + entry index, past its last position; BatchSpeculator
        keeps a tree's nodes within the room a chain has under max_context = seq_len, so they fit."""
        c = self.config
        positions = round_up(c.seq_len, SPAN)
        return KVCache(torch.zeros(c.n_layers, c.n_kv_heads, positions, c.head_size),
                       torch.zeros(c.n_layers, c.n_kv_heads, c.head_size, positions))

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotates the adjacent pairs of every head of x (rows, heads * head_size) at its row's position."""
        pairs = x.view(x.shape[0], -1, self.config.head_size // 2, 2)
        cos = self.cos[positions][:, None, :]
        sin = self.sin[positions][:, None, :]
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).view(x.shape)

    def _write(self, cache: KVCache, layer: int, pos: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Writes the keys and values of the T tokens of a pass into cache slots pos .. pos + T - 1."""
        c = self.config
        t = k.shape[0]
        cache.keys[layer, :, pos:pos + t] = k.view(t, c.n_kv_heads, c.head_size).transpose(0, 1)
        cache.values[layer, :, :, pos:pos + t] = v.view(t, c.n_kv_heads, c.head_size).permute(1, 2, 0)

    def _attention(self, cache: KVCache, layer: int, pos: int, q: torch.Tensor) -> torch.Tensor:
        """Causal attention of the T tokens at pos .. pos + T - 1 of one request. The token at position p
        attends over the first span(p) = p + 1 rounded up to a multiple of SPAN cached positions, those
        past p masked out: the length of every reduction depends on p alone, never on the pass."""
        c = self.config
        t, group, hs = q.shape[0], c.n_heads // c.n_kv_heads, c.head_size
        q = q.view(t, c.n_kv_heads, group, 1, hs)  # query head h = kv head h // group, member h % group
        outs, first = [], 0
        while first < t:  # the tokens whose span is the same, together
            span = round_up(pos + first + 1, SPAN)
            last = min(t, span - pos)
            keys = cache.keys[layer, :, :span]  # (kv heads, span, head_size)
            scores = (q[first:last] * keys[None, :, None]).sum(-1) * self.inv_sqrt  # (n, kv heads, group, span)
            future = self.positions[None, :span] > torch.arange(pos + first, pos + last)[:, None]
            scores = scores.masked_fill(future[:, None, None, :], float("-inf"))
            weights = torch.exp(scores - scores.amax(-1, keepdim=True))  # n * heads * span: a multiple of 64
            weights = weights / weights.sum(-1, keepdim=True)
            values = cache.values[layer, :, :, :span]  # (kv heads, head_size, span)
            outs.append((weights[:, :, :, None, :] * values[None, :, None]).sum(-1).reshape(last - first, c.dim))
            first = last
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def _tree_layout(self, pos: int, parents: list[int]) -> TreeLayout:
        """Where the entries of a tree pass at `pos` sit and what each attends to (see TreeLayout)."""
        depths: list[int] = []
        paths: list[list[int]] = []  # entry e's ancestors from its depth-0 one down to itself
        for e, parent in enumerate(parents):
            if not -1 <= parent < e:
                raise ValueError(f"tree pass entry {e} has parent {parent}; a parent is -1 (the cached sequence) "
                                 f"or an earlier entry, 0 to {e - 1}")
            paths.append([e] if parent < 0 else paths[parent] + [e])
            depths.append(len(paths[-1]) - 1)
        by_span: dict[int, list[int]] = {}
        for e, depth in enumerate(depths):
            by_span.setdefault(round_up(pos + depth + 1, SPAN), []).append(e)
        groups = []
        for span, rows in by_span.items():
            slots = np.tile(np.arange(span), (len(rows), 1))  # the cached positions, then per row its path
            for r, e in enumerate(rows):
                slots[r, pos:pos + len(paths[e])] = pos + np.array(paths[e])
            future = self.positions[None, :span] > torch.tensor([pos + depths[e] for e in rows])[:, None]
            groups.append((torch.tensor(rows), span, torch.from_numpy(slots), future[:, None, None, :]))
        return TreeLayout(torch.tensor(depths) + pos, groups)

    def _tree_attention(self, cache: KVCache, layer: int, q: torch.Tensor, layout: TreeLayout) -> torch.Tensor:
        """Attention of the entries of a tree pass (their keys and values already in the cache): entry e,
        at position p = pos + depth, reduces over exactly what the token at p of its path fed as a chain
        would (span(p) positions, in the same order, those past p masked out), gathered: position s < pos
        reads cache slot s, position pos + j the slot of its ancestor at depth j (pos + its entry index)."""
        c = self.config
        t, group, hs = q.shape[0], c.n_heads // c.n_kv_heads, c.head_size
        q = q.view(t, c.n_kv_heads, group, 1, hs)
        out = torch.empty(t, c.dim)
        for rows, span, slots, future in layout.groups:
            # (n, kv heads, span, head_size) and (n, kv heads, head_size, span), laid out as _attention's.
            n, flat = len(rows), slots.view(-1)
            keys = cache.keys[layer].index_select(1, flat).view(c.n_kv_heads, n, span, hs).transpose(0, 1)
            values = cache.values[layer].index_select(2, flat).view(c.n_kv_heads, hs, n, span).permute(2, 0, 1, 3)
            keys, values = keys.contiguous(), values.contiguous()
            scores = (q[rows] * keys[:, :, None]).sum(-1) * self.inv_sqrt  # (n, kv heads, group, span)
            scores = scores.masked_fill(future, float("-inf"))
            weights = torch.exp(scores - scores.amax(-1, keepdim=True))
            weights = weights / weights.sum(-1, keepdim=True)
            out[rows] = (weights[:, :, :, None, :] * values[:, :, None]).sum(-1).reshape(len(rows), c.dim)
        return out

    def forward(self, batch: list[tuple], logits: bool = False) -> list:
        """One batched pass: for each (cache, tokens) feeds the tokens as a chain at the cache's length;
        for each (cache, tokens, parents), a tree: token e at the cache's length + its depth, attending
        to the cached positions and to its ancestors in the pass (parents[e]: -1, it follows the cached
        sequence, or an earlier entry), its keys and values in slot length + e. Advances every cache's
        length by the tokens fed (a tree pass is then settled by keep()); returns, for each, the list
        of argmax tokens after every token fed (with `logits`, their logits, a tensor)."""
        c = self.config
        tokens = torch.tensor([token for entry in batch for token in entry[1]], dtype=torch.long)
        layouts = []
        for entry in batch:
            parents = list(entry[2]) if len(entry) > 2 and entry[2] is not None else None
            if parents is not None and len(parents) != len(entry[1]):
                raise ValueError(f"a tree pass has {len(entry[1])} tokens but {len(parents)} parents")
            # A chain-shaped tree (-1, 0, 1, ...) goes the chain's way: the same logits, less work.
            chain = parents is None or parents == list(range(-1, len(parents) - 1))
            layouts.append(None if chain else self._tree_layout(entry[0].length, parents))
        positions = torch.cat([torch.arange(cache.length, cache.length + len(fed)) if layout is None
                               else layout.positions for (cache, fed, *_), layout in zip(batch, layouts)])
        if int(positions.max()) >= c.seq_len:
            raise ValueError(f"a pass reaches position {int(positions.max())}; the model holds {c.seq_len}")
        for cache, fed, *_ in batch:
            if cache.length + len(fed) > c.seq_len:
                raise ValueError(f"a pass of {len(fed)} tokens at {cache.length} writes slots up to "
                                 f"{cache.length + len(fed) - 1}; the model holds {c.seq_len}")
        x = self.embedding[tokens]
        for layer in range(c.n_layers):
            xb = rmsnorm(x, self.rms_att[layer])
            q = self._rope(linear(xb, self.wq[layer]), positions)
            k = self._rope(linear(xb, self.wk[layer]), positions)
            v = linear(xb, self.wv[layer])
            outs, row = [], 0
            for (cache, fed, *_), layout in zip(batch, layouts):
                n = len(fed)
                self._write(cache, layer, cache.length, k[row:row + n], v[row:row + n])
                outs.append(self._attention(cache, layer, cache.length, q[row:row + n]) if layout is None
                            else self._tree_attention(cache, layer, q[row:row + n], layout))
                row += n
            x = x + linear(torch.cat(outs), self.wo[layer])
            xb = rmsnorm(x, self.rms_ffn[layer])
            h1 = linear(xb, self.w1[layer])
            h = h1 * (1.0 / (1.0 + torch.exp(-h1))) * linear(xb, self.w3[layer])  # SiLU(w1 x) * w3 x
            x = x + linear(h, self.w2[layer])
        scores = linear(rmsnorm(x, self.rms_final), self.classifier)
        best = scores if logits else scores.argmax(-1).tolist()
        out, row = [], 0
        for cache, fed, *_ in batch:
            cache.length += len(fed)
            out.append(best[row:row + len(fed)])
            row += len(fed)
        return out

    @staticmethod
    def keep(cache: KVCache, pos: int, kept: list[int]) -> None:
        """Settles a tree pass at `pos`: moves the keys and values of entry kept[j] to position pos + j
        (every layer) and keeps pos + len(kept) positions, as if that root path had been fed as a chain.
        `kept` ascends (a path), so no entry is overwritten before it moves."""
        m = len(kept)
        if list(kept) != list(range(m)):
            slots = torch.tensor(kept) + pos
            cache.keys[:, :, pos:pos + m] = cache.keys[:, :, slots]
            cache.values[:, :, :, pos:pos + m] = cache.values[:, :, :, slots]
        cache.length = pos + m


def top_tokens(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The k best tokens of every row of logits, best first, ties to the lower id (a stable sort of the
    negated logits keeps equal ones in id order; torch.topk promises no order among ties)."""
    return torch.sort(-scores, dim=-1, stable=True).indices[:, :k]


# ---- Serving a batch of requests ------------------------------------------------------------------


@dataclass
class Request:
    prompt: list[int]
    max_new_tokens: int
    output: list[int] = field(default_factory=list)
    passes: int = 0  # engine steps this request took part in, its prefill included


@dataclass
class Run:
    requests: list[Request]
    steps: int  # batched forwards
    seconds: float
    drafted: int = 0
    accepted: int = 0


def finished(request: Request, seq_len: int) -> bool:
    return (len(request.output) >= request.max_new_tokens or (request.output and request.output[-1] == BOS)
            or len(request.prompt) + len(request.output) >= seq_len)


def serve_plain(model: Transformer, prompts: list[list[int]], max_new_tokens: int, batch: int) -> Run:
    """Plain greedy decoding: every step feeds each running request its last token (its prompt, the
    first time) and emits the argmax. Up to `batch` requests run at once, admitted in order."""
    requests = [Request(p, max_new_tokens) for p in prompts]
    waiting, running, caches, steps = list(range(len(requests))), [], {}, 0
    start = time.perf_counter()
    while waiting or running:
        while waiting and len(running) < batch:
            running.append(waiting.pop(0))
            caches[running[-1]] = model.new_cache()
        fed = [requests[i].prompt if not requests[i].output else requests[i].output[-1:] for i in running]
        nexts = model.forward([(caches[i], tokens) for i, tokens in zip(running, fed)])
        steps += 1
        for i, next_tokens in zip(running, nexts):
            requests[i].output.append(next_tokens[-1])
            requests[i].passes += 1
        running = [i for i in running if not finished(requests[i], model.config.seq_len)]
    return Run(requests, steps, time.perf_counter() - start)


def admit(model: Transformer, spec, requests: list[Request], waiting: list[int], running: list[int],
          caches: dict, batch: int, max_drafts: int) -> None:
    """Starts waiting requests while the batch has room: each begins in `spec` with max_context = seq_len,
    which bounds its drafts and tree nodes so that every pass fits its cache, and gets a cache."""
    while waiting and len(running) < batch:
        i = waiting.pop(0)
        spec.begin(i, requests[i].prompt, max_new_tokens=requests[i].max_new_tokens, stop_tokens=(BOS,),
                   max_context=model.config.seq_len, max_drafts=max_drafts)
        running.append(i)
        caches[i] = model.new_cache()


def serve_speculative(model: Transformer, prompts: list[list[int]], max_new_tokens: int, batch: int,
                      max_drafts: int, cost: str | None) -> Run:
    """The same requests, admitted the same way, through one BatchSpeculator: each step verifies every
    running request's drafts in one batched forward and emits what accept() decides."""
    import ngramspec

    c = model.config
    spec = ngramspec.BatchSpeculator(max_sequences=batch, cost=cost)
    requests = [Request(p, max_new_tokens) for p in prompts]
    waiting, running, caches, steps = list(range(len(requests))), [], {}, 0
    start = time.perf_counter()
    while waiting or running:
        admit(model, spec, requests, waiting, running, caches, batch, max_drafts)
        drafts, offsets = spec.propose(running)
        fed = []  # a prefill feeds the prompt; a decode step the last emitted token, then the drafts
        for j, i in enumerate(running):
            request = requests[i]
            own = drafts[offsets[j]:offsets[j + 1]].tolist()
            fed.append(request.prompt if not request.output else request.output[-1:] + own)
        began = time.perf_counter()
        nexts = model.forward([(caches[i], tokens) for i, tokens in zip(running, fed)])
        if spec.learns_cost:  # the forward's own time, which the learned cost prices passes by
            spec.report_pass_seconds(max(time.perf_counter() - began, 1e-9))
        steps += 1
        answers = [next_tokens[-1:] if not requests[i].output else next_tokens
                   for i, next_tokens in zip(running, nexts)]
        model_offsets = np.cumsum([0] + [len(a) for a in answers])
        steps_taken = spec.accept(running, np.array([t for a in answers for t in a], np.uint32), model_offsets)
        emitted, discarded, rollback_to, done = (steps_taken[name].tolist() for name in
                                                 ("emitted", "discarded", "rollback_to", "finished"))
        still = []
        for j, i in enumerate(running):
            request = requests[i]
            request.output.extend(answers[j][:emitted[j]])
            request.passes += 1
            if discarded[j]:
                caches[i].length = rollback_to[j]
            if done[j]:
                spec.finish(i)
                del caches[i]
            else:
                still.append(i)
        running = still
    seconds = time.perf_counter() - start
    stats = spec.stats
    spec.close()
    return Run(requests, steps, seconds, stats.drafted, stats.accepted)


def serve_tree(model: Transformer, prompts: list[list[int]], max_new_tokens: int, batch: int, max_nodes: int,
               cost: str | None) -> Run:
    """The same requests through a tree batch: each step feeds every running request a tree pass (its
    last emitted token, then the nodes propose_trees() gives), and accept_trees() says which path of
    it the model follows; the cache keeps that path's entries, moved into place (Transformer.keep).
    The model's top spec.top_k tokens after every entry go back to the drafters, which recycle them."""
    import ngramspec

    c = model.config
    spec = ngramspec.BatchSpeculator(max_sequences=batch, cost=cost, tree={"vocab_size": c.vocab_size})
    k = spec.top_k
    requests = [Request(p, max_new_tokens) for p in prompts]
    waiting, running, caches, steps = list(range(len(requests))), [], {}, 0
    start = time.perf_counter()
    while waiting or running:
        admit(model, spec, requests, waiting, running, caches, batch, max_nodes)
        nodes, parents, offsets = spec.propose_trees(running)
        fed, roots = [], []  # a prefill feeds the prompt as a chain; a decode step a tree under the last token
        for j, i in enumerate(running):
            request, cache = requests[i], caches[i]
            roots.append(cache.length)
            if not request.output:
                fed.append((cache, request.prompt))
            else:
                own = slice(int(offsets[j]), int(offsets[j + 1]))
                fed.append((cache, request.output[-1:] + nodes[own].tolist(), [-1] + (parents[own] + 1).tolist()))
        began = time.perf_counter()
        scores = model.forward(fed, logits=True)
        if spec.learns_cost:
            spec.report_pass_seconds(max(time.perf_counter() - began, 1e-9))
        steps += 1
        answered = torch.cat([rows[-1:] if len(entry) == 2 else rows for entry, rows in zip(fed, scores)])
        model_tokens = answered.argmax(-1).numpy().astype(np.uint32)
        top = top_tokens(answered, k).numpy().astype(np.uint32).ravel() if k else None
        model_offsets = np.cumsum([0] + [1 if len(entry) == 2 else len(entry[1]) for entry in fed])
        taken, kept = spec.accept_trees(running, model_tokens, model_offsets, top)
        emitted, done = taken["emitted"].tolist(), taken["finished"].tolist()
        still = []
        for j, i in enumerate(running):
            request = requests[i]
            path = kept[model_offsets[j]:model_offsets[j] + emitted[j]].tolist()
            request.output.extend(model_tokens[model_offsets[j] + np.array(path, np.intp)].tolist())
            request.passes += 1
            if done[j]:
                spec.finish(i)
                del caches[i]
            else:
                if len(fed[j]) == 3:
                    model.keep(caches[i], roots[j], path)
                still.append(i)
        running = still
    seconds = time.perf_counter() - start
    stats = spec.stats
    spec.close()
    return Run(requests, steps, seconds, stats.drafted, stats.accepted)


# ---- What a pass costs ---------------------------------------------------------------------------


def measure_cost(model: Transformer, batch: int, max_drafts: int, repeats: int = 7, tree: bool = False) -> str:
    """The cost of a pass against the tokens it carries, as ngramspec's table spec: passes of `batch`
    requests at mid-context carrying 1, 2, 3, 5, 9, ... tokens each (up to max_drafts + 1), timed
    interleaved, medians normalized to the one-token-each pass and keyed by the pass's total tokens.
    With `tree`, the passes are trees (entry e under entry (e - 1) // 2), which go through the tree
    attention. Widths are capped by seq_len, and the context so that the widest pass fits."""
    c = model.config
    top = min(max_drafts + 1, c.seq_len)
    context = min(c.seq_len // 4, c.seq_len - top)
    widths = [1]
    while widths[-1] < top:
        widths.append(min(2 * widths[-1] - 1 if widths[-1] > 1 else 2, top))
    caches = [model.new_cache() for _ in range(batch)]
    prompt = [(i * 7919 + 13) % c.vocab_size for i in range(context + widths[-1])]
    if context > 0:
        for cache in caches:
            model.forward([(cache, prompt[:context])])
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(repeats):
        for w in widths:
            begin = time.perf_counter()
            shape = [[(e - 1) // 2 for e in range(w)]] if tree else []
            model.forward([(cache, prompt[context:context + w], *shape) for cache in caches])
            times[w].append(time.perf_counter() - begin)
            for cache in caches:
                cache.length = context
    base, points, highest = statistics.median(times[1]), [], 1.0
    for w in widths:  # a pass never costs less for carrying more: noise below the last point is raised to it
        highest = max(highest, statistics.median(times[w]) / base)
        points.append(f"{w * batch}={highest:.3g}")
    return "table:" + ",".join(points)


def check_invariance(model: Transformer, tokens: list[int]) -> bool:
    """Whether the logits at every position of `tokens` are bitwise those of one-token passes when the
    tokens come in passes of other widths (1 to 9 and the whole sequence at once), beside another
    request in the same pass, and after rolling back over rejected tokens."""
    reference_cache = model.new_cache()
    reference = torch.cat([model.forward([(reference_cache, [t])], logits=True)[0] for t in tokens])
    same = True
    for width in (2, 3, 5, 9, len(tokens)):
        cache, other, got = model.new_cache(), model.new_cache(), []
        for at in range(0, len(tokens), width):
            fed = tokens[at:at + width]
            # A neighbour in the pass, and a rejected draft written past the end then rolled back.
            got.append(model.forward([(other, [(at + 7) % model.config.vocab_size]), (cache, fed + [0])],
                                     logits=True)[1][:len(fed)])
            cache.length -= 1
        same = same and torch.equal(reference, torch.cat(got))
    return same


def check_tree_invariance(model: Transformer, tokens: list[int], seed: int = 1) -> bool:
    """Whether a tree pass gives, for every entry, bitwise the logits of its root path fed as a chain
    (beside another request, spans of two lengths), and whether keep() then leaves the cache as that
    chain would: the next token's logits after each kept path equal the chain's."""
    rng = random.Random(seed)
    c = model.config
    context, same = tokens[:58], True  # the entries sit at positions 58 to about 70: spans of 64 and 128
    for n in (1, 9, 40):
        fed = [tokens[58]] + [rng.randrange(c.vocab_size) for _ in range(n - 1)]
        parents = [-1] + [rng.randrange(e) if rng.random() < 0.6 else e - 1 for e in range(1, n)]
        paths: list[list[int]] = []
        for e, parent in enumerate(parents):
            paths.append([e] if parent < 0 else paths[parent] + [e])
        cache, other = model.new_cache(), model.new_cache()
        model.forward([(cache, context), (other, tokens[:5])])
        got = model.forward([(other, [7]), (cache, fed, parents)], logits=True)[1]
        chain = model.new_cache()
        model.forward([(chain, context)])
        for e, path in enumerate(paths):
            expected = model.forward([(chain, [fed[a] for a in path])], logits=True)[0][-1]
            same = same and torch.equal(got[e], expected)
            chain.length = len(context)
        for e in (n - 1, n // 2):  # the pass again, keep a path of it, then feed one more token after it
            cache.length = len(context)
            model.forward([(cache, fed, parents)])
            model.keep(cache, len(context), paths[e])
            after = model.forward([(cache, [3])], logits=True)[0]
            expected = model.forward([(chain, [fed[a] for a in paths[e]] + [3])], logits=True)[0][-1:]
            same = same and torch.equal(after, expected)
            chain.length = len(context)
    return same


# ---- The program ---------------------------------------------------------------------------------


class _Once(argparse.Action):
    """Stores an option's value (or True, for a switch), refusing the option a second time: argparse
    would keep the last value without a word."""

    def __init__(self, option_strings: list[str], dest: str, switch: bool = False, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0 if switch else None, **kwargs)  # type: ignore[arg-type]
        self.switch = switch

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        given = namespace.__dict__.setdefault("_given", set())
        if self.dest in given:
            parser.error(f"{option_string} is given twice")
        given.add(self.dest)
        setattr(namespace, self.dest, True if self.switch else values)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Batched llama2 inference in PyTorch, plain and with ngramspec's BatchSpeculator; checks that "
                    "the outputs are identical and prints tokens per pass and the speedup.")
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS, action=_Once,
                        help="folder with stories260K.bin, tok512.bin and stories260K_greedy256.ids "
                             "(default: ../shared/models beside the repository, or $NGRAMSPEC_SHARED_DIR/models)")
    parser.add_argument("--prompt", action="append", help="a prompt (repeatable; default: six prompts, the first "
                                                          "empty, which the golden output checks); every other "
                                                          "option at most once")
    parser.add_argument("--steps", type=int, default=256, action=_Once,
                        help="most tokens generated per request (default 256)")
    parser.add_argument("--batch", type=int, default=4, action=_Once, help="requests running at once (default 4)")
    parser.add_argument("--k", type=int, default=8, action=_Once,
                        help="most drafts per request and pass (default 8)")
    parser.add_argument("--tree-nodes", type=int, default=0, action=_Once,
                        help="also decode through a tree batch verifying up to N nodes per request and pass, "
                             "and print its figures beside the chains' (default 0: chains only)")
    parser.add_argument("--cost", default="measure", action=_Once,
                        help="what a pass costs: measure (default: time this forward at start), learn (no curve "
                             "at start: learned from the passes alone), none (no cost model: MatchDrafter's gate "
                             "decides), or an ngramspec spec, knee:N or table:T=C,...; every curve but none is the "
                             "prior of a cost learned from the passes served, unless --fixed-cost")
    parser.add_argument("--fixed-cost", action=_Once, switch=True, default=False,
                        help="plan every pass against the curve of --cost as it is, not learning from the passes")
    parser.add_argument("--repeats", type=int, default=2, action=_Once,
                        help="timed runs of each decoding, alternating (default 2: plain, spec, spec, plain)")
    parser.add_argument("--check-invariance", action=_Once, switch=True, default=False,
                        help="also check that a pass of many tokens gives bitwise what one-token passes give")
    args = parser.parse_args(argv)
    vars(args).pop("_given", None)
    for name in ("steps", "batch", "k", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.k > 1024:
        parser.error("--k must be at most 1024 (BatchSpeculator's most drafts per sequence and pass)")
    if not 0 <= args.tree_nodes <= 1024:
        parser.error(f"--tree-nodes must be 0 (chains only) to 1024 (BatchSpeculator's most nodes per sequence "
                     f"and pass), not {args.tree_nodes}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = {name: args.models / name for name in ("stories260K.bin", "tok512.bin", "stories260K_greedy256.ids")}
    for name, path in files.items():
        if not path.is_file():
            skip(f"{path} not found (the shared models folder is not beside the repository; --models names another)")
    try:
        import ngramspec
    except ImportError as error:
        skip(f"the ngramspec package cannot be imported: {error}")
    torch.set_num_threads(1)  # one thread: the reductions' order never depends on a split between threads
    model = Transformer(files["stories260K.bin"])
    c = model.config
    tokenizer = Tokenizer(files["tok512.bin"], c.vocab_size)
    texts = args.prompt if args.prompt else DEFAULT_PROMPTS
    prompts = [tokenizer.encode(text) for text in texts]
    golden = [int(t) for t in files["stories260K_greedy256.ids"].read_text().split()]
    print(f"stories260K (dim {c.dim}, {c.n_layers} layers, {c.n_heads} heads, {c.n_kv_heads} kv heads, vocab "
          f"{c.vocab_size}, seq_len {c.seq_len}) in PyTorch {torch.__version__} on the CPU, one thread; "
          f"ngramspec {ngramspec.__version__}")
    print(f"{len(prompts)} requests, up to {args.steps} tokens each, {args.batch} at a time; up to {args.k} drafts "
          f"per request and pass" + (f" (chains), up to {args.tree_nodes} nodes (trees)" if args.tree_nodes else ""))

    if args.check_invariance:
        ok = check_invariance(model, [BOS] + golden[:99])  # past position 64: attention spans of two lengths
        print(f"batch invariance (logits of passes of 2 to 9 tokens and of all at once, beside another request, = one-token passes, bitwise): {'yes' if ok else 'NO'}")
        tree_ok = check_tree_invariance(model, [BOS] + golden[:99])
        print(f"tree passes (logits of every node of trees of 1, 9 and 40 entries = its path fed as a chain, and the "
              f"cache after keeping a path = the chain's, bitwise): {'yes' if tree_ok else 'NO'}")
        if not ok or not tree_ok:
            return 1

    serve_plain(model, [prompts[0][:1]], 2, 1)  # warm-up: torch's first calls are slow
    # The speculative decodings: label, its pass budget, whether it drafts trees.
    decodings = [("chain" if args.tree_nodes else "spec", args.k, False)]
    if args.tree_nodes:
        decodings.append(("tree", args.tree_nodes, True))
    costs: dict[str, str | None] = {}
    for label, budget, tree in decodings:
        if args.cost == "measure":
            began = time.perf_counter()
            costs[label] = measure_cost(model, args.batch, budget, tree=tree)
            print(f"verify cost{f' ({label}s)' if args.tree_nodes else ''}: {costs[label]} (measured in "
                  f"{1000 * (time.perf_counter() - began):.0f} ms)")
        else:
            costs[label] = None if args.cost in ("none", "learn") else args.cost
        # By default the curve is a prior: the cost is learned from the passes served (each forward timed).
        if args.cost != "none" and not args.fixed_cost:
            costs[label] = "learn" if costs[label] is None else "learn:" + costs[label]
    if args.cost not in ("measure", "learn"):
        print(f"verify cost{' (given)' if args.cost != 'none' else ''}: {args.cost}")
    if args.cost != "none":
        print("verify cost: fixed (--fixed-cost)" if args.fixed_cost else
              "verify cost: learned from the passes served" + (" (no prior)" if args.cost == "learn" else
                                                               ", the curve above its prior"))

    runs: dict[str, list[Run]] = {"plain": [], **{label: [] for label, _, _ in decodings}}
    for r in range(args.repeats):  # alternating, so that no decoding always runs first
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for which in order:
            if which == "plain":
                runs[which].append(serve_plain(model, prompts, args.steps, args.batch))
            elif which == "tree":
                runs[which].append(serve_tree(model, prompts, args.steps, args.batch, args.tree_nodes, costs[which]))
            else:
                runs[which].append(serve_speculative(model, prompts, args.steps, args.batch, args.k, costs[which]))
    plain = runs["plain"][0]
    firsts = {label: runs[label][0] for label, _, _ in decodings}

    identical = all(run.requests[i].output == plain.requests[i].output
                    for label in runs for run in runs[label] for i in range(len(prompts)))
    print()
    header = f"{'request':<28} {'tokens':>6} {'passes plain':>12}"
    for label in firsts:
        header += f" {f'passes {label}':>{len(label) + 7}} {f'tokens/pass {label}':>{len(label) + 12}}"
    print(header + "  identical")
    for n, text in enumerate(texts):
        label = repr(text) if len(repr(text)) <= 28 else repr(text)[:25] + "...'"
        p = plain.requests[n]
        line = f"{label:<28} {len(p.output):>6} {p.passes:>12}"
        for name, run in firsts.items():
            s = run.requests[n]
            line += f" {s.passes:>{len(name) + 7}} {len(s.output) / s.passes:>{len(name) + 12}.2f}"
        same = all(run.requests[n].output == p.output for run in firsts.values())
        print(line + f"  {'yes' if same else 'NO'}")
    generated = sum(len(r.output) for r in plain.requests)
    line = f"{'all':<28} {generated:>6} {sum(r.passes for r in plain.requests):>12}"
    for name, run in firsts.items():
        passes = sum(r.passes for r in run.requests)
        line += f" {passes:>{len(name) + 7}} {sum(len(r.output) for r in run.requests) / passes:>{len(name) + 12}.2f}"
    print(line)
    print()
    print(f"engine steps (batched forwards): plain {plain.steps}, "
          + ", ".join(f"{'speculative' if name == 'spec' else name} {run.steps}" for name, run in firsts.items()))
    for name, run in firsts.items():
        passes = sum(r.passes for r in run.requests)
        what = "nodes" if name == "tree" else "drafts"
        print(f"{'' if name == 'spec' else name + 's: '}{what} verified {run.drafted}, accepted {run.accepted}"
              + (f"; {what} per request pass {run.drafted / passes:.2f}, tokens per request pass "
                 f"{sum(len(r.output) for r in run.requests) / passes:.2f}" if args.tree_nodes else ""))
    seconds = {name: statistics.median(run.seconds for run in runs[name]) for name in runs}
    print(f"wall clock (median of {args.repeats}): "
          + ", ".join(f"{'speculative' if name == 'spec' else name} {t:.2f} s" for name, t in seconds.items()))
    print(f"outputs identical: {'yes' if identical else 'NO'}, speedup "
          + ", ".join(f"{seconds['plain'] / seconds[name]:.2f}x" + ("" if name == "spec" else f" ({name}s)")
                      for name in firsts))
    spec = next(iter(firsts.values()))

    status = 0 if identical else 1
    if texts[0] == "" and args.steps >= len(golden):
        matches = plain.requests[0].output[:len(golden)] == golden
        agree = sum(a == b for a, b in zip(plain.requests[0].output, golden))
        print(f"golden check (BOS-only prompt, {len(golden)} tokens, llama2.c run.c): "
              f"{'matches' if matches else f'DIFFERS ({agree} of {len(golden)} tokens agree)'}")
        if not matches:
            status = 1
    print()
    print("text of the BOS-only request:" if texts[0] == "" else f"text of {texts[0]!r}:")
    print(tokenizer.decode(spec.requests[0].output)[:300].rstrip() + " ...")
    return status


if __name__ == "__main__":
    sys.exit(main())
