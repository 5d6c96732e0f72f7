"""The package: its version, how it finds the native library, and what errors become."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ngramspec
from ngramspec import _native

PYTHON_DIR = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path(ngramspec.__file__).resolve().parent
SONAME = f"libngramspec.so.{_native.ABI_MAJOR}.{_native.ABI_MINOR}"  # the name the system loader is asked for


def run_python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without NGRAMSPEC_LIBRARY or a PYTHONPATH to the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("NGRAMSPEC_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def test_version_is_the_library_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", ngramspec.__version__)
    assert ngramspec.version() == ngramspec.__version__
    major, minor, patch = (int(part) for part in ngramspec.__version__.split("."))
    assert int(_native.lib.ngramspec_version_number()) == major * 10000 + minor * 100 + patch
    assert (major, minor) >= (_native.ABI_MAJOR, _native.ABI_MINOR)


def test_pyproject_version_matches_the_library() -> None:
    pyproject = PYTHON_DIR / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no pyproject.toml beside the package (an installed copy)")
    match = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.MULTILINE)
    assert match, "pyproject.toml has no version"
    assert match.group(1) == ngramspec.__version__


def test_public_names() -> None:
    for name in ngramspec.__all__:
        assert hasattr(ngramspec, name), name
    for cls in (ngramspec.SharedCorpus, ngramspec.MappedCorpus, ngramspec.MatchDrafter, ngramspec.NGramPredictor,
                ngramspec.BatchSpeculator):
        assert cls.__doc__
        for attribute, member in vars(cls).items():
            if not attribute.startswith("_") and callable(member):
                assert member.__doc__, f"{cls.__name__}.{attribute} has no docstring"


def test_library_path_is_a_loaded_file() -> None:
    path = ngramspec.library_path()
    assert "libngramspec.so" in path
    if os.environ.get("NGRAMSPEC_LIBRARY"):
        assert path == os.environ["NGRAMSPEC_LIBRARY"]


def test_a_bad_NGRAMSPEC_LIBRARY_is_an_import_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / SONAME
    result = run_python("import ngramspec", clean_env(NGRAMSPEC_LIBRARY=str(missing), PYTHONPATH=str(PYTHON_DIR)),
                        tmp_path)
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert str(missing) in result.stderr
    assert "NGRAMSPEC_LIBRARY" in result.stderr


def test_a_library_that_is_not_the_c_abi_is_refused(tmp_path: Path) -> None:
    libm = None
    for candidate in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"):
        if os.path.exists(candidate):
            libm = candidate
    if libm is None:
        pytest.skip("no libm.so.6 at a known place")
    result = run_python("import ngramspec", clean_env(NGRAMSPEC_LIBRARY=libm, PYTHONPATH=str(PYTHON_DIR)), tmp_path)
    assert result.returncode != 0
    assert "not the ngramspec C ABI" in result.stderr


def copy_package(destination: Path) -> Path:
    """A copy of the package's Python files in destination/ngramspec, away from any build tree."""
    target = destination / "ngramspec"
    shutil.copytree(PACKAGE_DIR, target, ignore=shutil.ignore_patterns("__pycache__", "libngramspec.so*"))
    return target


def test_without_a_library_the_import_error_names_every_place_looked(tmp_path: Path) -> None:
    copy_package(tmp_path)
    result = run_python("import ngramspec", clean_env(PYTHONPATH=str(tmp_path)), tmp_path)
    if result.returncode == 0:
        pytest.skip("a libngramspec.so is on the system's library path")
    message = result.stderr
    assert "ImportError" in message
    assert "NGRAMSPEC_LIBRARY: not set" in message
    assert f"{tmp_path / 'ngramspec'}/libngramspec.so*" in message
    assert "build trees" in message
    assert "system loader path" in message
    assert "--target ngramspec_c" in message


def test_a_library_beside_the_package_is_found(tmp_path: Path) -> None:
    package = copy_package(tmp_path)
    real = Path(ngramspec.library_path()).resolve()
    (package / SONAME).symlink_to(real)
    result = run_python("import ngramspec; print(ngramspec.library_path()); print(ngramspec.__version__)",
                        clean_env(PYTHONPATH=str(tmp_path)), tmp_path)
    assert result.returncode == 0, result.stderr
    path, version = result.stdout.split()
    assert path == str(package / SONAME)
    assert version == ngramspec.__version__


