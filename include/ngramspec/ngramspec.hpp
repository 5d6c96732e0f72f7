#pragma once

/// Umbrella header: everything an engine needs to speculate with n-gram drafts.

#include "ngramspec/batch_speculator.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_stats.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/logits_model.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/position_random.hpp"
#include "ngramspec/sampling.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"
#include "ngramspec/verify_cost.hpp"
#include "ngramspec/version.hpp"
