#!/usr/bin/env python3
"""Checks the include rule of docs/ARCHITECTURE.md: every quoted include of the project's C and C++
files goes down a floor or stays on its own, never up.

  cmake/check_includes.py [--root DIR]

Exits 0 when the rule holds, 1 naming every include that crosses it (file, line, what it
includes, and the floors of both), 2 on a usage error. Run by ctest as check_includes.

Two rules:
- Folders: each folder of the project may include only the folders listed for it in FOLDERS
  (its own always). An include is resolved as the compiler would find it: beside the file,
  then under the include roots of INCLUDE_ROOTS; a name found nowhere in the project (a system
  or llama.cpp header) is not the project's and is not checked.
- Library layers: a header under include/ngramspec (and the src/ file of the same name) may
  include only library headers of its own or a lower layer of LAYERS.
"""

import argparse
import fnmatch
import os
import re
import sys

# The library's layers, lowest first. A header matches the first layer with a pattern that
# matches its path under include/ngramspec (an explicit name wins over "*", which puts every other
# header in its layer).
LAYERS = [
    ("foundation", ["token.hpp", "version.hpp", "allocation_error.hpp", "argument_error.hpp", "detail/fnv1a.hpp",
                    "detail/prefetch.hpp",
                    "detail/physical_memory.hpp", "detail/huge_page_allocator.hpp", "detail/open_table.hpp",
                    "detail/last_end_table.hpp", "detail/top_k_select.hpp", "detail/parse_number.hpp"]),
    ("corpus file", ["corpus_file.hpp", "corpus_draft.hpp", "detail/corpus_format.hpp", "detail/suffix_match.hpp",
                     "corpus_builder.hpp", "mapped_corpus.hpp"]),
    ("live corpus", ["shared_corpus.hpp"]),
    ("drafting", ["*"]),
    ("decoding", ["speculative_decoder.hpp", "batch_speculator.hpp", "detail/batch_passes.hpp"]),
    ("umbrella", ["ngramspec.hpp"]),
]

# What each folder (a path ending in /) or file may include besides itself. The first entry that
# holds a file is its folder.
FOLDERS = [
    ("include/ngramspec/ngramspec.h", []),  # the C ABI: C, standalone
    ("include/ngramspec/", ["include/ngramspec/"]),
    ("src/", ["include/ngramspec/"]),
    ("python/", ["include/ngramspec/ngramspec.h"]),
    ("tools/common/", ["include/ngramspec/"]),
    ("tools/", ["include/ngramspec/", "tools/common/", "tools/replay/"]),
    ("examples/", ["include/ngramspec/", "tools/common/"]),
    ("integrations/", ["include/ngramspec/", "tools/common/", "tools/replay/"]),
    ("bench/", ["include/ngramspec/", "tools/", "tests/support/"]),
    ("tests/", ["include/ngramspec/", "src/", "python/", "tools/", "examples/", "integrations/", "bench/"]),
]

# Where quoted includes are looked up after the including file's folder (the build's include
# directories), in order.
INCLUDE_ROOTS = ["include", "tools", "tools/replay", "tools/common", "tests", "tests/support", "examples/llama2",
                 "integrations/llama.cpp", "bench", "tests/fuzz"]

SCANNED = ["include", "src", "python", "tools", "examples", "integrations", "bench", "tests"]
SOURCE_SUFFIXES = (".h", ".hpp", ".c", ".cc", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def within(path, place):
    """Whether `path` is `place` (a file) or lies under it (a folder, ending in /)."""
    return path.startswith(place) if place.endswith("/") else path == place


def folder_of(path):
    for place, _ in FOLDERS:
        if within(path, place):
            return place
    return None


def may_include(folder, target):
    return within(target, folder) or any(within(target, place) for place in dict(FOLDERS)[folder])


def layer_of(header):
    """Index into LAYERS of a path under include/ngramspec/ (e.g. "detail/fnv1a.hpp"), or None."""
    default = None
    for index, (name, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if pattern == "*":
                default = index
            elif fnmatch.fnmatch(header, pattern):
                return index
    return default


def library_layer(root, path):
    """The layer of a library file: a header's own, a src/ file's that of its header (NAME.hpp or
    detail/NAME.hpp)."""
    if path.startswith("include/ngramspec/") and path.endswith(".hpp"):
        return layer_of(path[len("include/ngramspec/"):])
    if path.startswith("src/"):
        if path.startswith("src/c_api"):
            return len(LAYERS)  # the C ABI (src/c_api*.cpp, src/c_api/) sits on the whole library
        stem = os.path.splitext(os.path.basename(path))[0]
        for header in (stem + ".hpp", "detail/" + stem + ".hpp"):
            if os.path.isfile(os.path.join(root, "include", "ngramspec", header)):
                return layer_of(header)
        return layer_of(stem + ".hpp")
    return None


def source_files(root):
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")


def resolve(root, path, name, quoted):
    """The project file an include names, or None when it is not the project's."""
    candidates = []
    if quoted:
        candidates.append(os.path.join(os.path.dirname(path), name))
    candidates += [os.path.join(r, name) for r in INCLUDE_ROOTS]
    for candidate in candidates:
        candidate = os.path.normpath(candidate).replace(os.sep, "/")
        if not candidate.startswith("..") and os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def check(root):
    crossings = []
    for path in source_files(root):
        folder = folder_of(path)
        if folder is None:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for number, line in enumerate(lines, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            quoted, name = match.group(1) == '"', match.group(2)
            if not quoted and not name.startswith("ngramspec/"):
                continue  # a system header
            target = resolve(root, path, name, quoted)
            if target is None:
                continue  # not the project's (llama.cpp's, the system's)
            where = f"{path}:{number}: includes {target}"
            if not may_include(folder, target):
                crossings.append(f"{where}: {folder} may not include {folder_of(target) or target}")
                continue
            own, theirs = library_layer(root, path), library_layer(root, target)
            if own is not None and theirs is not None and theirs > own:
                crossings.append(f"{where}: the {LAYERS[own][0] if own < len(LAYERS) else 'C ABI'} layer may not "
                                 f"include the {LAYERS[theirs][0]} layer above it")
    return crossings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                        help="the project's root (default: this script's parent folder)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if not os.path.isdir(os.path.join(root, "include", "ngramspec")):
        print(f"check_includes: {root} is not the project's root (no include/ngramspec)", file=sys.stderr)
        return 2
    crossings = check(root)
    for crossing in crossings:
        print(crossing)
    if crossings:
        print(f"check_includes: {len(crossings)} include(s) cross the rule of docs/ARCHITECTURE.md", file=sys.stderr)
        return 1
    print("check_includes: every include follows docs/ARCHITECTURE.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
