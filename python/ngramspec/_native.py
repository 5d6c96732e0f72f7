"""Finding and loading the native library (the C ABI, ``libngramspec.so``) and declaring its functions.

The library is looked for, in order:

1. ``NGRAMSPEC_LIBRARY``: the path of the library, when that environment variable is set (and only
   there: a path that does not load is an error, not a reason to look elsewhere);
2. ``libngramspec.so*`` inside the package's own directory (the install layout: ``cmake --install``
   puts a link to the installed library there);
3. the repository's build trees, ``<repository>/build/*/libngramspec.so*`` (and one folder deeper),
   the most recently built first, when the package is imported from ``<repository>/python``;
4. the system's loader search for ``libngramspec.so.<major>.<minor>`` (``LD_LIBRARY_PATH``,
   ``ld.so.cache``).

A library built with a sanitizer (its ELF ``DT_NEEDED`` entries name a sanitizer runtime, read from
the file before it is loaded: loading it would abort the process, "ASan runtime does not come
first") unless that runtime is already in the process (LD_PRELOAD), one that does not load (another architecture) or one that is not the C ABI of a compatible
version is passed over with the reason noted; when none is left, ``ImportError`` names every place
looked and why each failed.
"""

from __future__ import annotations

import ctypes
import os
import struct
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int64, c_size_t, c_uint, c_uint64,
                    c_void_p)
from pathlib import Path

__all__ = ["lib", "library_path", "ABI_MAJOR", "ABI_MINOR"]

# The C ABI this package is written against: ngramspec.h 0.3. A library of the same major version
# and this minor version or a later one is accepted.
ABI_MAJOR = 0
ABI_MINOR = 3
_SONAME = f"libngramspec.so.{ABI_MAJOR}.{ABI_MINOR}"
_ENV = "NGRAMSPEC_LIBRARY"


# ---- The C structs (ngramspec.h); field order and types as declared there. ----------------------


class MatchConfig(Structure):
    """ngramspec_match_config."""

    _fields_ = [
        ("index_capacity", c_size_t),  # also named cap in C: an anonymous union of the two
        ("copy_min_match", c_size_t),
        ("count_max_order", c_size_t),
        ("count_window", c_size_t),
        ("min_confidence", c_double),
    ]


class NgramConfig(Structure):
    """ngramspec_ngram_config."""

    _fields_ = [("min_order", c_size_t), ("max_order", c_size_t), ("window", c_size_t)]


class BatchConfig(Structure):
    """ngramspec_batch_config."""

    _fields_ = [
        ("max_sequences", c_size_t),
        ("max_pass_tokens", c_size_t),
        ("max_record_tokens", c_size_t),
        ("cost", c_char_p),
        ("default_drafter", c_int),
        ("drafter", MatchConfig),
    ]


class SequenceOptions(Structure):
    """ngramspec_sequence_options."""

    _fields_ = [
        ("max_new_tokens", c_size_t),
        ("stop_tokens", c_void_p),
        ("n_stop_tokens", c_size_t),
        ("max_context", c_size_t),
        ("speculate", c_int),
        ("max_drafts", c_size_t),
    ]


class Step(Structure):
    """ngramspec_step."""

    _fields_ = [
        ("emitted", c_size_t),
        ("accepted", c_size_t),
        ("rollback_to", c_size_t),
        ("discarded", c_size_t),
        ("finished", c_int),
        ("stop_reason", c_int),
    ]


class TreeConfig(Structure):
    """ngramspec_tree_config (experimental in the C ABI)."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("successor_slots", c_size_t),
        ("max_children", c_size_t),
        ("vocab_size", c_size_t),
        ("top_k", c_size_t),
        ("shared_top_k", c_int),
        ("carry_over", c_int),
        ("enrich_counts", c_int),
        ("draw_recycled", c_int),
        ("draw_seed", c_uint64),
        ("recycled_history", c_float),
    ]


class SamplingOptions(Structure):
    """ngramspec_sampling_options."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("temperature", c_float),
        ("top_k", c_size_t),
        ("top_p", c_float),
        ("min_p", c_float),
        ("seed", c_uint64),
        ("mode", c_int),
    ]


