// The C ABI's single drafters: MatchDrafter and NGramPredictor.

#include <cstddef>
#include <cstdint>

#include "common.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/ngramspec.h"

namespace {

using namespace ngramspec::c_api;  // the parts every C function uses

ngramspec::NGramConfig to_cpp(const ngramspec_ngram_config* c) noexcept {
  ngramspec::NGramConfig config;
  if (c == nullptr) return config;
  config.min_order = c->min_order;
  config.max_order = c->max_order;
  config.window = c->window;
  return config;
}

// ngramspec_match_drafter_create_file and ngramspec_match_drafter_create_vocab.
ngramspec_status create_match_drafter(const char* where, const ngramspec_match_config* config,
                                      const ngramspec_corpus* corpus, const ngramspec_corpus_file* file, int preference,
                                      Vocabulary vocabulary, ngramspec_match_drafter** out) noexcept {
  if (out == nullptr) return ngramspec::c_api::null_argument(where, "out");
  ngramspec::CorpusPreference cpp_preference{};
  if (!ngramspec::c_api::to_cpp(preference, cpp_preference, where)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  ngramspec::MatchConfig cpp = ngramspec::c_api::to_cpp(config);
  cpp.corpus_preference = cpp_preference;
  cpp.vocab_size = vocabulary.size;
  cpp.tokenizer_fingerprint = vocabulary.tokenizer_fingerprint;
  return create_handle(where, out, cpp, object_of(corpus), object_of(file));
}

}  // namespace

namespace ngramspec::c_api {

MatchConfig to_cpp(const ngramspec_match_config* c) noexcept {
  MatchConfig config;
  if (c == nullptr) return config;
  config.index_capacity = c->index_capacity;
  config.copy_min_match = c->copy_min_match;
  config.count_max_order = c->count_max_order;
  config.count_window = c->count_window;
  config.min_confidence = c->min_confidence;
  return config;
}

ngramspec_match_config to_c(const MatchConfig& config) noexcept {
  ngramspec_match_config c;
  c.index_capacity = config.index_capacity;
  c.copy_min_match = config.copy_min_match;
  c.count_max_order = config.count_max_order;
  c.count_window = config.count_window;
  c.min_confidence = config.min_confidence;
  return c;
}

}  // namespace ngramspec::c_api

extern "C" {

// ---- MatchDrafter --------------------------------------------------------------------------------

ngramspec_match_config ngramspec_match_config_default(void) {
  return ngramspec::c_api::to_c(ngramspec::MatchConfig{});
}

ngramspec_status ngramspec_match_drafter_create(const ngramspec_match_config* config, const ngramspec_corpus* corpus,
                                                ngramspec_match_drafter** out) {
  return create_handle(__func__, out, ngramspec::c_api::to_cpp(config), object_of(corpus));
}

ngramspec_status ngramspec_match_drafter_create_file(const ngramspec_match_config* config,
                                                     const ngramspec_corpus* corpus, const ngramspec_corpus_file* file,
                                                     int preference, ngramspec_match_drafter** out) {
  return create_match_drafter(__func__, config, corpus, file, preference, {}, out);
}

ngramspec_status ngramspec_match_drafter_create_vocab(const ngramspec_match_config* config,
                                                      const ngramspec_corpus* corpus, const ngramspec_corpus_file* file,
                                                      int preference, uint64_t vocab_size,
                                                      uint64_t tokenizer_fingerprint, ngramspec_match_drafter** out) {
  return create_match_drafter(__func__, config, corpus, file, preference, Vocabulary{vocab_size, tokenizer_fingerprint},
                              out);
}

void ngramspec_match_drafter_free(ngramspec_match_drafter* drafter) { delete drafter; }

ngramspec_status ngramspec_match_drafter_update(ngramspec_match_drafter* drafter, const ngramspec_token* tokens,
                                                size_t count) {
  return update_handle(__func__, drafter, "drafter", tokens, count);
}

ngramspec_status ngramspec_match_drafter_predict(const ngramspec_match_drafter* drafter, ngramspec_token* out,
                                                 size_t capacity, float* probabilities, size_t* count) {
  return predict_handle(__func__, drafter, "drafter", out, capacity, probabilities, count);
}

ngramspec_status ngramspec_match_drafter_reset(ngramspec_match_drafter* drafter) {
  return reset_handle(__func__, drafter, "drafter");
}

ngramspec_status ngramspec_match_drafter_restart(ngramspec_match_drafter* drafter) {
  if (drafter == nullptr) return null_argument(__func__, "drafter");
  drafter->object.restart();
  return NGRAMSPEC_OK;
}

size_t ngramspec_match_drafter_memory_bytes(const ngramspec_match_drafter* drafter) {
  return drafter == nullptr ? 0 : drafter->object.memory_bytes();
}

uint64_t ngramspec_match_drafter_out_of_vocabulary(const ngramspec_match_drafter* drafter) {
  return drafter == nullptr ? 0 : drafter->object.out_of_vocabulary_drafts();
}

// ---- NGramPredictor ------------------------------------------------------------------------------

ngramspec_ngram_config ngramspec_ngram_config_default(void) {
  const ngramspec::NGramConfig config;
  ngramspec_ngram_config c;
  c.min_order = config.min_order;
  c.max_order = config.max_order;
  c.window = config.window;
  return c;
}

ngramspec_status ngramspec_ngram_predictor_create(const ngramspec_ngram_config* config,
                                                  ngramspec_ngram_predictor** out) {
  return create_handle(__func__, out, to_cpp(config));
}

void ngramspec_ngram_predictor_free(ngramspec_ngram_predictor* predictor) { delete predictor; }

ngramspec_status ngramspec_ngram_predictor_update(ngramspec_ngram_predictor* predictor, const ngramspec_token* tokens,
                                                  size_t count) {
  return update_handle(__func__, predictor, "predictor", tokens, count);
}

ngramspec_status ngramspec_ngram_predictor_predict(const ngramspec_ngram_predictor* predictor, ngramspec_token* out,
                                                   size_t capacity, float* probabilities, size_t* count) {
  return predict_handle(__func__, predictor, "predictor", out, capacity, probabilities, count);
}

ngramspec_status ngramspec_ngram_predictor_reset(ngramspec_ngram_predictor* predictor) {
  return reset_handle(__func__, predictor, "predictor");
}

size_t ngramspec_ngram_predictor_memory_bytes(const ngramspec_ngram_predictor* predictor) {
  return predictor == nullptr ? 0 : predictor->object.memory_bytes();
}

}  // extern "C"