def test_a_build_tree_library_is_found(tmp_path: Path) -> None:
    # The layout of the repository: <root>/python/ngramspec and <root>/build/<dir>/libngramspec.so.
    package = copy_package(tmp_path / "python")
    (tmp_path / "include" / "ngramspec").mkdir(parents=True)
    (tmp_path / "include" / "ngramspec" / "ngramspec.h").write_text("/* the source tree's header */\n")
    build = tmp_path / "build" / "somewhere"
    build.mkdir(parents=True)
    real = Path(ngramspec.library_path()).resolve()
    (build / "libngramspec.so").symlink_to(real)
    result = run_python("import ngramspec; print(ngramspec.library_path())",
                        clean_env(PYTHONPATH=str(package.parent)), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(build / "libngramspec.so")


def test_errors_carry_the_library_message() -> None:
    with pytest.raises(ValueError, match="count_max_order"):
        ngramspec.MatchDrafter(count_max_order=9)
    # The message is the calling thread's last error, so a later success does not clear what was raised.
    try:
        ngramspec.NGramPredictor(min_order=5, max_order=3)
    except ValueError as error:
        assert "order" in str(error)
    else:
        raise AssertionError("NGramPredictor(min_order=5, max_order=3) did not raise")


def test_internal_errors_are_ngramspec_errors() -> None:
    assert issubclass(ngramspec.NgramspecError, RuntimeError)
    from ngramspec._errors import raise_status

    with pytest.raises(ngramspec.NgramspecError):
        raise_status(3)
    with pytest.raises(MemoryError):
        raise_status(2)
    with pytest.raises(ValueError):
        raise_status(1)
    with pytest.raises(ngramspec.CorpusFileError):
        raise_status(4)


def fake_sanitizer_library(path: Path, runtime: str = "libasan.so.8") -> Path:
    """A minimal 64-bit little-endian ELF shared object whose dynamic section names `runtime` and
    libc.so.6 as DT_NEEDED: what a sanitizer build's libngramspec.so carries (it is never loaded)."""
    import struct
    strings = b"\0" + runtime.encode() + b"\0libc.so.6\0"
    strings_offset = 64
    dynamic_offset = (strings_offset + len(strings) + 7) // 8 * 8
    dynamic = struct.pack("<qQqQqQ", 1, 1, 1, 2 + len(runtime), 0, 0)
    sections_offset = dynamic_offset + len(dynamic)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sections_offset, 0, 64, 0, 0, 64, 3, 0)
    null = bytes(64)
    dynstr = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, strings_offset, len(strings), 0, 0, 1, 0)
    dynsec = struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dynamic_offset, len(dynamic), 1, 0, 8, 16)
    data = header + strings + bytes(dynamic_offset - strings_offset - len(strings)) + dynamic + null + dynstr + dynsec
    path.write_bytes(data)
    return path


def test_the_elf_reader_reads_what_a_library_links(tmp_path: Path) -> None:
    assert "libc.so.6" in _native._elf_needed(ngramspec.library_path())
    # The library this interpreter loaded links no sanitizer runtime, or (a sanitizer build's own
    # tests) one that was already in the process.
    runtime = _native._sanitizer_runtime(ngramspec.library_path())
    assert runtime is None or _native._runtime_loaded(runtime)
    fake = fake_sanitizer_library(tmp_path / "libngramspec.so")
    assert _native._elf_needed(str(fake)) == ["libasan.so.8", "libc.so.6"]
    assert _native._sanitizer_runtime(str(fake)) == "libasan.so.8"
    (tmp_path / "text").write_text("not an ELF file")
    assert _native._elf_needed(str(tmp_path / "text")) == []


# A preloaded runtime (LD_PRELOAD, as the sanitizer builds' own tests run) lets its builds load.
def test_a_runtime_in_the_process_is_seen() -> None:
    assert _native._runtime_loaded("libc.so.6")
    assert not _native._runtime_loaded("libngramspec_no_such_runtime.so.1")


# A sanitizer build of the library aborted the interpreter that loaded it ("ASan runtime does not
# come first"): it is passed over before it is loaded, and the search report says why.
def test_a_sanitizer_build_is_passed_over_naming_its_runtime(tmp_path: Path) -> None:
    if _native._runtime_loaded("libasan.so.8"):
        pytest.skip("this interpreter runs with the ASan runtime preloaded (a sanitizer build's tests), so "
                    "sanitizer builds are loaded, not passed over")
    fake = fake_sanitizer_library(tmp_path / SONAME)
    result = run_python("import ngramspec", clean_env(NGRAMSPEC_LIBRARY=str(fake), PYTHONPATH=str(PYTHON_DIR)),
                        tmp_path)
    assert result.returncode == 1, result.stderr
    assert "ImportError" in result.stderr
    assert f"{fake}: passed over: a sanitizer build (it links libasan.so.8" in result.stderr

    # In the build trees, a newer sanitizer build gives way to the plain one.
    package = copy_package(tmp_path / "repo" / "python")
    root = tmp_path / "repo"
    (root / "include" / "ngramspec").mkdir(parents=True)
    (root / "include" / "ngramspec" / "ngramspec.h").write_text("/* the source tree's header */\n")
    plain = root / "build" / "dev"
    plain.mkdir(parents=True)
    (plain / "libngramspec.so").symlink_to(Path(ngramspec.library_path()).resolve())
    asan = root / "build" / "asan"
    asan.mkdir(parents=True)
    fake_sanitizer_library(asan / "libngramspec.so")
    os.utime(asan / "libngramspec.so", (4_000_000_000, 4_000_000_000))  # the most recently built
    result = run_python("import ngramspec; print(ngramspec.library_path())",
                        clean_env(PYTHONPATH=str(package.parent)), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(plain / "libngramspec.so")
