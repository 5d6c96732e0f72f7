// Every way a corpus file can be bad, and the exact refusal: which file, which section, what is
// wrong. Structural faults are refused when the file is mapped; corrupted contents by verify(),
// which drafting survives meanwhile. SharedCorpus::load and save fail whole.

#include <sys/wait.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/detail/corpus_format.hpp"
#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "support/corpus_file_refusal.hpp"
#include "support/reference_corpus.hpp"
#include "support/temp_dir.hpp"

namespace ngramspec {
namespace {

namespace format = detail::corpus_format;
using ::testing::HasSubstr;
using ::testing::Not;
using test::refusal;
using test::Drafted;
using test::TempDir;

using Bytes = std::vector<std::uint8_t>;

Bytes read_bytes(const std::filesystem::path& path) { return test::read_file<std::uint8_t>(path); }

void write_bytes(const std::filesystem::path& path, const Bytes& bytes) {
  ASSERT_TRUE(test::write_file(path, bytes)) << "cannot write " << path;
}

format::Header header_of(const Bytes& bytes) {
  format::Header header;
  std::memcpy(&header, bytes.data(), sizeof header);
  return header;
}

// Writes `header` into the file's bytes, its checksum recomputed unless told otherwise.
void put_header(Bytes& bytes, format::Header header, bool fix_checksum = true) {
  if (fix_checksum) {
    header.header_checksum =
        format::checksum(std::as_bytes(std::span(&header, 1)).first(offsetof(format::Header, header_checksum)));
  }
  std::memcpy(bytes.data(), &header, sizeof header);
}

// Recomputes section `index`'s checksum (after its bytes were changed) and the header's, so that
// only verify()'s structural checks can tell.
void fix_checksums(Bytes& bytes, std::size_t index) {
  format::Header header = header_of(bytes);
  format::SectionEntry& section = header.sections[index];
  const std::span<const std::uint8_t> body =
      std::span(bytes).subspan(static_cast<std::size_t>(section.offset), static_cast<std::size_t>(section.bytes));
  section.checksum = format::checksum(std::as_bytes(body));
  put_header(bytes, header);
}

std::span<format::Slot> slots_of(Bytes& bytes, std::size_t index) {
  const format::SectionEntry section = header_of(bytes).sections[index];
  return {reinterpret_cast<format::Slot*>(bytes.data() + section.offset), static_cast<std::size_t>(section.bytes / 8)};
}

// As the messages write a 64-bit value: 0x and 16 hexadecimal digits.
std::string hex(std::uint64_t value) {
  std::string text = "0x";
  for (int shift = 60; shift >= 0; shift -= 4) text += "0123456789abcdef"[(value >> shift) & 0xfU];
  return text;
}

// Three records with repeated n-grams: every section is non-empty.
std::filesystem::path build_small(const TempDir& dir, const std::string& name) {
  CorpusBuilder builder;
  builder.add(std::vector<Token>{1, 2, 3, 4, 5}, 10);
  builder.add(std::vector<Token>{6, 7, 2, 3, 4, 8, 9}, 20);
  builder.add(std::vector<Token>{1, 2, 3, 10, 11, 12}, 30);
  static_cast<void>(builder.write(dir / name));
  return dir / name;
}

CorpusFileError mapping_refusal(const std::filesystem::path& path) {
  return refusal([&] { const MappedCorpus corpus(path); });
}

// The refusal names the file, the section and the problem, in what() and in its accessors.
void expect_refusal(const CorpusFileError& e, const std::filesystem::path& path, const std::string& section,
                    const std::string& problem) {
  EXPECT_EQ(e.path(), path);
  EXPECT_EQ(e.section(), section);
  const std::string what = e.what();
  EXPECT_THAT(what, HasSubstr("'" + path.string() + "'"));
  if (!section.empty()) {
    EXPECT_THAT(what, HasSubstr("section " + section + ":"));
  }
  EXPECT_THAT(what, HasSubstr(problem));
}

// ---------------------------------------------------------------------------------------------
// The file itself

TEST(CorpusFileErrors, AMissingFileIsNamed) {
  TempDir dir;
  const auto path = dir / "absent.ngc";
  expect_refusal(mapping_refusal(path), path, "", "cannot open: No such file or directory");
}

TEST(CorpusFileErrors, ADirectoryIsNamed) {
  TempDir dir;
  expect_refusal(mapping_refusal(dir.path()), dir.path(), "", "it is a directory");
}

TEST(CorpusFileErrors, AnEmptyFileIsNamed) {
  TempDir dir;
  const auto path = dir / "empty.ngc";
  write_bytes(path, {});
  expect_refusal(mapping_refusal(path), path, "header", "the file is empty");
}

TEST(CorpusFileErrors, AFileTruncatedInsideTheHeaderIsNamed) {
  TempDir dir;
  const Bytes whole = read_bytes(build_small(dir, "c.ngc"));
  const auto path = dir / "cut.ngc";
  write_bytes(path, Bytes(whole.begin(), whole.begin() + 100));
  expect_refusal(mapping_refusal(path), path, "header", "truncated: 100 bytes, shorter than the 320-byte header");
  write_bytes(path, Bytes(whole.begin(), whole.begin() + 5));
  expect_refusal(mapping_refusal(path), path, "header", "truncated: 5 bytes, not even the 8-byte magic");
}

TEST(CorpusFileErrors, AFileTruncatedInsideASectionIsNamedWithBothSizes) {
  TempDir dir;
  const Bytes whole = read_bytes(build_small(dir, "c.ngc"));
  const format::Header header = header_of(whole);
  const auto path = dir / "cut.ngc";
  // Cut inside the tokens: the header's file_bytes is what the check compares.
  const std::size_t cut = static_cast<std::size_t>(header.sections[0].offset) + 6;
  write_bytes(path, Bytes(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut)));
  expect_refusal(mapping_refusal(path), path, "",
                 "truncated: " + std::to_string(cut) + " bytes, the header says " + std::to_string(whole.size()));
  // And bytes after the end.
  Bytes longer = whole;
  longer.resize(whole.size() + 64);
  write_bytes(path, longer);
  expect_refusal(mapping_refusal(path), path, "",
                 std::to_string(longer.size()) + " bytes, the header says " + std::to_string(whole.size()) +
                     " (trailing bytes)");
}

// ---------------------------------------------------------------------------------------------
// The header

TEST(CorpusFileErrors, AWrongMagicIsNotACorpusFile) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  bytes[3] = 'X';
  const auto path = dir / "bad.ngc";
  write_bytes(path, bytes);
  expect_refusal(mapping_refusal(path), path, "header",
                 "not a corpus file: it does not start with the magic 'NGSPCORP'");
}

