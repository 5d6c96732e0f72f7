// Fuzz target: corpus files on arbitrary bytes, through MappedCorpus, SharedCorpus::load and
// CorpusBuilder.
//
// The first byte is a set of flags; the rest is what the target reads.
//
// Flag 0x80 clear ("file" mode): the rest is a corpus file. Before it is written out the harness
// may repair what a mutation broke, so that the deeper code sees garbage content instead of a
// refusal at the first checksum: 0x01 sets the header's file_bytes to the file's size, 0x02
// recomputes the checksum of every section that the section table places inside the file, and
// 0x04 recomputes the header checksum (after the other two; where the version field places it:
// a version 1 header keeps it at 312, a version 2 one at 376). Bits 0x78 seed the choice of
// contexts. The file is then
//  - mapped by MappedCorpus, which returns or throws CorpusFileError whose path() is the file
//    and whose what() names it (and the section, when there is one);
//  - when mapped, drafted from with contexts taken from its own tokens, from its records and from
//    the input's bytes, at rooms 0..100: every draft stays within its room, equals find() then
//    copy(), and what it matched and copied lies in tokens(); every record (up to 10000) is a view
//    inside tokens(); record(records()) throws std::out_of_range; ngrams() answers for orders 0..4;
//    moving it keeps the mapping, and verify() of the moved-from one throws CorpusFileError;
//  - verify()d, which returns or throws CorpusFileError. When it returns, the records tile
//    tokens() in stamp order, ngrams(n) is at most the number of distinct n-grams inside records
//    (each is stored once), and every draft equals NaiveCorpus's (support/reference_corpus.hpp)
//    over the same records;
//  - checked by verify_records(), which verify() agrees with: a file whose checksums hold is
//    refused by verify() with verify_records()'s message (or earlier, for a token outside the
//    recorded vocabulary) when verify_records() refuses it, and otherwise only for its tokens
//    (verify_tokens() says which) or its tables, which no load or merge copies;
//  - loaded by a SharedCorpus of 256 tokens that holds a record of its own: load() throws
//    CorpusFileError exactly when mapping, verify_checksums() or verify_records() did (a version
//    1 file reads as recording no vocabulary) or verify_tokens() over the records it keeps did,
//    load(ChecksumCheck::skip) exactly when mapping, verify_records() or that verify_tokens()
//    did, and CorpusBuilder::add (a merge) of the mapped file exactly when verify_records() or
//    verify_tokens() over every token did; a refused load leaves the corpus unchanged (size,
//    records, stamp, drafts); after loading a verified file it drafts as NaiveCorpus over the
//    file's records with its capacity.
//
// Flag 0x80 set ("builder" mode): the rest is a byte cap (or none), an alphabet and a script of
// records (new tokens, exact duplicates, empty ones; stamps that tie, are negative or extreme)
// for CorpusBuilder. The constructor throws std::invalid_argument exactly when the cap cannot
// hold one token; write()'s summary adds up and its file is as large as it says and within the
// cap; the file passes verify(), holds the records sorted by stamp and tokens with duplicates
// dropped, the newest that fit with the oldest kept cut to its end, drafts as NaiveCorpus over
// them, and a builder given the mapped file writes the same bytes again (or, when the oldest
// record kept was cut and so may sort elsewhere among the records of its stamp, the same records
// re-sorted).
//
// Files go to a private folder under /dev/shm (or the temporary folder), removed at exit.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "fuzz_input.hpp"
#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/detail/corpus_format.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "support/reference_corpus.hpp"

