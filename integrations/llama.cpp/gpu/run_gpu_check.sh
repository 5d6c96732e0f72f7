#!/usr/bin/env bash
# Builds ngramspec-llama with llama.cpp's CUDA backend from the source archive of
# make_source_archive.sh and runs the GPU figures, each step timed and limited so that the whole
# fits a short lease of a GPU machine (one NVIDIA GPU, the CUDA toolkit, CMake, Ninja, Python 3
# with NumPy and PyYAML; no network, the repository's checkout and the archive).
#
#   integrations/llama.cpp/gpu/run_gpu_check.sh [options]
#
#   --cpu            the same steps on a CPU build, at tiny sizes (stories260K and a random 134M, few
#                    prompts and tokens), to check the script where there is no GPU
#   --models DIR     the folder holding stories260K.gguf (default: ../shared/models of the checkout)
#   --out DIR        where gpu_figures.md, gpu_runs.json and gpu_log.txt go (default: $OUT, else ./gpu-out)
#   --archive FILE   the llama.cpp source archive (default: gpu/archive/llama.cpp-<commit>-<patches>.tar.gz)
#   --work DIR       the unpacked source, the build and the random models (default: build/gpu-check)
#   --program FILE   run this ngramspec-llama instead of building one (no archive needed)
#   --llama-cpp-source DIR  with --program: the llama.cpp tree whose gguf-py makes the random models
#                    (default: make_random_gguf.py's, the newest build/_deps/llama.cpp-*)
#   --budget S       seconds for the whole run (default 480; 7200 with --cpu): a step gets its own
#                    limit or what is left of the budget, whichever is less
#   --jobs N         build jobs (default: every core)
#   --cuda-fa        compile llama.cpp's CUDA flash-attention kernels (default off: GGML_CUDA_FA=OFF,
#                    which halves the CUDA compile; see the README)
#
# Every step's limit, time and result (ran, failed, cut at its limit, skipped) goes to
# gpu_figures.md with the figures, rewritten after each step, so a run cut short still says what it
# did. Exit status: 0 when every step ran, 1 when one failed, was cut or could not run, 2 for a bad
# command line.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "run_gpu_check: error: $*" >&2; exit 2; }

cpu=0
models="$repo/../shared/models"
out="${OUT:-./gpu-out}"
archive=""
work="$repo/build/gpu-check"
program=""
llama_source=""
budget=""
jobs="$(nproc)"
cuda_fa=0
jobs_given=0
while (($# > 0)); do
  case "$1" in
    --cpu) cpu=1; shift ;;
    --models|--out|--archive|--work|--program|--llama-cpp-source|--budget|--jobs)
      (($# >= 2)) || die "$1 needs a value"
      case "$1" in
        --models) models="$2" ;; --out) out="$2" ;; --archive) archive="$2" ;; --work) work="$2" ;;
        --program) program="$2" ;; --llama-cpp-source) llama_source="$2" ;; --budget) budget="$2" ;;
        --jobs) jobs="$2"; jobs_given=1 ;;
      esac
      shift 2 ;;
    --cuda-fa) cuda_fa=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -z "$budget" ]] && budget=$((cpu ? 7200 : 480))
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || die "--budget '$budget' is not a whole number of seconds above 0"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs '$jobs' is not a whole number above 0"
((cpu && cuda_fa)) && die "--cuda-fa goes with a CUDA build, not --cpu"
[[ -f "$models/stories260K.gguf" ]] || die "--models '$models' has no stories260K.gguf"
[[ -z "$program" || -x "$program" ]] || die "--program '$program' is not an executable file"
build=1
[[ -n "$program" ]] && build=0
if [[ -n "$llama_source" ]]; then
  [[ -n "$program" ]] || die "--llama-cpp-source goes with --program (else the archive's tree makes the models)"
  [[ -d "$llama_source/gguf-py" ]] || die "--llama-cpp-source '$llama_source' has no gguf-py/"
