#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ngramspec {

namespace detail {

/// An exception of type `Base` (std::invalid_argument, std::domain_error) whose what() is
/// "<where>: <detail>" (just the detail when `where` is empty), with the two kept apart as data:
/// where() names the thrower ("ngramspec::BatchSpeculator::propose", a class such as
/// "ngramspec::BatchConfig", or "ngramspec" for free functions and settings), detail() says what
/// was wrong, naming the value. Copying it does not throw (it keeps one string, as its base does).
template <class Base>
class LocatedError : public Base {
 public:
  LocatedError(std::string_view where, const std::string& detail)
      : Base(where.empty() ? detail : std::string(where) + ": " + detail), where_size_(where.size()) {}

  /// The thrower, as given.
  [[nodiscard]] std::string_view where() const noexcept { return std::string_view(this->what(), where_size_); }
  /// What was wrong.
  [[nodiscard]] std::string_view detail() const noexcept {
    return std::string_view(this->what()).substr(where_size_ == 0 ? 0 : where_size_ + 2);
  }

 private:
  std::size_t where_size_;
};

}  // namespace detail

/// What the library throws for a bad argument: a std::invalid_argument that keeps where it was
/// thrown and what was wrong apart (detail::LocatedError). The C ABI reports the detail under its
/// own function's name.
using ArgumentError = detail::LocatedError<std::invalid_argument>;
/// What the library throws for a value it cannot compute with (a NaN logit, a row with every
/// token masked): a std::domain_error, located the same way.
using DomainError = detail::LocatedError<std::domain_error>;

}  // namespace ngramspec
