#include "llama_draft_gguf.hpp"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "ggml.h"
#include "gguf.h"

namespace ngramspec::llama_cpp {
namespace {

struct FreeGguf {
  void operator()(gguf_context* g) const noexcept { gguf_free(g); }
};
struct FreeGgml {
  void operator()(ggml_context* g) const noexcept { ggml_free(g); }
};

// The block of a tensor named "blk.N.*", or -1.
long long block_of(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (name.substr(0, prefix.size()) != prefix) return -1;
  long long block = 0;
  std::size_t i = prefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) block = block * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? block : -1;
}

bool is_integer(gguf_type t) {
  return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_INT16 ||
         t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

long long integer(const gguf_context* g, std::int64_t id) {
  switch (gguf_get_kv_type(g, id)) {
    case GGUF_TYPE_UINT8: return gguf_get_val_u8(g, id);
    case GGUF_TYPE_INT8: return gguf_get_val_i8(g, id);
    case GGUF_TYPE_UINT16: return gguf_get_val_u16(g, id);
    case GGUF_TYPE_INT16: return gguf_get_val_i16(g, id);
    case GGUF_TYPE_UINT32: return gguf_get_val_u32(g, id);
    case GGUF_TYPE_INT32: return gguf_get_val_i32(g, id);
    case GGUF_TYPE_UINT64: return static_cast<long long>(gguf_get_val_u64(g, id));
    default: return gguf_get_val_i64(g, id);
  }
}

// Sets `key` to `value` in the type it had.
void set_integer(gguf_context* g, const char* key, gguf_type type, std::size_t value) {
  switch (type) {
    case GGUF_TYPE_UINT8: gguf_set_val_u8(g, key, static_cast<std::uint8_t>(value)); break;
    case GGUF_TYPE_INT8: gguf_set_val_i8(g, key, static_cast<std::int8_t>(value)); break;
    case GGUF_TYPE_UINT16: gguf_set_val_u16(g, key, static_cast<std::uint16_t>(value)); break;
    case GGUF_TYPE_INT16: gguf_set_val_i16(g, key, static_cast<std::int16_t>(value)); break;
    case GGUF_TYPE_UINT32: gguf_set_val_u32(g, key, static_cast<std::uint32_t>(value)); break;
    case GGUF_TYPE_INT32: gguf_set_val_i32(g, key, static_cast<std::int32_t>(value)); break;
    case GGUF_TYPE_UINT64: gguf_set_val_u64(g, key, value); break;
    default: gguf_set_val_i64(g, key, static_cast<std::int64_t>(value)); break;
  }
}

}  // namespace

std::size_t write_first_blocks(const std::string& source, std::size_t layers, const std::string& out) {
  const std::string where = "'" + source + "'";
  ggml_context* data_raw = nullptr;
  const std::unique_ptr<gguf_context, FreeGguf> in(gguf_init_from_file(source.c_str(), {false, &data_raw}));
  const std::unique_ptr<ggml_context, FreeGgml> data(data_raw);
  if (in == nullptr || data == nullptr) throw std::runtime_error("cannot read " + where + " as a GGUF file");
  const std::int64_t arch_id = gguf_find_key(in.get(), "general.architecture");
  if (arch_id < 0 || gguf_get_kv_type(in.get(), arch_id) != GGUF_TYPE_STRING) {
    throw std::runtime_error(where + " has no general.architecture: not a model GGUF");
  }
  const std::string arch = gguf_get_val_str(in.get(), arch_id);
  const std::string count_key = arch + ".block_count";
  const std::int64_t count_id = gguf_find_key(in.get(), count_key.c_str());
  if (count_id < 0 || !is_integer(gguf_get_kv_type(in.get(), count_id))) {
    throw std::runtime_error(where + " has no integer " + count_key + ": not a model of blocks to cut");
  }
  const long long blocks = integer(in.get(), count_id);
  if (layers == 0 || static_cast<long long>(layers) > blocks) {
    throw std::runtime_error("a draft of " + std::to_string(layers) + " blocks is out of range: " + where + " has " +
                             std::to_string(blocks) + " (" + count_key + ")");
  }

  const std::unique_ptr<gguf_context, FreeGguf> draft(gguf_init_empty());
  gguf_set_kv(draft.get(), in.get());
  set_integer(draft.get(), count_key.c_str(), gguf_get_kv_type(in.get(), count_id), layers);
  for (std::int64_t id = 0; id < gguf_get_n_kv(in.get()); ++id) {
    const std::string key = gguf_get_key(in.get(), id);
    if (key.rfind(arch + ".", 0) != 0 || gguf_get_kv_type(in.get(), id) != GGUF_TYPE_ARRAY) continue;
    const gguf_type item = gguf_get_arr_type(in.get(), id);
    if ((is_integer(item) || item == GGUF_TYPE_FLOAT32 || item == GGUF_TYPE_FLOAT64) &&
        gguf_get_arr_n(in.get(), id) == static_cast<std::size_t>(blocks)) {
      gguf_set_arr_data(draft.get(), key.c_str(), item, gguf_get_arr_data(in.get(), id), layers);  // one per block
    }
  }
  for (std::int64_t t = 0; t < gguf_get_n_tensors(in.get()); ++t) {
    const char* name = gguf_get_tensor_name(in.get(), t);
    if (block_of(name) >= static_cast<long long>(layers)) continue;
    const ggml_tensor* tensor = ggml_get_tensor(data.get(), name);
    if (tensor == nullptr) throw std::runtime_error(where + ": tensor '" + std::string(name) + "' has no data");
    gguf_add_tensor(draft.get(), tensor);
  }
  if (!gguf_write_to_file(draft.get(), out.c_str(), false)) {
    std::remove(out.c_str());
    throw std::runtime_error("cannot write the draft of " + where + " to '" + out + "'");
  }
  return static_cast<std::size_t>(blocks);
}

}  // namespace ngramspec::llama_cpp
