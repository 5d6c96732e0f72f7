#!/usr/bin/env bash
# gpu/run_gpu_check.sh in its --cpu mode with this build's ngramspec-llama: every step runs and
# its figures are written; a step beyond the budget is skipped and said so; an archive of another
# commit or other patches is refused by name before anything is built; and a llama.cpp tree
# without tools/ (the archive's) is refused by name unless NGRAMSPEC_LLAMA_CPP_PROGRAMS=OFF. When
# LLAMA_CPP_SOURCE is fetch_llama_cpp.sh's checkout, make_source_archive.sh packs it: the pinned
# commit and patch stamp recorded, gguf-py in, .git, docs/, tools/ and examples/ out, under 64 MiB.
#
#   run_gpu_check_test.sh PROGRAM MODELS_DIR LLAMA_CPP_SOURCE WORK_DIR
#
# Exit 77 (skipped) when MODELS_DIR has no stories260K.gguf or /usr/bin/python3 lacks NumPy or PyYAML.
set -uo pipefail

program="$1" models="$2" llama_source="$3" work="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script="$here/../gpu/run_gpu_check.sh"
export PYTHON=/usr/bin/python3
if [[ ! -f "$models/stories260K.gguf" ]]; then
  echo "skipped: $models/stories260K.gguf not found (the shared folder is not beside the project)"; exit 77
fi
if ! "$PYTHON" -c 'import numpy, yaml' 2>/dev/null; then
  echo "skipped: $PYTHON cannot import NumPy and PyYAML (make_random_gguf.py needs them)"; exit 77
fi
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
mkdir -p "$work"

# 1. Every step, at --cpu's sizes: each row says ran, and each run's figures are there.
out="$work/out"
rm -rf "$out"
"$script" --cpu --program "$program" --llama-cpp-source "$llama_source" --models "$models" --out "$out" \
  --work "$work/check"
rc=$?
((rc == 0)) || fail "run_gpu_check.sh --cpu exited $rc"
figures="$out/gpu_figures.md"
for s in stories260k_p1 stories260k_p4 refrains_p1 curve_llama-134m; do
  grep -Eq "^\| $s \| [0-9]+ \| [0-9.]+ \| ran \|$" "$figures" || fail "no row '$s ... ran' in $figures"
done
grep -Eq '^\| models (\(beside the build\) \| [0-9]+ \| [0-9.]+ \| ran|\| - \| - \| skipped: made by an earlier run)' "$figures" ||
  fail "no row saying the models were made in $figures"
for title in "stories20.txt (4 prompts x 32), --parallel 1" "stories20.txt (4 prompts x 32), --parallel 4" \
             "refrains20.txt (4 prompts x 32), --parallel 1" "Cost curve, random llama-134m"; do
  grep -Fq "## stories260K, $title" "$figures" || grep -Fq "## $title" "$figures" || fail "no section '$title' in $figures"
done
grep -Eq '^\| ngramspec \| [0-9]+ \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| yes \|$' "$figures" ||
  fail "no ngramspec row with identical output in $figures"
"$PYTHON" - "$out/gpu_runs.json" <<'EOF' || fail "gpu_runs.json does not hold the three comparisons, all identical"
import json, sys
runs = json.load(open(sys.argv[1]))
assert sorted(runs) == ["refrains_p1", "stories260k_p1", "stories260k_p4"], sorted(runs)
for name, r in runs.items():
    assert r["identical"] is True, name
    assert [c["drafter"] for c in r["runs"]][:2] == ["plain", "ngramspec"], name
    assert all(c["generated"] > 0 for c in r["runs"]), name
EOF
grep -q "=== stories260k_p1" "$out/gpu_log.txt" || fail "gpu_log.txt has no stories260k_p1 output"

# 2. A budget that is spent: the steps are skipped, each said so, and the exit status is 1.
out="$work/out-budget"
rm -rf "$out"
"$script" --cpu --program "$program" --llama-cpp-source "$llama_source" --models "$models" --out "$out" \
  --work "$work/check" --budget 1 > /dev/null 2>&1
rc=$?
((rc == 1)) || fail "--budget 1 exited $rc, not 1"
for s in stories260k_p1 stories260k_p4 refrains_p1; do
  grep -Eq "^\| $s \| [0-9]+ \| - \| skipped: the budget of 1 s was spent \|$" "$out/gpu_figures.md" ||
    fail "no row '$s ... skipped: the budget of 1 s was spent' in $out/gpu_figures.md"
done

# 3. Archives of another commit, or of other patches, are refused by name at the unpack step.
read -r commit patch_hash < <(bash "$here/../fetch_llama_cpp.sh" --pinned)
top="llama.cpp-${commit:0:12}"
fake="$work/fake"
for case in commit patches; do
  rm -rf "$fake" && mkdir -p "$fake/$top"
  if [[ "$case" == commit ]]; then
    printf 'commit %s\npatches %s\n' 0123456789abcdef0123456789abcdef01234567 "$patch_hash" > "$fake/$top/.ngramspec-source"
    echo "$patch_hash" > "$fake/$top/.ngramspec-patches"
    expect="holds llama.cpp commit '0123456789abcdef0123456789abcdef01234567'; the pinned commit is $commit"
  else
    printf 'commit %s\npatches %s\n' "$commit" 000000000000 > "$fake/$top/.ngramspec-source"
    echo 000000000000 > "$fake/$top/.ngramspec-patches"
    expect="holds patches '000000000000'; fetch_llama_cpp.sh applies '$patch_hash'"
  fi
  tar -C "$fake" -czf "$fake.tar.gz" "$top"
  out="$work/out-$case"
  rm -rf "$out"
  "$script" --cpu --archive "$fake.tar.gz" --models "$models" --out "$out" --work "$work/fake-check" > /dev/null 2>&1
  rc=$?
  ((rc == 1)) || fail "an archive of another $case: exit $rc, not 1"
  grep -Fq "$expect" "$out/gpu_log.txt" || fail "an archive of another $case: gpu_log.txt does not say \"$expect\""
  grep -Eq '^\| unpack \| [0-9]+ \| [0-9.]+ \| failed' "$out/gpu_figures.md" || fail "an archive of another $case: no failed unpack row"
  if grep -q '^| configure' "$out/gpu_figures.md"; then fail "an archive of another $case was configured"; fi
