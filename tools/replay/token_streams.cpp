#include "token_streams.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <random>
#include <stdexcept>
#include <system_error>

#include "ngramspec/detail/parse_number.hpp"

namespace ngramspec::replay {
namespace {

[[noreturn]] void fail(std::string_view source, std::size_t line, const std::string& what) {
  throw std::runtime_error(std::string(source) + ":" + std::to_string(line) + ": " + what);
}

std::vector<Token> parse_ids(std::string_view field, std::string_view source, std::size_t line, const char* name) {
  std::vector<Token> ids;
  std::size_t i = 0;
  while (i < field.size()) {
    if (field[i] == ' ') {
      ++i;
      continue;
    }
    std::size_t end = field.find(' ', i);
    if (end == std::string_view::npos) end = field.size();
    const std::string_view word = field.substr(i, end - i);
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (ec != std::errc() || ptr != word.data() + word.size() || value > std::numeric_limits<Token>::max()) {
      fail(source, line, std::string(name) + " has an invalid token id '" + escape_for_message(word) +
                             "' (expected an integer from 0 to 4294967295)");
    }
    ids.push_back(static_cast<Token>(value));
    i = end;
  }
  if (ids.empty()) fail(source, line, std::string(name) + " is empty");
  return ids;
}

}  // namespace

std::string escape_for_message(std::string_view text, std::size_t max_bytes) {
  const bool shortened = text.size() > max_bytes;
  if (shortened) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  if (shortened) out += "...";
  return out;
}

std::vector<TokenStream> parse_streams(std::istream& in, std::string_view source_name) {
  std::vector<TokenStream> streams;
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty()) continue;
    std::string_view rest(text);
    std::string_view fields[4];
    for (int f = 0; f < 4; ++f) {
      const std::size_t tab = rest.find('\t');
      if (f < 3 && tab == std::string_view::npos) {
        fail(source_name, line, "expected 4 TAB-separated fields (id, category, prompt ids, output ids), found " +
                                    std::to_string(f + 1));
      }
      if (f == 3 && tab != std::string_view::npos) fail(source_name, line, "more than 4 TAB-separated fields");
      fields[f] = rest.substr(0, tab);
      if (tab != std::string_view::npos) rest.remove_prefix(tab + 1);
    }
    if (fields[0].empty()) fail(source_name, line, "the id field is empty");
    if (fields[1].empty()) fail(source_name, line, "the category field is empty");
    TokenStream stream;
    stream.id = std::string(fields[0]);
    stream.category = std::string(fields[1]);
    stream.prompt = parse_ids(fields[2], source_name, line, "the prompt");
    stream.output = parse_ids(fields[3], source_name, line, "the output");
    streams.push_back(std::move(stream));
  }
  if (in.bad()) fail(source_name, line, "read error");
  return streams;
}

std::vector<TokenStream> read_streams(const std::string& path) {
  // A directory opens on some systems and then fails to read, with no word of why.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw std::runtime_error("cannot read streams file '" + path + "': it is a directory");
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open streams file '" + path + "'");
  std::vector<TokenStream> streams = parse_streams(in, path);
  // An input's fault, as a malformed line is (exit 1, "error:"), not a usage mistake.
  if (streams.empty()) throw std::runtime_error(path + ": no records");
  return streams;
}

SyntheticSpec parse_synthetic(std::string_view text) {
  SyntheticSpec spec;
  const auto parts = [&] {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    for (;;) {
      const std::size_t colon = text.find(':', i);
      out.push_back(text.substr(i, colon == std::string_view::npos ? std::string_view::npos : colon - i));
      if (colon == std::string_view::npos) return out;
      i = colon + 1;
    }
  }();
  const auto bad = [&](const std::string& why) {
    throw std::invalid_argument("synthetic stream '" + std::string(text) + "': " + why +
                                " (expected periodic:P[:noise], random or mixture:P)");
  };
  spec.kind = std::string(parts[0]);
  const auto number = [&](std::string_view word) {
    std::size_t value = 0;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (ec != std::errc() || ptr != word.data() + word.size() || value < 2 || value > (1u << 20)) {
      bad("period '" + std::string(word) + "' is not a whole number from 2 to 1048576");
    }
    return value;
  };
  if (spec.kind == "random") {
    if (parts.size() != 1) bad("random takes no parameters");
  } else if (spec.kind == "periodic") {
    if (parts.size() < 2 || parts.size() > 3) bad("periodic takes a period and an optional noise probability");
    spec.period = number(parts[1]);
    if (parts.size() == 3) {
      const std::string word(parts[2]);
      // The project's reader: hexadecimal, inf, a sign or spaces are refused as on every command line.
      const ngramspec::detail::ParsedNumber<double> noise = ngramspec::detail::parse_real<double>(word);
      spec.noise = noise.value;
      if (!noise.ok() || !(spec.noise >= 0.0 && spec.noise <= 1.0)) {
        bad("noise '" + word + "' is not a probability from 0 to 1");
      }
    }
  } else if (spec.kind == "mixture") {
    if (parts.size() != 2) bad("mixture takes a run length");
    spec.period = number(parts[1]);
  } else {
    bad("unknown kind '" + spec.kind + "'");
  }
  return spec;
}

