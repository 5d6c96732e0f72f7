// The C ABI's learned costs: LearnedCost on its own, and the totals a batch's learned cost shares.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "common.hpp"
#include "ngramspec/argument_error.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/learned_cost.hpp"
#include "ngramspec/ngramspec.h"
#include "ngramspec/verify_cost.hpp"

struct ngramspec_learned_cost : ngramspec::c_api::Handle<ngramspec::LearnedCost> {
  using Handle::Handle;
};

namespace {

using namespace ngramspec::c_api;  // the parts every C function uses

// The versions of ngramspec_learned_cost_stats, as ngramspec.h lists them; the caller passes the size of its struct.
constexpr StructVersion kLearnedCostStatsVersions[] = {
    {offsetof(ngramspec_learned_cost_stats, exploration_seconds) + sizeof(double), member_align<std::uint64_t, double>},
};
static_assert(kLearnedCostStatsVersions[std::size(kLearnedCostStatsVersions) - 1].size() ==
                  sizeof(ngramspec_learned_cost_stats),
              "a field added to ngramspec_learned_cost_stats is a new version: add it to kLearnedCostStatsVersions");

}  // namespace

namespace ngramspec::c_api {

ngramspec_status learned_cost_stats(const char* where, const LearnedCost& cost, ngramspec_learned_cost_stats* out,
                                    std::size_t out_size) noexcept {
  if (out == nullptr) return null_argument(where, "out");
  const std::size_t bytes = struct_bytes(kLearnedCostStatsVersions, out_size);
  if (bytes == 0) {
    return bad_struct_size(where, "out_size", "ngramspec_learned_cost_stats", out_size, kLearnedCostStatsVersions,
                           nullptr);
  }
  ngramspec_learned_cost_stats c;
  std::memset(&c, 0, sizeof c);
  c.passes = cost.passes();
  c.seconds = cost.seconds();
  c.plain_passes = cost.plain_passes();
  c.plain_seconds = cost.plain_seconds();
  c.exploring_passes = cost.exploring_passes();
  c.exploration_seconds = cost.exploration_seconds();
  std::memcpy(out, &c, bytes);
  return NGRAMSPEC_OK;
}

}  // namespace ngramspec::c_api

extern "C" {

ngramspec_status ngramspec_learned_cost_create(const char* prior, double exploration, size_t plain_every,
                                               ngramspec_learned_cost** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  return guarded(Where{__func__}, [&] {
    std::optional<ngramspec::VerifyCost> curve;
    if (prior != nullptr) {
      CostSpec spec;
      try {
        spec = parse_cost_spec(prior);
      } catch (const ngramspec::ArgumentError& e) {  // named as the argument it came in
        throw ngramspec::ArgumentError("ngramspec", "prior " + std::string(e.detail()));
      }
      if (spec.learn) {
        throw ngramspec::ArgumentError("ngramspec", "prior = '" + std::string(prior) +
                                                        "' is invalid: a prior is a fixed curve (flat, knee:N or "
                                                        "table:...), not a learned cost");
      }
      curve = spec.curve;
    }
    const ngramspec::LearnedCostConfig config{.exploration = exploration, .plain_every = plain_every};
    *out = new ngramspec_learned_cost(std::move(curve), config);
  });
}

void ngramspec_learned_cost_free(ngramspec_learned_cost* cost) { delete cost; }

ngramspec_status ngramspec_learned_cost_plan(ngramspec_learned_cost* cost, size_t rows, size_t base_tokens,
                                             double base_expected, float* probabilities, size_t n, size_t* count) {
  if (cost == nullptr) return null_argument(__func__, "cost");
  if (count == nullptr) return null_argument(__func__, "count");
  if (const ngramspec_status bad = check_array(__func__, probabilities, "probabilities", "n", n, sizeof(float));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad = check_base_expected(__func__, base_expected); bad != NGRAMSPEC_OK) return bad;
  const ngramspec::VerifyCost& curve = cost->object.curve(rows);
  *count = ngramspec::DraftPlanner::plan_one(&curve, base_tokens, base_expected, 0, std::span<float>(probabilities, n));
  return NGRAMSPEC_OK;
}

ngramspec_status ngramspec_learned_cost_observe(ngramspec_learned_cost* cost, size_t rows, size_t tokens,
                                                double seconds) {
  if (cost == nullptr) return null_argument(__func__, "cost");
  return guarded(Where{__func__}, [&] { cost->object.observe(rows, tokens, seconds); });
}

ngramspec_status ngramspec_learned_cost_describe(const ngramspec_learned_cost* cost, char* out, size_t capacity,
                                                 size_t* length) {
  if (cost == nullptr) return null_argument(__func__, "cost");
  return guarded(Where{__func__}, [&] { return write_text(__func__, cost->object.describe(), out, capacity, length); });
}

ngramspec_status ngramspec_learned_cost_stats_get(const ngramspec_learned_cost* cost,
                                                  ngramspec_learned_cost_stats* out, size_t out_size) {
  if (cost == nullptr) return null_argument(__func__, "cost");
  return learned_cost_stats(__func__, cost->object, out, out_size);
}

}  // extern "C"
