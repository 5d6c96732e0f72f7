// Corpus files and the model's vocabulary: files record it (format version 2; version 1 files
// read as unknown), builders and drafters refuse what does not match it, drafts never carry a
// token outside it (cut and counted, by chains, trees and batches), and loading a corpus checks
// every byte so that damage cannot be saved back under fresh checksums.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/batch_speculator.hpp"
#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/detail/corpus_format.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "support/allocation_counter.hpp"
#include "support/corpus_file_refusal.hpp"
#include "support/reference_corpus.hpp"
#include "support/temp_dir.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec {
namespace {

namespace format = detail::corpus_format;
using ::testing::HasSubstr;
using test::invalid_argument_message;
using test::refusal;
using test::random_tokens;
using test::TempDir;

using Bytes = std::vector<std::uint8_t>;

Bytes read_bytes(const std::filesystem::path& path) { return test::read_file<std::uint8_t>(path); }
void write_bytes(const std::filesystem::path& path, const Bytes& bytes) {
  ASSERT_TRUE(test::write_file(path, bytes)) << "cannot write " << path;
}

// The same file as a version 1 writer wrote it: the 320-byte header (no vocabulary), the
// sections 64 bytes earlier.
Bytes as_version_1(const Bytes& v2) {
  format::Header header;
  std::memcpy(&header, v2.data(), sizeof header);
  header.version = 1;
  header.header_bytes = format::kHeaderBytesV1;
  header.file_bytes -= format::kHeaderBytes - format::kHeaderBytesV1;
  for (format::SectionEntry& s : header.sections) s.offset -= format::kHeaderBytes - format::kHeaderBytesV1;
  Bytes v1(format::kHeaderBytesV1, 0);
  std::memcpy(v1.data(), &header, format::checksum_offset(1));
  const std::uint64_t checksum =
      format::checksum(std::as_bytes(std::span(v1).first(format::checksum_offset(1))));
  std::memcpy(v1.data() + format::checksum_offset(1), &checksum, sizeof checksum);
  v1.insert(v1.end(), v2.begin() + format::kHeaderBytes, v2.end());
  return v1;
}

// Records of random tokens below `alphabet`, some long repeats among them, so that contexts match.
void add_random_records(CorpusBuilder& builder, std::mt19937_64& rng, Token alphabet, std::size_t records) {
  for (std::size_t r = 0; r < records; ++r) {
    builder.add(random_tokens(rng, 1 + rng() % 40, alphabet), static_cast<std::int64_t>(r));
  }
}

// ---------------------------------------------------------------------------------------------
// The format: version 2 records the vocabulary; version 1 files still load, vocabulary unknown

TEST(CorpusFileVocabulary, BuilderRecordsTheVocabularyAndVersion1FilesReadAsUnknown) {
  TempDir dir;
  std::mt19937_64 rng(41);
  CorpusBuilder builder(CorpusBuilder::kNoCap, CorpusVocabulary{50, 0xfeedULL});
  add_random_records(builder, rng, 50, 30);
  static_cast<void>(builder.write(dir / "v2.ngc"));
  const MappedCorpus v2(dir / "v2.ngc");
  EXPECT_EQ(v2.format_version(), 2U);
  EXPECT_EQ(v2.vocabulary(), (CorpusVocabulary{50, 0xfeedULL}));
  EXPECT_NO_THROW(v2.verify());

  write_bytes(dir / "v1.ngc", as_version_1(read_bytes(dir / "v2.ngc")));
  const MappedCorpus v1(dir / "v1.ngc");
  EXPECT_EQ(v1.format_version(), 1U);
  EXPECT_EQ(v1.vocabulary(), CorpusVocabulary{});
  EXPECT_NO_THROW(v1.verify());
  ASSERT_EQ(v1.size(), v2.size());
  ASSERT_TRUE(std::equal(v1.tokens().begin(), v1.tokens().end(), v2.tokens().begin()));
  for (const auto& context : {std::vector<Token>{1, 2, 3}, std::vector<Token>{7}, std::vector<Token>{4, 9}}) {
    std::vector<Token> a(8);
    std::vector<Token> b(8);
    const CorpusDraft from_v1 = v1.draft(context, a);
    const CorpusDraft from_v2 = v2.draft(context, b);
    EXPECT_EQ(from_v1.count, from_v2.count);
    EXPECT_EQ(a, b);
  }
  // A live corpus loads it, and a drafter of any vocabulary accepts it.
  SharedCorpus corpus(SharedCorpus::min_bytes());
  corpus.load(dir / "v1.ngc");
  EXPECT_EQ(corpus.size(), std::min(v1.size(), corpus.capacity_tokens()));
  EXPECT_NO_THROW(MatchDrafter(MatchConfig{.vocab_size = 7, .tokenizer_fingerprint = 3}, nullptr, &v1));
}

TEST(CorpusFileVocabulary, ABuilderRefusesATokenOutsideItsVocabularyByName) {
  TempDir dir;
  CorpusBuilder builder(CorpusBuilder::kNoCap, CorpusVocabulary{10, 0});
  builder.add(std::vector<Token>{1, 2, 3}, 1);
  EXPECT_EQ(invalid_argument_message([&] { builder.add(std::vector<Token>{4, 5, 10, 6}, 2); }),
            "ngramspec::CorpusBuilder::add: token 10 at index 2 of the record is outside the vocabulary of 10 tokens");
  EXPECT_EQ(builder.records(), 1U);  // nothing added
  EXPECT_EQ(builder.tokens(), 3U);

  // A shard of unknown vocabulary holding a token outside it, and one of another vocabulary.
  CorpusBuilder unknown;
  unknown.add(std::vector<Token>{1, 2, 30}, 5);
  static_cast<void>(unknown.write(dir / "unknown.ngc"));
  EXPECT_THAT(invalid_argument_message([&] { builder.add(MappedCorpus(dir / "unknown.ngc")); }),
              HasSubstr("corpus file '" + (dir / "unknown.ngc").string() +
                        "': token 30 at position 2 is outside the vocabulary of 10 tokens"));
  CorpusBuilder other(CorpusBuilder::kNoCap, CorpusVocabulary{12, 0});
  other.add(std::vector<Token>{1, 2}, 5);
  static_cast<void>(other.write(dir / "other.ngc"));
  const CorpusFileError e = refusal([&] { builder.add(MappedCorpus(dir / "other.ngc")); });
  EXPECT_EQ(e.path(), dir / "other.ngc");
  EXPECT_EQ(e.section(), "header");
  EXPECT_THAT(e.what(), HasSubstr("its tokens come from a vocabulary of 12 tokens, the model's has 10"));
  EXPECT_EQ(builder.records(), 1U);
}

TEST(CorpusFileVocabulary, VerifyNamesATokenOutsideTheRecordedVocabulary) {
  TempDir dir;
  CorpusBuilder builder(CorpusBuilder::kNoCap, CorpusVocabulary{10, 0});
  builder.add(std::vector<Token>{1, 2, 3, 4}, 1);
  static_cast<void>(builder.write(dir / "c.ngc"));
  Bytes bytes = read_bytes(dir / "c.ngc");
  format::Header header;
  std::memcpy(&header, bytes.data(), sizeof header);
  const Token foreign = 77;
  std::memcpy(bytes.data() + header.sections[0].offset + 2 * sizeof(Token), &foreign, sizeof foreign);
  // Checksums fixed, so that only the vocabulary check can tell.
  header.sections[0].checksum = format::checksum(
      std::as_bytes(std::span(bytes).subspan(static_cast<std::size_t>(header.sections[0].offset),
                                             static_cast<std::size_t>(header.sections[0].bytes))));
  header.header_checksum =
      format::checksum(std::as_bytes(std::span(&header, 1)).first(offsetof(format::Header, header_checksum)));
  std::memcpy(bytes.data(), &header, sizeof header);
  write_bytes(dir / "foreign.ngc", bytes);
  const CorpusFileError e = refusal([&] { MappedCorpus(dir / "foreign.ngc").verify(); });
  EXPECT_EQ(e.section(), "tokens");
  EXPECT_THAT(e.what(), HasSubstr("token 77 at position 2 is outside the file's vocabulary of 10 tokens"));
}

// ---------------------------------------------------------------------------------------------
// Drafters refuse a file of another vocabulary, naming it and both values

TEST(CorpusFileVocabulary, ADrafterRefusesAFileOfAnotherVocabularyNamingItAndBothValues) {
  TempDir dir;
  CorpusBuilder builder(CorpusBuilder::kNoCap, CorpusVocabulary{32000, 0xabcULL});
  builder.add(std::vector<Token>{1, 2, 3}, 1);
  static_cast<void>(builder.write(dir / "llama.ngc"));
  const MappedCorpus file(dir / "llama.ngc");

  CorpusFileError e = refusal([&] { MatchDrafter(MatchConfig{.vocab_size = 512}, nullptr, &file); });
  EXPECT_EQ(e.path(), dir / "llama.ngc");
  EXPECT_EQ(e.section(), "header");
  EXPECT_THAT(e.what(), HasSubstr("its tokens come from a vocabulary of 32000 tokens, the model's has 512"));
  e = refusal([&] { MatchDrafter(MatchConfig{.vocab_size = 32000, .tokenizer_fingerprint = 0xabdULL}, nullptr, &file); });
  EXPECT_THAT(e.what(), HasSubstr("tokenizer fingerprint 0x0000000000000abc, the model's is 0x0000000000000abd"));
  e = refusal([&] { TreeDrafter(TreeConfig{.vocab_size = 512}, nullptr, nullptr, &file); });
  EXPECT_THAT(e.what(), HasSubstr("vocabulary of 32000 tokens, the model's has 512"));
  e = refusal([&] { BatchSpeculator<>(BatchConfig{.max_sequences = 2}, MatchConfig{.vocab_size = 512}, nullptr, &file); });
  EXPECT_THAT(e.what(), HasSubstr("'" + (dir / "llama.ngc").string() + "'"));

  // Unknown on either side agrees with anything.
  EXPECT_NO_THROW(MatchDrafter(MatchConfig{}, nullptr, &file));
  EXPECT_NO_THROW(MatchDrafter(MatchConfig{.vocab_size = 32000}, nullptr, &file));
  EXPECT_NO_THROW(MatchDrafter(MatchConfig{.tokenizer_fingerprint = 0xabcULL}, nullptr, &file));
}

TEST(CorpusFileVocabulary, InvalidVocabularySettingsAreNamed) {
  EXPECT_EQ(invalid_argument_message([] { MatchDrafter(MatchConfig{.vocab_size = (std::uint64_t{1} << 32) + 1}); }),
            "ngramspec::MatchConfig: vocab_size = 4294967297 is invalid: must be 0 (unknown) or at most 2^32 (tokens "
            "are 32-bit)");
  EXPECT_EQ(invalid_argument_message(
                [] { TreeDrafter(TreeConfig{.chain = MatchConfig{.vocab_size = 10}, .vocab_size = 11}); }),
            "ngramspec: TreeConfig::chain.vocab_size = 10 and TreeConfig::vocab_size = 11 disagree; both are the "
            "model's vocabulary");
}

// ---------------------------------------------------------------------------------------------
// Drafts never carry a token outside the vocabulary: cut at the first, the rest counted

// Over many random corpus files holding foreign tokens (a file of unknown vocabulary, built from
// another tokenizer or damaged), a drafter that knows the vocabulary drafts exactly the prefix
// of an unbounded drafter's drafts before their first foreign token, and counts the rest.
TEST(CorpusFileVocabularyProperty, DraftsAreTheUnboundedDraftsCutAtTheirFirstForeignToken) {
  TempDir dir;
  std::mt19937_64 rng(20261128);
  std::uint64_t cut_drafts = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Token vocab = static_cast<Token>(3 + rng() % 12);
    const Token foreign = static_cast<Token>(1 + rng() % 6);  // tokens vocab .. vocab + foreign - 1 are foreign
    CorpusBuilder builder;
    add_random_records(builder, rng, vocab + foreign, 1 + rng() % 30);
    // Named by appending: GCC 12 at -O3 warns (-Wrestrict, a false positive) on "c" + std::string.
    std::string name = "c";
    name += std::to_string(trial);
    name += ".ngc";
    const auto path = dir / name;
    static_cast<void>(builder.write(path));
    const MappedCorpus file(path);
    MatchConfig config;
    config.min_confidence = rng() % 2 == 0 ? 0.0 : 0.03;
    config.index_capacity = 64;
    config.count_window = 64;
    MatchDrafter unbounded(config, nullptr, &file);
    config.vocab_size = vocab;
    MatchDrafter bounded(config, nullptr, &file);
    std::uint64_t expected_dropped = 0;
    const std::vector<Token> sequence = random_tokens(rng, 1 + rng() % 200, vocab);
    for (const Token token : sequence) {
      unbounded.update(token);
      bounded.update(token);
      const std::size_t room = 1 + rng() % 16;
      std::vector<Token> all(room);
      std::vector<Token> kept(room);
      std::vector<float> all_p(room);
      std::vector<float> kept_p(room);
      const bool estimates = rng() % 2 == 0;
      const std::size_t made = estimates ? unbounded.predict(all, all_p) : unbounded.predict(all);
      const std::size_t n = estimates ? bounded.predict(kept, kept_p) : bounded.predict(kept);
      const auto first_foreign = static_cast<std::size_t>(
          std::find_if(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(made),
                       [vocab](Token t) { return t >= vocab; }) -
          all.begin());
      ASSERT_EQ(n, first_foreign) << "trial " << trial;
      ASSERT_TRUE(std::equal(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(n), all.begin()));
      if (estimates) {
        ASSERT_TRUE(std::equal(kept_p.begin(), kept_p.begin() + static_cast<std::ptrdiff_t>(n), all_p.begin()));
      }
      expected_dropped += made - n;
      ASSERT_EQ(bounded.out_of_vocabulary_drafts(), expected_dropped);
    }
    EXPECT_EQ(unbounded.out_of_vocabulary_drafts(), 0U);
    bounded.reset();
    EXPECT_EQ(bounded.out_of_vocabulary_drafts(), expected_dropped);  // since construction
    cut_drafts += expected_dropped;
  }
  EXPECT_GT(cut_drafts, 0U) << "no draft held a foreign token: the property was never exercised";
}

