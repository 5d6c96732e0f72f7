// The C ABI's corpora: the live corpus (SharedCorpus) and the corpus files (MappedCorpus).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "common.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/ngramspec.h"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"

namespace {

using namespace ngramspec::c_api;  // the parts every C function uses

// ngramspec_corpus_draft and ngramspec_corpus_file_draft: a draft (a noexcept C++ draft) from the
// corpus or file `handle`, the parameter `name`.
template <class H>
ngramspec_status draft_from(const char* where, const H* handle, const char* name, const ngramspec_token* context,
                            std::size_t n, ngramspec_token* out, std::size_t room, std::size_t* count,
                            std::size_t* match_length) noexcept {
  if (handle == nullptr) return null_argument(where, name);
  if (const ngramspec_status bad = check_tokens(where, context, "context", "n", n); bad != NGRAMSPEC_OK) return bad;
  if (const ngramspec_status bad = check_tokens(where, out, "out", "room", room); bad != NGRAMSPEC_OK) return bad;
  if (count == nullptr) return null_argument(where, "count");
  const ngramspec::CorpusDraft found =
      handle->object.draft(std::span<const ngramspec::Token>(context, n), std::span<ngramspec::Token>(out, room));
  *count = found.count;
  if (match_length != nullptr) *match_length = found.match_length;
  return NGRAMSPEC_OK;
}

// ngramspec_corpus_append and ngramspec_corpus_append_stamped: the C++ append with `stamp...`.
template <class... Stamp>
ngramspec_status append(const char* where, ngramspec_corpus* corpus, const ngramspec_token* tokens, std::size_t count,
                        Stamp... stamp) noexcept {
  if (corpus == nullptr) return null_argument(where, "corpus");
  if (const ngramspec_status bad = check_tokens(where, tokens, "tokens", "count", count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  return guarded(Where{where},
                 [&] { corpus->object.append(std::span<const ngramspec::Token>(tokens, count), stamp...); });
}

// ngramspec_corpus_load and ngramspec_corpus_load_trusted.
ngramspec_status load(const char* where, ngramspec_corpus* corpus, const char* path,
                      ngramspec::ChecksumCheck check) noexcept {
  if (corpus == nullptr) return null_argument(where, "corpus");
  if (path == nullptr) return null_argument(where, "path");
  return guarded(Where{where}, [&] { corpus->object.load(std::filesystem::path(path), check); });
}

// A corpus file check: the C++ check `check` of `file`.
template <class Check>
ngramspec_status check_file(const char* where, const ngramspec_corpus_file* file, Check check) noexcept {
  if (file == nullptr) return null_argument(where, "file");
  return guarded(Where{where}, [&] { check(file->object); });
}

}  // namespace

extern "C" {

// ---- SharedCorpus --------------------------------------------------------------------------------

ngramspec_status ngramspec_corpus_create(size_t max_bytes, ngramspec_corpus** out) {
  return create_handle(__func__, out, max_bytes);
}

void ngramspec_corpus_free(ngramspec_corpus* corpus) { delete corpus; }

ngramspec_status ngramspec_corpus_append(ngramspec_corpus* corpus, const ngramspec_token* tokens, size_t count) {
  return append(__func__, corpus, tokens, count);
}

ngramspec_status ngramspec_corpus_clear(ngramspec_corpus* corpus) {
  if (corpus == nullptr) return null_argument(__func__, "corpus");
  return guarded(Where{__func__}, [corpus] { corpus->object.clear(); });
}

size_t ngramspec_corpus_size(const ngramspec_corpus* corpus) {
  if (corpus == nullptr) return 0;
  return guarded_value(Where{__func__}, std::size_t{0}, [corpus] { return corpus->object.size(); });  // the lock
}

uint64_t ngramspec_corpus_records(const ngramspec_corpus* corpus) {
  if (corpus == nullptr) return 0;
  return guarded_value(Where{__func__}, std::uint64_t{0}, [corpus] { return corpus->object.records(); });
}

size_t ngramspec_corpus_capacity_tokens(const ngramspec_corpus* corpus) {
  return corpus == nullptr ? 0 : corpus->object.capacity_tokens();
}

size_t ngramspec_corpus_memory_bytes(const ngramspec_corpus* corpus) {
  return corpus == nullptr ? 0 : corpus->object.memory_bytes();
}

ngramspec_status ngramspec_corpus_append_stamped(ngramspec_corpus* corpus, const ngramspec_token* tokens, size_t count,
                                                 int64_t stamp) {
  return append(__func__, corpus, tokens, count, stamp);
}

int64_t ngramspec_corpus_last_stamp(const ngramspec_corpus* corpus) {
  if (corpus == nullptr) return 0;
  return guarded_value(Where{__func__}, std::int64_t{0}, [corpus] { return corpus->object.last_stamp(); });
}

ngramspec_status ngramspec_corpus_draft(const ngramspec_corpus* corpus, const ngramspec_token* context, size_t n,
                                        ngramspec_token* out, size_t room, size_t* count, size_t* match_length) {
  return draft_from(__func__, corpus, "corpus", context, n, out, room, count, match_length);
}

ngramspec_status ngramspec_corpus_save(const ngramspec_corpus* corpus, const char* path) {
  if (corpus == nullptr) return null_argument(__func__, "corpus");
  if (path == nullptr) return null_argument(__func__, "path");
  return guarded(Where{__func__}, [&] { corpus->object.save(std::filesystem::path(path)); });
}

ngramspec_status ngramspec_corpus_load(ngramspec_corpus* corpus, const char* path) {
  return load(__func__, corpus, path, ngramspec::ChecksumCheck::verify);
}

ngramspec_status ngramspec_corpus_load_trusted(ngramspec_corpus* corpus, const char* path) {
  return load(__func__, corpus, path, ngramspec::ChecksumCheck::skip);
}

// ---- Corpus files --------------------------------------------------------------------------------

ngramspec_status ngramspec_corpus_file_open(const char* path, ngramspec_corpus_file** out) {
  if (path == nullptr) return null_argument(__func__, "path");
  return create_handle(__func__, out, path);
}

void ngramspec_corpus_file_close(ngramspec_corpus_file* file) { delete file; }

ngramspec_status ngramspec_corpus_file_verify(const ngramspec_corpus_file* file) {
  return check_file(__func__, file, [](const ngramspec::MappedCorpus& f) { f.verify(); });
}

ngramspec_status ngramspec_corpus_file_verify_checksums(const ngramspec_corpus_file* file) {
  return check_file(__func__, file, [](const ngramspec::MappedCorpus& f) { f.verify_checksums(); });
}

uint64_t ngramspec_corpus_file_vocab_size(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->object.vocabulary().size;
}

uint64_t ngramspec_corpus_file_tokenizer_fingerprint(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->object.vocabulary().tokenizer_fingerprint;
}

size_t ngramspec_corpus_file_size(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->object.size();
}

uint64_t ngramspec_corpus_file_records(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->object.records();
}

uint64_t ngramspec_corpus_file_bytes(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->object.file_bytes();
}

int64_t ngramspec_corpus_file_first_stamp(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->object.first_stamp();
}

int64_t ngramspec_corpus_file_last_stamp(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->object.last_stamp();
}

ngramspec_status ngramspec_corpus_file_draft(const ngramspec_corpus_file* file, const ngramspec_token* context,
                                             size_t n, ngramspec_token* out, size_t room, size_t* count,
                                             size_t* match_length) {
  return draft_from(__func__, file, "file", context, n, out, room, count, match_length);
}

}  // extern "C"