TEST(CorpusFileErrors, AnotherFormatVersionSaysWhichThisBuildReads) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  format::Header header = header_of(bytes);
  header.version = 7;
  put_header(bytes, header);
  const auto path = dir / "v7.ngc";
  write_bytes(path, bytes);
  expect_refusal(mapping_refusal(path), path, "header",
                 "format version 7: this build of ngramspec reads versions 1 to " + std::to_string(format::kVersion));
}

// One flipped bit in the version field read as "format version 1048578": the header's checksum
// is checked before its fields are believed, so it reads as corruption (naming what the field
// reads, since a later format may place its checksum elsewhere).
TEST(CorpusFileErrors, AFlippedBitInTheVersionOrByteOrderIsCorruption) {
  TempDir dir;
  const Bytes whole = read_bytes(build_small(dir, "c.ngc"));
  const auto path = dir / "flipped.ngc";
  Bytes bytes = whole;
  format::Header header = header_of(bytes);
  header.version ^= 1U << 20;
  put_header(bytes, header, /*fix_checksum=*/false);
  write_bytes(path, bytes);
  CorpusFileError e = mapping_refusal(path);
  expect_refusal(e, path, "header", "checksum mismatch: stored ");
  EXPECT_THAT(e.what(), HasSubstr("(the header is corrupted, or of a format version this build does not read: its "
                                  "version field reads 1048578, this build of ngramspec reads versions 1 to 2)"));
  EXPECT_THAT(e.what(), Not(HasSubstr("format version 1048578:")));

  bytes = whole;
  header = header_of(bytes);
  header.byte_order ^= 1U << 9;
  put_header(bytes, header, /*fix_checksum=*/false);
  write_bytes(path, bytes);
  e = mapping_refusal(path);
  expect_refusal(e, path, "header", "checksum mismatch: stored ");
  EXPECT_THAT(e.what(), HasSubstr("(the header is corrupted)"));
  EXPECT_THAT(e.what(), Not(HasSubstr("byte-order mark")));
}

TEST(CorpusFileErrors, AFileOfTheOtherByteOrderSaysSo) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  format::Header header = header_of(bytes);
  // What a big-endian writer's mark reads as here.
  header.byte_order = 0x04030201U;
  put_header(bytes, header);
  const auto path = dir / "swapped.ngc";
  write_bytes(path, bytes);
  expect_refusal(mapping_refusal(path), path, "header",
                 "written on a machine of the other byte order (big-endian); rebuild it on this one");
  // A mark that is neither.
  header.byte_order = 0x11223344U;
  put_header(bytes, header);
  write_bytes(path, bytes);
  expect_refusal(mapping_refusal(path), path, "header",
                 "byte-order mark 0x0000000011223344 is not 0x0000000001020304");
}

