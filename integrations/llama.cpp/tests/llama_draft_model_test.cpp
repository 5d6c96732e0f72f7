// Draft models in llama.cpp on stories260K (from the shared folder beside the project), with
// drafts written by make_draft_gguf.py from its first blocks: llama.cpp's draft-simple behind the
// Drafter concept drafts exactly what llama.cpp's own loop drafts, decoding with a draft model
// emits exactly what plain decoding emits, the model cut to all its blocks drafts only tokens the
// model accepts, and ngramspec-llama refuses draft models it cannot use, naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <ngramspec/batch_speculator.hpp>
#include <ngramspec/model_drafter.hpp>

#include "common.h"
#include "llama.h"
#include "llama_cpp_drafter.hpp"
#include "llama_decoding.hpp"
#include "llama_draft_gguf.hpp"
#include "llama_engine.hpp"
#include "llama_logits_model.hpp"
#include "llama_test_support.hpp"
#include "speculative.h"

namespace {

using namespace ngramspec;
using namespace ngramspec::llama_cpp;
using namespace ngramspec::llama_cpp::testing;

constexpr std::size_t kBlocks = 5;  // stories260K's block count (make_draft_gguf.py --list)

// A folder of this run's files, removed when the tests end.
std::filesystem::path scratch() {
  struct Folder {
    Folder() : path(std::filesystem::temp_directory_path() / ("ngramspec_draft_model_test_" + std::to_string(::getpid()))) {
      std::filesystem::create_directories(path);
    }
    ~Folder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
    std::filesystem::path path;
  };
  static const Folder folder;
  return folder.path;
}

// The draft of stories260K's first `layers` blocks, written once per test run by the tool.
std::string draft_gguf(std::size_t layers) {
  static std::map<std::size_t, std::string> made;
  if (const auto it = made.find(layers); it != made.end()) return it->second;
  const std::string out = (scratch() / ("draft" + std::to_string(layers) + ".gguf")).string();
  const std::string command = std::string("/usr/bin/python3 ") + NGRAMSPEC_DRAFT_TOOL + " --model " + kModel +
                              " --layers " + std::to_string(layers) + " --out " + out + " > /dev/null";
  if (std::system(command.c_str()) != 0) throw std::runtime_error("make_draft_gguf.py failed: " + command);
  return made[layers] = out;
}

Token argmax(std::span<const float> row) {
  return static_cast<Token>(std::max_element(row.begin(), row.end()) - row.begin());
}

// A greedy run and every draft proposed in it, pass by pass.
struct DraftedRun {
  std::vector<Token> output;
  std::vector<std::vector<Token>> drafts;
};

// llama.cpp's examples/speculative-simple loop for one prompt, greedy, with draft-simple at
// n_max on the two contexts: the reference.
DraftedRun llama_cpp_loop(Engine& target, Engine& draft, const std::vector<Token>& prompt, std::size_t n, int n_max) {
  target.clear_sequence(0);
  draft.clear_sequence(0);
  common_params_speculative params;
  params.types = {COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE};
  params.draft.n_max = n_max;
  params.draft.ctx_tgt = target.handle();
  params.draft.ctx_dft = draft.handle();
  common_speculative_ptr spec(common_speculative_init(params, 1));
  llama_batch batch = llama_batch_init(static_cast<std::int32_t>(target.max_pass_tokens()), 0, 1);
  llama_context* tgt = target.handle();
  common_batch_clear(batch);
  for (std::size_t i = 0; i + 1 < prompt.size(); ++i) common_batch_add(batch, prompt[i], static_cast<llama_pos>(i), {0}, false);
  if (batch.n_tokens > 0) {
    EXPECT_EQ(llama_decode(tgt, batch), 0);
    EXPECT_TRUE(common_speculative_process(spec.get(), batch));
  }
  llama_token id_last = prompt.back();
  llama_tokens prompt_tgt(prompt.begin(), prompt.end() - 1);
  auto n_past = static_cast<llama_pos>(prompt.size() - 1);
  common_speculative_begin(spec.get(), 0, prompt_tgt);
  DraftedRun run;
  llama_tokens drafted;
  while (run.output.size() < n) {
    drafted.clear();
    common_speculative_get_draft_params(spec.get(), 0) = {true, n_max, n_past, id_last, &prompt_tgt, &drafted};
    common_speculative_draft(spec.get());
    llama_memory_seq_rm(llama_get_memory(draft.handle()), 0, n_past, -1);
    run.drafts.emplace_back(drafted.begin(), drafted.end());
    common_batch_clear(batch);
    common_batch_add(batch, id_last, n_past++, {0}, true);
    for (std::size_t i = 0; i < drafted.size(); ++i) common_batch_add(batch, drafted[i], n_past + static_cast<llama_pos>(i), {0}, true);
    EXPECT_EQ(llama_decode(tgt, batch), 0);
    EXPECT_TRUE(common_speculative_process(spec.get(), batch));
    std::vector<llama_token> ids;
    for (std::size_t i = 0; i <= drafted.size(); ++i) {
      const llama_token t = static_cast<llama_token>(argmax({llama_get_logits_ith(tgt, static_cast<std::int32_t>(i)), target.vocab_size()}));
      ids.push_back(t);
      if (i == drafted.size() || t != drafted[i]) break;
    }
    common_speculative_accept(spec.get(), 0, static_cast<std::uint16_t>(ids.size() - 1));
    n_past += static_cast<llama_pos>(ids.size() - 1);
    for (const llama_token t : ids) {
      prompt_tgt.push_back(id_last);
      id_last = t;
      run.output.push_back(static_cast<Token>(t));
    }
    llama_memory_seq_rm(llama_get_memory(tgt), 0, n_past, -1);
    llama_memory_seq_rm(llama_get_memory(draft.handle()), 0, n_past, -1);
  }
  llama_batch_free(batch);
  return run;
}

// The same loop with LlamaCppDrafter behind the Drafter concept: update() the prompt and each
// pass's tokens, predict() the drafts.
DraftedRun drafter_loop(Engine& target, LlamaCppDrafter& drafter, const std::vector<Token>& prompt, std::size_t n,
                        int n_max) {
  target.clear_sequence(0);
  drafter.reset();
  drafter.update(prompt);
  target.clear_pass();
  if (prompt.size() > 1) {
    target.add(0, 0, std::span<const Token>(prompt).first(prompt.size() - 1), false);
    target.decode();
  }
  std::size_t n_past = prompt.size() - 1;
  Token last = prompt.back();
  DraftedRun run;
  std::vector<Token> out(static_cast<std::size_t>(n_max));
  std::vector<Token> fed;
  while (run.output.size() < n) {
    const std::size_t made = drafter.predict(out);
    run.drafts.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(made));
    fed.assign(1, last);
    fed.insert(fed.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(made));
    target.clear_pass();
    const std::size_t first = target.add(0, n_past, fed, true);
    target.decode();
    std::vector<Token> ids;
    for (std::size_t i = 0; i <= made; ++i) {
      ids.push_back(argmax(target.logits(first + i)));
      if (i == made || ids.back() != out[i]) break;
    }
    n_past += ids.size();
    target.truncate(0, n_past);
    drafter.update(ids);
    last = ids.back();
    run.output.insert(run.output.end(), ids.begin(), ids.end());
  }
  return run;
}

