#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace ngramspec::test {

/// The sequences an engine steps in one pass of a serving test: each running lane with chance
/// 7/8 (at least one), in a random order, into `pass`, and their ids into `ids`. `Lane` has a
/// member `id`.
template <class Lane, class Id>
void pick_pass(const std::vector<std::unique_ptr<Lane>>& lanes, std::mt19937_64& rng, std::vector<Lane*>& pass,
               std::vector<Id>& ids) {
  pass.clear();
  for (const auto& lane : lanes) {
    if (rng() % 8 != 0) pass.push_back(lane.get());
  }
  if (pass.empty()) pass.push_back(lanes[rng() % lanes.size()].get());
  std::shuffle(pass.begin(), pass.end(), rng);
  ids.clear();
  for (const Lane* lane : pass) ids.push_back(lane->id);
}

}  // namespace ngramspec::test