TEST(CorpusFileErrors, AnotherTokenWidthIsNamed) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  format::Header header = header_of(bytes);
  header.token_bytes = 2;
  put_header(bytes, header);
  const auto path = dir / "narrow.ngc";
  write_bytes(path, bytes);
  expect_refusal(mapping_refusal(path), path, "header", "token width 2 bytes: this build reads 4-byte tokens");
}

TEST(CorpusFileErrors, ACorruptedHeaderFailsItsChecksum) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  format::Header header = header_of(bytes);
  const std::uint64_t stored = header.header_checksum;
  header.last_stamp += 1;  // a field no other check looks at
  put_header(bytes, header, /*fix_checksum=*/false);
  const auto path = dir / "bad.ngc";
  write_bytes(path, bytes);
  const CorpusFileError e = mapping_refusal(path);
  expect_refusal(e, path, "header", "checksum mismatch: stored ");
  EXPECT_THAT(e.what(), HasSubstr("(the header is corrupted)"));
  EXPECT_THAT(e.what(), HasSubstr("stored " + hex(stored) + ", computed "));
}

TEST(CorpusFileErrors, ASectionOutsideTheFileIsRefusedWhenMapping) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  format::Header header = header_of(bytes);
  header.sections[4].offset = bytes.size() + 64;
  put_header(bytes, header);
  const auto path = dir / "bad.ngc";
  write_bytes(path, bytes);
  expect_refusal(mapping_refusal(path), path, "ngrams2",
                 "offset " + std::to_string(bytes.size() + 64) + " and size " +
                     std::to_string(header.sections[4].bytes) + " do not lie in order inside the file's " +
                     std::to_string(bytes.size()) + " bytes");
}

// ---------------------------------------------------------------------------------------------
// Corrupted contents: mapped, then caught by verify()

TEST(CorpusFileErrors, EachSectionsCorruptionIsCaughtByVerifyNamingIt) {
  TempDir dir;
  const Bytes whole = read_bytes(build_small(dir, "c.ngc"));
  const format::Header header = header_of(whole);
  for (std::size_t i = 0; i < format::kSections; ++i) {
    const std::string name(format::section_name(i));
    SCOPED_TRACE(name);
    ASSERT_GT(header.sections[i].bytes, 0U);
    Bytes bytes = whole;
    bytes[static_cast<std::size_t>(header.sections[i].offset + header.sections[i].bytes / 2)] ^= 0x20;
    const auto path = dir / ("flipped-" + name + ".ngc");
    write_bytes(path, bytes);
    const MappedCorpus corpus(path);  // the structure is intact
    const CorpusFileError e = refusal([&] { corpus.verify(); });
    expect_refusal(e, path, name, "checksum mismatch: stored ");
    EXPECT_THAT(e.what(), HasSubstr("(the section is corrupted)"));
  }
  // The file as written passes.
  EXPECT_NO_THROW(MappedCorpus(dir / "c.ngc").verify());
}

TEST(CorpusFileErrors, ATableEntryPastTheTokensIsCaughtByVerify) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  const MappedCorpus original(dir / "c.ngc");
  const std::size_t held = original.size();
  const std::span<format::Slot> slots = slots_of(bytes, 4);  // ngrams2
  std::size_t victim = slots.size();
  for (std::size_t i = 0; i < slots.size() && victim == slots.size(); ++i) {
    if (slots[i].end != 0) victim = i;
  }
  ASSERT_LT(victim, slots.size());
  slots[victim].end = static_cast<std::uint32_t>(held + 5);
  fix_checksums(bytes, 4);
  const auto path = dir / "bad.ngc";
  write_bytes(path, bytes);
  const MappedCorpus corpus(path);
  expect_refusal(refusal([&] { corpus.verify(); }), path, "ngrams2",
                 "slot " + std::to_string(victim) + " ends at " + std::to_string(held + 5) +
                     ", not after an n-gram of 2 inside one record");
}