// draft-simple behind the Drafter concept proposes, pass by pass, exactly the drafts llama.cpp's
// own loop proposes, for drafts of every depth, prompts and draft lengths; and both decode
// stories260K's greedy text.
TEST(DraftSimple, ProposesExactlyWhatLlamaCppsOwnLoopProposes) {
  REQUIRE_MODEL();
  Engine target({kModel, 1, 1, 256, 0, false});
  for (const std::size_t layers : {std::size_t{1}, std::size_t{2}, kBlocks}) {
    Engine draft({draft_gguf(layers), 1, 1, 256, 0, false});
    for (const int n_max : {1, 3, 8}) {
      LlamaCppDrafter drafter(DraftSimpleConfig{n_max}, target.handle(), draft.handle(), 0);
      for (const std::vector<Token>& prompt : tokenized(target, kPrompts)) {
        const DraftedRun reference = llama_cpp_loop(target, draft, prompt, 80, n_max);
        const DraftedRun ours = drafter_loop(target, drafter, prompt, 80, n_max);
        ASSERT_EQ(ours.drafts, reference.drafts) << "layers " << layers << ", n_max " << n_max;
        ASSERT_EQ(ours.output, reference.output) << "layers " << layers << ", n_max " << n_max;
        RunSettings settings;
        settings.max_new_tokens = ours.output.size();
        settings.stop_at_eog = false;
        const std::vector<std::vector<Token>> one = {prompt};
        ASSERT_EQ(decode_plain(target, one, settings).outputs[0], ours.output) << "layers " << layers;
      }
    }
  }
}

