#!/usr/bin/env bash
# Tries this folder's patches and ngramspec's llama.cpp integration on the newest llama.cpp release
# the npm registry has, unpinned: fetches it (fetch_llama_cpp.sh --newest), applies the patches,
# builds what the llama-cpp preset builds into a build folder of its own, runs the llama.cpp tests,
# and says what broke. For a maintainer deciding whether to move the pin; never for CI, whose builds
# must not change with the registry (they use the pin, checked by hash and commit).
#
#   integrations/llama.cpp/try_newest_llama_cpp.sh [--build DIR] [--dest DIR]
#
# --build DIR  the build folder (default: build/llama-cpp-newest of the repository)
# --dest DIR   where the release and its patched source go (default: build/_deps, as the pin's)
#
# The last line says how it went: the release tried (version, commit), then "patches apply, builds,
# N llama.cpp tests pass" or the step that broke: a patch that does not apply (with the hunks that
# fail), build errors (the first of each failing file), the tests that fail. Every step's whole
# output is in DIR/try-newest/<step>.log. Exit status: 0 all passed, 1 something broke, 2 a bad
# command line. Needs what the llama-cpp preset needs (npm, git, CMake, Ninja, a C++20 compiler).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build/llama-cpp-newest"
dest="$root/build/_deps"
while (($# > 0)); do
  case "$1" in
    --build) build="${2:?--build needs a folder}"; shift 2 ;;
    --dest) dest="${2:?--dest needs a folder}"; shift 2 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
logs="$build/try-newest"
mkdir -p "$logs" || { echo "error: cannot make the folder $logs" >&2; exit 2; }
say() { echo "try_newest_llama_cpp: $*"; }
release="the newest release"
broke() {
  say "BROKE on $release: $*"
  exit 1
}

# 1. Fetch and patch. fetch_llama_cpp.sh says what it got on its error output.
say "fetching the newest node-llama-cpp and applying $(find "$here/patches" -maxdepth 1 -name '*.patch' | wc -l) patch(es)"
source_dir="$(bash "$here/fetch_llama_cpp.sh" --newest --dest "$dest" 2> "$logs/fetch.log")"
fetch_status=$?
cat "$logs/fetch.log"
got="$(sed -n 's/^fetch_llama_cpp: newest: \([^,]*\), archive SHA-256 [0-9a-f]*, llama.cpp commit \([0-9a-f]\{12\}\)[0-9a-f]* (\(release [^)]*\)).*/\1 (llama.cpp \2, \3)/p' "$logs/fetch.log")"
[[ -n "$got" ]] && release="$got"
case "$fetch_status" in
  0) ;;
  3) broke "a patch does not apply (the failing hunks are above; $logs/fetch.log)" ;;
  *) broke "fetching failed, exit $fetch_status ($logs/fetch.log)" ;;
esac

# 2. Configure and build what the llama-cpp preset builds, continuing past errors to list them all.
say "configuring $build on $source_dir"
if ! nice -n 5 cmake --preset llama-cpp -S "$root" -B "$build" -DNGRAMSPEC_LLAMA_CPP_SOURCE_DIR="$source_dir" \
     > "$logs/configure.log" 2>&1; then
  grep -E 'CMake Error|error' "$logs/configure.log" | head -20
  broke "configuring failed ($logs/configure.log)"
fi
targets="$(sed -n '/"name": "llama-cpp",/,/}/p' "$root/CMakePresets.json" | tr -d '\n' |
           sed -n 's/.*"targets": *\[\([^]]*\)\].*/\1/p' | tr -d '" ' | tr ',' ' ')"
[[ -n "$targets" ]] || broke "cannot read the llama-cpp build preset's targets from CMakePresets.json"
say "building $targets (a fresh build of llama.cpp takes a while)"
# shellcheck disable=SC2086 # the targets are words
if ! nice -n 5 cmake --build "$build" --target $targets -- -k 0 > "$logs/build.log" 2>&1; then
  echo "the first errors, by file:"
  grep -E '^FAILED: |error:' "$logs/build.log" | awk '/^FAILED: /{shown=0; print; next} shown < 3 {print "  " $0; shown++}' | head -60
  broke "the build failed in $(grep -c '^FAILED: ' "$logs/build.log") step(s) ($logs/build.log)"
fi

# 3. The llama.cpp tests, as the llama-cpp test preset runs them.
say "running the llama.cpp tests"
nice -n 5 ctest --test-dir "$build" -L 'llama\.cpp' --no-tests=error --output-on-failure > "$logs/test.log" 2>&1
test_status=$?
summary="$(grep -E '^[0-9]+% tests passed' "$logs/test.log")"
if ((test_status != 0)); then
  sed -n '/^The following tests FAILED:/,$p' "$logs/test.log"
  broke "tests fail: ${summary:-ctest exited $test_status} ($logs/test.log)"
fi
say "OK on $release: patches apply, builds, ${summary:-the tests pass} (the pin: $(bash "$here/fetch_llama_cpp.sh" --pinned | cut -c1-12))"
