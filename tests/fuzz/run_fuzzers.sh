#!/usr/bin/env bash
# Builds the `fuzz` preset (clang, libFuzzer, ASan and UBSan) and runs every fuzzer for a time
# budget, starting from its committed corpus (tests/fuzz/corpus/<target>/; inputs found on the
# way go to a scratch folder, not into the repository). Prints the executions per target and
# exits nonzero when any fuzzer crashed, leaked or broke an invariant; a crashing input is
# kept under <build dir>/fuzz-artifacts/ and replays with `<target> <file>` in any build.
#
# Usage: tests/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET]   (default 60)
# Environment: NGRAMSPEC_FUZZ_BUILD_DIR (default build/fuzz), NGRAMSPEC_FUZZ_TARGETS (a
# space-separated subset), and the usual ASAN_OPTIONS / UBSAN_OPTIONS.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

budget="${1:-60}"
if ! [[ "$budget" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS_PER_TARGET]  (a whole number of seconds, default 60)" >&2
  exit 2
fi
build_dir="${NGRAMSPEC_FUZZ_BUILD_DIR:-build/fuzz}"
read -r -a targets <<<"${NGRAMSPEC_FUZZ_TARGETS:-ngram_predictor_fuzz match_drafter_fuzz shared_corpus_fuzz corpus_file_fuzz decode_fuzz tree_decode_fuzz streams_fuzz llama2_loader_fuzz cli_options_fuzz c_api_fuzz}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:print_stacktrace=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

cmake --preset fuzz -B "$build_dir"
fuzzers=()
for target in "${targets[@]}"; do fuzzers+=("${target}_fuzzer"); done
cmake --build "$build_dir" --target "${fuzzers[@]}"

artifacts="$build_dir/fuzz-artifacts"
mkdir -p "$artifacts"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

status=0
summary=()
for target in "${targets[@]}"; do
  corpus="tests/fuzz/corpus/$target"
  mkdir -p "$scratch/$target"
  log="$artifacts/$target.log"
  echo "== $target: ${budget} s from $corpus"
  rc=0
  # A target's dictionary (tests/fuzz/<target>.dict, libFuzzer's format) seeds its mutations.
  dict=()
  if [[ -f "tests/fuzz/$target.dict" ]]; then dict=(-dict="tests/fuzz/$target.dict"); fi
  "$build_dir/tests/fuzz/${target}_fuzzer" -max_total_time="$budget" -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$artifacts/$target-" "$scratch/$target" "$corpus" >"$log" 2>&1 || rc=$?
  executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  coverage="$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1 || true)"
  if ((rc != 0)); then
    status=1
    grep -E 'ERROR|fuzz invariant broken|runtime error|Test unit written' "$log" >&2 || tail -n 30 "$log" >&2
    summary+=("$(printf '%-22s %12s  %-22s FAILED (exit %d; log %s)' \
      "$target" "${executions:-?}" "$coverage" "$rc" "$log")")
  else
    summary+=("$(printf '%-22s %12s  %-22s ok' "$target" "${executions:-?}" "$coverage")")
  fi
done

echo
printf '%-22s %12s  %-22s %s\n' target executions coverage result
printf '%s\n' "${summary[@]}"
exit "$status"