// Through BatchSpeculator at several widths: output is plain decoding's, and the model as its own
// draft model (every block kept) has every draft accepted.
TEST(DraftSimple, KeepsPlainOutputAndTheWholeModelIsAlwaysAccepted) {
  REQUIRE_MODEL();
  std::mt19937_64 rng(20261128);
  for (const std::size_t parallel : {std::size_t{1}, std::size_t{3}}) {
    Engine target({kModel, 1, parallel, 256, 0, false});
    for (const std::size_t layers : {std::size_t{2}, kBlocks}) {
      Engine draft({draft_gguf(layers), 1, parallel, 256, 0, false});
      std::vector<std::string> texts;
      for (std::size_t i = 0; i < parallel + 2; ++i) texts.push_back(kPrompts[rng() % kPrompts.size()]);
      const auto prompts = tokenized(target, texts);
      RunSettings settings;
      settings.max_new_tokens = 40 + rng() % 80;
      const int n_max = 1 + static_cast<int>(rng() % 6);
      BatchConfig config;
      config.max_sequences = parallel;
      std::int32_t sequence = 0;
      BatchSpeculator<LlamaCppDrafter> speculator(config, [&] {
        return LlamaCppDrafter(DraftSimpleConfig{n_max}, target.handle(), draft.handle(), sequence++);
      });
      const RunResult plain = decode_plain(target, prompts, settings);
      const RunResult spec = decode_speculative(target, speculator, prompts, settings, static_cast<std::size_t>(n_max));
      ASSERT_EQ(spec.outputs, plain.outputs) << "parallel " << parallel << ", layers " << layers << ", n_max " << n_max;
      EXPECT_GT(spec.drafted, 0u);
      if (layers == kBlocks) {
        EXPECT_EQ(spec.accepted, spec.drafted) << "the model drafts what it will choose";
      }
    }
  }
}

TEST(DraftSimple, RefusesWhatItCannotUseByName) {
  REQUIRE_MODEL();
  Engine target({kModel, 1, 1, 256, 0, false});
  Engine draft({draft_gguf(1), 1, 2, 256, 0, false});
  const auto error = [&](auto make) {
    try {
      make();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no exception)");
  };
  EXPECT_NE(error([&] { LlamaCppDrafter d(DraftSimpleConfig{3}, target.handle(), draft.handle(), 2); })
                .find("sequence 2 is outside the draft context's 2"),
            std::string::npos);
  EXPECT_NE(error([&] { LlamaCppDrafter d(DraftSimpleConfig{0}, target.handle(), draft.handle(), 0); })
                .find("DraftSimpleConfig::n_max = 0"),
            std::string::npos);
  EXPECT_NE(error([&] { LlamaCppDrafter d(DraftSimpleConfig{3}, target.handle(), nullptr, 0); }).find("draft model's is null"),
            std::string::npos);
}

