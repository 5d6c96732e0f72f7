#!/usr/bin/env python3
"""Makes a GGUF of a Llama shape with random weights, written by llama.cpp's own gguf-py.

  python3 integrations/llama.cpp/make_random_gguf.py --shape llama-134m
  python3 integrations/llama.cpp/make_random_gguf.py --shape llama-1.1b --out /tmp/tiny.gguf
  python3 integrations/llama.cpp/make_random_gguf.py --shape llama-8b --type Q8_0 --seed 7
  python3 integrations/llama.cpp/make_random_gguf.py --list

Shapes (--shape):
  llama-134m  dim 768, 12 layers, 12 heads, 12 KV heads, FFN 2048, vocab 32000     F16 by default
  llama-1.1b  TinyLlama 1.1B: dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000
                                                                                   Q8_0 by default
  llama-8b    Llama 3 8B: dim 4096, 32 layers, 32 heads, 8 KV heads, FFN 14336, vocab 128256
                                                                                   Q4_0 by default
--type F16, Q8_0 or Q4_0 overrides the default; 1-D tensors (the norms) stay F32, as llama.cpp's
converter leaves them.

The weights are normal random numbers of standard deviation --std (0.02) from --seed, the norms
all 1: activations and logits stay finite through every layer and llama.cpp decodes with them,
but the output means nothing (with seed 0, the 134M's greedy output falls into a loop within a
dozen tokens; the 1.1B's hardly repeats). Such a model is for measuring what a decode of k tokens
costs at a real model's size (the verify-cost curve) and for checking that drafting never makes
decoding slower; never for acceptance rates.

The vocabulary is a SentencePiece-style "llama" one that llama.cpp loads: <unk>, <s>, </s>, the
256 byte tokens <0x00>..<0xFF> (type BYTE, so any text tokenizes by byte fallback), then filler
pieces (printable ASCII, then lowercase letter strings with and without the word-start mark)
up to the shape's vocabulary size, with scores and token types; BOS 1, EOS 2, UNK 0.

gguf-py is imported from the llama.cpp source named by --llama-cpp-source (default: the newest
build/_deps/llama.cpp-*/ of this repository, where fetch_llama_cpp.sh puts it). Tensors are made
and written one at a time, in chunks of rows, so memory holds one tensor's encoded bytes at most
(the 8B's output matrix: 0.3 GB in Q4_0). The file is written beside --out and renamed into
place when complete. Needs NumPy (and PyYAML, which gguf-py imports).
"""
import argparse
import dataclasses
import glob
import math
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Rows are generated and encoded in chunks of about this many values (4 MiB of float32): small
# enough to stay in cache between NumPy's passes, large enough that per-call overhead is small.
CHUNK_VALUES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Shape:
    dim: int  # embedding length
    n_layer: int
    n_head: int
    n_head_kv: int
    ffn: int  # feed-forward length
    vocab: int
    context: int  # context length written to the file
    rope_base: float
    default_type: str
    like: str  # the model whose shape it is


SHAPES = {
    "llama-134m": Shape(768, 12, 12, 12, 2048, 32000, 2048, 10000.0, "F16", "a Llama of about 134M"),
    "llama-1.1b": Shape(2048, 22, 32, 4, 5632, 32000, 2048, 10000.0, "Q8_0", "TinyLlama 1.1B"),
    "llama-8b": Shape(4096, 32, 32, 8, 14336, 128256, 8192, 500000.0, "Q4_0", "Llama 3 8B"),
}
TYPES = ("F16", "Q8_0", "Q4_0")
RMS_EPS = 1e-5


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def default_source():
    """The newest fetched llama.cpp source under build/_deps, or None."""
    found = [d for d in glob.glob(os.path.join(REPO, "build", "_deps", "llama.cpp-*"))
             if os.path.isdir(os.path.join(d, "gguf-py", "gguf"))]
    return max(found, key=os.path.getmtime) if found else None


def import_gguf(source):
    package = os.path.join(source, "gguf-py")
    if not os.path.isfile(os.path.join(package, "gguf", "__init__.py")):
        fail(f"--llama-cpp-source {source!r} has no gguf-py/gguf/__init__.py "
             "(give llama.cpp's source folder, as fetch_llama_cpp.sh prints it)")
    sys.path.insert(0, package)
    try:
        import gguf
    except ImportError as e:
        fail(f"cannot import gguf-py from {package!r}: {e}")
    return gguf


