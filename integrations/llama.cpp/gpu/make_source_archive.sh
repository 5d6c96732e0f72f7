#!/usr/bin/env bash
# Packs the pinned, patched llama.cpp source that fetch_llama_cpp.sh leaves into one archive, for a
# build on a machine that has the repository's checkout and no network (gpu/run_gpu_check.sh).
#
#   integrations/llama.cpp/gpu/make_source_archive.sh [--source DIR] [--out DIR]
#
# --source DIR  a tree of fetch_llama_cpp.sh's (default: the one it prints, fetched if need be)
# --out DIR     where the archive goes (default: integrations/llama.cpp/gpu/archive, which git ignores)
#
# The archive, llama.cpp-<commit 12>-<patch stamp>.tar.gz, holds what building ngramspec-llama
# reads: llama.cpp's CMake files, include/, src/, common/, vendor/, ggml/ (every backend), its
# licenses, gguf-py/ (make_random_gguf.py imports it), the patch stamp (.ngramspec-patches) and
# .ngramspec-source (commit and patch stamp); not .git, docs/, models/, tests/, tools/,
# examples/ and the rest. Such a tree builds with -DNGRAMSPEC_LLAMA_CPP_PROGRAMS=OFF (no
# llama-server). The tree is checked first: its commit is the pinned one, its stamp that of this
# folder's patches, and the patches are applied. Needs git, tar, gzip and sha256sum.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fetch="$here/../fetch_llama_cpp.sh"
source_dir=""
out_dir="$here/archive"
while (($# > 0)); do
  case "$1" in
    --source) source_dir="${2:?--source needs a folder}"; shift 2 ;;
    --out) out_dir="${2:?--out needs a folder}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for tool in git tar gzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool is needed and is not installed" >&2; exit 1; }
done

read -r commit patch_hash < <(bash "$fetch" --pinned)
if [[ -z "$source_dir" ]]; then
  source_dir="$(bash "$fetch")"
fi
[[ -d "$source_dir" ]] || { echo "error: --source '$source_dir' is not a folder" >&2; exit 1; }
source_dir="$(cd "$source_dir" && pwd)"

# The tree must be what fetch_llama_cpp.sh makes now: the pinned commit, this folder's patches.
head="$(git -C "$source_dir" rev-parse HEAD 2>/dev/null)" ||
  { echo "error: $source_dir is not a git checkout of llama.cpp (fetch_llama_cpp.sh makes one)" >&2; exit 1; }
[[ "$head" == "$commit" ]] || { echo "error: $source_dir is at commit $head; the pinned commit is $commit" >&2; exit 1; }
stamp="$(cat "$source_dir/.ngramspec-patches" 2>/dev/null || true)"
[[ "$stamp" == "$patch_hash" ]] ||
  { echo "error: $source_dir has patch stamp '${stamp:-none}'; this folder's patches make '$patch_hash' (run fetch_llama_cpp.sh)" >&2; exit 1; }
for p in "$here"/../patches/*.patch; do
  git -C "$source_dir" apply --reverse --check "$p" 2>/dev/null ||
    { echo "error: $(basename "$p") is not applied in $source_dir" >&2; exit 1; }
done

# What the build and make_random_gguf.py read; everything else stays behind.
keep=(CMakeLists.txt LICENSE licenses cmake include src common vendor ggml gguf-py .ngramspec-patches)
for k in "${keep[@]}"; do
  [[ -e "$source_dir/$k" ]] || { echo "error: $source_dir has no $k" >&2; exit 1; }
done

top="llama.cpp-${commit:0:12}"
name="$top-$patch_hash.tar.gz"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
work="$(mktemp -d "$out_dir/.pack.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/$top"
# tar copies the kept paths as they are in the tree (git's index is not consulted: the patches'
# changes are in the working tree).
tar -C "$source_dir" -cf - "${keep[@]}" | tar -C "$work/$top" -xf -
find "$work/$top" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
printf 'commit %s\npatches %s\n' "$commit" "$patch_hash" > "$work/$top/.ngramspec-source"
# Sorted names, fixed owners and times (the commit's): the same tree packs to the same bytes.
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$(git -C "$source_dir" log -1 --format=%ct)" \
  -cf - "$top" | gzip -9n > "$work/$name"
mv "$work/$name" "$out_dir/$name"

bytes="$(stat -c %s "$out_dir/$name")"
limit=$((64 * 1024 * 1024))
if ((bytes >= limit)); then
  echo "error: $out_dir/$name is $bytes bytes, not under 64 MiB" >&2
  exit 1
fi
echo "make_source_archive: llama.cpp ${commit:0:12} with patches $patch_hash, $((bytes / 1024)) KiB" \
     "($(sha256sum "$out_dir/$name" | cut -c1-16)...)" >&2
echo "$out_dir/$name"
