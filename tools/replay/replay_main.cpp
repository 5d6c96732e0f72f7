// ngramspec-replay: mean accepted length, simulated serving speedup and drafter cost of
// drafters replayed through SpeculativeDecoder and BatchSpeculator on recorded greedy
// generations and on synthetic streams.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "drafter_registry.hpp"
#include "heap_tracking.hpp"
#include "ngramspec/draft_tree.hpp"
#include "replay_options.hpp"
#include "replay_report.hpp"
#include "replay_runner.hpp"
#include "token_streams.hpp"

namespace {

using namespace ngramspec;
using namespace ngramspec::replay;

static_assert(kMaxSyntheticTokens == 16777216, "the usage below states the limit on synthetic tokens");
static_assert(DraftTree::kMaxNodes == 1024, "the usage below states the limit on --tree-nodes");

constexpr const char* kUsage = R"(usage: ngramspec-replay [options]
Replays recorded or synthetic token streams with each drafter as an inference server decodes
them, and reports, per drafter, cost, batch, k, policy and category, the tokens each target
pass yields (AL) and what the passes cost against plain decoding (speedup).

Records are decoded greedily from their recordings: a ReplayModel answers each forward pass
with the recorded tokens (exactly what the model answered, greedy decoding being a function of
the prefix), and every record's output is checked to equal its recording token for token
(exit 1 otherwise).

Serving: --batch N decodes N records at once through one BatchSpeculator, in file order: when
a record finishes, the next one is admitted, as a server admits requests. An admitted record
first gets its prefill (its prompt forwarded; its first output token comes from it) as a step
of its own. Then each decode pass is one propose() over every running record, each record's
model forwarded with its last token and its drafts, one accept(), rollbacks, finish() of the
finished records (which adds them to the corpus of a match:corpus= drafter), and admission of
new records. Batch 1 replays each record exactly as SpeculativeDecoder does (checked). A
record's drafts, and so its AL, do not depend on what runs beside it, except with a corpus
(records running together do not see each other's outputs) and under the cost policy (the
pass's lengths are chosen together).

Policies (--policy), each run at every --k, --batch and --cost:
  plain   no drafts (DecodeOptions::speculate = false): one token per record per pass
  fixed   up to k drafts a pass, the drafter's gate off (match: min_confidence 0; the other
          drafters have no gate and draft as they do)
  gate    up to k drafts a pass, the drafter as configured (match: its gate, 0.03 unless
          gate=P says otherwise)
  cost    gate off, k the cap: each record's draft length, 0 to k, chosen by BatchSpeculator
          so that the pass's expected emitted tokens per unit of cost is highest (BatchConfig::
          cost = the --cost curve; with no --cost, the flat cost, under which every draft with
          any chance is sent). match and ngram estimate each draft's chance; for the others
          BatchSpeculator estimates it from how the record's own drafts have fared.

Cost (--cost): what one verify pass costs as a function of the tokens in it, the whole batch's:
every decoding record's last token and its drafts. Only ratios matter.
  flat            every pass costs 1 whatever it carries (the default)
  knee:N          flat up to N tokens, then proportional to the tokens (a pass of 2N costs 2)
  table:T=C,...   measured points, TOKENS=COST with tokens increasing and costs not decreasing;
                  linear between points, flat before the first, and beyond the last with the
                  slope of the last two. E.g. table:1=1,2=1.25,3=1.71,5=2.77,9=5.06
simulated cost = the sum over decode passes of cost(tokens in the pass). Prefill passes are
left out: every policy runs the same ones. speedup = the simulated cost of plain decoding of the
same records at the same batch and cost divided by the row's: plain is exactly 1, above 1 the
policy spends less. Overall, the batch's passes include those of its tail, when the last
records drain and the batch is no longer full (with few records and a large batch, most of
them). A category's row is priced by what its records are charged: for every decode pass a
record takes part in, cost(B) / B, B the batch (or the records, if fewer), what a pass without
drafts costs per record while the batch is full; plus, of what the pass's drafts add, cost(T) -
cost(S) for a pass of S records and T tokens, the part in proportion to the drafts it sent.
A record's charge thus depends on its own passes and drafts, not on which records happen to
run beside it; the excess cost of passes while the batch is not full goes to no category, so
the categories' costs need not add up to the overall one (at batch 1 they do).

