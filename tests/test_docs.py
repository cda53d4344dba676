"""The documentation as a reader uses it: every relative link of the README,
CONTRIBUTING.md and docs/ leads to a file (and a heading, for an anchor),
and the README's examples run.

The README's code blocks run in order, in one scratch directory (later
examples use the files earlier ones write): a ``python`` block as a script
of its own, or as a doctest where it is a ``>>>`` session; each line of an
``sh`` block as a shell command. Install and test-suite commands are not run
here: they must be ``.ci/run``'s, line for line. A code block that cannot run
here says why on the line before it, ``<!-- not run: reason -->``; a reason
naming a test (``tests/test_x.py::test_name``) must name one that exists.
Blocks without a language (printed output) are not code."""
from __future__ import annotations

import collections
import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = [README, REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]

RUNNABLE = {"python", "sh"}
# Languages that are code: a block in one of these runs or is marked not run.
CODE = RUNNABLE | {"bash", "shell", "console", "cpp", "c++", "c"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})([^`]*)$")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# Commands of the README that set up a machine or run the whole suite: CI's.
SETUP = re.compile(r"^(pip install|apt-get|pytest|tools/sanitize-pytest)\b")


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason given, where the block is marked


def parse(text: str) -> tuple[list[str], list[Block]]:
    """``text``'s lines with every fenced block's lines blanked (the prose),
    and its fenced blocks."""
    lines = text.splitlines()
    prose, blocks = list(lines), []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = len(opening.group(1)), opening.group(2), opening.group(3).strip()
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [line[indent:] if line[:indent].isspace() else line for line in lines[i + 1:end]]
        before = i - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = NOT_RUN.search(lines[before]) if before >= 0 else None
        blocks.append(Block(i + 1, info.split()[0].lower() if info else "", "\n".join(body) + "\n",
                            marker.group(1) if marker else None))
        prose[i:end + 1] = [""] * (min(end, len(lines) - 1) - i + 1)
        i = end + 1
    return prose, blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but
    hyphens and underscores), spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings (a repeated one gets ``-1``, ``-2``...)."""
    found, times = set(), collections.Counter()
    for line in parse(path.read_text())[0]:
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            found.add(f"{base}-{times[base]}" if times[base] else base)
            times[base] += 1
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links of markdown file ``path`` that lead nowhere: to a
    missing file, or to an anchor no heading of the target file makes."""
    broken = []
    for number, line in enumerate(parse(path.read_text())[0], 1):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                broken.append(f"{path.name}:{number}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{path.name}:{number}: {target} (no such heading)")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=[str(doc.relative_to(REPO)) for doc in DOCS])
def test_relative_links_resolve(doc):
    assert broken_links(doc) == []


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `second` part\n\n## Its `second` part\n")
    doc = tmp_path / "doc.md"
    doc.write_text("# Title\n\n[ok](other.md#its-second-part-1) [ok](#title) [web](https://example.com)\n"
                   "[gone](missing.md) [bad anchor](other.md#nothing) ![img](gone.png)\n"
                   "```\n[in code](missing-too.md)\n```\n")
    assert broken_links(doc) == ["doc.md:4: missing.md (no such file)", "doc.md:4: other.md#nothing (no such heading)",
                                 "doc.md:4: gone.png (no such file)"]


def section(path: Path, anchor: str) -> str:
    """The text of ``path`` under the heading of ``anchor``, up to the next
    heading of the same or a higher level."""
    lines, out, level = path.read_text().splitlines(), [], None
    for line in lines:
        heading = HEADING.match(line)
        if heading and level is not None and len(heading.group(1)) <= level:
            break
        if level is not None:
            out.append(line)
        elif heading and slug(heading.group(2)) == anchor:
            level = len(heading.group(1))
    return "\n".join(out)


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def test_the_readmes_headline_figures_are_those_of_their_home():
    """Each row of the README's "Headline figures" quotes a figure whose
    home is the section of docs/bench/README.md its first cell links to:
    every number of its shapefn and "against" cells is there too, so the
    two cannot drift apart."""
    rows = [line for line in section(README, "headline-figures").splitlines()
            if line.startswith("| [")]
    assert rows, "the README has no headline figures linked to their home"
    drifted = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        target = LINK.search(cells[0]).group(1)
        file, _, anchor = target.partition("#")
        home = section((README.parent / file).resolve(), anchor)
        assert home, f"{target}: no such section"
        for number in NUMBER.findall(" ".join(cells[1:3]).replace("**", "")):
            if number not in home:
                drifted.append(f"{cells[0]}: {number} is not in {target}")
    assert not drifted, "\n".join(drifted)


def commands(block: Block) -> list[str]:
    """The command lines of a shell block (continuations joined)."""
    return [line for line in block.text.replace("\\\n", " ").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def ci_commands() -> list[str]:
    """``.ci/run``'s commands, each line's subshell parentheses taken off."""
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    return [line.removeprefix("(").removesuffix(")") for line in lines
            if line.strip() and not line.startswith(("#", "set ", "cd ", "export "))]


def test_install_and_test_commands_are_ci_s():
    """The README's install and test commands are exactly what CI runs."""
    setup = [line for block in parse(README.read_text())[1] if block.lang == "sh"
             for line in commands(block) if SETUP.match(line)]
    assert setup == ci_commands()


def test_not_run_reasons_name_tests_that_exist():
    for doc in DOCS:
        for block in parse(doc.read_text())[1]:
            for file, name in re.findall(r"(tests/test_\w+\.py)::(\w+)", block.not_run or ""):
                assert re.search(rf"^def {name}\(", (REPO / file).read_text(), re.M), \
                    f"{doc.name}:{block.line} names {file}::{name}, which does not exist"


def run(args, where: Path, *, shell=False) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(args, cwd=where, env=env, shell=shell, executable="/bin/bash" if shell else None,
                          capture_output=True, text=True, timeout=600)


def run_block(block: Block, where: Path) -> list[subprocess.CompletedProcess]:
    if block.lang == "python":
        script = where / f"readme_line_{block.line}.{'txt' if block.text.startswith('>>>') else 'py'}"
        script.write_text(block.text)
        # A >>> session runs as a doctest: its printed results are checked too.
        doctest = ["-m", "doctest"] if script.suffix == ".txt" else []
        return [run([sys.executable, *doctest, script.name], where)]
    # A setup line's other commands (the demo after the install) run; the
    # install and the test suite do not.
    return [run(part, where, shell=True) for line in commands(block) for part in line.split(" && ")
            if not SETUP.match(part.strip())]


def test_readme_examples_run(tmp_path):
    """Every code block of the README runs, in order, in one directory, or
    says why it cannot."""
    ran = 0
    for block in parse(README.read_text())[1]:
        if block.lang not in CODE or block.not_run:
            continue
        assert block.lang in RUNNABLE, \
            f"README.md:{block.line}: a {block.lang} block the tests cannot run: mark it <!-- not run: why -->"
        for proc in run_block(block, tmp_path):
            assert proc.returncode == 0, \
                f"README.md:{block.line} ({block.lang}) failed: {proc.args}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            ran += 1
    assert ran > 0