class BatchStats(Structure):
    """ngramspec_batch_stats."""

    _fields_ = [("proposals", c_uint64), ("drafted", c_uint64), ("accepted", c_uint64), ("emitted", c_uint64),
                ("out_of_vocabulary", c_uint64)]


class LearnedCostStats(Structure):
    """ngramspec_learned_cost_stats."""

    _fields_ = [("passes", c_uint64), ("seconds", c_double), ("plain_passes", c_uint64), ("plain_seconds", c_double),
                ("exploring_passes", c_uint64), ("exploration_seconds", c_double)]


# ---- Signatures. Pointers are c_void_p so that plain integers (NumPy data addresses) pass fast. --

_P = c_void_p  # any pointer: a handle, an array's address, or None for NULL
_S = c_size_t
_STATUS = c_int

_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "ngramspec_version_number": (c_uint, []),
    "ngramspec_version_string": (c_char_p, []),
    "ngramspec_status_name": (c_char_p, [c_int]),
    "ngramspec_last_error": (c_char_p, []),
    # SharedCorpus
    "ngramspec_corpus_create": (_STATUS, [_S, _P]),
    "ngramspec_corpus_free": (None, [_P]),
    "ngramspec_corpus_append": (_STATUS, [_P, _P, _S]),
    "ngramspec_corpus_clear": (_STATUS, [_P]),
    "ngramspec_corpus_size": (_S, [_P]),
    "ngramspec_corpus_records": (c_uint64, [_P]),
    "ngramspec_corpus_capacity_tokens": (_S, [_P]),
    "ngramspec_corpus_memory_bytes": (_S, [_P]),
    "ngramspec_corpus_append_stamped": (_STATUS, [_P, _P, _S, c_int64]),
    "ngramspec_corpus_last_stamp": (c_int64, [_P]),
    "ngramspec_corpus_draft": (_STATUS, [_P, _P, _S, _P, _S, _P, _P]),
    "ngramspec_corpus_save": (_STATUS, [_P, c_char_p]),
    "ngramspec_corpus_load": (_STATUS, [_P, c_char_p]),
    "ngramspec_corpus_load_trusted": (_STATUS, [_P, c_char_p]),
    # Corpus files
    "ngramspec_corpus_file_open": (_STATUS, [c_char_p, _P]),
    "ngramspec_corpus_file_close": (None, [_P]),
    "ngramspec_corpus_file_verify": (_STATUS, [_P]),
    "ngramspec_corpus_file_verify_checksums": (_STATUS, [_P]),
    "ngramspec_corpus_file_vocab_size": (c_uint64, [_P]),
    "ngramspec_corpus_file_tokenizer_fingerprint": (c_uint64, [_P]),
    "ngramspec_corpus_file_size": (_S, [_P]),
    "ngramspec_corpus_file_records": (c_uint64, [_P]),
    "ngramspec_corpus_file_bytes": (c_uint64, [_P]),
    "ngramspec_corpus_file_first_stamp": (c_int64, [_P]),
    "ngramspec_corpus_file_last_stamp": (c_int64, [_P]),
    "ngramspec_corpus_file_draft": (_STATUS, [_P, _P, _S, _P, _S, _P, _P]),
    # MatchDrafter
    "ngramspec_match_config_default": (MatchConfig, []),
    "ngramspec_match_drafter_create": (_STATUS, [POINTER(MatchConfig), _P, _P]),
    "ngramspec_match_drafter_create_file": (_STATUS, [POINTER(MatchConfig), _P, _P, c_int, _P]),
    "ngramspec_match_drafter_create_vocab": (_STATUS, [POINTER(MatchConfig), _P, _P, c_int, c_uint64, c_uint64, _P]),
    "ngramspec_match_drafter_out_of_vocabulary": (c_uint64, [_P]),
    "ngramspec_match_drafter_free": (None, [_P]),
    "ngramspec_match_drafter_update": (_STATUS, [_P, _P, _S]),
    "ngramspec_match_drafter_predict": (_STATUS, [_P, _P, _S, _P, _P]),
    "ngramspec_match_drafter_reset": (_STATUS, [_P]),
    "ngramspec_match_drafter_restart": (_STATUS, [_P]),
    "ngramspec_match_drafter_memory_bytes": (_S, [_P]),
    # NGramPredictor
    "ngramspec_ngram_config_default": (NgramConfig, []),
    "ngramspec_ngram_predictor_create": (_STATUS, [POINTER(NgramConfig), _P]),
    "ngramspec_ngram_predictor_free": (None, [_P]),
    "ngramspec_ngram_predictor_update": (_STATUS, [_P, _P, _S]),
    "ngramspec_ngram_predictor_predict": (_STATUS, [_P, _P, _S, _P, _P]),
    "ngramspec_ngram_predictor_reset": (_STATUS, [_P]),
    "ngramspec_ngram_predictor_memory_bytes": (_S, [_P]),
    # BatchSpeculator
    "ngramspec_batch_config_default": (BatchConfig, []),
    "ngramspec_sequence_options_default": (SequenceOptions, []),
    "ngramspec_batch_create": (_STATUS, [POINTER(BatchConfig), _P, _P]),
    "ngramspec_batch_create_file": (_STATUS, [POINTER(BatchConfig), _P, _P, c_int, _P]),
    "ngramspec_batch_create_vocab": (_STATUS, [POINTER(BatchConfig), _P, _P, c_int, c_uint64, c_uint64, _P]),
    "ngramspec_batch_free": (None, [_P]),
    "ngramspec_batch_begin": (_STATUS, [_P, c_uint64, _P, _S, POINTER(SequenceOptions)]),
    "ngramspec_batch_propose": (_STATUS, [_P, _P, _S, _P, _S, _P, _S, _P]),
    "ngramspec_batch_accept": (_STATUS, [_P, _P, _S, _P, _S, _P, _P]),
    "ngramspec_batch_finish": (_STATUS, [_P, c_uint64]),
    "ngramspec_batch_cancel": (_STATUS, [_P, c_uint64]),
    "ngramspec_batch_contains": (c_int, [_P, c_uint64]),
    "ngramspec_batch_size": (_S, [_P]),
    "ngramspec_batch_memory_bytes": (_S, [_P]),
    "ngramspec_batch_stats_get_sized": (_STATUS, [_P, POINTER(BatchStats), _S]),
    # Tree batches (experimental)
    "ngramspec_tree_config_init": (_STATUS, [POINTER(TreeConfig), _S]),
    "ngramspec_batch_create_tree": (_STATUS, [POINTER(BatchConfig), POINTER(TreeConfig), _P, _P]),
    "ngramspec_batch_create_tree_file": (_STATUS, [POINTER(BatchConfig), POINTER(TreeConfig), _P, _P, c_int, c_uint64,
                                                   c_uint64, _P]),
    "ngramspec_batch_top_k": (_S, [_P]),
    "ngramspec_batch_propose_trees": (_STATUS, [_P, _P, _S, _P, _P, _S, _P, _S, _P]),
    "ngramspec_batch_accept_trees": (_STATUS, [_P, _P, _S, _P, _S, _P, _P, _S, _P, _P, _S]),
    "ngramspec_batch_propose_trees_q": (_STATUS, [_P, _P, _S, _P, _P, _S, _P, _S, _P, _P, _P, _P, _S, _P]),
    "ngramspec_batch_accept_trees_q": (_STATUS, [_P, _P, _S, _P, _S, _P, _P, _P, _S, _P, _P, _S]),
    # Verify costs and the draft planner (experimental)
    "ngramspec_verify_cost_create": (_STATUS, [c_char_p, _P]),
    "ngramspec_verify_cost_free": (None, [_P]),
    "ngramspec_verify_cost_of": (c_double, [_P, _S]),
    "ngramspec_verify_cost_of_pass": (c_double, [_P, _S, _S]),
    "ngramspec_verify_cost_spec": (c_char_p, [_P]),
    "ngramspec_plan_drafts": (_STATUS, [_P, _S, c_double, _P, _S, _P]),
    # Learned costs
    "ngramspec_batch_report_pass_seconds": (_STATUS, [_P, c_double]),
    "ngramspec_batch_learns_cost": (c_int, [_P]),
    "ngramspec_batch_describe_cost": (_STATUS, [_P, _P, _S, _P]),
    "ngramspec_batch_learned_cost_stats": (_STATUS, [_P, POINTER(LearnedCostStats), _S]),
    "ngramspec_learned_cost_create": (_STATUS, [c_char_p, c_double, _S, _P]),
    "ngramspec_learned_cost_free": (None, [_P]),
    "ngramspec_learned_cost_plan": (_STATUS, [_P, _S, _S, c_double, _P, _S, _P]),
    "ngramspec_learned_cost_observe": (_STATUS, [_P, _S, _S, c_double]),
    "ngramspec_learned_cost_describe": (_STATUS, [_P, _P, _S, _P]),
    "ngramspec_learned_cost_stats_get": (_STATUS, [_P, POINTER(LearnedCostStats), _S]),
    # Sampling and rejection verification
    "ngramspec_sampling_options_init": (_STATUS, [POINTER(SamplingOptions), _S]),
    "ngramspec_sampler_create": (_STATUS, [POINTER(SamplingOptions), _S, _P]),
    "ngramspec_sampler_free": (None, [_P]),
    "ngramspec_sampler_set_options": (_STATUS, [_P, POINTER(SamplingOptions)]),
    "ngramspec_sampler_verify_chain": (_STATUS, [_P, _P, _S, c_uint64, _P, _S, _P, _P, _P, _S, _P, _P]),
    "ngramspec_sampler_verify_tree": (_STATUS, [_P, _P, _S, c_uint64, _P, _P, _S, _P, _P, _P, _S, _P, _P, _P, _P]),
}