Columns (named as in the README's and docs/BENCHMARKS.md's tables; the table leaves out a
batch, policy, cost or category column whose value is the same on every row, and says it on a
line above):
  drafter, k                 the drafter and its most drafts per pass (- in the table, 0 in
                             JSON: plain)
  batch, policy, cost, category   the configuration and the records ("overall": all of them)
  samples                    records
  tokens per pass            mean accepted length (AL): generated tokens / target passes, a
                             record's passes being those it took part in after its prompt, its
                             prefill counting as one (plain decoding = 1.000)
  acceptance rate            accepted / drafted drafts
  rejected drafts per pass   rejected drafts per record per decode pass
  speedup                    see Cost above
  drafter ns per token       drafter ns per generated token (all its updates, the prompt's
                             included, and predicts), timed on the single-sequence replay of
                             each record (gate off for fixed and cost), whatever the batch; 0
                             for plain, which runs no drafter
  peak drafter KiB           peak drafter heap on the same replays
JSON rows add passes (summed over the records: a batch of N records running together counts N
per decode pass), decode_passes (passes - samples), generated, drafted, accepted and
simulated_cost (see Cost above); a number that is not finite would be null, named in the row's
not_finite list (a --cost whose sums could overflow is refused before the replay).

inputs (at least one):
  --streams FILE       records: id TAB category TAB prompt ids TAB output ids (repeatable)
  --synthetic SPEC     periodic:P[:noise] | random | mixture:P   (repeatable)
  --length N           output tokens per synthetic stream (default 2048)
  --samples N          streams per synthetic spec (default 4); specs x samples x length is at
                       most 16777216 tokens
  --seed N             seed of the synthetic streams (default 1)
  --limit N            replay only the first N records of each --streams file
  --records START:END  replay only records START to END (exclusive) of each --streams file, after
                       --limit; each a record index or a percentage, either may be empty:
                       --records 50%%: is the second half
  --corpus-file FILE   a corpus file (ngramspec-corpus build) that match:file=1 drafts from and
                       match:corpus=MIB,prime=1 loads into its live corpus. Without --drafter,
                       the default drafter reads it (match:file=1); with --drafter, at least one
                       drafter must read it (else the replay is refused: the file would be unused).
                       Its checksums are verified when it is opened (every byte read once): a
                       file damaged since it was written is refused, naming the section
drafters:
  --drafter NAME       repeatable; default match (MatchDrafter, the decoder's default), or
                       match:file=1 with --corpus-file. Drafters:
)" "%s" R"(
  --max-drafts LIST    most drafts per pass, each 1 to 1024, comma-separated (default 4); --k LIST
                       is its old name, still read
  --tree-nodes LIST    also replay draft trees: node budgets per pass, each 1 to 1024, comma-
                       separated. For every match drafter (the other drafters draft no trees; at
                       least one must be a match drafter), a TreeDrafter with TreeConfig's
                       defaults whose spine is that drafter's chain (its gate, corpus and corpus
                       file), recycling no top-k (recordings hold none). A pass sends a tree of up
                       to the budget, no deeper than the tokens left, and keeps its longest root
                       path that follows the recording. Policies as for chains: fixed and gate
                       send whole trees (the spine ungated, and as configured), cost the prefixes
                       DraftPlanner picks over the batch's path probabilities; plain stays the
                       chain rows'. Rows (a table of their own; "trees" in JSON): tokens per pass
                       as above, nodes per pass, wasted nodes per pass (off the accepted path)
                       and speedup against the same plain decoding; no drafter time. Not with
                       --expect-al
  --window W           default window of ngram drafters (default 512)
  --min-order N        default shortest n-gram of ngram drafters (default 2)
  --max-order N        default longest n-gram of ngram drafters (default 4)