fi
if ((!build)); then
  [[ -n "$archive" ]] && die "--archive goes without --program (the archive is for the build)"
  ((jobs_given)) && die "--jobs goes without --program (it sizes the build)"
  ((cuda_fa)) && die "--cuda-fa goes without --program (it sets the build)"
fi
python="${PYTHON:-python3}"
command -v "$python" >/dev/null 2>&1 || die "$python is not installed (PYTHON names another)"
if ((!cpu)) && ! command -v nvidia-smi >/dev/null 2>&1; then
  die "no NVIDIA GPU here (nvidia-smi is not installed); --cpu runs the same steps on a CPU build"
fi

read -r commit patch_hash < <(bash "$here/../fetch_llama_cpp.sh" --pinned)
top="llama.cpp-${commit:0:12}"
[[ -z "$archive" ]] && archive="$here/archive/$top-$patch_hash.tar.gz"
if [[ $build -eq 1 && ! -f "$archive" ]]; then
  die "no source archive '$archive': make it with integrations/llama.cpp/gpu/make_source_archive.sh where llama.cpp can be fetched, and copy it here"
fi
mkdir -p "$out" "$work" || die "cannot make '$out' or '$work'"
out="$(cd "$out" && pwd)"
work="$(cd "$work" && pwd)"
models="$(cd "$models" && pwd)"
logs="$work/logs"
rm -rf "$logs" && mkdir -p "$logs"
figures="$out/gpu_figures.md"
log="$out/gpu_log.txt"
: > "$log"

# What each mode runs: the build, the random models for the cost curves, and the runs' sizes.
# Several sequences and the curves are measured at the sizes a GPU is for; on a CPU (--cpu) they
# shrink to what 2 cores finish in minutes, since there the point is that every step works.
if ((cpu)); then
  mode="CPU (--cpu)"
  preset=llama-cpp
  build_dir="$work/cpu"
  n_prompts=4; n_refrains=4; n_tokens=32; parallel_many=4
  random_shapes=(llama-134m)
  curve_args=(--curve 1,2 --curve-tokens 3 --curve-at 32 --ctx 128 --repeats 1)
  run_args=(--threads 1)
  limit_unpack=60 limit_configure=300 limit_build=5400 limit_models=600 limit_run=300
else
  mode="CUDA"
  preset=llama-cpp-cuda
  build_dir="$work/cuda"
  n_prompts=10; n_refrains=20; n_tokens=200; parallel_many=16
  random_shapes=(llama-1.1b llama-8b)
  curve_args=(--curve 1,8,16)
  run_args=()
  limit_unpack=30 limit_configure=90 limit_build=330 limit_models=420 limit_run=60
fi
# llama.cpp's drafters in --compare: the defaults of the two kinds that draft on short texts and
# the best setting of each type on Spec-Bench (docs/BENCHMARKS.md), so that each run fits its limit.
llama_drafters=(--llama-drafter ngram-simple:n=1,m=4 --llama-drafter ngram-map-k:n=2,m=4
                --llama-drafter ngram-mod:n_match=2,n_max=4,n_min=1 --llama-drafter ngram-cache)

now() { date +%s.%N; }
start="$(now)"
elapsed() { awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%d", b - a }'; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

rows=()       # the steps table, one markdown row each
sections=()   # the figures, one markdown section per step that made some
failed=0

write_figures() {
  {
    echo "# ngramspec-llama GPU check: $mode"
    echo
    echo "- machine: $machine"
    echo "- checkout: $checkout; llama.cpp $commit with patches $patch_hash"
    echo "- build: $build_line"
    echo "- budget: $budget s for the whole run; $(elapsed) s used when this was written"
    echo
    echo "| step | limit (s) | seconds | result |"
    echo "|---|---:|---:|---|"
    printf '%s\n' "${rows[@]}"
    for s in "${sections[@]}"; do printf '\n%s\n' "$s"; done
  } > "$figures"
}

# The limit a step gets: its own, or what the budget has left, whichever is less (0: none left).
limit_for() {
  local left=$((budget - $(elapsed)))
  if ((left < 5)); then echo 0; elif (($1 < left)); then echo "$1"; else echo "$left"; fi
}

# result_of RC LIMIT: the table's word for how a command under `timeout LIMIT` ended.
result_of() {
  case "$1" in
    0) echo "ran" ;;
    124|137) echo "cut at its limit of $2 s" ;;
    *) echo "failed (exit $1; gpu_log.txt)" ;;
  esac
}

