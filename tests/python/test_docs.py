"""Every Python example of the user guide and the README runs as written (on the CPU), so that the
documentation stays true."""
import re
from pathlib import Path

import pytest
import torch

from conftest import skip_if_aot_inductor_crashes

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
    if "aoti_" in code:  # an AOTInductor example, which a broken C++ toolchain would crash
        skip_if_aot_inductor_crashes(torch.device("cpu"))
    exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})
