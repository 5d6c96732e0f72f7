"""python/README.md's batch example runs as shown: every token, in far fewer passes than plain decoding."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = "<!-- example: python, run by python/tests/test_readme.py -->"


def test_the_readme_python_example() -> None:
    if not README.is_file():
        pytest.skip("no python/README.md (the tests run outside the source tree)")
    text = README.read_text()
    assert MARKER in text, "python/README.md's example lost its marker"
    block = re.search(r"```python\n(.*?)```", text[text.index(MARKER):], re.DOTALL)
    assert block is not None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.group(1), "python/README.md (example)", "exec"), {"__name__": "readme_example"})
    match = re.fullmatch(r"(\d+) tokens in (\d+) batched passes; plain decoding takes 180\n", printed.getvalue())
    assert match, printed.getvalue()
    assert int(match.group(1)) == 20 * (7 + 8 + 9)  # every token of the three sequences
    assert int(match.group(2)) < 180 // 4  # plain decoding's 180 passes; the counting was drafted
