#!/usr/bin/env bash
# Fetches llama.cpp's source at the pinned commit, checks it, applies this folder's patches, and
# prints the source folder. llama.cpp's source comes from the npm registry, where the package
# node-llama-cpp carries it as a git bundle: the package's archive is checked against its pinned
# SHA-256 and the bundle's commit against the pinned commit before anything is used.
#
#   integrations/llama.cpp/fetch_llama_cpp.sh [--dest DIR]
#   integrations/llama.cpp/fetch_llama_cpp.sh --pinned
#
# The source lands in DIR/llama.cpp-<commit> (DIR: build/_deps of the repository) with a stamp of
# the patches it holds, so a second run with the same patches costs nothing and a changed patch
# gets a fresh tree in the same place. Needs npm, git, tar and sha256sum.
# --pinned prints the pinned commit and the stamp of this folder's patches, one line, and fetches
# nothing (what a tree made here must carry; gpu/run_gpu_check.sh checks an archive against it).
set -euo pipefail

readonly package=node-llama-cpp
readonly version=3.22.1
readonly archive_sha256=a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f
readonly commit=de3ff815ea7d559ee917f063901b8986f038abc6

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="$here/../../build/_deps"
dest_given=0
pinned=0
while (($# > 0)); do
  case "$1" in
    --dest) dest="${2:?--dest needs a folder}"; dest_given=1; shift 2 ;;
    --pinned) pinned=1; shift ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
patches=()
while IFS= read -r p; do patches+=("$p"); done < <(find "$here/patches" -maxdepth 1 -name '*.patch' | LC_ALL=C sort)
patch_hash="$( (for p in "${patches[@]}"; do basename "$p"; cat "$p"; done) | sha256sum | cut -c1-12)"
if ((pinned)); then
  ((dest_given)) && { echo "error: --pinned fetches nothing, so --dest has no use with it" >&2; exit 2; }
  echo "$commit $patch_hash"
  exit 0
fi

mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

for tool in npm git tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool is needed to fetch llama.cpp and is not installed" >&2; exit 1; }
done
# One folder per commit, whatever the patches: a build that points at it keeps its objects (and a
# compiler cache its hits) when a patch changes; the stamp says which patches it holds.
source_dir="$dest/llama.cpp-${commit:0:12}"
stamp="$source_dir/.ngramspec-patches"
if [[ -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$patch_hash" ]]; then
  echo "$source_dir"
  exit 0
fi

say() { echo "fetch_llama_cpp: $*" >&2; }
tgz="$dest/$package-$version.tgz"
if [[ ! -f "$tgz" ]] || [[ "$(sha256sum "$tgz" | cut -d' ' -f1)" != "$archive_sha256" ]]; then
  say "downloading $package@$version from the npm registry (about 35 MB)"
  rm -f "$tgz"
  (cd "$dest" && npm pack --silent "$package@$version" >/dev/null)
fi
actual="$(sha256sum "$tgz" | cut -d' ' -f1)"
if [[ "$actual" != "$archive_sha256" ]]; then
  echo "error: $tgz has SHA-256 $actual; the pinned $package@$version has $archive_sha256" >&2
  exit 1
fi

work="$(mktemp -d "$dest/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle
git clone -q "$work/package/llama/gitRelease.bundle" "$work/llama.cpp" 2>/dev/null
head="$(git -C "$work/llama.cpp" rev-parse HEAD)"
if [[ "$head" != "$commit" ]]; then
  echo "error: the bundle in $package@$version is at llama.cpp commit $head; expected $commit" >&2
  exit 1
fi
rm -f "$work/package/llama/gitRelease.bundle"
for p in "${patches[@]}"; do
  say "applying $(basename "$p")"
  git -C "$work/llama.cpp" apply --whitespace=nowarn "$p" || { echo "error: patch $p does not apply to llama.cpp $commit" >&2; exit 1; }
done
echo "$patch_hash" > "$work/llama.cpp/.ngramspec-patches"
rm -rf "$source_dir"
mv "$work/llama.cpp" "$source_dir"
say "llama.cpp ${commit:0:12} with ${#patches[@]} patch(es) is in $source_dir"
echo "$source_dir"