// Many random settings, one invariant: decoding with drafts of a draft model (every depth, widths,
// draft counts, costs, greedy and sampled) emits what plain decoding emits; and greedy drafts of
// the whole model, sent as drafted (no cost), are every one accepted.
TEST(ModelDrafterInLlama, OutputIsPlainDecodingsForRandomSettings) {
  REQUIRE_MODEL();
  std::mt19937_64 rng(20261129);
  std::uint64_t accepted = 0;
  for (const std::size_t parallel : {std::size_t{1}, std::size_t{3}}) {
    Engine target({kModel, 1, parallel, 256, 0, false});
    for (const std::size_t layers : {std::size_t{1}, std::size_t{2}, kBlocks}) {
      Engine draft({draft_gguf(layers), 1, parallel, 256, 0, false});
      draft.require_vocabulary_of(target);
      for (int trial = 0; trial < 2; ++trial) {
        std::vector<std::string> texts;
        for (std::size_t i = 0; i < parallel + 1; ++i) texts.push_back(kPrompts[rng() % kPrompts.size()]);
        const auto prompts = tokenized(target, texts);
        RunSettings settings;
        settings.max_new_tokens = 30 + rng() % 60;
        settings.stop_at_eog = rng() % 2 == 0;
        const bool sampled = trial == 1;
        if (sampled) {
          settings.sampling.temperature = rng() % 2 ? 1.0f : 0.7f;
          settings.sampling.top_p = rng() % 2 ? 1.0f : 0.9f;
          settings.sampling.seed = rng() % 1000;
        }
        const std::size_t k = 1 + rng() % 6;
        BatchConfig batch;
        batch.max_sequences = parallel;
        batch.max_pass_tokens = target.max_pass_tokens();
        const bool costed = rng() % 2 == 0;
        if (costed) batch.cost = VerifyCost::parse("table:1=1,2=1.2,3=1.5,5=2,9=3");
        ModelDraftConfig config;
        config.max_drafts = k;
        config.sampling = settings.sampling;
        DraftModelSpeculator drafting(draft, batch, config);
        const RunResult plain = decode_plain(target, prompts, settings);
        const RunResult spec = decode_speculative(target, *drafting.speculator, prompts, settings, k);
        ASSERT_EQ(spec.outputs, plain.outputs) << "parallel " << parallel << ", layers " << layers << ", k " << k
                                               << (sampled ? ", sampled" : ", greedy") << (costed ? ", cost" : "");
        accepted += spec.accepted;
        if (layers == kBlocks && !sampled && !costed) {
          EXPECT_GT(spec.drafted, 0u);
          EXPECT_EQ(spec.accepted, spec.drafted) << "the whole model drafts what it will choose";
        }
      }
    }
  }
  EXPECT_GT(accepted, 100u) << "drafts must really be accepted for the identity to mean something";
}

// A copy of a draft whose vocabulary differs from the model's in one token's text.
std::string foreign_vocabulary_gguf() {
  const std::string out = (scratch() / "foreign_vocabulary.gguf").string();
  std::ifstream in(draft_gguf(1), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t at = bytes.find("Lily");
  if (at == std::string::npos) throw std::runtime_error("no token 'Lily' in the draft to change");
  bytes[at + 3] = 'x';  // "Lilx": the same length, so the file stays well formed
  std::ofstream(out, std::ios::binary) << bytes;
  return out;
}

TEST(DraftModelProgram, CompareRunsDraftSimpleBesideTheOthersWithOutputIdentical) {
  REQUIRE_MODEL();
  int status = 0;
  const std::string out = run_program("--model " + kModel + " --prompts " + NGRAMSPEC_PROMPTS_FILE +
                                          " --n 48 --threads 1 --compare --repeats 1 --llama-drafter ngram-simple:n=2,m=4"
                                          " --draft-model " + draft_gguf(kBlocks) + " --llama-draft-max 4",
                                      status);
  EXPECT_EQ(status, 0) << out;
  const std::size_t row = out.find("| llama.cpp:draft-simple(n_max=4) draft5.gguf |");
  ASSERT_NE(row, std::string::npos) << out;
  const std::string line = out.substr(row, out.find('\n', row) - row);
  EXPECT_NE(line.find("| yes |"), std::string::npos) << line;
}

TEST(DraftModelProgram, CheckWithADraftModelIsIdenticalAndItsDraftsAccepted) {
  REQUIRE_MODEL();
  for (const std::string sampling : {"", " --temperature 1 --seed 3"}) {
    int status = 0;
    const std::string out = run_program("--model " + kModel + " --prompts " + NGRAMSPEC_PROMPTS_FILE +
                                            " --n 48 --threads 1 --check --repeats 1 --cost none --draft-model " +
                                            draft_gguf(kBlocks) + sampling + " --json",
                                        status);
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("\"identical\": true"), std::string::npos) << out;
    const std::size_t run = out.find("{\"drafter\": \"ngramspec draft-model draft5.gguf\"");
    ASSERT_NE(run, std::string::npos) << out;
    const std::size_t accepted = out.find("\"accepted\": ", run);
    ASSERT_NE(accepted, std::string::npos) << out;
    EXPECT_GT(std::stoul(out.substr(accepted + 12)), 100u) << out.substr(run, 300);
  }
}