TEST(CorpusFileErrors, AProbeBoundTooLongIsRefusedWhenMappingAndOneTooShortByVerify) {
  TempDir dir;
  // Enough distinct tokens that some key of the 1-gram table sits past its home slot.
  CorpusBuilder builder;
  std::vector<Token> tokens(400);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>(i * 7919U);
  builder.add(tokens, 1);
  static_cast<void>(builder.write(dir / "c.ngc"));
  const Bytes whole = read_bytes(dir / "c.ngc");
  const format::Header header = header_of(whole);
  const format::SectionEntry& table = header.sections[3];
  ASSERT_GT(table.max_probe, 0U) << "no key needs a probe: the test needs another corpus";
  const auto path = dir / "bad.ngc";

  // A bound as long as the table: a lookup would wrap around it. Refused before any lookup runs.
  format::Header longer = header;
  longer.sections[3].max_probe = static_cast<std::uint32_t>(table.bytes / 8);
  Bytes bytes = whole;
  put_header(bytes, longer);
  write_bytes(path, bytes);
  expect_refusal(mapping_refusal(path), path, "ngrams1",
                 "with probe runs up to " + std::to_string(table.bytes / 8) +
                     ": expected at least 8 slots, two per n-gram, and runs shorter than the table");

  // A bound shorter than a stored key needs: lookups stop before that key, so verify() says
  // where.
  format::Header shorter = header;
  shorter.sections[3].max_probe = 0;
  bytes = whole;
  put_header(bytes, shorter);
  write_bytes(path, bytes);
  const MappedCorpus corpus(path);
  const CorpusFileError e = refusal([&] { corpus.verify(); });
  expect_refusal(e, path, "ngrams1", "does not hold the n-gram ending at ");
  EXPECT_THAT(e.what(), HasSubstr("where a lookup finds it"));
}

TEST(CorpusFileErrors, DraftingSurvivesGarbageTableEntriesThatVerifyThenRefuses) {
  TempDir dir;
  const auto good = build_small(dir, "c.ngc");
  const Bytes whole = read_bytes(good);
  const std::vector<Token> context = {2, 3, 4};  // the second record: 6 7 2 3 4 8 9
  std::vector<Token> out(4, 0);
  {
    const MappedCorpus corpus(good);
    const CorpusDraft found = corpus.draft(context, out);
    ASSERT_EQ(found.match_length, 3U);
    ASSERT_EQ(found.count, 2U);
    EXPECT_EQ(out[0], 8U);
    EXPECT_EQ(out[1], 9U);
  }

  // Every 3-gram's entry points at position 1, which ends no 3-gram: the lookup's match check
  // turns that into a miss, and the 2-gram 3 4 still finds the same occurrence.
  Bytes bytes = whole;
  for (format::Slot& slot : slots_of(bytes, 5)) {
    if (slot.end != 0) slot.end = 1;
  }
  fix_checksums(bytes, 5);
  const auto wrong = dir / "wrong-ends.ngc";
  write_bytes(wrong, bytes);
  {
    const MappedCorpus corpus(wrong);
    std::fill(out.begin(), out.end(), 0);
    const CorpusDraft found = corpus.draft(context, out);
    EXPECT_EQ(found.match_length, 3U);
    EXPECT_EQ(found.count, 2U);
    EXPECT_EQ(out[0], 8U);
    expect_refusal(refusal([&] { corpus.verify(); }), wrong, "ngrams3",
                   "ends at 1, not after an n-gram of 3 inside one record");
  }

  // Every entry of every table points far past the tokens: no lookup may follow one, so nothing
  // matches, and nothing is read or written out of bounds.
  bytes = whole;
  for (std::size_t section = 3; section < format::kSections; ++section) {
    for (format::Slot& slot : slots_of(bytes, section)) {
      if (slot.end != 0) slot.end = 0xFFFFFFF0U;
    }
    fix_checksums(bytes, section);
  }
  const auto beyond = dir / "ends-beyond.ngc";
  write_bytes(beyond, bytes);
  {
    const MappedCorpus corpus(beyond);
    std::fill(out.begin(), out.end(), 0xDEADBEEFU);
    const CorpusDraft found = corpus.draft(context, out);
    EXPECT_EQ(found.match_length, 0U);
    EXPECT_EQ(found.count, 0U);
    EXPECT_EQ(out, std::vector<Token>(4, 0xDEADBEEFU));
    EXPECT_EQ(corpus.find(context).length, 0U);
    expect_refusal(refusal([&] { corpus.verify(); }), beyond, "ngrams1",
                   "ends at " + std::to_string(0xFFFFFFF0U) + ", not after an n-gram of 1 inside one record");
  }
}