def tensor_plan(shape, gguf):
    """(name, NumPy shape (rows, columns) or (n,), is_norm) for every tensor, in file order."""
    names = gguf.TENSOR_NAMES
    t = gguf.MODEL_TENSOR
    head_dim = shape.dim // shape.n_head
    kv_dim = head_dim * shape.n_head_kv
    plan = [(names[t.TOKEN_EMBD] + ".weight", (shape.vocab, shape.dim), False)]
    for b in range(shape.n_layer):
        def name(kind, b=b):
            return names[kind].format(bid=b) + ".weight"
        plan += [
            (name(t.ATTN_NORM), (shape.dim,), True),
            (name(t.ATTN_Q), (shape.dim, shape.dim), False),
            (name(t.ATTN_K), (kv_dim, shape.dim), False),
            (name(t.ATTN_V), (kv_dim, shape.dim), False),
            (name(t.ATTN_OUT), (shape.dim, shape.dim), False),
            (name(t.FFN_NORM), (shape.dim,), True),
            (name(t.FFN_GATE), (shape.ffn, shape.dim), False),
            (name(t.FFN_UP), (shape.ffn, shape.dim), False),
            (name(t.FFN_DOWN), (shape.dim, shape.ffn), False),
        ]
    plan += [(names[t.OUTPUT_NORM] + ".weight", (shape.dim,), True),
             (names[t.OUTPUT] + ".weight", (shape.vocab, shape.dim), False)]
    return plan


def encoded_nbytes(dims, qtype, gguf):
    """Bytes of a matrix of NumPy shape dims stored as qtype."""
    if qtype == gguf.GGMLQuantizationType.F16:
        return 2 * math.prod(dims)
    return math.prod(gguf.quant_shape_to_byte_shape(dims, qtype))


def vocabulary(size, gguf):
    """Pieces, scores and token types of a SentencePiece-style vocabulary of size entries."""
    tt = gguf.TokenType
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [tt.UNKNOWN, tt.CONTROL, tt.CONTROL] + [tt.BYTE] * 256
    scores = [0.0] * len(pieces)
    seen = set(pieces)

    def filler():
        yield "\u2581"  # SentencePiece's word-start mark, which stands for a space
        for c in range(0x21, 0x7F):
            yield chr(c)
        letters = "abcdefghijklmnopqrstuvwxyz"
        words = [""]
        while True:
            words = [w + c for w in words for c in letters]
            for w in words:
                yield "\u2581" + w
                yield w

    for piece in filler():
        if len(pieces) == size:
            break
        if piece in seen:
            continue
        seen.add(piece)
        # Earlier pieces score higher, as in a trained SentencePiece model.
        scores.append(-float(len(pieces)))
        pieces.append(piece)
        types.append(tt.NORMAL)
    return pieces, scores, [int(x) for x in types]


