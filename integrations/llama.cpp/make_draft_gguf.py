#!/usr/bin/env python3
"""Writes a draft model from a llama GGUF: the same model with only its first --layers blocks.

  python3 integrations/llama.cpp/make_draft_gguf.py --model ../shared/models/stories260K.gguf --layers 2 \\
      --out build/models/stories260K-draft2.gguf
  python3 integrations/llama.cpp/make_draft_gguf.py --model ../shared/models/stories260K.gguf --list

The written file keeps everything of the input but the blocks from --layers on: the token
embedding, the output norm, the output matrix (the classifier), the tokenizer and every other
metadata key, with `<arch>.block_count` set to --layers and the tensors `blk.N.*` of every
N >= --layers left out. llama.cpp loads it as a smaller model of the same vocabulary whose
hidden state after block L - 1 goes straight to the output norm and the classifier: an early
exit of the model itself (self-speculation, as LayerSkip's early exit; Elhoushi et al. 2024),
which drafts for the full model in `ngramspec-llama --draft-model` and in llama.cpp's own
draft-simple. A per-layer metadata array (an `<arch>.` key holding one number per block, as some
converters write head counts) is cut to its first --layers entries too.

--layers equal to the block count writes a copy of the model that decodes exactly as the input
does (its tensors, their order and bytes unchanged). --list prints the architecture, the block
count and the tensors per block, and writes nothing.

Only the standard library: the GGUF is read and written by this file (versions 2 and 3: the
header, the metadata, the tensor table, then the tensor data at `general.alignment`, 32 when
absent). Tensor bytes are copied unchanged, whatever their type. The file is written beside
--out and renamed into place when complete (its folder is made when missing). Errors name the value and exit 2.
"""
import argparse
import os
import re
import struct
import sys

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
COPY_CHUNK = 1 << 20

# GGUF metadata value types: (struct format of one item, or None for a string or array).
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
SCALAR_FORMATS = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f",
                  BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
INTEGER_TYPES = (UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64, INT64)
BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.")


class GGUFError(Exception):
    """The input is not a GGUF this tool can read; the message names what and where."""


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


class Reader:
    def __init__(self, f, path):
        self.f = f
        self.path = path

    def take(self, n):
        data = self.f.read(n)
        if len(data) != n:
            raise GGUFError(f"{self.path!r} ends at byte {self.f.tell()}, inside its header "
                            f"(wanted {n} more bytes): a truncated or damaged GGUF")
        return data

    def scalar(self, vtype):
        fmt = SCALAR_FORMATS[vtype]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.scalar(UINT64)
        if n > 1 << 30:
            raise GGUFError(f"{self.path!r}: a string of {n} bytes at byte {self.f.tell() - 8}: a damaged GGUF")
        return self.take(n)

    def value(self, vtype):
        if vtype in SCALAR_FORMATS:
            return self.scalar(vtype)
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            item_type = self.scalar(UINT32)
            count = self.scalar(UINT64)
            if item_type not in SCALAR_FORMATS and item_type not in (STRING, ARRAY):
                raise GGUFError(f"{self.path!r}: an array of unknown value type {item_type}")
            if count > 1 << 32:
                raise GGUFError(f"{self.path!r}: an array of {count} items: a damaged GGUF")
            return (item_type, [self.value(item_type) for _ in range(count)])
        raise GGUFError(f"{self.path!r}: unknown metadata value type {vtype} at byte {self.f.tell() - 4}")


def pack_value(vtype, value):
    if vtype in SCALAR_FORMATS:
        return struct.pack(SCALAR_FORMATS[vtype], value)
    if vtype == STRING:
        return struct.pack("<Q", len(value)) + value
    item_type, items = value
    return struct.pack("<IQ", item_type, len(items)) + b"".join(pack_value(item_type, v) for v in items)


def pack_string(s):
    return struct.pack("<Q", len(s)) + s