TEST(CorpusFileErrors, AnNgramStoredTwiceIsCaughtByVerify) {
  TempDir dir;
  const auto good = build_small(dir, "c.ngc");
  Bytes bytes = read_bytes(good);
  // The 1-gram 2 ends at 2, 8 and 14; its slot holds 14. A second slot further along its probe
  // run holding 8, with the count and the probe bound raised to match, passes every other check:
  // lookups stop at the first slot and find 14.
  const std::uint64_t key = detail::fnv1a_step(detail::kFnvOffsetBasis, 2);
  const std::span<format::Slot> slots = slots_of(bytes, 3);
  const std::uint64_t home = format::home(key, slots.size());
  std::uint64_t at = home;
  while (slots[at].print != format::fingerprint(key)) at = (at + 1) % slots.size();
  ASSERT_EQ(slots[at].end, 14U);
  std::uint64_t spare = (at + 1) % slots.size();
  while (slots[spare].end != 0) spare = (spare + 1) % slots.size();
  slots[spare] = format::Slot{format::fingerprint(key), 8};
  format::Header header = header_of(bytes);
  header.sections[3].count += 1;
  header.sections[3].max_probe = std::max(header.sections[3].max_probe,
                                          static_cast<std::uint32_t>((spare + slots.size() - home) % slots.size()));
  put_header(bytes, header);
  fix_checksums(bytes, 3);
  const auto path = dir / "twice.ngc";
  write_bytes(path, bytes);

  const MappedCorpus corpus(path);
  EXPECT_EQ(corpus.ngrams(1), MappedCorpus(good).ngrams(1) + 1);
  const std::vector<Token> context = {2};
  std::vector<Token> out(2);
  EXPECT_EQ(corpus.draft(context, out).count, 2U);
  EXPECT_EQ(out, (std::vector<Token>{3, 10}));  // drafting finds the latest end all the same
  expect_refusal(refusal([&] { corpus.verify(); }), path, "ngrams1",
                 "slot " + std::to_string(spare) + " holds the n-gram ending at 8 again: slot " + std::to_string(at) +
                     " holds it ending at 14");
}

TEST(CorpusFileErrors, CorruptedRecordsStayInsideTheTokensAndVerifyNamesThem) {
  TempDir dir;
  Bytes bytes = read_bytes(build_small(dir, "c.ngc"));
  const format::SectionEntry section = header_of(bytes).sections[2];
  // The second record starts far past the tokens.
  const std::uint64_t first = 1000000;
  std::memcpy(bytes.data() + section.offset + sizeof(format::RecordEntry), &first, sizeof first);
  fix_checksums(bytes, 2);
  const auto path = dir / "bad.ngc";
  write_bytes(path, bytes);
  const MappedCorpus corpus(path);
  for (std::size_t r = 0; r < corpus.records(); ++r) {
    const std::span<const Token> record = corpus.record(r).tokens;
    EXPECT_GE(record.data(), corpus.tokens().data());
    EXPECT_LE(record.data() + record.size(), corpus.tokens().data() + corpus.size());
  }
  expect_refusal(refusal([&] { corpus.verify(); }), path, "records",
                 "record 1 starts at token 1000000, not at a start bit after the previous record's start");
}

// ---------------------------------------------------------------------------------------------
// SharedCorpus::load and save fail whole

TEST(CorpusFileErrors, LoadingABadFileThrowsAndLeavesTheCorpusUnchanged) {
  TempDir dir;
  const Bytes whole = read_bytes(build_small(dir, "c.ngc"));
  std::vector<std::filesystem::path> bad;
  bad.push_back(dir / "absent.ngc");
  bad.push_back(dir.path());
  write_bytes(dir / "cut.ngc", Bytes(whole.begin(), whole.end() - 8));
  bad.push_back(dir / "cut.ngc");
  Bytes bytes = whole;
  format::Header header = header_of(bytes);
  header.version = 3;
  put_header(bytes, header);
  write_bytes(dir / "v3.ngc", bytes);
  bad.push_back(dir / "v3.ngc");
  bytes = whole;
  bytes[100] ^= 1;
  write_bytes(dir / "header.ngc", bytes);
  bad.push_back(dir / "header.ngc");
  // A body damaged since it was written: load() verifies the checksums, so it never takes it in
  // (and a later save() cannot write the damage out under fresh checksums).
  for (std::size_t section = 0; section < format::kSections; ++section) {
    bytes = whole;
    bytes[static_cast<std::size_t>(header.sections[section].offset)] ^= 0x10;
    const auto damaged = dir / ("body" + std::to_string(section) + ".ngc");
    write_bytes(damaged, bytes);
    bad.push_back(damaged);
  }

  SharedCorpus corpus(SharedCorpus::min_bytes());
  corpus.append(std::vector<Token>{40, 41, 42, 43}, 5);
  corpus.append(std::vector<Token>{41, 42, 50}, 6);
  const std::vector<std::vector<Token>> contexts = {{41, 42}, {40}, {42}, {2, 3}};
  const auto drafts = [&] {
    std::vector<Drafted> all;
    for (const auto& context : contexts) {
      std::vector<Token> out(4);
      const CorpusDraft found = corpus.draft(context, out);
      out.resize(found.count);
      all.push_back(Drafted{found.count, found.match_length, out});
    }
    return all;
  };
  const std::vector<Drafted> before = drafts();
  ASSERT_EQ(before[0].tokens, (std::vector<Token>{50}));
  for (const auto& path : bad) {
    SCOPED_TRACE(path.string());
    const CorpusFileError e = refusal([&] { corpus.load(path); });
    EXPECT_EQ(e.path(), path);
    EXPECT_THAT(e.what(), HasSubstr("'" + path.string() + "'"));
    EXPECT_EQ(corpus.size(), 7U);
    EXPECT_EQ(corpus.records(), 2U);
    EXPECT_EQ(corpus.last_stamp(), 6);
    EXPECT_EQ(drafts(), before);
  }
  // The good file loads, replacing what was held.
  corpus.load(dir / "c.ngc");
  EXPECT_EQ(corpus.size(), 18U);
  EXPECT_EQ(corpus.records(), 3U);
}

