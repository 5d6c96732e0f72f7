#include "corpus_inputs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <istream>
#include <limits>
#include <stdexcept>
#include <streambuf>
#include <system_error>

#include "token_streams.hpp"

namespace ngramspec::corpus_tool {
namespace {

// A file opened for reading, closed at the end of the scope.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open");
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat");
    // A directory opens, then fails to read with a less helpful word.
    if (S_ISDIR(st.st_mode)) throw std::runtime_error("cannot read '" + path_ + "': it is a directory");
    size_ = S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
  }
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Reads up to `bytes`; 0 at the end of the file. Throws naming the file on an error.
  std::size_t read(char* into, std::size_t bytes) {
    for (;;) {
      const ssize_t got = ::read(fd_, into, bytes);
      if (got >= 0) return static_cast<std::size_t>(got);
      if (errno != EINTR) fail("cannot read");
    }
  }
  // The size of a regular file (0 for a pipe or device).
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string(what) + " '" + path_ + "': " + std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A stream buffer over an InputFile that reports the bytes read. A read error ends the
// stream and is kept, for the reader to throw after the parser has stopped (an istream would
// swallow it into badbit).
class CountingBuffer : public std::streambuf {
 public:
  CountingBuffer(InputFile& file, const ReadProgress& progress) : file_(file), progress_(progress) {}

  // Rethrows a read error, if one ended the stream.
  void check() const {
    if (error_) std::rethrow_exception(error_);
  }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (error_) return traits_type::eof();
    std::size_t got = 0;
    try {
      got = file_.read(buffer_.data(), buffer_.size());
    } catch (...) {
      error_ = std::current_exception();
      return traits_type::eof();
    }
    if (got == 0) return traits_type::eof();
    bytes_ += got;
    if (progress_) progress_(bytes_);
    setg(buffer_.data(), buffer_.data(), buffer_.data() + got);
    return traits_type::to_int_type(*gptr());
  }

 private:
  InputFile& file_;
  const ReadProgress& progress_;
  std::array<char, std::size_t{1} << 16> buffer_{};
  std::uint64_t bytes_ = 0;
  std::exception_ptr error_;
};

// Parses a text file through a CountingBuffer with `parse(stream)`; a read error, if one cut
// the text short, is what is reported.
template <class Parse>
void parse_text(InputFile& file, const ReadProgress& progress, const Parse& parse) {
  CountingBuffer buffer(file, progress);
  std::istream in(&buffer);
  try {
    parse(in);
  } catch (...) {
    buffer.check();
    throw;
  }
  buffer.check();
}

[[noreturn]] void no_records(const std::string& path, const char* why) {
  throw std::runtime_error(path + ": no records (" + why + ")");
}

void read_tsv(InputFile& file, TsvField field, RecordPool& pool, const ReadProgress& progress) {
  std::vector<replay::TokenStream> streams;
  parse_text(file, progress, [&](std::istream& in) { streams = replay::parse_streams(in, file.path()); });
  if (streams.empty()) no_records(file.path(), "no line holds a row");
  for (replay::TokenStream& s : streams) {
    if (field != TsvField::output) {
      pool.append(s.prompt);
      pool.end_record();
    }
    if (field != TsvField::prompt) {
      pool.append(s.output);
      pool.end_record();
    }
    pool.end_input_record();
    s = {};  // the pool holds the tokens now
  }
}

void read_ids(InputFile& file, RecordPool& pool, const ReadProgress& progress) {
  const std::size_t before = pool.input_records();
  parse_text(file, progress, [&](std::istream& in) { parse_id_lines(in, file.path(), pool); });
  if (pool.input_records() == before) no_records(file.path(), "no line holds a token id");
}