TEST(CorpusFileVocabulary, CuttingDraftsAllocatesNothing) {
  TempDir dir;
  CorpusBuilder builder;
  builder.add(std::vector<Token>{100, 101, 102, 103, 5000, 104}, 1);
  static_cast<void>(builder.write(dir / "c.ngc"));
  const MappedCorpus file(dir / "c.ngc");
  MatchDrafter drafter(MatchConfig{.min_confidence = 0, .vocab_size = 1000}, nullptr, &file);
  drafter.update(std::vector<Token>{7, 100, 101, 102});
  std::vector<Token> out(8);
  std::vector<float> probabilities(8);
  const test::AllocationCounter allocations;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(drafter.predict(out), 1U);
    ASSERT_EQ(drafter.predict(out, probabilities), 1U);
  }
  EXPECT_EQ(allocations.count(), 0U);
  EXPECT_EQ(out[0], 103U);
  EXPECT_EQ(drafter.out_of_vocabulary_drafts(), 400U);  // 5000 and 104, 200 times
}

// ---------------------------------------------------------------------------------------------
// Batches: chains and trees read a corpus file, drop foreign drafts and count them

DecodeOptions options_16_tokens_8_drafts() {
  DecodeOptions options;
  options.max_new_tokens = 16;
  options.max_drafts = 8;
  return options;
}

