#!/usr/bin/env bash
# Fetches llama.cpp's source at the pinned commit, checks it, applies this folder's patches, and
# prints the source folder. llama.cpp's source comes from the npm registry, where the package
# node-llama-cpp carries it as a git bundle: the package's archive is checked against its pinned
# SHA-256 and the bundle's commit against the pinned commit before anything is used.
#
#   integrations/llama.cpp/fetch_llama_cpp.sh [--dest DIR]
#   integrations/llama.cpp/fetch_llama_cpp.sh --pinned
#   integrations/llama.cpp/fetch_llama_cpp.sh --newest [--dest DIR]
#
# The source lands in DIR/llama.cpp-<commit> (DIR: build/_deps of the repository) with a stamp of
# the patches it holds, so a second run with the same patches costs nothing and a changed patch
# gets a fresh tree in the same place. Needs npm, git, tar and sha256sum.
# --pinned prints the pinned commit and the stamp of this folder's patches, one line, and fetches
# nothing (what a tree made here must carry; gpu/run_gpu_check.sh checks an archive against it).
# --newest takes the newest release the registry has instead of the pin, unchecked: for a maintainer
# trying the next release (try_newest_llama_cpp.sh), never for a build that must be reproducible.
# It says which version, archive SHA-256, commit and llama.cpp release it got (the lines to pin it).
# Exit status: 0 done, 1 a fetch or check failed, 2 a bad command line, 3 a patch does not apply.
set -euo pipefail

readonly package=node-llama-cpp
readonly pinned_version=3.22.1
readonly pinned_archive_sha256=a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f
readonly pinned_commit=de3ff815ea7d559ee917f063901b8986f038abc6

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="$here/../../build/_deps"
dest_given=0
pinned=0
newest=0
while (($# > 0)); do
  case "$1" in
    --dest) dest="${2:?--dest needs a folder}"; dest_given=1; shift 2 ;;
    --pinned) pinned=1; shift ;;
    --newest) newest=1; shift ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
patches=()
while IFS= read -r p; do patches+=("$p"); done < <(find "$here/patches" -maxdepth 1 -name '*.patch' | LC_ALL=C sort)
patch_hash="$( (for p in "${patches[@]}"; do basename "$p"; cat "$p"; done) | sha256sum | cut -c1-12)"
if ((pinned)); then
  ((newest)) && { echo "error: --pinned prints the pin and --newest ignores it: give one of them" >&2; exit 2; }
  ((dest_given)) && { echo "error: --pinned fetches nothing, so --dest has no use with it" >&2; exit 2; }
  echo "$pinned_commit $patch_hash"
  exit 0
fi

mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

for tool in npm git tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool is needed to fetch llama.cpp and is not installed" >&2; exit 1; }
done
say() { echo "fetch_llama_cpp: $*" >&2; }

# The package's archive, DIR/node-llama-cpp-<version>.tgz: downloaded unless a copy with the wanted
# SHA-256 is there (any copy, for --newest, which has no SHA-256 to want).
fetch_archive() {
  local version="$1" want="$2" tgz="$dest/$package-$1.tgz"
  if [[ ! -f "$tgz" ]] || [[ -n "$want" && "$(sha256sum "$tgz" | cut -d' ' -f1)" != "$want" ]]; then
    say "downloading $package@$version from the npm registry (about 35 MB)"
    rm -f "$tgz"
    (cd "$dest" && npm pack --silent "$package@$version" >/dev/null)
  fi
  echo "$tgz"
}

if ((newest)); then
  version="$(npm view --silent "$package" version)" ||
    { echo "error: cannot ask the npm registry for the newest $package (npm view $package version)" >&2; exit 1; }
  [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    { echo "error: the npm registry names '$version' as the newest $package, not a release version" >&2; exit 1; }
  tgz="$(fetch_archive "$version" "")"
  archive_sha256="$(sha256sum "$tgz" | cut -d' ' -f1)"
  commit=""   # read from the bundle below
else
  version="$pinned_version"
  archive_sha256="$pinned_archive_sha256"
  commit="$pinned_commit"
  # One folder per commit, whatever the patches: a build that points at it keeps its objects (and a
  # compiler cache its hits) when a patch changes; the stamp says which patches it holds.
  source_dir="$dest/llama.cpp-${commit:0:12}"
  if [[ -f "$source_dir/.ngramspec-patches" ]] && [[ "$(cat "$source_dir/.ngramspec-patches")" == "$patch_hash" ]]; then
    echo "$source_dir"
    exit 0
  fi
  tgz="$(fetch_archive "$version" "$archive_sha256")"
  actual="$(sha256sum "$tgz" | cut -d' ' -f1)"
  if [[ "$actual" != "$archive_sha256" ]]; then
    echo "error: $tgz has SHA-256 $actual; the pinned $package@$version has $archive_sha256" >&2
    exit 1
  fi
fi

work="$(mktemp -d "$dest/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle
# The llama.cpp release the package names (package/llama/binariesGithubRelease.json), for the report.
release="$(tar -xzOf "$tgz" package/llama/binariesGithubRelease.json 2>/dev/null |
           sed -n 's/.*"release"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')" || true
head="$(git bundle list-heads "$work/package/llama/gitRelease.bundle" | awk '$2 == "HEAD" {print $1}')"
if ((newest)); then
  [[ "$head" =~ ^[0-9a-f]{40}$ ]] ||
    { echo "error: the bundle in $package@$version names no HEAD commit (git bundle list-heads)" >&2; exit 1; }
  commit="$head"
  say "newest: $package@$version, archive SHA-256 $archive_sha256, llama.cpp commit $commit" \
      "(release ${release:-unknown}); the pin is $package@$pinned_version at ${pinned_commit:0:12}"
  source_dir="$dest/llama.cpp-${commit:0:12}"
  if [[ -f "$source_dir/.ngramspec-patches" ]] && [[ "$(cat "$source_dir/.ngramspec-patches")" == "$patch_hash" ]]; then
    echo "$source_dir"
    exit 0
  fi
fi
git clone -q "$work/package/llama/gitRelease.bundle" "$work/llama.cpp" 2>/dev/null
head="$(git -C "$work/llama.cpp" rev-parse HEAD)"
if [[ "$head" != "$commit" ]]; then
  echo "error: the bundle in $package@$version is at llama.cpp commit $head; expected $commit" >&2
  exit 1
fi
rm -f "$work/package/llama/gitRelease.bundle"
for p in "${patches[@]}"; do
  say "applying $(basename "$p")"
  if ! git -C "$work/llama.cpp" apply --whitespace=nowarn "$p" 2>/dev/null; then
    # What does not apply, hunk by hunk, for whoever updates the patch.
    git -C "$work/llama.cpp" apply --check --verbose --whitespace=nowarn "$p" 2>&1 | grep -v '^Checking patch' >&2 || true
    echo "error: patch $p does not apply to llama.cpp $commit ($package@$version)" >&2
    exit 3
  fi
done
echo "$patch_hash" > "$work/llama.cpp/.ngramspec-patches"
rm -rf "$source_dir"
mv "$work/llama.cpp" "$source_dir"
say "llama.cpp ${commit:0:12} with ${#patches[@]} patch(es) is in $source_dir"
echo "$source_dir"
