#pragma once
// A model's first blocks as a draft model, written as make_draft_gguf.py writes it, for
// ngramspec-llama --draft-layers: the same file in C++ through ggml's GGUF reader and writer.

#include <cstddef>
#include <string>

namespace ngramspec::llama_cpp {

/// Writes to `out` the GGUF `source` with only its first `layers` blocks: every metadata key
/// kept but `<arch>.block_count`, set to `layers` (and a per-layer array of numbers under
/// `<arch>.`, cut to its first `layers` entries), every tensor kept but those of blocks
/// `layers` and later (`blk.N.*`). Reads the whole source into memory once. Returns the
/// source's block count. Throws std::runtime_error naming the file and the value when the
/// source cannot be read as a model GGUF, `layers` is 0 or more than its blocks, or `out`
/// cannot be written (nothing is left at `out` then).
std::size_t write_first_blocks(const std::string& source, std::size_t layers, const std::string& out);

}  // namespace ngramspec::llama_cpp