void read_u32(InputFile& file, RecordPool& pool, const ReadProgress& progress) {
  if (file.size() % 4 != 0) {
    throw std::runtime_error("u32 file '" + file.path() + "' is " + std::to_string(file.size()) +
                             " bytes: not a multiple of 4 (raw 32-bit token ids)");
  }
  // Read in blocks, each converted from little-endian as it comes.
  constexpr std::size_t kBlockTokens = std::size_t{1} << 20;
  std::vector<Token> block(kBlockTokens);
  std::uint64_t bytes = 0;
  std::size_t partial = 0;  // bytes of a token split across reads
  for (;;) {
    char* const into = reinterpret_cast<char*>(block.data());
    const std::size_t got = file.read(into + partial, kBlockTokens * sizeof(Token) - partial);
    if (got == 0) break;
    bytes += got;
    const std::size_t held = partial + got;
    const std::size_t whole = held / sizeof(Token);
    if constexpr (std::endian::native == std::endian::big) {
      for (std::size_t i = 0; i < whole; ++i) {
        const Token t = block[i];
        block[i] = (t << 24) | ((t & 0xff00U) << 8) | ((t >> 8) & 0xff00U) | (t >> 24);
      }
    }
    pool.append(std::span<const Token>(block.data(), whole));
    partial = held % sizeof(Token);
    if (partial != 0) std::memmove(into, into + whole * sizeof(Token), partial);
    if (progress) progress(bytes);
  }
  if (partial != 0) {
    // The size changed while reading (a pipe, or a file still being written).
    throw std::runtime_error("u32 file '" + file.path() + "' is " + std::to_string(bytes) +
                             " bytes: not a multiple of 4 (raw 32-bit token ids)");
  }
  if (bytes == 0) no_records(file.path(), "the file is empty");
  pool.end_record();
  pool.end_input_record();
}

}  // namespace

void RecordPool::append(std::span<const Token> tokens) { tokens_.insert(tokens_.end(), tokens.begin(), tokens.end()); }

void RecordPool::end_record() { ends_.push_back(tokens_.size()); }

void RecordPool::end_input_record() { input_ends_.push_back(ends_.size()); }

std::span<const Token> RecordPool::record(std::size_t index) const noexcept {
  const std::uint64_t first = index == 0 ? 0 : ends_[index - 1];
  return std::span<const Token>(tokens_.data() + first, static_cast<std::size_t>(ends_[index] - first));
}

std::pair<std::size_t, std::size_t> RecordPool::records_of(std::size_t first_input,
                                                           std::size_t last_input) const noexcept {
  const auto start = [&](std::size_t input) { return input == 0 ? std::size_t{0} : input_ends_[input - 1]; };
  return {start(first_input), start(last_input)};
}

void parse_id_lines(std::istream& in, std::string_view source, RecordPool& pool) {
  std::string text;
  std::size_t line = 0;
  std::vector<Token> ids;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    ids.clear();
    std::size_t i = 0;
    while (i < text.size()) {
      if (text[i] == ' ' || text[i] == '\t') {
        ++i;
        continue;
      }
      std::size_t end = text.find_first_of(" \t", i);
      if (end == std::string::npos) end = text.size();
      const std::string_view word(text.data() + i, end - i);
      std::uint64_t value = 0;
      const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
      if (ec != std::errc() || ptr != word.data() + word.size() || value > std::numeric_limits<Token>::max()) {
        // Shortened (the line may hold a whole document) and escaped (it may hold a NUL byte).
        throw std::runtime_error(std::string(source) + ":" + std::to_string(line) + ": invalid token id '" +
                                 replay::escape_for_message(word) +
                                 "' (expected whole numbers from 0 to 4294967295 separated by spaces or tabs)");
      }
      ids.push_back(static_cast<Token>(value));
      i = end;
    }
    if (ids.empty()) continue;
    pool.append(ids);
    pool.end_record();
    pool.end_input_record();
  }
  if (in.bad()) throw std::runtime_error(std::string(source) + ":" + std::to_string(line) + ": read error");
}

void read_input(const std::string& path, InputFormat format, TsvField field, RecordPool& pool,
                const ReadProgress& progress) {
  InputFile file(path);
  switch (format) {
    case InputFormat::tsv: read_tsv(file, field, pool, progress); break;
    case InputFormat::u32: read_u32(file, pool, progress); break;
    case InputFormat::ids:
    case InputFormat::automatic: read_ids(file, pool, progress); break;
  }
}

}  // namespace ngramspec::corpus_tool
