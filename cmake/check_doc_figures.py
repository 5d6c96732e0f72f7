#!/usr/bin/env python3
"""Check that the exact figures the docs quote are the ones their commands print.

docs/figures.json lists commands whose printed figures are exact (tokens per pass, simulated speedups, drafts per
sequence: counts, not times), and for each printed figure the places in the docs that quote it. Each command is run
from the source folder, each figure read from its output with the entry's regular expression, and each quote found
in its document with its own regular expression, whose first group is the figure (rounded first to the quote's
"decimals", where the document rounds it). A quote that differs from the printed figure is reported as a diff of the
document (and written with --write); a quote the document no longer holds, or holds more than once, is an error of
the manifest, so that no figure silently drops out of the check.

Placeholders in commands and environments: {build} (--build), {shared} (--shared), {python} (this interpreter).
Exit status: 0 all quotes agree, 1 a quote disagrees or is missing, 2 usage or a command that failed,
77 the shared folder is missing (nothing can be checked).

    /usr/bin/python3 cmake/check_doc_figures.py --build build/release            # every figure
    /usr/bin/python3 cmake/check_doc_figures.py --build build/release --fast     # those that take seconds
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1]


def expand(text: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        text = text.replace("{" + key + "}", value)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=SOURCE / "build" / "release", help="a Release build folder")
    parser.add_argument("--shared", type=Path, default=SOURCE.parent / "shared", help="the shared data and models")
    parser.add_argument("--manifest", type=Path, default=SOURCE / "docs" / "figures.json")
    parser.add_argument("--docs-root", type=Path, default=SOURCE,
                        help="the folder the manifest's documents are read from (the commands run in the source)")
    parser.add_argument("--fast", action="store_true", help="only the commands marked fast (seconds in Release)")
    parser.add_argument("--only", default="", help="only the commands whose name contains this text")
    parser.add_argument("--write", action="store_true", help="write the printed figures into the docs")
    parser.add_argument("--list", action="store_true", help="list the commands and quotes, run nothing")
    args = parser.parse_args()

    entries = json.loads(args.manifest.read_text(encoding="utf-8"))
    entries = [e for e in entries if (e.get("fast", False) or not args.fast) and args.only in e["name"]]
    if args.list:
        for entry in entries:
            print(f"{entry['name']}{' (fast)' if entry.get('fast') else ''}: {' '.join(entry['command'])}")
            for figure in entry["figures"]:
                for quote in figure["quotes"]:
                    print(f"  {quote['doc']}: {quote['at']}")
        return 0
    if not args.shared.is_dir():
        print(f"skipped: {args.shared} not found (the shared data folder is not beside the project)")
        return 77
    places = {"build": str(args.build.resolve()), "shared": str(args.shared.resolve()), "python": sys.executable}

    docs: dict[str, str] = {}
    written: dict[str, str] = {}
    disagreements = 0
    lost = 0
    for entry in entries:
        command = [expand(word, places) for word in entry["command"]]
        if not Path(command[0]).is_file():
            print(f"{entry['name']}: {command[0]} is not built", file=sys.stderr)
            return 2
        env = dict(os.environ)
        env.update({key: expand(value, places) for key, value in entry.get("env", {}).items()})
        started = time.monotonic()
        if "pipe" in entry:
            # The first command's messages go to a file: a pipe nobody reads could fill and stall it.
            with tempfile.TemporaryFile() as first_errors:
                first = subprocess.Popen(command, cwd=SOURCE, env=env, stdout=subprocess.PIPE, stderr=first_errors)
                run = subprocess.run([expand(word, places) for word in entry["pipe"]], cwd=SOURCE, env=env,
                                     stdin=first.stdout, capture_output=True, text=True, check=False)
                first.stdout.close()  # type: ignore[union-attr]
                failed = first.wait() != 0 or run.returncode != 0
                first_errors.seek(0)
                errors = first_errors.read().decode(errors="replace") + run.stderr
        else:
            run = subprocess.run(command, cwd=SOURCE, env=env, capture_output=True, text=True, check=False)
            failed = run.returncode != 0
            errors = run.stderr
        output = run.stdout + run.stderr
        print(f"{entry['name']}: {time.monotonic() - started:.1f} s", flush=True)
        if failed:
            print(f"{entry['name']}: the command failed:\n  {' '.join(command)}\n{errors}", file=sys.stderr)
            return 2
        for figure in entry["figures"]:
            printed = re.findall(figure["printed"], output, flags=re.MULTILINE)
            if len(printed) != 1:
                print(f"{entry['name']}: /{figure['printed']}/ matches {len(printed)} lines of the output, not one:\n"
                      f"{output}", file=sys.stderr)
                return 2
            for quote in figure["quotes"]:
                name = quote["doc"]
                if name not in docs:
                    docs[name] = (args.docs_root / name).read_text(encoding="utf-8")
                    written[name] = docs[name]
                found = list(re.finditer(quote["at"], written[name], flags=re.MULTILINE))
                if len(found) != 1:
                    print(f"{name}: /{quote['at']}/ is found {len(found)} times, not once: the manifest "
                          f"({args.manifest.name}) no longer points at the quote of {entry['name']}'s figure")
                    lost += 1
                    continue
                match = found[0]
                # A prose figure may round the printed one ("4.9 tokens a pass" of a printed 4.90).
                value = f"{float(printed[0]):.{quote['decimals']}f}" if "decimals" in quote else printed[0]
                line = written[name].count("\n", 0, match.start(1)) + 1
                if match.group(1) == value:
                    print(f"  {name}:{line}: {value}")
                    continue
                print(f"  {name}:{line}: quotes {match.group(1)} where the command prints {value}")
                disagreements += 1
                text = written[name]
                written[name] = text[:match.start(1)] + value + text[match.end(1):]

    for name, text in written.items():
        if text == docs[name]:
            continue
        sys.stdout.writelines(difflib.unified_diff(docs[name].splitlines(keepends=True), text.splitlines(keepends=True),
                                                   f"a/{name}", f"b/{name}", n=0))
        if args.write:
            (args.docs_root / name).write_text(text, encoding="utf-8")
    if disagreements and not args.write:
        print(f"{disagreements} quoted figure(s) disagree with their commands (--write puts the printed ones in)")
    return 1 if lost or (disagreements and not args.write) else 0


if __name__ == "__main__":
    sys.exit(main())