// Twenty records of repeated text (records 0 to 19, stamps 100 to 119), 110 tokens.
std::filesystem::path build_twenty(const TempDir& dir, const std::string& name) {
  CorpusBuilder builder;
  for (int r = 0; r < 20; ++r) {
    std::vector<Token> record;
    for (int i = 0; i < 3 + r % 5; ++i) record.push_back(static_cast<Token>((r * 3 + i) % 11));
    builder.add(record, 100 + r);
  }
  static_cast<void>(builder.write(dir / name));
  return dir / name;
}

std::span<format::RecordEntry> records_of(Bytes& bytes) {
  const format::SectionEntry section = header_of(bytes).sections[2];
  return {reinterpret_cast<format::RecordEntry*>(bytes.data() + section.offset),
          static_cast<std::size_t>(section.bytes / sizeof(format::RecordEntry))};
}

// What each reader that copies records out of the file says of it: "" when it takes the file,
// else its refusal's message. A refused load leaves the corpus as it was; a refused add
// leaves the builder empty.
struct Readings {
  std::string verify, load, load_trusted, builder_add;
};

Readings read_with_each(const std::filesystem::path& path) {
  Readings out;
  const auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const CorpusFileError& e) {
      return e.what();
    }
    return "";
  };
  out.verify = message([&] { MappedCorpus(path).verify(); });
  for (const ChecksumCheck check : {ChecksumCheck::verify, ChecksumCheck::skip}) {
    SharedCorpus corpus(SharedCorpus::min_bytes());
    corpus.append(std::vector<Token>{40, 41, 42}, 7);
    (check == ChecksumCheck::verify ? out.load : out.load_trusted) = message([&] { corpus.load(path, check); });
    if (!(check == ChecksumCheck::verify ? out.load : out.load_trusted).empty()) {
      EXPECT_EQ(corpus.size(), 3U);
      EXPECT_EQ(corpus.records(), 1U);
      EXPECT_EQ(corpus.last_stamp(), 7);
    }
  }
  CorpusBuilder builder;
  out.builder_add = message([&] { builder.add(MappedCorpus(path)); });
  if (!out.builder_add.empty()) {
    EXPECT_EQ(builder.tokens(), 0U);
  }
  return out;
}

// The exit status and what stderr said of `ngramspec-corpus ARGS` (run in `dir`).
std::pair<int, std::string> run_corpus_tool([[maybe_unused]] const TempDir& dir,
                                            [[maybe_unused]] const std::string& args) {
#ifdef NGRAMSPEC_CORPUS_TOOL
  const std::filesystem::path err = dir / "tool.err";
  const std::string command = "'" NGRAMSPEC_CORPUS_TOOL "' " + args + " > /dev/null 2> '" + err.string() + "'";
  const int status = std::system(command.c_str());
  const std::vector<char> text = test::read_file(err);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, std::string(text.begin(), text.end())};
#else
  return {-1, ""};
#endif
}