struct FileWithForeignToken {
  TempDir dir;
  std::filesystem::path path;
  FileWithForeignToken() : path(dir / "c.ngc") {
    CorpusBuilder builder;
    builder.add(std::vector<Token>{100, 101, 102, 103, 5000, 104}, 1);
    static_cast<void>(builder.write(path));
  }
};

TEST(CorpusFileVocabulary, AChainBatchDropsForeignDraftsAndCountsThem) {
  const FileWithForeignToken fixture;
  const MappedCorpus file(fixture.path);
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 1}, MatchConfig{.min_confidence = 0, .vocab_size = 1000},
                         nullptr, &file);
  const SequenceId id = 1;
  spec.begin(id, std::vector<Token>{7, 100, 101}, options_16_tokens_8_drafts());
  std::vector<Token> drafts(8);
  std::vector<std::size_t> offsets(2);
  EXPECT_EQ(spec.propose(std::span(&id, 1), drafts, offsets), 0U);  // the prefill
  StepOutcome step;
  const std::vector<std::size_t> one = {0, 1};
  spec.accept(std::span(&id, 1), std::vector<Token>{102}, one, std::span(&step, 1));
  ASSERT_EQ(spec.propose(std::span(&id, 1), drafts, offsets), 1U);
  EXPECT_EQ(drafts[0], 103U);
  EXPECT_EQ(spec.stats().out_of_vocabulary, 2U);  // 5000 and 104
  EXPECT_EQ(spec.drafter(id).out_of_vocabulary_drafts(), 2U);
}