namespace ngramspec::test {
namespace {

namespace format = detail::corpus_format;

constexpr Token kUntouched = 0xDEADBEEFU;
constexpr std::size_t kMaxRecordCalls = 10000;

// A folder of this process's own, removed (with what it holds) when the process exits.
class Scratch {
 public:
  Scratch() {
    std::error_code error;
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm", error) ? std::filesystem::path("/dev/shm")
                                                         : std::filesystem::temp_directory_path();
    std::string pattern = (base / "corpus_file_fuzz.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) fuzz_fail("mkdtemp failed");
    dir_ = pattern;
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  [[nodiscard]] std::filesystem::path operator/(const char* name) const { return dir_ / name; }

 private:
  std::filesystem::path dir_;
};

const Scratch& scratch() {
  static const Scratch instance;
  return instance;
}

void write_file(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fuzz_fail("cannot create the input file");
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) {
      ::close(fd);
      fuzz_fail("cannot write the input file");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) fuzz_fail("cannot close the input file");
}

std::vector<char> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fuzz_fail("cannot read back a written file");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool is_section_name(const std::string& name) {
  if (name.empty() || name == "header") return true;
  for (std::size_t i = 0; i < format::kSections; ++i) {
    if (name == format::section_name(i)) return true;
  }
  return false;
}

// A refusal must say which file, and which part of it, in its message.
void check_error(const CorpusFileError& e, const std::filesystem::path& path) {
  const std::string what = e.what();
  if (what.empty()) fuzz_fail("a CorpusFileError has no message");
  if (e.path() != path) fuzz_fail("a CorpusFileError's path() is not the file");
  if (what.find(path.string()) == std::string::npos) fuzz_fail("a CorpusFileError's message does not name the file");
  if (!is_section_name(e.section())) fuzz_fail("a CorpusFileError names an unknown section");
  if (!e.section().empty() && what.find(e.section()) == std::string::npos) {
    fuzz_fail("a CorpusFileError's message does not name its section");
  }
}

// A tiny generator for choosing contexts: the same input chooses the same ones.
class Choices {
 public:
  explicit Choices(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) noexcept { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

std::vector<Token> to_vector(std::span<const Token> tokens) { return {tokens.begin(), tokens.end()}; }

// Contexts that hit the file (its own n-grams, record prefixes, sometimes extended by a token)
// and that come from the input's bytes (as 32-bit words and as small ids).
std::vector<std::vector<Token>> contexts_for(const MappedCorpus& corpus, std::span<const std::uint8_t> input,
                                             Choices& choose) {
  std::vector<std::vector<Token>> contexts;
  contexts.emplace_back();
  const std::span<const Token> held = corpus.tokens();
  static constexpr std::size_t kLengths[] = {1, 2, 3, 4, 8, 64, 65, 90};
  if (!held.empty()) {
    for (int i = 0; i < 12; ++i) {
      const std::size_t end = 1 + choose.below(held.size());
      const std::size_t length = std::min(end, kLengths[choose.below(std::size(kLengths))]);
      std::vector<Token> context = to_vector(held.subspan(end - length, length));
      if (choose.below(3) == 0) {
        context.push_back(input.empty() ? Token{0} : Token{input[choose.below(input.size())]});
      }
      contexts.push_back(std::move(context));
    }
    contexts.push_back(to_vector(held.last(std::min<std::size_t>(held.size(), 70))));
  }
  const std::size_t records = std::min<std::size_t>(corpus.records(), 6);
  for (std::size_t r = 0; r < records; ++r) {
    const std::span<const Token> record = corpus.record(r).tokens;
    if (record.empty()) continue;
    contexts.push_back(to_vector(record.first(1 + choose.below(record.size()))));
  }
  if (!input.empty()) {
    for (int i = 0; i < 3; ++i) {
      const std::size_t from = choose.below(input.size());
      const std::size_t words = std::min<std::size_t>(1 + choose.below(70), (input.size() - from) / 4);
      std::vector<Token> context(words);
      for (std::size_t w = 0; w < words; ++w) std::memcpy(&context[w], input.data() + from + 4 * w, 4);
      contexts.push_back(std::move(context));
      const std::size_t count = std::min<std::size_t>(1 + choose.below(8), input.size() - from);
      std::vector<Token> small;
      for (std::size_t b = 0; b < count; ++b) small.push_back(input[from + b] % 8);
      contexts.push_back(std::move(small));
    }
  }
  return contexts;
}

// Drafts `context` with `room` slots and checks what any mapped file, however corrupted, must
// give: a draft within its room, equal to find() then copy(), matching and copying tokens held.
Drafted checked_draft(const MappedCorpus& corpus, std::span<const Token> context, std::size_t room) {
  std::vector<Token> out(room, kUntouched);
  const CorpusDraft found = corpus.draft(context, out);
  if (found.busy) fuzz_fail("a mapped corpus said it was busy");
  if (found.count > room) fuzz_fail("draft() counted more than its room");
  for (std::size_t i = found.count; i < room; ++i) {
    if (out[i] != kUntouched) fuzz_fail("draft() wrote past its count");
  }
  if ((room == 0 || context.empty()) && (found.count != 0 || found.match_length != 0)) {
    fuzz_fail("draft() with no room or no context found something");
  }
  if (found.match_length > std::min(context.size(), MappedCorpus::kMaxVerify)) {
    fuzz_fail("draft()'s match is longer than the context or kMaxVerify");
  }
  if (found.count > 0 && found.match_length == 0) fuzz_fail("draft() copied without a match");

  const std::span<const Token> held = corpus.tokens();
  const CorpusMatch match = corpus.find(context);
  if (match.length > std::min(context.size(), MappedCorpus::kMaxVerify)) {
    fuzz_fail("find()'s match is longer than the context or kMaxVerify");
  }
  if (room > 0 && match.length != found.match_length) fuzz_fail("draft()'s match is not find()'s");
  if (match.length > 0) {
    if (match.end > held.size() || match.end < match.length) fuzz_fail("find() matched outside the tokens held");
    const std::span<const Token> matched =
        held.subspan(static_cast<std::size_t>(match.end) - match.length, match.length);
    if (!std::equal(matched.begin(), matched.end(), context.end() - static_cast<std::ptrdiff_t>(match.length))) {
      fuzz_fail("find()'s match is not the context's suffix");
    }
  }
  std::vector<Token> again(room, kUntouched);
  const std::size_t copied = corpus.copy(match, again);
  if (room > 0 && copied != found.count) fuzz_fail("copy() after find() copied another count than draft()");
  if (copied > room) fuzz_fail("copy() counted more than its room");
  if (match.length == 0 && copied != 0) fuzz_fail("copy() of no match copied something");
  if (copied > 0 && match.end + copied > held.size()) fuzz_fail("copy() read past the tokens held");
  for (std::size_t i = 0; i < room; ++i) {
    if (i < copied ? again[i] != held[static_cast<std::size_t>(match.end) + i] : again[i] != kUntouched) {
      fuzz_fail("copy() wrote other than the tokens after the match, or past its count");
    }
    if (i < found.count && out[i] != again[i]) fuzz_fail("draft() and copy() drafted different tokens");
  }
  out.resize(found.count);
  return Drafted{found.count, found.match_length, out};
}

Drafted shared_draft(const SharedCorpus& corpus, std::span<const Token> context, std::size_t room) {
  std::vector<Token> out(room, kUntouched);
  const CorpusDraft found = corpus.draft(context, out);
  if (found.busy) fuzz_fail("a SharedCorpus nobody appends to said it was busy");
  if (found.count > room) fuzz_fail("SharedCorpus::draft counted more than its room");
  for (std::size_t i = found.count; i < room; ++i) {
    if (out[i] != kUntouched) fuzz_fail("SharedCorpus::draft wrote past its count");
  }
  out.resize(found.count);
  return Drafted{found.count, found.match_length, out};
}

// Distinct n-grams of `order` tokens lying inside one record.
std::uint64_t distinct_ngrams(const MappedCorpus& corpus, std::size_t order) {
  std::set<std::vector<Token>> seen;
  for (std::size_t r = 0; r < corpus.records(); ++r) {
    const std::span<const Token> record = corpus.record(r).tokens;
    for (std::size_t end = order; end <= record.size(); ++end) {
      seen.insert(to_vector(record.subspan(end - order, order)));
    }
  }
  return seen.size();
}

// What a file that passed verify() holds: records that tile the tokens in stamp order.
NaiveCorpus check_verified_records(const MappedCorpus& corpus) {
  NaiveCorpus naive(std::numeric_limits<std::size_t>::max());
  std::size_t next = 0;
  for (std::size_t r = 0; r < corpus.records(); ++r) {
    const CorpusRecord record = corpus.record(r);
    if (record.tokens.empty() || record.tokens.data() != corpus.tokens().data() + next) {
      fuzz_fail("a verified file's records do not tile its tokens");
    }
    if (r > 0 && record.stamp < corpus.record(r - 1).stamp) fuzz_fail("a verified file's stamps go back in time");
    next += record.tokens.size();
    naive.append(record.tokens);
  }
  if (next != corpus.size()) fuzz_fail("a verified file's records do not cover its tokens");
  if (corpus.records() > 0 && (corpus.first_stamp() != corpus.record(0).stamp ||
                               corpus.last_stamp() != corpus.record(corpus.records() - 1).stamp)) {
    fuzz_fail("a verified file's first and last stamps are not its records'");
  }
  // Each n-gram is stored once (two whose fingerprints meet in a probe run may share a slot).
  if (corpus.size() <= 4096) {
    for (std::size_t order = 1; order <= format::kMaxOrder; ++order) {
      if (corpus.ngrams(order) > distinct_ngrams(corpus, order)) {
        fuzz_fail("a verified file's ngrams() exceeds the number of distinct n-grams in its records");
      }
    }
  }
  return naive;
}

// ---------------------------------------------------------------------------------------------
// File mode

std::vector<std::uint8_t> repaired(std::uint8_t flags, std::span<const std::uint8_t> input) {
  std::vector<std::uint8_t> bytes(input.begin(), input.end());
  if ((flags & 0x07) == 0 || bytes.size() < format::kHeaderBytes) return bytes;
  format::Header header;
  std::memcpy(&header, bytes.data(), sizeof header);
  // A version 1 header keeps its checksum where version 2 keeps vocab_size (the bytes after it
  // are the sections'): the checksum is written where the version field says.
  const std::size_t checksum_at = format::checksum_offset(header.version);
  if ((flags & 0x01) != 0) header.file_bytes = bytes.size();
  if ((flags & 0x02) != 0) {
    for (format::SectionEntry& section : header.sections) {
      if (section.offset > bytes.size() || section.bytes > bytes.size() - section.offset) continue;
      section.checksum = format::checksum(std::as_bytes(
          std::span(bytes).subspan(static_cast<std::size_t>(section.offset), static_cast<std::size_t>(section.bytes))));
    }
  }
  std::memcpy(bytes.data(), &header, sizeof header);
  if ((flags & 0x04) != 0) {
    const std::uint64_t checksum = format::checksum(std::as_bytes(std::span(bytes).first(checksum_at)));
    std::memcpy(bytes.data() + checksum_at, &checksum, sizeof checksum);
  }
  return bytes;
}

void exercise_mapped(const MappedCorpus& corpus, std::span<const std::uint8_t> bytes, std::uint8_t flags,
                     std::vector<std::vector<Token>>& contexts, bool& verified,
                     std::optional<CorpusFileError>& refusal) {
  const std::span<const Token> held = corpus.tokens();
  if (held.size() != corpus.size()) fuzz_fail("tokens() and size() disagree");
  if (corpus.file_bytes() != bytes.size()) fuzz_fail("file_bytes() is not the file's size");
  if (corpus.records() > corpus.size() || (corpus.records() == 0) != (corpus.size() == 0)) {
    fuzz_fail("a mapped file holds more records than tokens, or records without tokens");
  }
  if (corpus.first_stamp() > corpus.last_stamp()) fuzz_fail("a mapped file's first stamp is after its last");
  if (corpus.ngrams(0) != 0 || corpus.ngrams(format::kMaxOrder + 1) != 0) fuzz_fail("ngrams() of an order not stored");
  for (std::size_t order = 1; order <= format::kMaxOrder; ++order) static_cast<void>(corpus.ngrams(order));

  const std::size_t calls = std::min(corpus.records(), kMaxRecordCalls);
  for (std::size_t r = 0; r < calls; ++r) {
    const std::span<const Token> record = corpus.record(r).tokens;
    if (!record.empty() &&
        (record.data() < held.data() || record.data() + record.size() > held.data() + held.size())) {
      fuzz_fail("record() returned a view outside the tokens held");
    }
  }
  try {
    static_cast<void>(corpus.record(corpus.records()));
    fuzz_fail("record(records()) did not throw");
  } catch (const std::out_of_range& e) {
    if (std::string(e.what()).empty()) fuzz_fail("record()'s std::out_of_range has no message");
  }

  Choices choose((std::uint64_t{flags} >> 3) ^ (std::uint64_t{bytes.size()} << 8));
  contexts = contexts_for(corpus, bytes, choose);
  static constexpr std::size_t kRooms[] = {1, 3, 16, 100};
  std::vector<Drafted> drafted;
  std::vector<std::size_t> rooms;
  for (const std::vector<Token>& context : contexts) {
    static_cast<void>(checked_draft(corpus, context, 0));
    rooms.push_back(kRooms[choose.below(std::size(kRooms))]);
    drafted.push_back(checked_draft(corpus, context, rooms.back()));
  }

  try {
    corpus.verify();
    verified = true;
  } catch (const CorpusFileError& e) {
    check_error(e, corpus.path());
    if (e.section().empty()) fuzz_fail("verify() of a mapped file blamed no section");
    refusal = e;
  }
  if (!verified) return;
  const NaiveCorpus naive = check_verified_records(corpus);
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    if (drafted[i] != naive.draft(contexts[i], rooms[i])) {
      fuzz_fail("a verified file drafts other than the reference over its records");
    }
  }
}

void run_file(std::uint8_t flags, std::span<const std::uint8_t> input) {
  const std::vector<std::uint8_t> bytes = repaired(flags, input);
  const std::filesystem::path path = scratch() / "input.ngc";
  write_file(path, bytes);

  bool mapped = false;
  bool checksums_hold = false;
  bool records_hold = false;
  bool kept_tokens_hold = false;
  bool verified = false;
  std::optional<CorpusFileError> verify_refusal;
  std::vector<std::vector<Token>> contexts;
  std::size_t held = 0;
  try {
    MappedCorpus corpus(path);
    mapped = true;
    held = corpus.size();
    if (corpus.format_version() == 1 && corpus.vocabulary() != CorpusVocabulary{}) {
      fuzz_fail("a version 1 file reads as recording a vocabulary");
    }
    try {
      corpus.verify_checksums();
      checksums_hold = true;
    } catch (const CorpusFileError& e) {
      check_error(e, corpus.path());
    }
    std::optional<CorpusFileError> records_refusal;
    try {
      corpus.verify_records();
      records_hold = true;
    } catch (const CorpusFileError& e) {
      check_error(e, corpus.path());
      records_refusal = e;
    }
    // The tokens inside the recorded vocabulary: all of them (what a merge copies), and those of
    // the records a load into a corpus of kMinTokens keeps.
    std::optional<CorpusFileError> tokens_refusal;
    try {
      corpus.verify_tokens();
    } catch (const CorpusFileError& e) {
      check_error(e, corpus.path());
      if (e.section() != "tokens") fuzz_fail("verify_tokens() refused naming another section than tokens");
      tokens_refusal = e;
    }
    if (records_hold && corpus.records() > 0) {
      const std::size_t first = corpus.first_record_kept(SharedCorpus::kMinTokens);
      try {
        corpus.verify_tokens(static_cast<std::size_t>(corpus.record(first).tokens.data() - corpus.tokens().data()));
        kept_tokens_hold = true;
      } catch (const CorpusFileError& e) {
        check_error(e, corpus.path());
      }
    } else {
      kept_tokens_hold = true;
    }
    if (kept_tokens_hold && tokens_refusal && corpus.records() == 0) {
      fuzz_fail("verify_tokens() refused a token of a file that holds no record");
    }
    // A merge copies the records out under fresh checksums: it takes exactly what verify_records()
    // and verify_tokens() do, with the first refusal's message.
    try {
      CorpusBuilder merge;
      merge.add(corpus);
      if (!records_hold || tokens_refusal) {
        fuzz_fail("CorpusBuilder::add took a file whose records or tokens verify() refuses");
      }
    } catch (const CorpusFileError& e) {
      if (records_hold && !tokens_refusal) {
        fuzz_fail("CorpusBuilder::add refused a file whose records and tokens verify() takes");
      }
      const std::string expected = records_hold ? tokens_refusal->what() : records_refusal->what();
      if (std::string(e.what()) != expected) {
        fuzz_fail("CorpusBuilder::add refused with another message than verify_records() or verify_tokens()");
      }
    }
    exercise_mapped(corpus, bytes, flags, contexts, verified, verify_refusal);
    if (verified && !checksums_hold) fuzz_fail("verify() passed a file whose checksums fail");
    if (verified && !records_hold) fuzz_fail("verify() passed a file whose records verify_records() refuses");
    if (checksums_hold && !records_hold && verify_refusal->section() != "tokens" &&
        std::string(verify_refusal->what()) != records_refusal->what()) {
      fuzz_fail("verify() refused a file whose records verify_records() refuses with another message");
    }
    if (checksums_hold && records_hold && !verified && verify_refusal->section() != "tokens" &&
        verify_refusal->section().rfind("ngrams", 0) != 0) {
      fuzz_fail("verify() refused records that verify_records() takes");
    }
    // Moving keeps the mapping and leaves an empty corpus behind, which verify() refuses.
    const MappedCorpus moved(std::move(corpus));
    if (moved.size() != held || corpus.size() != 0 || corpus.records() != 0) {  // NOLINT(bugprone-use-after-move)
      fuzz_fail("moving a MappedCorpus did not move its mapping");
    }
    try {
      corpus.verify();  // NOLINT(bugprone-use-after-move)
      fuzz_fail("verify() of a moved-from MappedCorpus passed");
    } catch (const CorpusFileError& e) {
      check_error(e, corpus.path());
    }
  } catch (const CorpusFileError& e) {
    if (mapped) throw;  // verify() handled its own; anything else is a bug the fuzzer must see
    check_error(e, path);
  }

  // SharedCorpus::load: all or nothing.
  SharedCorpus shared(SharedCorpus::min_bytes());
  const std::vector<Token> own = {7, 8, 9, 7, 8, 10, 11};
  shared.append(own, 3);
  const std::vector<std::vector<Token>> own_contexts = {{7, 8}, {9, 7}, {8}, {10}};
  std::vector<Drafted> before;
  for (const auto& context : own_contexts) before.push_back(shared_draft(shared, context, 8));
  const std::size_t size_before = shared.size();
  const std::uint64_t records_before = shared.records();
  const std::int64_t stamp_before = shared.last_stamp();
  bool loaded = false;
  try {
    shared.load(path);
    loaded = true;
  } catch (const CorpusFileError& e) {
    check_error(e, path);
  }
  // load() verifies the checksums, the records and the tokens of the records it keeps: it takes
  // exactly the files that map and pass all three.
  if (loaded != (checksums_hold && records_hold && kept_tokens_hold)) {
    fuzz_fail("SharedCorpus::load took a file whose checksums, records or kept tokens fail, or refused one that "
              "passes all three");
  }
  // Trusted, it skips the checksums, never the records.
  {
    SharedCorpus trusted(SharedCorpus::min_bytes());
    trusted.append(own, 3);
    bool taken = false;
    try {
      trusted.load(path, ChecksumCheck::skip);
      taken = true;
    } catch (const CorpusFileError& e) {
      check_error(e, path);
      if (trusted.size() != size_before || trusted.records() != records_before) {
        fuzz_fail("a failed trusted SharedCorpus::load changed the corpus");
      }
    }
    if (taken != (records_hold && kept_tokens_hold)) {
      fuzz_fail("a trusted SharedCorpus::load disagrees with verify_records() and verify_tokens()");
    }
  }
  if (!loaded) {
    if (shared.size() != size_before || shared.records() != records_before || shared.last_stamp() != stamp_before) {
      fuzz_fail("a failed SharedCorpus::load changed the corpus");
    }
    for (std::size_t i = 0; i < own_contexts.size(); ++i) {
      if (shared_draft(shared, own_contexts[i], 8) != before[i]) {
        fuzz_fail("a failed SharedCorpus::load changed drafts");
      }
    }
    return;
  }
  // The records it took tile the tokens (verify_records), so it keeps the most recent tokens
  // that fit, whatever the tables hold.
  if (shared.size() > shared.capacity_tokens() || shared.records() > shared.appended()) {
    fuzz_fail("SharedCorpus::load holds more than its capacity, or records without tokens");
  }
  if (shared.size() != std::min(held, shared.capacity_tokens())) {
    fuzz_fail("SharedCorpus::load did not keep the most recent tokens that fit");
  }
  if (!verified) return;
  // The reference with the live corpus's capacity, over the verified file's records.
  const MappedCorpus again(path);
  NaiveCorpus naive(shared.capacity_tokens());
  for (std::size_t r = 0; r < again.records(); ++r) naive.append(again.record(r).tokens);
  for (const std::vector<Token>& context : contexts) {
    for (const std::size_t room : {std::size_t{1}, std::size_t{9}}) {
      if (shared_draft(shared, context, room) != naive.draft(context, room)) {
        fuzz_fail("a SharedCorpus loaded from a verified file drafts other than the reference");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Builder mode

struct Added {
  std::vector<Token> tokens;
  std::int64_t stamp = 0;
  auto operator<=>(const Added&) const = default;
};

void run_builder(FuzzInput& in) {
  const std::uint64_t cap = in.flag() ? CorpusBuilder::kNoCap : 900 + in.in_range(0, 6000);
  std::optional<CorpusBuilder> builder;
  try {
    builder.emplace(cap);
  } catch (const std::invalid_argument& e) {
    if (CorpusBuilder::tokens_that_fit(cap, 1) != 0 ||
        std::string(e.what()).find(std::to_string(cap)) == std::string::npos) {
      fuzz_fail("CorpusBuilder refused a cap that holds a token, or without naming it");
    }
    return;
  }
  if (CorpusBuilder::tokens_that_fit(cap, 1) == 0) fuzz_fail("CorpusBuilder accepted a cap that holds no token");

  const std::vector<Token> alphabet = fuzz_alphabet(in, 8);
  std::vector<Added> added;
  std::uint64_t tokens_added = 0;
  while (!in.empty() && added.size() < 40) {
    const std::uint8_t kind = in.byte() % 8;
    if (kind == 0 && !added.empty()) {
      added.push_back(added[in.in_range(0, added.size() - 1)]);  // an exact duplicate
    } else if (kind == 1) {
      builder->add({}, static_cast<std::int64_t>(in.byte()));  // ignored
      continue;
    } else {
      Added record;
      using Limits = std::numeric_limits<std::int64_t>;
      record.stamp = kind == 2 ? (in.flag() ? Limits::max() : Limits::min())
                               : static_cast<std::int64_t>(in.in_range(0, 15)) - 4;
      record.tokens.resize(in.in_range(1, 48));
      for (Token& t : record.tokens) t = alphabet[in.in_range(0, alphabet.size() - 1)];
      added.push_back(std::move(record));
    }
    builder->add(added.back().tokens, added.back().stamp);
    tokens_added += added.back().tokens.size();
  }
  if (builder->records() != added.size() || builder->tokens() != tokens_added) {
    fuzz_fail("CorpusBuilder's records() or tokens() is not what was added");
  }

  const std::filesystem::path path = scratch() / "built.ngc";
  const CorpusFileSummary summary = builder->write(path);
  std::vector<Added> expected = added;
  std::sort(expected.begin(), expected.end(), [](const Added& a, const Added& b) {
    return a.stamp != b.stamp ? a.stamp < b.stamp : a.tokens < b.tokens;
  });
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  std::uint64_t distinct_tokens = 0;
  for (const Added& r : expected) distinct_tokens += r.tokens.size();
  if (summary.tokens + summary.dropped_tokens != distinct_tokens) {
    fuzz_fail("write()'s tokens and dropped tokens do not add up");
  }
  if (summary.records > expected.size() || summary.file_bytes > cap ||
      summary.file_bytes != std::filesystem::file_size(path)) {
    fuzz_fail("write()'s summary is not the file it wrote, or the file exceeds the cap");
  }
  if (cap == CorpusBuilder::kNoCap && (summary.dropped_tokens != 0 || summary.records != expected.size())) {
    fuzz_fail("write() without a cap left something out");
  }
  if (summary.dropped_tokens > 0 && summary.tokens != CorpusBuilder::tokens_that_fit(cap, summary.records) &&
      summary.tokens != CorpusBuilder::tokens_that_fit(cap, summary.records + 1)) {
    fuzz_fail("write() dropped tokens while more would have fit");
  }
  // The newest records that fit; the oldest kept loses its front.
  expected.erase(expected.begin(), expected.end() - static_cast<std::ptrdiff_t>(summary.records));
  std::uint64_t kept = 0;
  for (std::size_t r = 1; r < expected.size(); ++r) kept += expected[r].tokens.size();
  if (!expected.empty()) {
    if (summary.tokens <= kept || summary.tokens - kept > expected.front().tokens.size()) {
      fuzz_fail("write() kept a record without a token or more than it had");
    }
    std::vector<Token>& oldest = expected.front().tokens;
    oldest.erase(oldest.begin(), oldest.end() - static_cast<std::ptrdiff_t>(summary.tokens - kept));
  }

  const MappedCorpus corpus(path);
  try {
    corpus.verify();
  } catch (const CorpusFileError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz_fail("a file CorpusBuilder wrote fails verify()");
  }
  if (corpus.size() != summary.tokens || corpus.records() != summary.records) {
    fuzz_fail("the file's tokens or records are not write()'s summary");
  }
  for (std::size_t r = 0; r < corpus.records(); ++r) {
    const CorpusRecord record = corpus.record(r);
    if (to_vector(record.tokens) != expected[r].tokens || record.stamp != expected[r].stamp) {
      fuzz_fail("the file does not hold the records sorted, deduplicated and cut to the newest that fit");
    }
  }
  const NaiveCorpus naive = check_verified_records(corpus);
  const std::vector<std::uint8_t> none;
  Choices choose(tokens_added);
  for (const std::vector<Token>& context : contexts_for(corpus, none, choose)) {
    for (const std::size_t room : {std::size_t{1}, std::size_t{4}, std::size_t{60}}) {
      if (checked_draft(corpus, context, room) != naive.draft(context, room)) {
        fuzz_fail("a built file drafts other than the reference over its records");
      }
    }
  }

  // The same records give the same bytes. When the oldest record kept was cut, it may sort
  // elsewhere among records of its stamp than the whole one did: then the records come out
  // re-sorted, the same otherwise.
  CorpusBuilder rebuilder(cap);
  rebuilder.add(corpus);
  const std::filesystem::path path_again = scratch() / "rebuilt.ngc";
  static_cast<void>(rebuilder.write(path_again));
  if (summary.dropped_tokens > 0) {
    std::vector<Added> resorted(expected);
    std::stable_sort(resorted.begin(), resorted.end(), [](const Added& a, const Added& b) {
      return a.stamp != b.stamp ? a.stamp < b.stamp : a.tokens < b.tokens;
    });
    resorted.erase(std::unique(resorted.begin(), resorted.end()), resorted.end());
    const MappedCorpus again(path_again);
    if (again.records() != resorted.size()) fuzz_fail("a capped file's records, written again, lost some");
    for (std::size_t r = 0; r < again.records(); ++r) {
      if (to_vector(again.record(r).tokens) != resorted[r].tokens || again.record(r).stamp != resorted[r].stamp) {
        fuzz_fail("a capped file's records, written again, are not the same records sorted");
      }
    }
    return;
  }
  const std::vector<char> first = read_file(path);
  const std::vector<char> second = read_file(path_again);
  if (first != second) {
    const auto differ = std::mismatch(first.begin(), first.end(), second.begin(), second.end());
    std::fprintf(stderr, "%zu and %zu bytes, first difference at byte %zu\n", first.size(), second.size(),
                 static_cast<std::size_t>(differ.first - first.begin()));
    fuzz_fail("a built file's records, written again, give other bytes");
  }
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ngramspec::test;
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const std::span<const std::uint8_t> rest(data + 1, size - 1);
  try {
    if ((flags & 0x80) != 0) {
      FuzzInput in(rest.data(), rest.size());
      run_builder(in);
    } else {
      run_file(flags, rest);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    fuzz_fail("an exception escaped");
  }
  return 0;
}