std::vector<TokenStream> make_synthetic(const SyntheticSpec& spec) {
  if (spec.vocab < 4 || spec.vocab - 1 > std::numeric_limits<Token>::max()) {
    throw std::invalid_argument("synthetic streams: vocab = " + std::to_string(spec.vocab) +
                                " is invalid: it must be from 4 to 4294967296 (ids 0-2 are reserved)");
  }
  std::vector<TokenStream> streams;
  for (std::size_t s = 0; s < spec.samples; ++s) {
    std::mt19937_64 rng(spec.seed * 1000003u + s);
    std::uniform_int_distribution<Token> token(3, static_cast<Token>(spec.vocab - 1));
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    TokenStream stream;
    stream.id = spec.kind + "-" + std::to_string(s);
    std::vector<Token> all;
    if (spec.kind == "random") {
      stream.category = "random";
      const std::size_t prompt = 64;
      for (std::size_t i = 0; i < prompt + spec.output_length; ++i) all.push_back(token(rng));
      stream.prompt.assign(all.begin(), all.begin() + prompt);
    } else if (spec.kind == "periodic") {
      stream.category = "periodic-" + std::to_string(spec.period);
      if (spec.noise > 0) stream.category += "-noise" + std::to_string(spec.noise).substr(0, 4);
      std::vector<Token> unit_tokens(spec.period);
      for (Token& t : unit_tokens) t = token(rng);
      const std::size_t prompt = 2 * spec.period;
      for (std::size_t i = 0; i < prompt + spec.output_length; ++i) {
        Token t = unit_tokens[i % spec.period];
        if (i >= prompt && spec.noise > 0 && unit(rng) < spec.noise) t = token(rng);
        all.push_back(t);
      }
      stream.prompt.assign(all.begin(), all.begin() + prompt);
    } else {
      stream.category = "mixture-" + std::to_string(spec.period);
      const std::size_t run = spec.period;
      for (std::size_t i = 0; i < run; ++i) all.push_back(token(rng));
      bool copy = true;
      while (all.size() < run + spec.output_length) {
        if (copy) {
          // Copy a run that starts anywhere earlier: the drafter has seen it, perhaps long ago.
          std::uniform_int_distribution<std::size_t> start(0, all.size() - run);
          const std::size_t from = start(rng);
          for (std::size_t i = 0; i < run; ++i) all.push_back(all[from + i]);
        } else {
          for (std::size_t i = 0; i < run; ++i) all.push_back(token(rng));
        }
        copy = !copy;
      }
      all.resize(run + spec.output_length);
      stream.prompt.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(run));
    }
    stream.output.assign(all.begin() + static_cast<std::ptrdiff_t>(stream.prompt.size()), all.end());
    streams.push_back(std::move(stream));
  }
  return streams;
}

namespace {

// One bound of a record range: digits, or digits and '%' (at most 100).
void check_bound(std::string_view option, std::string_view text, std::string_view bound) {
  std::string_view digits = bound;
  const bool percent = !digits.empty() && digits.back() == '%';
  if (percent) digits.remove_suffix(1);
  const bool plain = !digits.empty() && digits.size() <= 18 &&
                     std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!bound.empty() && (!plain || (percent && std::stoull(std::string(digits)) > 100))) {
    throw std::invalid_argument(std::string(option) + ": '" + std::string(text) +
                                "' is not a record range: expected START:END, each a record index or a percentage "
                                "up to 100% (or empty), e.g. ':50%' or '50%:'");
  }
}

std::size_t resolve_bound(const std::string& bound, std::size_t count, std::size_t empty) {
  if (bound.empty()) return empty;
  if (bound.back() == '%') return static_cast<std::size_t>(std::stoull(bound.substr(0, bound.size() - 1)) * count / 100);
  return std::min<std::size_t>(static_cast<std::size_t>(std::stoull(bound)), count);
}

}  // namespace

RecordRange parse_record_range(std::string_view option, std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos || text.find(':', colon + 1) != std::string_view::npos) {
    check_bound(option, text, "x");  // throws the message
  }
  const std::string_view begin = text.substr(0, colon);
  const std::string_view end = text.substr(colon + 1);
  check_bound(option, text, begin);
  check_bound(option, text, end);
  return RecordRange{std::string(begin), std::string(end)};
}

std::pair<std::size_t, std::size_t> RecordRange::resolve(std::size_t count) const {
  const std::size_t first = resolve_bound(begin, count, 0);
  const std::size_t last = resolve_bound(end, count, count);
  const std::string name = "record range '" + begin + ":" + end + "'";
  if (first > last) {
    throw std::invalid_argument(name + " starts after it ends (records " + std::to_string(first) + " to " +
                                std::to_string(last) + " of " + std::to_string(count) + ")");
  }
  if (first == last) {
    throw std::invalid_argument(name + " selects none of the " + std::to_string(count) + " records (it resolves to " +
                                std::to_string(first) + ":" + std::to_string(last) + ")");
  }
  return {first, last};
}

std::vector<TokenStream> slice_records(std::vector<TokenStream> streams, const RecordRange& range) {
  const auto [first, last] = range.resolve(streams.size());
  streams.erase(streams.begin() + static_cast<std::ptrdiff_t>(last), streams.end());
  streams.erase(streams.begin(), streams.begin() + static_cast<std::ptrdiff_t>(first));
  return streams;
}

}  // namespace ngramspec::replay