done

# 4. A tree without llama.cpp's programs, configured with them: refused by name, saying what to set.
tree="$work/tree-without-tools"
rm -rf "$tree" "$tree-build" && mkdir -p "$tree/include" "$tree/common"
touch "$tree/include/llama.h" "$tree/common/speculative.h" "$tree/common/common.h"
cmake -S "$here/../../.." -B "$tree-build" -DNGRAMSPEC_WITH_LLAMA_CPP=ON -DNGRAMSPEC_LLAMA_CPP_SOURCE_DIR="$tree" \
  -DNGRAMSPEC_BUILD_TESTS=OFF -DNGRAMSPEC_BUILD_TOOLS=OFF -DNGRAMSPEC_BUILD_EXAMPLES=OFF \
  -DNGRAMSPEC_BUILD_BENCHMARKS=OFF > "$tree-build.log" 2>&1
rc=$?
((rc != 0)) || fail "a tree without tools/ configured with llama.cpp's programs on"
# CMake wraps the message's lines: compare with every run of blanks as one space.
tr -s ' \n' '  ' < "$tree-build.log" |
  grep -Fq "$tree has no tools/ (a source archive without llama.cpp's programs?): configure with -DNGRAMSPEC_LLAMA_CPP_PROGRAMS=OFF" ||
  fail "configuring a tree without tools/ does not say so by name ($tree-build.log)"

# 5. The source archive of the build's own llama.cpp tree, where that tree is fetch_llama_cpp.sh's.
if git -C "$llama_source" rev-parse HEAD > /dev/null 2>&1; then
  rm -rf "$work/archive"
  made="$("$here/../gpu/make_source_archive.sh" --source "$llama_source" --out "$work/archive" 2> "$work/archive.log")"
  if [[ "$made" != "$work/archive/$top-$patch_hash.tar.gz" || ! -f "$made" ]]; then
    fail "make_source_archive.sh made '$made', not $work/archive/$top-$patch_hash.tar.gz ($(cat "$work/archive.log"))"
  else
    ((($(stat -c %s "$made") < 64 * 1024 * 1024))) || fail "$made is 64 MiB or more"
    names="$(tar -tzf "$made")"
    for kept in CMakeLists.txt include/llama.h common/speculative.h ggml/CMakeLists.txt gguf-py/gguf/__init__.py \
                .ngramspec-patches .ngramspec-source; do
      grep -qx "$top/$kept" <<< "$names" || fail "$made lacks $kept"
    done
    for left in .git docs tools examples models tests; do
      if grep -q "^$top/$left/" <<< "$names"; then fail "$made holds $left/"; fi
    done
    [[ "$(tar -xzOf "$made" "$top/.ngramspec-source")" == "commit $commit"$'\n'"patches $patch_hash" ]] ||
      fail "$made's .ngramspec-source does not name commit $commit and patches $patch_hash"
    grep -q "^make_source_archive: llama.cpp ${commit:0:12} with patches $patch_hash, [0-9]* KiB" "$work/archive.log" ||
      fail "make_source_archive.sh does not say the archive's size"
  fi
else
  echo "make_source_archive.sh not checked: $llama_source is not a git checkout (fetch_llama_cpp.sh's is)"
fi

# 6. fetch_llama_cpp.sh --pinned prints the commit and stamp, and refuses a --dest it would not use.
[[ "$commit" =~ ^[0-9a-f]{40}$ && "$patch_hash" =~ ^[0-9a-f]{12}$ ]] ||
  fail "fetch_llama_cpp.sh --pinned printed '$commit $patch_hash', not a commit and a patch stamp"
message="$(bash "$here/../fetch_llama_cpp.sh" --pinned --dest "$work/unused" 2>&1)"
rc=$?
((rc == 2)) || fail "fetch_llama_cpp.sh --pinned --dest exited $rc, not 2"
[[ "$message" == "error: --pinned fetches nothing, so --dest has no use with it" ]] ||
  fail "fetch_llama_cpp.sh --pinned --dest said '$message'"
message="$(bash "$here/../fetch_llama_cpp.sh" --pinned --newest 2>&1)"
rc=$?
((rc == 2)) || fail "fetch_llama_cpp.sh --pinned --newest exited $rc, not 2"
[[ "$message" == "error: --pinned prints the pin and --newest ignores it: give one of them" ]] ||
  fail "fetch_llama_cpp.sh --pinned --newest said '$message'"

((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }
echo "run_gpu_check.sh --cpu: every step ran; a spent budget, foreign archives and a tree without tools/ are reported"