// --best-of: each pass the text's drafts, the draft model's, or the text's continued by the draft model;
// the output is plain decoding's, greedy and sampled, and the draft model's drafts are accepted where it wins.
TEST(DraftModelProgram, CheckWithTheBestOfTextAndDraftModelIsIdentical) {
  REQUIRE_MODEL();
  for (const std::string sampling : {"", " --temperature 1 --seed 5"}) {
    int status = 0;
    const std::string out = run_program("--model " + kModel + " --prompts " + NGRAMSPEC_PROMPTS_FILE +
                                            " --n 48 --threads 1 --check --repeats 1 --cost none --best-of"
                                            " --draft-cost 0 --draft-model " + draft_gguf(kBlocks) + sampling + " --json",
                                        status);
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("\"identical\": true"), std::string::npos) << out;
    const std::size_t run = out.find("{\"drafter\": \"ngramspec best-of draft5.gguf\"");
    ASSERT_NE(run, std::string::npos) << out;
    const std::size_t accepted = out.find("\"accepted\": ", run);
    ASSERT_NE(accepted, std::string::npos) << out;
    // The whole model as its own draft model: drafting it wins nearly every pass.
    EXPECT_GT(std::stoul(out.substr(accepted + 12)), 100u) << out.substr(run, 300);
  }
}

