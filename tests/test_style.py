"""The code is as ruff and clang-format want it (pyproject.toml's [tool.ruff],
.clang-format): a finding fails the test and is shown. The README's install
command installs both tools; the test skips only where one is missing."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff_command() -> list[str] | None:
    if importlib.util.find_spec("ruff") is not None:  # the test extra's, beside this interpreter
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    return [found] if found else None


def test_python_is_ruff_clean():
    ruff = ruff_command()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    proc = subprocess.run([*ruff, "check", "--no-cache", "shapefn", "tests", "tools"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff check found problems:\n{proc.stdout}{proc.stderr}"


def test_cpp_is_clang_formatted():
    clang_format = shutil.which("clang-format")
    if clang_format is None:
        pytest.skip("clang-format is not installed (apt-get install clang-format)")
    sources = sorted(p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".cc", ".h"))
    assert sources
    proc = subprocess.run([clang_format, "--dry-run", "--Werror", *map(str, sources)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"clang-format would change (clang-format -i <files>):\n{proc.stderr[-20000:]}"
