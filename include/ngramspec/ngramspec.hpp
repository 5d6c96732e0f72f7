#pragma once

/// Umbrella header: everything an engine needs to speculate with n-gram drafts.

#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_stats.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/version.hpp"
