"""Every Python example of the user guide and the README runs as written (on the CPU), so that the
documentation stays true."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/user-guide.md", "README.md")


def examples():
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text[:match.start()].count("\n") + 1
            yield pytest.param(match.group(1), id=f"{doc}:{line}")


@pytest.mark.parametrize("code", list(examples()))
def test_example_runs(code):
    exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})