serving:
  --batch LIST         records decoded at once, each 1 to 65536, comma-separated (default 1)
  --price SPEC         what passes really cost, hidden from the planner (which sees --cost):
                       a --cost curve, then optional ,shape=R (a pass whose token count differs
                       from the previous pass's costs R one-token passes more), ,noise=S (each
                       price times a seeded log-normal factor of sigma S), ,seed=K (the
                       noise's seed, default 1) and, last, ,drift=N:SPEC2 (from decode pass
                       N the price is SPEC2, with the first part's seed). Every row,
                       plain decoding's included, is priced by it (JSON field "price")
  --policy LIST        comma-separated from plain, fixed, gate, cost, reported in that order
                       (default: gate without --cost; plain,fixed,gate,cost with --cost)
  --cost SPEC          flat, knee:N or table:T=C,...: the cost every decode pass is priced under
                       and the cost policy plans against; learn or learn:SPEC: the cost policy
                       learns the cost from the passes (LearnedCost, from SPEC as prior; needs
                       --price); repeatable, each its own rows
                       (default flat). Plain decoding is simulated at every batch and cost
                       whether or not it is a --policy, for the speedups.
output:
  --json               one JSON object instead of the table, with every row: each category's
                       and, with more than one category, overall
  --categories         the table prints every category's row; by default only the overall
                       row of each drafter, cost, batch, k and policy (the category's row
                       when there is only one)
  --timing-repeats N   best of N timed runs of each drafter's calls (default 3)
checks:
  --expect-al X        exit 3 unless the overall mean accepted length of every drafter, k, batch
                       and policy but plain is within --tolerance of X (a regression check for
                       one configuration)
  --tolerance T        the margin of --expect-al (default 0.005); only with --expect-al

--streams, --synthetic, --drafter and --cost are repeatable, each value once; every other
option is given at most once, and a LIST names each item once.
)";

int run(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  ReplayOptions options = parse_replay_options(args);
  if (!options.help && !options.corpus_file.empty()) {
    auto file = std::make_shared<const MappedCorpus>(options.corpus_file);
    file->verify_checksums();  // a damaged body is refused here, naming the section, not replayed
    options.defaults.corpus_file = std::move(file);
  }
  if (options.help) {
    std::printf(kUsage, drafter_names_help().c_str());
    return 0;
  }
  // The drafters first: a bad spec is refused before any streams file is read.
  std::vector<DrafterEntry> drafters;
  for (const std::string& name : options.drafter_names) drafters.push_back(make_drafter(name, options.defaults));
  // A corpus file named is a file used: with no drafter that reads it, it would be ignored.
  if (!options.corpus_file.empty() &&
      std::none_of(drafters.begin(), drafters.end(), [](const DrafterEntry& d) { return d.reads_corpus_file; })) {
    throw std::invalid_argument("--corpus-file '" + options.corpus_file +
                                "': no --drafter reads it: add file=1 to a match drafter (match:file=1 drafts from "
                                "it) or prime=1 beside corpus=MIB (match:corpus=64,prime=1 loads it into the live "
                                "corpus), or leave --drafter out (the default, match:file=1, reads it)");
  }

  const std::vector<TokenStream> streams = load_streams(options);
  std::vector<std::string> categories;
  for (const TokenStream& s : streams) {
    if (std::find(categories.begin(), categories.end(), s.category) == categories.end()) {
      categories.push_back(s.category);
    }
  }

  const HeapMeter meter{live_heap_bytes, peak_heap_bytes, reset_peak_heap_bytes};
  const std::vector<Row> rows = measure_rows(drafters, streams, options, meter);
  const std::string report = options.json ? format_json(rows) : format_table(rows, options.categories);
  std::fputs(report.c_str(), stdout);
  if (options.expect_al >= 0) {
    for (const Row& row : rows) {
      if (row.policy == Policy::plain || (row.category != "overall" && categories.size() > 1)) continue;
      const double al = row.totals.mean_accepted_length();
      if (al < options.expect_al - options.tolerance || al > options.expect_al + options.tolerance) {
        std::string where = row.drafter + " at k = " + std::to_string(row.k);
        if (options.batches.size() > 1 || row.batch != 1) where += ", batch " + std::to_string(row.batch);
        if (options.policies.size() > 1 || row.policy != Policy::gate) where += ", policy " + std::string(to_string(row.policy));
        if (options.costs.size() > 1) where += ", cost " + row.cost;
        std::fprintf(stderr, "ngramspec-replay: %s: mean accepted length %.4f, expected %.4f +- %.4f\n",
                     where.c_str(), al, options.expect_al, options.tolerance);
        return 3;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ngramspec-replay: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ngramspec-replay: error: out of memory (the records, the drafters and their corpora do not "
                         "fit; try fewer or smaller)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ngramspec-replay: error: %s\n", e.what());
    return 1;
  }
}