def read_gguf(path):
    """(version, [(key, type, value)], [(name, dims, ggml_type, offset)], data_start, file_size)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        r = Reader(f, path)
        magic = f.read(4)
        if magic != MAGIC:
            raise GGUFError(f"{path!r} is not a GGUF file (it begins {magic!r}, not {MAGIC!r})")
        version = r.scalar(UINT32)
        if version not in (2, 3):
            raise GGUFError(f"{path!r} is GGUF version {version}; this tool reads versions 2 and 3")
        n_tensors = r.scalar(UINT64)
        n_kv = r.scalar(UINT64)
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise GGUFError(f"{path!r} claims {n_tensors} tensors and {n_kv} metadata keys: a damaged GGUF")
        kvs = []
        for _ in range(n_kv):
            key = r.string().decode("utf-8", "replace")
            vtype = r.scalar(UINT32)
            kvs.append((key, vtype, r.value(vtype)))
        tensors = []
        for _ in range(n_tensors):
            name = r.string().decode("utf-8", "replace")
            n_dims = r.scalar(UINT32)
            if n_dims > 8:
                raise GGUFError(f"{path!r}: tensor {name!r} has {n_dims} dimensions: a damaged GGUF")
            dims = [r.scalar(UINT64) for _ in range(n_dims)]
            ggml_type = r.scalar(UINT32)
            offset = r.scalar(UINT64)
            tensors.append((name, dims, ggml_type, offset))
        alignment = DEFAULT_ALIGNMENT
        for key, vtype, value in kvs:
            if key == "general.alignment":
                if vtype not in INTEGER_TYPES or value <= 0 or value & (value - 1):
                    raise GGUFError(f"{path!r}: general.alignment = {value!r} is not a power of two")
                alignment = value
        data_start = -(-f.tell() // alignment) * alignment
    for name, _, _, offset in tensors:
        if data_start + offset > size:
            raise GGUFError(f"{path!r}: tensor {name!r} starts at byte {data_start + offset}, past the end "
                            f"of the file ({size} bytes): a truncated GGUF")
    return version, kvs, tensors, data_start, size, alignment


def metadata(kvs, key):
    for k, vtype, value in kvs:
        if k == key:
            return vtype, value
    return None, None


def model_shape(path, kvs, tensors):
    """(architecture, block_count, {block: [tensor names]})."""
    vtype, arch = metadata(kvs, "general.architecture")
    if vtype != STRING:
        raise GGUFError(f"{path!r} has no general.architecture string: not a model GGUF")
    arch = arch.decode("utf-8", "replace")
    key = f"{arch}.block_count"
    vtype, blocks = metadata(kvs, key)
    if vtype not in INTEGER_TYPES:
        raise GGUFError(f"{path!r} has no integer {key}: not a model of blocks this tool can cut")
    per_block = {}
    for name, _, _, _ in tensors:
        m = BLOCK_TENSOR.match(name)
        if m:
            per_block.setdefault(int(m.group(1)), []).append(name)
    stray = sorted(b for b in per_block if b >= blocks)
    if stray:
        raise GGUFError(f"{path!r} has tensors of block {stray[0]} but {key} = {blocks}: a damaged GGUF")
    return arch, blocks, per_block


def write_draft(path, out, layers):
    version, kvs, tensors, data_start, size, alignment = read_gguf(path)
    arch, blocks, _ = model_shape(path, kvs, tensors)
    if layers > blocks:
        fail(f"--layers {layers} is more than the {blocks} blocks of {path!r} ({arch}.block_count)")

    # Each tensor's bytes run from its offset to the next tensor's (padding included) or the file's end.
    starts = sorted({offset for _, _, _, offset in tensors})
    end_of = {s: e for s, e in zip(starts, starts[1:] + [size - data_start])}

    kept = [t for t in tensors if not (BLOCK_TENSOR.match(t[0]) and int(BLOCK_TENSOR.match(t[0]).group(1)) >= layers)]
    new_kvs = []
    for key, vtype, value in kvs:
        if key == f"{arch}.block_count":
            value = layers
        elif (key.startswith(arch + ".") and vtype == ARRAY and value[0] in INTEGER_TYPES + (FLOAT32, FLOAT64)
              and len(value[1]) == blocks):
            value = (value[0], value[1][:layers])  # one entry per block
        new_kvs.append((key, vtype, value))

    header = MAGIC + struct.pack("<IQQ", version, len(kept), len(new_kvs))
    header += b"".join(pack_string(k.encode()) + struct.pack("<I", t) + pack_value(t, v) for k, t, v in new_kvs)
    offset = 0
    placed = []
    for name, dims, ggml_type, old in kept:
        length = end_of[old] - old
        placed.append((old, offset, length))
        header += pack_string(name.encode()) + struct.pack("<I", len(dims))
        header += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ggml_type, offset)
        offset = -(-(offset + length) // alignment) * alignment
    header += b"\0" * (-len(header) % alignment)

    partial = out + ".partial"
    try:
        with open(path, "rb") as src, open(partial, "wb") as dst:
            dst.write(header)
            for old, new, length in placed:
                dst.write(b"\0" * (len(header) + new - dst.tell()))
                src.seek(data_start + old)
                left = length
                while left:
                    chunk = src.read(min(left, COPY_CHUNK))
                    if not chunk:
                        raise GGUFError(f"{path!r} ends inside a tensor's data: a truncated GGUF")
                    dst.write(chunk)
                    left -= len(chunk)
        os.replace(partial, out)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    return arch, blocks, len(tensors) - len(kept)


def main():
    parser = argparse.ArgumentParser(
        description="Writes a llama GGUF with only its first --layers blocks: a draft model of the same vocabulary.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--model", required=True, metavar="GGUF", help="the model to cut (required)")
    parser.add_argument("--layers", metavar="L",
                        help="blocks to keep, 1 to the model's block count (required unless --list)")
    parser.add_argument("--out", metavar="GGUF", help="the file to write (required unless --list)")
    parser.add_argument("--list", action="store_true",
                        help="print the architecture, the block count and the tensors per block; write nothing")
    args = parser.parse_args()

    if not os.path.isfile(args.model):
        fail(f"--model {args.model!r} does not exist or is not a file")
    try:
        if args.list:
            if args.layers is not None or args.out is not None:
                fail("--list writes nothing: it takes --model alone, not --layers or --out")
            _, kvs, tensors, _, _, _ = read_gguf(args.model)
            arch, blocks, per_block = model_shape(args.model, kvs, tensors)
            counts = sorted({len(v) for v in per_block.values()})
            print(f"{args.model}: architecture {arch}, {blocks} blocks, {len(tensors)} tensors "
                  f"({', '.join(map(str, counts))} per block)")
            return 0
        if args.layers is None or args.out is None:
            fail("--layers and --out are required (or --list)")
        try:
            layers = int(args.layers, 10)
        except ValueError:
            fail(f"--layers {args.layers!r} is not a whole number")
        if layers < 1:
            fail(f"--layers {layers} is out of range: a draft keeps at least 1 block")
        if os.path.isdir(args.out):
            fail(f"--out {args.out!r} is a folder; give a file name")
        if os.path.exists(args.out) and os.path.samefile(args.out, args.model):
            fail(f"--out {args.out!r} is the --model file itself; give another name")
        folder = os.path.dirname(os.path.abspath(args.out))
        if os.path.exists(folder) and not os.path.isdir(folder):
            fail(f"--out {args.out!r}: {folder!r} is not a folder")
        os.makedirs(folder, exist_ok=True)
        arch, blocks, dropped = write_draft(args.model, args.out, layers)
    except GGUFError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename or args.out!r}: {e.strerror}")
    print(f"{args.out}: {arch}, {layers} of {blocks} blocks ({dropped} tensors left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
