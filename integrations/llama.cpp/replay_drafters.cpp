// llama.cpp's own n-gram drafters in ngramspec-replay (--drafter llama.cpp:TYPE[:key=value,...]):
// registered from here, before main, by an object this folder's build links into the replay, so
// the replay includes nothing of llama.cpp or of this folder.

#include <cstddef>
#include <string>

#include "drafter_entry.hpp"
#include "drafter_registry.hpp"
#include "llama_cpp_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "token_streams.hpp"

namespace ngramspec::llama_cpp {
namespace {

replay::DrafterEntry make_llama_cpp_drafter(const std::string& spec) {
  const std::string type = spec.size() > 10 ? spec.substr(10) : std::string();
  const LlamaCppDrafterConfig config = parse_spec(type, "drafter '" + spec + "'");
  return replay::drafter_entry(describe(config), [config](const replay::TokenStream&, std::size_t, const SharedCorpus*,
                                                          bool) { return LlamaCppDrafter(config); });
}

const bool kRegistered = [] {
  replay::register_drafter_family(
      {"llama.cpp", make_llama_cpp_drafter,
       "  llama.cpp:TYPE[:key=value,...]       llama.cpp's own n-gram drafter, run by llama.cpp's code\n"
       "                                       (common_speculative): ngram-simple[:n=N,m=M],\n"
       "                                       ngram-map-k[:n=N,m=M], ngram-map-k4v[:n=N,m=M,min_hits=H],\n"
       "                                       ngram-mod[:n_match=N,n_max=M,n_min=L], ngram-cache;\n"
       "                                       defaults llama.cpp's (n 12, m 48, min_hits 1; n_match 24,\n"
       "                                       n_max 64, n_min 48)\n"});
  return true;
}();

}  // namespace
}  // namespace ngramspec::llama_cpp
