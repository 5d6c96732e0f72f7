#pragma once
// Builds a DrafterEntry from one function that makes the drafter: what the replay's own drafters
// and the families other parts of the build register (register_drafter_family) share.

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "drafter_registry.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "replay_runner.hpp"
#include "serving_sim.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// The entry of a drafter that `make(stream, k, corpus, gate)` builds: for `stream`, at most
/// k drafts a pass, reading `corpus` (nullptr: none), with its gate on or off (a drafter
/// without a gate ignores it). Every way of running it (one record, gated or not, or a served
/// batch) is built from that one function. With corpus_bytes > 0 the drafter reads a causal
/// SharedCorpus of that size, holding the outputs of the records before, in file order; with
/// `prime`, the records of that corpus file first.
template <class Make>
DrafterEntry drafter_entry(std::string name, Make make, bool has_gate = false, std::size_t corpus_bytes = 0,
                           std::shared_ptr<const MappedCorpus> prime = nullptr) {
  const auto single = [make, corpus_bytes, prime](bool gate) -> DrafterEntry::Run {
    if (corpus_bytes == 0) {
      return [make, gate](const TokenStream& stream, std::size_t k, int repeats, const HeapMeter& meter) {
        const auto one = [&make, gate](const TokenStream& s, std::size_t n) { return make(s, n, nullptr, gate); };
        return replay_record(stream, k, one, repeats, meter);
      };
    }
    // Each record drafts from the outputs of the records before it in the file, then adds its
    // own. A pass over the streams starts from an empty corpus.
    struct Shared {
      explicit Shared(std::size_t bytes) : corpus(bytes) {}
      SharedCorpus corpus;
      const TokenStream* first = nullptr;
    };
    auto shared = std::make_shared<Shared>(corpus_bytes);
    return [make, gate, shared, prime](const TokenStream& stream, std::size_t k, int repeats, const HeapMeter& meter) {
      if (shared->first == nullptr) shared->first = &stream;
      if (shared->first == &stream) {
        if (prime != nullptr) {
          shared->corpus.load(prime->path(), ChecksumCheck::skip);  // verified when opened
        } else {
          shared->corpus.clear();
        }
      }
      const auto one = [&make, &shared, gate](const TokenStream& s, std::size_t n) {
        return make(s, n, &shared->corpus, gate);
      };
      const RecordResult result = replay_record(stream, k, one, repeats, meter);
      shared->corpus.append(stream.output);
      return result;
    };
  };
  DrafterEntry e;
  e.name = std::move(name);
  e.run = single(true);
  e.run_ungated = has_gate ? single(false) : e.run;
  e.has_gate = has_gate;
  e.serve = [make, corpus_bytes, prime](std::span<const TokenStream> streams, const ServeRequest& request) {
    ServeConfig config;
    config.k = request.k;
    config.batch = request.batch;
    config.speculate = request.policy != Policy::plain;
    if (request.policy == Policy::cost) {
      config.learn_cost = request.learn;
      if (request.cost != nullptr) config.plan_cost = *request.cost;
      else if (!request.learn) config.plan_cost = flat_cost();
    }
    config.prices.assign(request.prices.begin(), request.prices.end());
    if (request.price != nullptr) config.price = *request.price;
    // The pool serves every record: a drafter sized by its record (a whole-context window) is
    // sized for the longest.
    static const TokenStream kNone{};
    const TokenStream* longest = &kNone;
    for (const TokenStream& s : streams) {
      if (s.prompt.size() + s.output.size() > longest->prompt.size() + longest->output.size()) longest = &s;
    }
    const bool gate = request.policy == Policy::gate;
    std::optional<SharedCorpus> corpus;
    if (corpus_bytes != 0) corpus.emplace(corpus_bytes);
    if (corpus && prime != nullptr) corpus->load(prime->path(), ChecksumCheck::skip);  // verified when opened
    SharedCorpus* const shared = corpus ? &*corpus : nullptr;
    return serve_records(
        streams, config, [&] { return make(*longest, request.k, static_cast<const SharedCorpus*>(shared), gate); },
        shared);
  };
  return e;
}

}  // namespace ngramspec::replay