// A record table written wrong under fresh checksums: record 10 starts at 10^12. Its checksums
// hold, so only the records' structure tells. Mapped, record 9 reads to the end of the tokens
// (the records after it over again) and record 10 is empty; a load or merge that took it would
// write that out under fresh checksums, into a file verify() passes. Every reader that copies
// records refuses it instead, with verify()'s message, which names record 10 and its start.
TEST(CorpusFileErrors, ARecordTablePastTheTokensUnderFreshChecksumsIsRefusedByEveryLoaderAndMerge) {
  TempDir dir;
  Bytes bytes = read_bytes(build_twenty(dir, "c.ngc"));
  records_of(bytes)[10].first = 1000000000000ULL;
  fix_checksums(bytes, 2);
  const auto path = dir / "forged.ngc";
  write_bytes(path, bytes);
  EXPECT_NO_THROW(MappedCorpus(path).verify_checksums());
  const std::string problem =
      "record 10 starts at token 1000000000000, not at a start bit after the previous record's start";
  const Readings readings = read_with_each(path);
  const std::string expected = "corpus file '" + path.string() + "', section records: " + problem;
  EXPECT_EQ(readings.verify, expected);
  EXPECT_EQ(readings.load, expected);
  EXPECT_EQ(readings.load_trusted, expected);
  EXPECT_EQ(readings.builder_add, expected);
  expect_refusal(refusal([&] { MappedCorpus(path).verify_records(); }), path, "records", problem);

#ifndef NGRAMSPEC_CORPUS_TOOL
  GTEST_SKIP() << "ngramspec-corpus is not built (NGRAMSPEC_BUILD_TOOLS is off)";
#endif
  // ngramspec-corpus merge (with or without checking its shards' checksums) and stats refuse it
  // too, exiting 1 and writing nothing.
  const auto merged = dir / "merged.ngc";
  for (const std::string& args : {"merge '" + merged.string() + "' '" + (dir / "c.ngc").string() + "' '" +
                                      path.string() + "'",
                                  "merge '" + merged.string() + "' '" + path.string() + "' --no-verify",
                                  "stats '" + path.string() + "'", "verify '" + path.string() + "'"}) {
    SCOPED_TRACE(args);
    const auto [status, err] = run_corpus_tool(dir, args);
    EXPECT_EQ(status, 1);
    EXPECT_EQ(err, "ngramspec-corpus: error: " + expected + "\n");
    EXPECT_FALSE(std::filesystem::exists(merged));
  }
  // The good file merges.
  const auto [status, err] = run_corpus_tool(dir, "merge '" + merged.string() + "' '" + (dir / "c.ngc").string() + "'");
  EXPECT_EQ(status, 0) << err;
  EXPECT_NO_THROW(MappedCorpus(merged).verify());
}

// A token outside the vocabulary the file records, under fresh checksums: only verify()'s token
// check tells. A load would hand it to drafters as text (a model that cannot take it answers
// every request with an error) and a merge would write it out under fresh checksums; each
// refuses it instead with verify()'s message, naming the token and its position.
TEST(CorpusFileErrors, ATokenOutsideTheRecordedVocabularyUnderFreshChecksumsIsRefusedByEveryLoaderAndMerge) {
  TempDir dir;
  CorpusBuilder builder(CorpusBuilder::kNoCap, CorpusVocabulary{11, 0});
  for (int r = 0; r < 20; ++r) {
    std::vector<Token> record;
    for (int i = 0; i < 3 + r % 5; ++i) record.push_back(static_cast<Token>((r * 3 + i) % 11));
    builder.add(record, 100 + r);
  }
  static_cast<void>(builder.write(dir / "c.ngc"));
  ASSERT_NO_THROW(MappedCorpus(dir / "c.ngc").verify());
  Bytes bytes = read_bytes(dir / "c.ngc");
  const format::SectionEntry tokens = header_of(bytes).sections[0];
  const std::size_t held = static_cast<std::size_t>(tokens.bytes / sizeof(Token));
  // The last token: inside every record a load keeps, whatever the corpus's capacity.
  const std::size_t at = held - 1;
  const Token foreign = 2130706697;
  std::memcpy(bytes.data() + tokens.offset + at * sizeof(Token), &foreign, sizeof foreign);
  fix_checksums(bytes, 0);
  const auto path = dir / "foreign.ngc";
  write_bytes(path, bytes);
  EXPECT_NO_THROW(MappedCorpus(path).verify_checksums());
  EXPECT_NO_THROW(MappedCorpus(path).verify_records());
  const std::string expected = "corpus file '" + path.string() + "', section tokens: token 2130706697 at position " +
                               std::to_string(at) + " is outside the file's vocabulary of 11 tokens";
  const Readings readings = read_with_each(path);
  EXPECT_EQ(readings.verify, expected);
  EXPECT_EQ(readings.load, expected);
  EXPECT_EQ(readings.load_trusted, expected);
  EXPECT_EQ(readings.builder_add, expected);
}