# step NAME LIMIT COMMAND...: runs COMMAND under its limit, its output in $logs/NAME.out and .err
# (both appended to gpu_log.txt), and adds a row; returns COMMAND's status (75: not run). With
# compare_run=1, an exit status of 1 with a JSON result that says "identical": false is a run whose
# output differs from plain decoding's (--compare's exit status then), not a failure.
compare_run=0
step() {
  local name="$1" own="$2"; shift 2
  local limit; limit="$(limit_for "$own")"
  if ((limit == 0)); then
    rows+=("| $name | $own | - | skipped: the budget of $budget s was spent |"); failed=1; write_figures
    return 75
  fi
  echo "run_gpu_check: $name (at most $limit s): $*" >&2
  local t0; t0="$(now)"
  timeout --kill-after=10 "$limit" "$@" > "$logs/$name.out" 2> "$logs/$name.err"
  local rc=$?
  local took; took="$(seconds_since "$t0")"
  local result; result="$(result_of "$rc" "$limit")"
  if ((compare_run && rc == 1)) && grep -q '"identical": false' "$logs/$name.out"; then
    result="ran; some drafter's output differs from plain decoding's"
  elif ((rc != 0)); then
    failed=1
  fi
  rows+=("| $name | $limit | $took | $result |")
  { echo "=== $name ($took s, exit $rc): $*"; tail -c 20000 "$logs/$name.out"; tail -c 20000 "$logs/$name.err"; } >> "$log"
  write_figures
  return "$rc"
}
skip() { rows+=("| $1 | - | - | skipped: $2 |"); write_figures; }

machine="$(nproc) cores of $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
if ((!cpu)); then
  machine="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1), $machine"
  machine="$machine; $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | sed 's/^/CUDA /' || echo 'no nvcc on the PATH')"
fi
checkout="$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then checkout="$checkout (modified)"; fi
build_line="not built (--program $program)"
write_figures

# --- 1. the source, checked, and the build -------------------------------------------------------
source_dir="$work/_deps/$top"
if ((build)); then
  # Unpacks the archive into $work/_deps and checks it holds the pinned commit and patches.
  check_source() {
    rm -rf "$work/_deps" && mkdir -p "$work/_deps" && tar -xzf "$archive" -C "$work/_deps" || return 1
    local c p
    c="$(sed -n 's/^commit //p' "$source_dir/.ngramspec-source" 2>/dev/null)"
    p="$(sed -n 's/^patches //p' "$source_dir/.ngramspec-source" 2>/dev/null)"
    if [[ "$c" != "$commit" ]]; then
      echo "error: $archive holds llama.cpp commit '${c:-none}'; the pinned commit is $commit" >&2; return 1
    fi
    if [[ "$p" != "$patch_hash" || "$(cat "$source_dir/.ngramspec-patches" 2>/dev/null)" != "$patch_hash" ]]; then
      echo "error: $archive holds patches '${p:-none}'; fetch_llama_cpp.sh applies '$patch_hash'" >&2; return 1
    fi
  }
  export -f check_source
  export archive work source_dir commit patch_hash
  step unpack "$limit_unpack" bash -c check_source ||
    { echo "run_gpu_check: the source archive did not unpack or is not the pinned one (gpu_log.txt)" >&2; exit 1; }
fi

