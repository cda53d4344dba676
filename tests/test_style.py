"""The code is as ruff and clang-format want it (pyproject.toml's [tool.ruff],
.clang-format): a finding fails the test and is shown. Both tools come
pinned with the ``test`` extra (their findings differ between versions:
another clang-format would flag code this one accepts); the tests skip only
where the extra is not installed."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff_command() -> list[str] | None:
    if importlib.util.find_spec("ruff") is not None:  # tests/requirements.txt's, beside this interpreter
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    return [found] if found else None


def test_python_is_ruff_clean():
    ruff = ruff_command()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -r tests/requirements.txt)")
    proc = subprocess.run([*ruff, "check", "--no-cache", "shapefn", "tests", "tools"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff check found problems:\n{proc.stdout}{proc.stderr}"


# The clang-format of tests/requirements.txt.
CLANG_FORMAT_VERSION = "14.0.6"


def pinned_clang_format() -> str | None:
    """tests/requirements.txt's clang-format: the one installed beside this
    interpreter, not whichever the system has."""
    for directory in (Path(sys.executable).parent, Path(sys.prefix) / "bin"):
        candidate = directory / "clang-format"
        if candidate.exists():
            return str(candidate)
    return None


def test_cpp_is_clang_formatted():
    clang_format = pinned_clang_format()
    if clang_format is None:
        pytest.skip("clang-format is not installed (pip install -r tests/requirements.txt)")
    version = subprocess.run([clang_format, "--version"], capture_output=True, text=True).stdout
    assert f"version {CLANG_FORMAT_VERSION}" in version, version
    sources = sorted(p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".cc", ".h"))
    assert sources
    proc = subprocess.run([clang_format, "--dry-run", "--Werror", *map(str, sources)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"clang-format would change (clang-format -i <files>):\n{proc.stderr[-20000:]}"