def encode_matrix(rows, cols, qtype, rng, std, gguf, np):
    """A rows x cols matrix of N(0, std^2) values, encoded as qtype, made in chunks of rows."""
    f16 = qtype == gguf.GGMLQuantizationType.F16
    if f16:
        out = np.empty((rows, cols), dtype=np.float16)
    else:
        out = np.empty(gguf.quant_shape_to_byte_shape((rows, cols), qtype), dtype=np.uint8)
    step = max(1, CHUNK_VALUES // cols)
    buf = np.empty(step * cols, dtype=np.float32)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        chunk = buf[: (r1 - r0) * cols].reshape(r1 - r0, cols)
        rng.standard_normal(dtype=np.float32, out=chunk)
        chunk *= np.float32(std)
        if f16:
            out[r0:r1] = chunk
        else:
            out[r0:r1] = gguf.quantize(chunk, qtype)
    return out


def describe(shape, qtype, gguf):
    """Parameters and bytes of tensor data of shape stored as qtype."""
    plan = tensor_plan(shape, gguf)
    params = sum(math.prod(d) for _, d, _ in plan)
    nbytes = sum(4 * d[0] if norm else encoded_nbytes(d, qtype, gguf) for _, d, norm in plan)
    return params, nbytes


def main():
    parser = argparse.ArgumentParser(
        description="Make a random-weight GGUF of a Llama shape with llama.cpp's gguf-py.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--shape", choices=sorted(SHAPES), help="which shape to make")
    parser.add_argument("--type", dest="qtype", choices=TYPES,
                        help="encoding of the matrices (default: the shape's)")
    parser.add_argument("--out", help="output file (default: build/models/<shape>-<type>.gguf)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--std", type=float, default=0.02,
                        help="standard deviation of the weights (default 0.02)")
    parser.add_argument("--llama-cpp-source", metavar="DIR",
                        help="llama.cpp source holding gguf-py (default: newest build/_deps/llama.cpp-*)")
    parser.add_argument("--list", action="store_true",
                        help="print every shape's parameters and file size, write nothing")
    args = parser.parse_args()

    if not args.list and args.shape is None:
        fail("--shape is required (one of " + ", ".join(sorted(SHAPES)) + "), or --list")
    if not 0 <= args.seed < 2**63:
        fail(f"--seed {args.seed} is out of range (0 to 2^63-1)")
    if not (math.isfinite(args.std) and 0 < args.std <= 1):
        fail(f"--std {args.std} must be a finite number in (0, 1]")
    source = args.llama_cpp_source or default_source()
    if source is None:
        fail(f"no llama.cpp source under {os.path.join(REPO, 'build', '_deps')}: run "
             "integrations/llama.cpp/fetch_llama_cpp.sh first or pass --llama-cpp-source DIR")
    gguf = import_gguf(source)
    import numpy as np

    if args.list:
        for name in sorted(SHAPES):
            s = SHAPES[name]
            for t in TYPES:
                params, nbytes = describe(s, gguf.GGMLQuantizationType[t], gguf)
                mark = " (default)" if t == s.default_type else ""
                print(f"{name:11} {t:5} {params:>14,} parameters  {nbytes / 1e9:6.2f} GB of tensors{mark}")
        return 0

    shape = SHAPES[args.shape]
    type_name = args.qtype or shape.default_type
    qtype = gguf.GGMLQuantizationType[type_name]
    if qtype != gguf.GGMLQuantizationType.F16:
        try:
            gguf.quantize(np.zeros((1, 256), dtype=np.float32), qtype)
        except NotImplementedError:
            fail(f"--type {type_name}: the gguf-py of {source!r} cannot quantize to it")
    out = args.out or os.path.join(REPO, "build", "models", f"{args.shape}-{type_name.lower()}.gguf")
    if os.path.isdir(out):
        fail(f"--out {out!r} is a folder; give a file name")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    partial = out + ".partial"

    start = time.monotonic()
    plan = tensor_plan(shape, gguf)
    params, _ = describe(shape, qtype, gguf)
    file_type = {"F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                 "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[type_name]

    try:
        w = gguf.GGUFWriter(partial, "llama")
        w.add_name(f"random {args.shape} {type_name}")
        w.add_description(f"random weights in the shape of {shape.like} (seed {args.seed}, std {args.std}): "
                          "for decode-cost measurements only, its output means nothing")
        w.add_context_length(shape.context)
        w.add_embedding_length(shape.dim)
        w.add_block_count(shape.n_layer)
        w.add_feed_forward_length(shape.ffn)
        w.add_head_count(shape.n_head)
        w.add_head_count_kv(shape.n_head_kv)
        w.add_rope_dimension_count(shape.dim // shape.n_head)
        w.add_rope_freq_base(shape.rope_base)
        w.add_layer_norm_rms_eps(RMS_EPS)
        w.add_vocab_size(shape.vocab)
        w.add_file_type(int(file_type))
        if qtype != gguf.GGMLQuantizationType.F16:
            w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        pieces, scores, types = vocabulary(shape.vocab, gguf)
        w.add_tokenizer_model("llama")
        w.add_token_list(pieces)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)

        for name, dims, norm in plan:
            if norm:
                w.add_tensor_info(name, dims, np.dtype(np.float32), 4 * dims[0])
            elif qtype == gguf.GGMLQuantizationType.F16:
                w.add_tensor_info(name, dims, np.dtype(np.float16), encoded_nbytes(dims, qtype, gguf))
            else:
                byte_shape = gguf.quant_shape_to_byte_shape(dims, qtype)
                w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), math.prod(byte_shape), raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()

        for index, (name, dims, norm) in enumerate(plan):
            if norm:
                data = np.ones(dims, dtype=np.float32)
            else:
                # One generator per tensor: its values depend on the seed and its place only.
                rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([args.seed, index])))
                data = encode_matrix(dims[0], dims[1], qtype, rng, args.std, gguf, np)
            w.write_tensor_data(data)
            if name.startswith("blk.") and name.endswith("ffn_down.weight"):
                layer = int(name.split(".")[1]) + 1
                print(f"  layer {layer}/{shape.n_layer} written", file=sys.stderr, flush=True)
        w.close()
    except BaseException:
        # Leave no half-written file behind, whatever stopped the run.
        if os.path.exists(partial):
            os.remove(partial)
        raise
    os.replace(partial, out)
    seconds = time.monotonic() - start

    size = os.path.getsize(out)
    print(f"wrote {out}")
    print(f"  shape {args.shape} ({shape.like}): dim {shape.dim}, {shape.n_layer} layers, "
          f"{shape.n_head} heads, {shape.n_head_kv} KV heads, FFN {shape.ffn}, vocab {shape.vocab}")
    print(f"  {type_name}, seed {args.seed}, std {args.std}: {params:,} parameters, "
          f"{size:,} bytes ({size / 1e9:.2f} GB), made in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