# The random models need only gguf-py, so they are made, all at once, while llama.cpp compiles;
# their row joins the table when the curves wait for them.
declare -A model_file
models_pid=""
models_limit=0
missing=()
if ! "$python" -c 'import numpy, yaml' 2>/dev/null; then
  skip models "$python cannot import NumPy and PyYAML, which make_random_gguf.py needs"
  failed=1
else
  make_models() {
    local pids=() rc=0 source=()
    [[ -n "$gguf_source" ]] && source=(--llama-cpp-source "$gguf_source")
    for shape in "$@"; do
      "$python" "$here/../make_random_gguf.py" --shape "$shape" --out "$work/models/$shape.gguf" "${source[@]}" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return "$rc"
  }
  export -f make_models
  gguf_source="$llama_source"
  ((build)) && gguf_source="$source_dir"
  export python here work gguf_source
  for shape in "${random_shapes[@]}"; do
    model_file[$shape]="$work/models/$shape.gguf"
    [[ -f "$work/models/$shape.gguf" ]] || missing+=("$shape")
  done
  if ((${#missing[@]} == 0)); then
    skip models "made by an earlier run ($(printf '%s ' "${random_shapes[@]}")in $work/models)"
  else
    models_limit="$(limit_for "$limit_models")"
  fi
  if ((${#missing[@]} > 0 && models_limit == 0)); then
    rows+=("| models | $limit_models | - | skipped: the budget of $budget s was spent |"); failed=1; write_figures
  elif ((${#missing[@]} > 0)); then
    echo "run_gpu_check: models (at most $models_limit s, beside the build): ${missing[*]}" >&2
    models_start="$(now)"
    timeout --kill-after=10 "$models_limit" bash -c 'make_models "$@"' make_models "${missing[@]}" \
      > "$logs/models.out" 2> "$logs/models.err" &
    models_pid=$!
  fi
fi

if ((build)); then
  configure=(cmake --preset "$preset" -S "$repo" -B "$build_dir" -DNGRAMSPEC_LLAMA_CPP_SOURCE_DIR="$source_dir"
             -DNGRAMSPEC_LLAMA_CPP_PROGRAMS=OFF -DNGRAMSPEC_BUILD_TESTS=OFF -DNGRAMSPEC_BUILD_TOOLS=OFF
             -DNGRAMSPEC_BUILD_BENCHMARKS=OFF -DNGRAMSPEC_BUILD_EXAMPLES=OFF)
  ((cpu)) || configure+=(-DGGML_CUDA_FA="$( ((cuda_fa)) && echo ON || echo OFF)")
  if command -v ccache >/dev/null 2>&1; then
    configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
    ((cpu)) || configure+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  build_line="${configure[*]:1}; ninja -j$jobs ngramspec-llama"
  if step configure "$limit_configure" "${configure[@]}"; then
    step build "$limit_build" cmake --build "$build_dir" --target ngramspec-llama -j "$jobs"
  else
    skip build "the configure step did not succeed"
  fi
  program="$build_dir/integrations/llama.cpp/ngramspec-llama"
  archs="$(sed -n 's/.*ngramspec: llama.cpp with CUDA for architectures //p' "$logs/configure.out" 2>/dev/null)"
  [[ -n "$archs" ]] && build_line="$build_line; CUDA architectures $archs"
fi
write_figures

# --- 2. the runs --------------------------------------------------------------------------------
# compare_section TITLE NAME: the --compare JSON of step NAME as a table.
compare_section() {
  "$python" - "$1" "$logs/$2.out" <<'EOF'
import json, sys
title, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
print(f"## {title}\n")
print(f"{r['model']}; {r['prompts']} prompts, --parallel {r['parallel']}, {r['threads']} threads, "
      f"cost {r['cost']}, median of {r['repeats']} runs\n")
print("| drafter | drafted | accepted | mean accepted length | tokens/s | speedup | identical |")
print("|---|---:|---:|---:|---:|---:|---|")
for c in r["runs"]:
    print(f"| {c['drafter']} | {c['drafted']} | {c['accepted']} | {c['mean_accepted_length']:.2f} | "
          f"{c['tokens_per_second']:.1f} | {c['speedup']:.2f}x | {'yes' if c['identical'] else 'no'} |")
EOF
}

# compare NAME TITLE PROMPTS PARALLEL [REPEATS]: --compare --json on stories260K.
compare_steps=()
compare() {
  local name="$1" title="$2" prompts="$3" parallel="$4" repeats="${5:-3}"
  if [[ ! -x "$program" ]]; then skip "$name" "no ngramspec-llama (the build did not finish)"; failed=1; return; fi
  compare_run=1
  step "$name" "$limit_run" "$program" --model "$models/stories260K.gguf" --prompts "$prompts" --n "$n_tokens" \
    --parallel "$parallel" --compare --json --repeats "$repeats" "${llama_drafters[@]}" "${run_args[@]}"
  compare_run=0
  compare_steps+=("$name")
  if [[ -s "$logs/$name.out" ]] && section="$(compare_section "$title" "$name" 2>>"$log")"; then
    sections+=("$section"); write_figures
  fi
}

# curve NAME SHAPE: the cost curve of a random model.
curve() {
  local name="$1" shape="$2"
  if [[ ! -x "$program" ]]; then skip "$name" "no ngramspec-llama (the build did not finish)"; failed=1; return; fi
  if [[ -z "${model_file[$shape]:-}" || ! -f "${model_file[$shape]}" ]]; then skip "$name" "no $shape model (the models step)"; failed=1; return; fi
  step "$name" "$limit_run" "$program" --model "${model_file[$shape]}" "${curve_args[@]}" "${run_args[@]}"
  if [[ -s "$logs/$name.out" ]]; then
    sections+=("## Cost curve, random $shape ($(basename "${model_file[$shape]}"))"$'\n\n'"\`${curve_args[*]}\`"$'\n\n'"$(cat "$logs/$name.out")")
    write_figures
  fi
}

head -n "$n_prompts" "$here/../prompts/stories20.txt" > "$work/stories.txt"
head -n "$n_refrains" "$here/../prompts/refrains20.txt" > "$work/refrains.txt"
compare stories260k_p1 "stories260K, stories20.txt ($n_prompts prompts x $n_tokens), --parallel 1" "$work/stories.txt" 1
compare stories260k_p$parallel_many "stories260K, stories20.txt ($n_prompts prompts x $n_tokens), --parallel $parallel_many" \
  "$work/stories.txt" "$parallel_many"

if [[ -n "$models_pid" ]]; then
  wait "$models_pid"
  rc=$?
  ((rc == 0)) || failed=1
  rows+=("| models (beside the build) | $models_limit | $(seconds_since "$models_start") | $(result_of "$rc" "$models_limit") |")
  { echo "=== models (exit $rc): ${missing[*]}"; cat "$logs/models.out" "$logs/models.err"; } >> "$log"
  write_figures
fi
for shape in "${random_shapes[@]}"; do curve "curve_$shape" "$shape"; done

# The refrains measure acceptance more than time: one run each.
compare refrains_p1 "stories260K, refrains20.txt ($n_refrains prompts x $n_tokens), --parallel 1" "$work/refrains.txt" 1 1

# --- 3. the raw JSON beside the figures ----------------------------------------------------------
"$python" - "$out/gpu_runs.json" "$logs" "${compare_steps[@]}" <<'EOF' 2>>"$log"
import json, os, sys
runs = {}
for name in sys.argv[3:]:
    try:
        runs[name] = json.load(open(os.path.join(sys.argv[2], name + ".out")))
    except (OSError, ValueError) as e:
        runs[name] = {"error": str(e)}
json.dump(runs, open(sys.argv[1], "w"), indent=1)
EOF
write_figures
echo "run_gpu_check: $(elapsed) s; figures in $figures" >&2
exit "$failed"
