// Two processes map one corpus file and draft from it at the same time, as the workers of a
// server would: the pages are the page cache's, shared read-only, and every draft in either
// process equals what a live SharedCorpus holding the same records drafts. A concurrency test
// (the tsan preset runs those); the checks hold under any build. The children report through
// their exit status alone and write nothing shared.

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "support/reference_corpus.hpp"
#include "support/temp_dir.hpp"

namespace ngramspec {
namespace {

using test::Drafted;
using test::TempDir;

constexpr std::size_t kMaxRoom = 24;
constexpr int kPasses = 20;

// A child's exit statuses.
enum ChildStatus : int { kAllEqual = 0, kDraftDiffers = 1, kCannotMap = 2, kThrew = 3 };

struct Probe {
  std::vector<Token> context;
  std::size_t room = 0;
  Drafted expected;
};

// Maps the file, waits until `start` reads end-of-file (the parent closed the pipe), then drafts
// every probe kPasses times, comparing each draft with what the live corpus drafted.
int draft_in_child(const std::filesystem::path& path, const std::vector<Probe>& probes, int start) noexcept {
  try {
    const MappedCorpus corpus(path);
    char byte = 0;
    ssize_t got = 0;
    do {
      got = ::read(start, &byte, 1);
    } while (got < 0 && errno == EINTR);
    std::vector<Token> out(kMaxRoom);
    for (int pass = 0; pass < kPasses; ++pass) {
      for (const Probe& probe : probes) {
        const std::span<Token> room(out.data(), probe.room);
        const CorpusDraft found = corpus.draft(probe.context, room);
        if (found.busy || found.count != probe.expected.count || found.match_length != probe.expected.match_length ||
            !std::equal(probe.expected.tokens.begin(), probe.expected.tokens.end(), room.begin())) {
          return kDraftDiffers;
        }
      }
    }
    return kAllEqual;
  } catch (const CorpusFileError&) {
    return kCannotMap;
  } catch (...) {
    return kThrew;
  }
}

std::string describe(int status) {
  if (WIFEXITED(status)) {
    switch (WEXITSTATUS(status)) {
      case kAllEqual: return "every draft equal";
      case kDraftDiffers: return "a draft differed from the live corpus's";
      case kCannotMap: return "the file could not be mapped";
      case kThrew: return "an exception was thrown";
      default: return "exit status " + std::to_string(WEXITSTATUS(status));
    }
  }
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

TEST(MappedCorpusConcurrency, TwoProcessesDraftFromOneFileAtOnce) {
  TempDir dir;
  std::mt19937_64 rng(20261124);
  // Records that quote one another over a small vocabulary, so that most contexts match.
  SharedCorpus live(SharedCorpus::bytes_for(std::size_t{1} << 14));
  CorpusBuilder builder;
  std::vector<Token> all;
  for (int r = 0; r < 60; ++r) {
    std::vector<Token> record(40 + rng() % 160);
    for (Token& t : record) t = static_cast<Token>(rng() % 40);
    if (!all.empty()) {
      const std::size_t from = rng() % all.size();
      const std::size_t to = rng() % 10;
      const std::size_t length = std::min({all.size() - from, record.size() - to, std::size_t{10} + rng() % 30});
      std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(from), length,
                  record.begin() + static_cast<std::ptrdiff_t>(to));
    }
    live.append(record, 1000 + r);
    builder.add(record, 1000 + r);
    all.insert(all.end(), record.begin(), record.end());
  }
  ASSERT_EQ(live.size(), all.size()) << "the live corpus must hold every record";
  const auto path = dir / "shared.ngc";
  static_cast<void>(builder.write(path));

  // What the live corpus drafts: the expectation both children check against.
  std::vector<Probe> probes;
  for (int i = 0; i < 3000; ++i) {
    Probe probe;
    const std::size_t end = 1 + rng() % all.size();
    const std::size_t length = std::min<std::size_t>(end, 1 + rng() % 80);
    probe.context.assign(all.begin() + static_cast<std::ptrdiff_t>(end - length),
                         all.begin() + static_cast<std::ptrdiff_t>(end));
    if (rng() % 4 == 0) probe.context.push_back(static_cast<Token>(rng() % 50));
    probe.room = 1 + rng() % kMaxRoom;
    std::vector<Token> out(probe.room);
    const CorpusDraft found = live.draft(probe.context, out);
    ASSERT_FALSE(found.busy);
    out.resize(found.count);
    probe.expected = Drafted{found.count, found.match_length, out};
    probes.push_back(std::move(probe));
  }

  // Built, not yet mapped: two children map it, wait for the start, and draft at once.
  int start[2];
  ASSERT_EQ(::pipe(start), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < 2; ++c) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(start[1]);
      ::_exit(draft_in_child(path, probes, start[0]));
    }
    if (pid < 0) break;
    children.push_back(pid);
  }
  ::close(start[0]);
  ::close(start[1]);  // the start: both children's reads return end-of-file
  for (const pid_t pid : children) {
    int status = 0;
    pid_t waited = 0;
    do {
      waited = ::waitpid(pid, &status, 0);
    } while (waited < 0 && errno == EINTR);
    ASSERT_EQ(waited, pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kAllEqual) << "child " << pid << ": " << describe(status);
  }
  ASSERT_EQ(children.size(), 2U) << "fork failed";

  // And the parent, mapping it last, drafts the same.
  const MappedCorpus corpus(path);
  EXPECT_NO_THROW(corpus.verify());
  for (const Probe& probe : probes) {
    std::vector<Token> out(probe.room);
    const CorpusDraft found = corpus.draft(probe.context, out);
    out.resize(found.count);
    ASSERT_EQ((Drafted{found.count, found.match_length, out}), probe.expected);
  }
}

}  // namespace
}  // namespace ngramspec