// Random corruptions of the record table (starts moved, entries swapped or repeated, stamps
// changed) and of the header's first and last stamps, checksums made to hold: load, trusted
// load and a builder's add (a merge) each refuse exactly the files verify() refuses, with
// verify()'s message.
TEST(CorpusFileErrors, EveryLoaderRefusesExactlyTheRecordTablesVerifyRefuses) {
  TempDir dir;
  const Bytes whole = read_bytes(build_twenty(dir, "c.ngc"));
  const format::Header header = header_of(whole);
  const std::uint64_t held = header.tokens;
  Bytes copy = whole;
  std::vector<std::uint64_t> starts;
  for (const format::RecordEntry& e : records_of(copy)) starts.push_back(e.first);
  std::mt19937_64 rng(37);
  std::size_t refused = 0;
  std::size_t taken = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Bytes bytes = whole;
    const std::span<format::RecordEntry> records = records_of(bytes);
    format::Header h = header_of(bytes);
    const auto pick = [&] { return static_cast<std::size_t>(rng() % records.size()); };
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < changes; ++c) {
      format::RecordEntry& e = records[pick()];
      switch (rng() % 9) {
        case 0: e.first = rng() % (held + 3); break;                                  // anywhere, or just past the end
        case 1: e.first = starts[rng() % starts.size()]; break;                       // another record's start
        case 2: e.first += rng() % 2 == 0 ? 1 : static_cast<std::uint64_t>(-1); break;  // off by one
        case 3: e.first = std::uint64_t{1} << (32 + rng() % 32); break;               // far past the tokens
        case 4: std::swap(e, records[pick()]); break;
        case 5: e = records[pick()]; break;
        case 6: e.stamp += static_cast<std::int64_t>(rng() % 5) - 2; break;          // may stay in order
        case 7: e.stamp = static_cast<std::int64_t>(rng()); break;
        default:
          (rng() % 2 == 0 ? h.first_stamp : h.last_stamp) += static_cast<std::int64_t>(rng() % 3) - 1;
          break;
      }
    }
    put_header(bytes, h);
    fix_checksums(bytes, 2);
    // Named by appending: GCC 12 at -O3 warns (-Wrestrict, a false positive) on "t" + std::string.
    std::string name = "t";
    name += std::to_string(trial);
    name += ".ngc";
    const auto path = dir / name;
    write_bytes(path, bytes);
    SCOPED_TRACE(path.string());
    const Readings readings = [&] {
      try {
        static_cast<void>(MappedCorpus(path));  // a header stamp moved past the other is refused here
      } catch (const CorpusFileError& e) {
        return Readings{e.what(), e.what(), e.what(), e.what()};
      }
      return read_with_each(path);
    }();
    ++(readings.verify.empty() ? taken : refused);
    EXPECT_EQ(readings.load, readings.verify);
    EXPECT_EQ(readings.load_trusted, readings.verify);
    EXPECT_EQ(readings.builder_add, readings.verify);
    std::filesystem::remove(path);
  }
  // Both outcomes were tried often.
  EXPECT_GT(refused, 100U);
  EXPECT_GT(taken, 20U);
}

TEST(CorpusFileErrors, SavingIntoAMissingDirectoryNamesThePath) {
  TempDir dir;
  SharedCorpus corpus(SharedCorpus::min_bytes());
  corpus.append(std::vector<Token>{1, 2, 3}, 1);
  const auto path = dir / "missing" / "c.ngc";
  const CorpusFileError e = refusal([&] { corpus.save(path); });
  expect_refusal(e, path, "", "cannot create '" + path.string() + ".tmp-");
  EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  EXPECT_FALSE(std::filesystem::exists(dir / "missing"));
  // CorpusBuilder::write, which save() uses, says the same.
  CorpusBuilder builder;
  builder.add(std::vector<Token>{1, 2}, 1);
  expect_refusal(refusal([&] { static_cast<void>(builder.write(path)); }), path, "", "No such file or directory");
}

TEST(CorpusFileErrors, AFailedSaveLeavesNoTemporaryFileBehind) {
  TempDir dir;
  SharedCorpus corpus(SharedCorpus::min_bytes());
  corpus.append(std::vector<Token>{1, 2, 3}, 1);
  // The temporary file is written in full, then cannot be renamed over a directory.
  const auto taken = dir / "taken";
  std::filesystem::create_directories(taken / "inside");
  const CorpusFileError e = refusal([&] { corpus.save(taken); });
  expect_refusal(e, taken, "", "cannot rename '" + taken.string() + ".tmp-");
  const auto names = [&] {
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      found.push_back(entry.path().filename().string());
    }
    std::sort(found.begin(), found.end());
    return found;
  };
  EXPECT_EQ(names(), std::vector<std::string>{"taken"});
  // And a save that succeeds leaves only its file.
  corpus.save(dir / "c.ngc");
  EXPECT_EQ(names(), (std::vector<std::string>{"c.ngc", "taken"}));
}

}  // namespace
}  // namespace ngramspec