TEST(CorpusFileVocabulary, ATreeBatchReadsACorpusFileAndDropsForeignSpineDrafts) {
  const FileWithForeignToken fixture;
  const MappedCorpus file(fixture.path);
  for (const bool bounded : {false, true}) {
    SCOPED_TRACE(bounded ? "vocab_size 1000" : "vocabulary unknown");
    TreeConfig config;
    config.chain.min_confidence = 0;
    config.vocab_size = bounded ? 1000 : 0;
    BatchSpeculator<TreeDrafter> spec(BatchConfig{.max_sequences = 1},
                                      [&] { return TreeDrafter(config, nullptr, nullptr, &file); });
    const SequenceId id = 3;
    spec.begin(id, std::vector<Token>{7, 100, 101}, options_16_tokens_8_drafts());
    std::vector<Token> tokens(8);
    std::vector<std::int32_t> parents(8);
    std::vector<std::size_t> offsets(2);
    EXPECT_EQ(spec.propose_trees(std::span(&id, 1), tokens, parents, offsets), 0U);  // the prefill
    std::vector<StepOutcome> steps(1);
    std::vector<std::size_t> kept(1);
    const std::vector<std::size_t> one = {0, 1};
    spec.accept_trees(std::span(&id, 1), std::vector<Token>{102}, one, {}, steps, kept);
    const std::size_t nodes = spec.propose_trees(std::span(&id, 1), tokens, parents, offsets);
    ASSERT_GE(nodes, 1U);
    // The spine is the file's continuation: 103 under the root.
    EXPECT_EQ(tokens[0], 103U);
    EXPECT_EQ(parents[0], kTreeRoot);
    const bool foreign = std::any_of(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(nodes),
                                     [](Token t) { return t >= 1000; });
    EXPECT_EQ(foreign, !bounded);
    EXPECT_EQ(spec.stats().out_of_vocabulary, bounded ? 2U : 0U);
  }
}