// --sampling-mode rejection: each draft accepted with probability min(1, p/q) for the q it was drawn
// from. With the whole model as its own draft model q is p on its support, so far more drafts are
// accepted than in the exact mode, where a drawn draft must equal the seed's own draw; the runs are
// not compared with plain decoding's text (identical: null), and the program succeeds.
TEST(DraftModelProgram, TheRejectionModeAcceptsTheWholeModelsDraftsMoreOften) {
  REQUIRE_MODEL();
  const auto rate = [](const std::string& mode, int& status) {
    const std::string out = run_program("--model " + kModel + " --prompts " + NGRAMSPEC_PROMPTS_FILE +
                                            " --n 48 --threads 1 --check --repeats 1 --cost none --temperature 1"
                                            " --seed 3 --sampling-mode " + mode + " --draft-model " +
                                            draft_gguf(kBlocks) + " --json",
                                        status);
    const std::size_t run = out.find("{\"drafter\": \"ngramspec draft-model draft5.gguf\"");
    EXPECT_NE(run, std::string::npos) << out;
    if (run == std::string::npos) return std::pair<double, std::string>{0.0, out};
    const auto field = [&](const std::string& name) {
      const std::size_t at = out.find("\"" + name + "\": ", run);
      return at == std::string::npos ? 0.0 : std::stod(out.substr(at + name.size() + 4));
    };
    const std::size_t identical = out.find("\"identical\": ", run);
    return std::pair<double, std::string>{field("accepted") / std::max(1.0, field("drafted")),
                                          out.substr(identical + 13, 4)};
  };
  int status = 0;
  const auto [exact, exact_identical] = rate("exact", status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(exact_identical, "true");
  const auto [rejection, rejection_identical] = rate("rejection", status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(rejection_identical, "null");
  EXPECT_GT(rejection, 0.7);
  EXPECT_GT(rejection, exact + 0.2) << "exact " << exact << ", rejection " << rejection;
}

// write_first_blocks (--draft-layers) writes, for every depth, a draft that llama.cpp loads with
// that many blocks and that decodes as make_draft_gguf.py's file of the same depth does; what it
// cannot do it refuses by name, leaving no file.
TEST(DraftGguf, FirstBlocksDecodeAsTheToolsFileDoes) {
  REQUIRE_MODEL();
  Engine target({kModel, 1, 1, 256, 0, false});
  const auto prompts = tokenized(target, {kPrompts[0], kPrompts[1], kPrompts[4]});
  RunSettings settings;
  settings.max_new_tokens = 32;
  settings.stop_at_eog = false;
  for (std::size_t layers = 1; layers <= kBlocks; ++layers) {
    const std::string out = (scratch() / ("cut" + std::to_string(layers) + ".gguf")).string();
    EXPECT_EQ(write_first_blocks(kModel, layers, out), kBlocks);
    Engine ours({out, 1, 1, 256, 0, false});
    Engine tools({draft_gguf(layers), 1, 1, 256, 0, false});
    EXPECT_EQ(ours.layers(), layers);
    ours.require_vocabulary_of(target);
    EXPECT_EQ(decode_plain(ours, prompts, settings).outputs, decode_plain(tools, prompts, settings).outputs)
        << "layers " << layers;
  }
  const auto error = [](const std::string& source, std::size_t layers, const std::string& out) {
    try {
      write_first_blocks(source, layers, out);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no exception)");
  };
  const std::string out = (scratch() / "refused.gguf").string();
  EXPECT_NE(error(kModel, 0, out).find("a draft of 0 blocks is out of range: '" + kModel + "' has 5"), std::string::npos);
  EXPECT_NE(error(kModel, kBlocks + 1, out).find("a draft of 6 blocks is out of range"), std::string::npos);
  EXPECT_NE(error(NGRAMSPEC_DRAFT_TOOL, 1, out).find(std::string("cannot read '") + NGRAMSPEC_DRAFT_TOOL + "' as a GGUF file"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(out));
  const std::string unwritable = (scratch() / "no-such-folder" / "draft.gguf").string();
  EXPECT_NE(error(kModel, 1, unwritable).find("cannot write the draft of '" + kModel + "' to '" + unwritable + "'"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(unwritable));
}

// Every "drafted" and "accepted" figure of a --json run, in order.
std::vector<unsigned long> draft_counts(const std::string& json) {
  std::vector<unsigned long> counts;
  for (const std::string key : {"\"drafted\": ", "\"accepted\": "}) {
    for (std::size_t at = json.find(key); at != std::string::npos; at = json.find(key, at + 1)) {
      counts.push_back(std::stoul(json.substr(at + key.size())));
    }
  }
  return counts;
}

// --draft-layers cuts the model in the program and drafts exactly as the tool's files do.
TEST(DraftModelProgram, DraftLayersDraftAsTheToolsFilesDo) {
  REQUIRE_MODEL();
  const std::string base = "--model " + kModel + " --prompts " + NGRAMSPEC_PROMPTS_FILE +
                           " --n 40 --threads 1 --compare --repeats 1 --cost none --llama-drafter ngram-simple:n=2,m=4 --json ";
  int status = 0;
  const std::string cut = run_program(base + "--draft-layers 1,2", status);
  EXPECT_EQ(status, 0) << cut;
  const std::string files = run_program(base + "--draft-model " + draft_gguf(1) + " --draft-model " + draft_gguf(2), status);
  EXPECT_EQ(status, 0) << files;
  EXPECT_NE(cut.find("\"ngramspec draft-model stories260K.gguf 2 of 5 blocks\""), std::string::npos) << cut;
  EXPECT_NE(cut.find("\"llama.cpp:draft-simple(n_max=3) stories260K.gguf 1 of 5 blocks\""), std::string::npos) << cut;
  const std::vector<unsigned long> counts = draft_counts(cut);
  EXPECT_EQ(counts.size(), 14u) << cut;  // 7 runs: plain, ngramspec, 2 draft models twice, one n-gram setting
  EXPECT_EQ(counts, draft_counts(files));
}

TEST(DraftModelProgram, RefusesDraftModelsItCannotUseNamingThem) {
  REQUIRE_MODEL();
  int status = 0;
  const std::string base = "--model " + kModel + " --prompt 'Once upon a time' --n 8 --threads 1 --compare --repeats 1 ";
  std::string out = run_program(base + "--draft-model /nonexistent/draft.gguf", status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("--draft-model '/nonexistent/draft.gguf': model file '/nonexistent/draft.gguf' does not exist"),
            std::string::npos)
      << out;
  const std::string junk = (scratch() / "junk.gguf").string();
  std::ofstream(junk) << "GGUF but not really a model file";
  out = run_program(base + "--draft-model " + junk, status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("--draft-model '" + junk + "': llama.cpp could not load"), std::string::npos) << out;
  const std::string foreign = foreign_vocabulary_gguf();
  out = run_program(base + "--draft-model " + foreign, status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("the draft model '" + foreign + "' does not share the vocabulary of '" + kModel + "'"), std::string::npos)
      << out;
  EXPECT_NE(out.find("Lilx' there, '"), std::string::npos) << out;
  EXPECT_NE(out.find("Lily' in the model"), std::string::npos) << out;

  // Mistakes on the command line, before anything is loaded (exit 2).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--prompt hi --no-speculate --draft-model d.gguf", "--draft-model does nothing with --no-speculate"},
      {"--prompt hi --draft-model a.gguf --draft-model b.gguf",
       "--draft-model 'b.gguf': more than one draft model goes with --compare only"},
      {"--prompt hi --compare --draft-model a.gguf --draft-model a.gguf", "--draft-model: 'a.gguf' is given twice"},
      {"--prompt hi --compare --llama-draft-max 4", "--llama-draft-max goes with --compare and --draft-model"},
      {"--prompt hi --compare --draft-model a.gguf --llama-draft-max 0", "--llama-draft-max 0: is out of range: 1 to 1024"},
      {"--prompt hi --draft-model a.gguf --corpus 4", "--corpus drafts from text, and --draft-model drafts with the model instead"},
      {"--prompt hi --draft-layers 1,2", "--draft-layers 1,2: more than one draft model goes with --compare only"},
      {"--prompt hi --compare --draft-layers 2,1,2", "--draft-layers: '2' is given twice"},
      {"--prompt hi --compare --draft-layers 0", "--draft-layers 0: is out of range: 1 to 1024"},
      {"--prompt hi --compare --draft-layers 1 --draft-model a.gguf --draft-model b.gguf",
       "--draft-layers cuts one model: give at most one --draft-model"},
      {"--prompt hi --no-speculate --draft-layers 1", "--draft-layers does nothing with --no-speculate"},
      {"--prompt hi --best-of", "--best-of chooses between the text and a draft model: it needs --draft-model or "
                                "--draft-layers"},
      {"--prompt hi --draft-layers 1 --draft-cost 0.5",
       "--draft-cost prices the draft model's tokens for --best-of: it needs --best-of"},
      {"--prompt hi --draft-layers 1 --best-of --draft-cost -1",
       "--draft-cost -1: is negative; a drafted token costs 0 or more passes"},
      {"--prompt hi --draft-layers 1 --best-of --draft-cost inf", "--draft-cost inf: is not a finite number"},
      {"--prompt hi --sampling-mode rejection", "--sampling-mode applies to sampling only: it needs --temperature above 0"},
      {"--prompt hi --temperature 1 --no-speculate --sampling-mode rejection",
       "--sampling-mode does nothing with --no-speculate, which drafts nothing"},
      {"--prompt hi --temperature 1 --sampling-mode bogus",
       "--sampling-mode 'bogus' is invalid: give exact or rejection"},
  };
  for (const auto& [args, message] : cases) {
    out = run_program("--model /nonexistent/model.gguf " + args, status);
    EXPECT_EQ(status, 2) << args << ": " << out;
    EXPECT_NE(out.find("ngramspec-llama: " + message), std::string::npos) << args << ": " << out;
  }
}

}  // namespace