def _declare(library: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = argtypes


def _check(library: ctypes.CDLL) -> str | None:
    """None when `library` is a compatible C ABI, else why not."""
    if not hasattr(library, "ngramspec_version_number"):
        return "not the ngramspec C ABI (no ngramspec_version_number)"
    library.ngramspec_version_number.restype = c_uint
    library.ngramspec_version_number.argtypes = []
    number = int(library.ngramspec_version_number())
    major, minor = number // 10000, number // 100 % 100
    if major != ABI_MAJOR or minor < ABI_MINOR:
        return (f"version {major}.{minor}.{number % 100}; this package needs {ABI_MAJOR}.{ABI_MINOR} or a later "
                f"{ABI_MAJOR}.x")
    missing = [name for name in _SIGNATURES if not hasattr(library, name)]
    if missing:
        return f"not the ngramspec C ABI (no {missing[0]})"
    return None


# The runtimes a sanitizer build links: such a library aborts the process that loads it unless the
# runtime was loaded first (LD_PRELOAD), which a Python interpreter never does by itself.
_SANITIZER_RUNTIMES = ("libasan", "libtsan", "libubsan", "liblsan", "libmsan", "libhwasan",
                       "libclang_rt.asan", "libclang_rt.tsan", "libclang_rt.ubsan", "libclang_rt.msan")


def _elf_needed(path: str) -> list[str]:
    """The DT_NEEDED entries of the ELF file at `path` (the shared libraries it links), read from its
    dynamic section without loading it; [] for a file that is not ELF or has no dynamic section."""
    with open(path, "rb") as file:
        data = file.read()
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return []
    wide = data[4] == 2
    order = "<" if data[5] == 1 else ">"
    try:
        if wide:
            shoff, = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
            section, dynamic_entry = order + "IIQQQQIIQQ", order + "qQ"
        else:
            shoff, = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
            section, dynamic_entry = order + "IIIIIIIIII", order + "iI"
        headers = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
        needed = []
        for header in headers:
            if header[1] != 6:  # SHT_DYNAMIC
                continue
            offset, size, link = header[4], header[5], header[6]
            strings_offset = headers[link][4]
            step = struct.calcsize(dynamic_entry)
            for at in range(offset, offset + size - step + 1, step):
                tag, value = struct.unpack_from(dynamic_entry, data, at)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED
                    end = data.index(b"\0", strings_offset + value)
                    needed.append(data[strings_offset + value:end].decode(errors="replace"))
        return needed
    except (struct.error, IndexError, ValueError):
        return []


def _sanitizer_runtime(path: str) -> str | None:
    """The sanitizer runtime the library at `path` links, or None."""
    try:
        needed = _elf_needed(path)
    except OSError:
        return None
    return next((name for name in needed if name.startswith(_SANITIZER_RUNTIMES)), None)


def _runtime_loaded(runtime: str) -> bool:
    """Whether the sanitizer runtime `runtime` (a DT_NEEDED name) is already in this process
    (LD_PRELOAD put it there): a sanitizer build then loads like any other."""
    stem = runtime.split(".so")[0] + ".so"
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any(stem in line for line in maps)
    except OSError:
        return False


def _try(path: str, looked: list[str], where: str) -> ctypes.CDLL | None:
    if os.sep in path and not os.path.isfile(path):
        looked.append(f"{where}: {path}: no such file" + (" (a broken link)" if os.path.islink(path) else ""))
        return None
    runtime = _sanitizer_runtime(path) if os.sep in path else None
    if runtime is not None and not _runtime_loaded(runtime):
        looked.append(f"{where}: {path}: passed over: a sanitizer build (it links {runtime}, which must be "
                      f"loaded before the interpreter starts; run with LD_PRELOAD={runtime} to use it)")
        return None
    try:
        library = ctypes.CDLL(path)
    except OSError as error:
        looked.append(f"{where}: {path}: does not load ({error})")
        return None
    why = _check(library)
    if why is not None:
        looked.append(f"{where}: {path}: {why}")
        return None
    return library


def _in_directory(directory: Path) -> list[Path]:
    """The library files of one directory, the preferred name first: libngramspec.so, the soname, others."""
    found = [p for p in directory.glob("libngramspec.so*") if not p.name.endswith(".debug")]
    order = {"libngramspec.so": 0, _SONAME: 1}
    return sorted(found, key=lambda p: (order.get(p.name, 2), p.name))


def _build_tree_candidates(repository: Path) -> list[Path]:
    """One library per build directory under <repository>/build, the most recently built first."""
    directories = {p.parent for pattern in ("*/libngramspec.so*", "*/*/libngramspec.so*")
                   for p in (repository / "build").glob(pattern)}
    best = []
    for directory in directories:
        files = [p for p in _in_directory(directory) if p.exists()]
        if files:
            best.append((files[0].stat().st_mtime, files[0]))
    return [path for _, path in sorted(best, key=lambda item: -item[0])]


def _load() -> tuple[ctypes.CDLL, str]:
    looked: list[str] = []
    explicit = os.environ.get(_ENV)
    if explicit:
        library = _try(explicit, looked, _ENV)
        if library is None:
            raise ImportError(f"ngramspec: {looked[0]}; set {_ENV} to the path of a libngramspec.so built from "
                              f"this version, or unset it to search the usual places")
        return library, explicit
    looked.append(f"{_ENV}: not set")

    package = Path(__file__).resolve().parent
    beside = _in_directory(package)
    if not beside:
        looked.append(f"beside the package: no {package}/libngramspec.so*")
    for path in beside:
        library = _try(str(path), looked, "beside the package")
        if library is not None:
            return library, str(path)

    repository = package.parent.parent
    if (repository / "include" / "ngramspec" / "ngramspec.h").is_file():
        built = _build_tree_candidates(repository)
        if not built:
            looked.append(f"build trees: no {repository}/build/*/libngramspec.so*")
    else:
        built = []
        looked.append(f"build trees: none, the package is not in a source tree ({repository})")
    for path in built:
        library = _try(str(path), looked, "build tree")
        if library is not None:
            return library, str(path)

    library = _try(_SONAME, looked, "system loader path")
    if library is not None:
        return library, _SONAME

    places = "\n  - ".join(looked)
    raise ImportError(
        "ngramspec: cannot find the native library libngramspec.so (the ngramspec C ABI). Looked at:\n  - "
        f"{places}\nBuild it (cmake --build <build-dir> --target ngramspec_c) or set {_ENV} to its path.")


lib, _path = _load()
_declare(lib)


def library_path() -> str:
    """The path (or, when the system loader found it, the name) of the native library in use."""
    return _path