// ---------------------------------------------------------------------------------------------
// Loading checks every byte: damage is refused, never laundered by a later save

// Over many random files, random bytes written over a tenth of the body: load() refuses the
// file naming it and a section, leaves the corpus as it was, and so nothing of the damage can
// be saved under fresh checksums (a file that passes verify()).
TEST(CorpusFileLoadProperty, ADamagedBodyIsRefusedByLoadSoSaveCannotLaunderIt) {
  TempDir dir;
  std::mt19937_64 rng(1128);
  for (int trial = 0; trial < 30; ++trial) {
    CorpusBuilder builder;
    add_random_records(builder, rng, static_cast<Token>(2 + rng() % 50), 1 + rng() % 40);
    // Named by appending: GCC 12 at -O3 warns (-Wrestrict, a false positive) on "c" + std::string.
    std::string name = "c";
    name += std::to_string(trial);
    name += ".ngc";
    const auto path = dir / name;
    static_cast<void>(builder.write(path));
    Bytes bytes = read_bytes(path);
    const Bytes whole = bytes;
    const std::size_t body = bytes.size() - format::kHeaderBytes;
    for (std::size_t i = 0; i < std::max<std::size_t>(1, body / 10); ++i) {
      bytes[format::kHeaderBytes + rng() % body] = static_cast<std::uint8_t>(rng());
    }
    // Only bytes inside the sections are covered by their checksums (the gaps between them are not
    // read by anything); a trial whose damage missed them all, or wrote what was there, is redrawn.
    format::Header header;
    std::memcpy(&header, whole.data(), sizeof header);
    bool damaged = false;
    for (const format::SectionEntry& s : header.sections) {
      damaged = damaged || !std::equal(whole.begin() + static_cast<std::ptrdiff_t>(s.offset),
                                       whole.begin() + static_cast<std::ptrdiff_t>(s.offset + s.bytes),
                                       bytes.begin() + static_cast<std::ptrdiff_t>(s.offset));
    }
    if (!damaged) continue;
    write_bytes(path, bytes);

    SharedCorpus corpus(SharedCorpus::min_bytes());
    corpus.append(std::vector<Token>{1, 2, 3}, 5);
    const CorpusFileError e = refusal([&] { corpus.load(path); });
    EXPECT_EQ(e.path(), path);
    EXPECT_THAT(e.what(), HasSubstr("checksum mismatch"));
    EXPECT_NE(e.section(), "header");
    EXPECT_EQ(corpus.records(), 1U);
    EXPECT_EQ(corpus.size(), 3U);
    // What the corpus saves is what it held: a good file, none of the damage.
    const auto saved = dir / ("saved" + std::to_string(trial) + ".ngc");
    corpus.save(saved);
    const MappedCorpus reread(saved);
    EXPECT_NO_THROW(reread.verify());
    EXPECT_EQ(reread.size(), 3U);
  }
}

}  // namespace
}  // namespace ngramspec
