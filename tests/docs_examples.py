"""Console examples in the README and docs/, as runnable checks (in the spirit of cram and doctest).

A console example is a fenced code block whose first line starts with ``$ ``. Each ``$ `` line is a
shell command; a command continues on the next line when it ends with a backslash or when the next
line starts with ``> `` (the shell's secondary prompt, e.g. for a here-document). The lines after a
command, up to the next command or the end of the block, are its expected output (stdout and stderr
as a terminal shows them). In expected output:

* ``...`` alone on a line matches any number of lines (none included);
* ``...`` inside a line matches anything on that line;
* a command whose expected output has an ``error:`` line must exit with status 2, every other
  command with status 0 (show another status with ``|| echo "exit status $?"``).

A block is excluded only by a visible marker on the line before its fence,
``<!-- docs-test: skip: REASON -->``; the test reports the reason.

Before comparing, both sides are masked (see ``MASKS``): what measures the run (timings, elapsed
clocks), dates, versions and the workspace's absolute path. Results (JCTs, throughputs,
utilisation, counts) are never masked. Rich re-wraps text and re-pads tables when a masked timing
changes width, so when the line-by-line comparison fails, the comparison is repeated with every
run of whitespace (line breaks included) read as one space: the words and numbers must still match
in order.

Run ``python tests/docs_examples.py README.md docs/simulation.md`` to print what every command of
those files prints now (the way to refresh a doc's outputs after a change).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
DOCS = ("README.md", "docs/*.md")

PROMPT = "$ "
CONTINUATION = "> "
WILDCARD = "..."
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<directive>[\w-]+)\s*:\s*(?P<reason>.*?)\s*-->$")

# What a fresh clone gives the examples: inputs, benchmark scripts, the Makefile (for `make demo`).
COPIED = ("data", "benchmarks", "examples", "Makefile", "pyproject.toml")
COMMAND_TIMEOUT_S = 900
COLUMNS = 100  # rich wraps at the terminal width; the docs' outputs were printed 100 columns wide


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line of the `$ ` in the markdown file
    text: str  # the shell command, continuation lines included (prompts removed)
    expected: tuple[str, ...]

    @property
    def expected_status(self) -> int:
        return 2 if any(line.startswith("error:") for line in self.expected) else 0


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository root
    line: int  # 1-based line of the opening fence
    commands: tuple[Command, ...]
    skip: str | None  # the reason given by a skip marker

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


class DocError(ValueError):
    """A malformed example or marker (the test fails on it rather than skipping the block)."""


def doc_paths(root: Path = ROOT) -> list[Path]:
    found: list[Path] = []
    for pattern in DOCS:
        found.extend(sorted(root.glob(pattern)))
    return found


def parse_doc(path: Path, root: Path = ROOT) -> list[Block]:
    """Every console example of one markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(root).as_posix()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = _closing_fence(lines, i, opening.group("fence"))
        body = [line[len(opening.group("indent")) :] for line in lines[i + 1 : end]]
        skip = _skip_reason(lines, i, rel)
        if body and body[0].startswith(PROMPT):
            blocks.append(Block(rel, i + 1, tuple(_commands(body, i + 2)), skip))
        elif skip is not None:
            raise DocError(f"{rel}:{i + 1}: a docs-test marker before a block that is not a console example")
        elif any(line.startswith(PROMPT) for line in body):
            raise DocError(f"{rel}:{i + 1}: a block with `$ ` commands must start with one")
        i = end + 1
    return blocks


def _closing_fence(lines: Sequence[str], start: int, fence: str) -> int:
    for j in range(start + 1, len(lines)):
        match = FENCE.match(lines[j])
        if match and match.group("fence")[0] == fence[0] and len(match.group("fence")) >= len(fence):
            if not lines[j].strip().strip(fence[0]):
                return j
    return len(lines)


def _skip_reason(lines: Sequence[str], fence_index: int, rel: str) -> str | None:
    j = fence_index - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or "docs-test" not in lines[j]:
        return None
    match = MARKER.match(lines[j].strip())
    if not match or match.group("directive") != "skip" or not match.group("reason"):
        raise DocError(f"{rel}:{j + 1}: expected `<!-- docs-test: skip: REASON -->`, got {lines[j].strip()!r}")
    return match.group("reason")


def _commands(body: Sequence[str], first_line: int) -> Iterable[Command]:
    i = 0
    while i < len(body):
        start = i
        parts = [body[i][len(PROMPT) :]]
        i += 1
        while i < len(body) and (parts[-1].endswith("\\") or body[i].startswith(CONTINUATION)):
            line = body[i]
            parts.append(line[len(CONTINUATION) :] if line.startswith(CONTINUATION) else line)
            i += 1
        out_start = i
        while i < len(body) and not body[i].startswith(PROMPT):
            i += 1
        yield Command(first_line + start, "\n".join(parts), tuple(body[out_start:i]))


# ----------------------------------------------------------------------------------------- masking


@dataclass(frozen=True)
class Mask:
    what: str
    pattern: re.Pattern[str]
    replacement: str


def _mask(what: str, pattern: str, replacement: str) -> Mask:
    return Mask(what, re.compile(pattern), replacement)


# Applied in order to expected and actual output alike. Each one hides a number that measures this
# run (or this installation), never a result of the planning, the simulation or a table.
MASKS: tuple[Mask, ...] = (
    _mask("ISO dates and times", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?", "<date>"),
    _mask("versions (rota, torch)", r"(?<![\w.])\d+\.\d+\.\d+(?:[.+-]?[A-Za-z0-9]+)*(?![\w.])", "<version>"),
    _mask("solver build and solve time", r"\b(build|solve) \d+(?:\.\d+)? (?:ms|s)\b", r"\1 <time>"),
    _mask("time a command took", r"\b(in|took) \d+(?:\.\d+)? (?:ms|s|min)\b", r"\1 <time>"),
    _mask("solver and wall time of a simulation", r"(time\s+│\s*\d+ / )\d+(?:\.\d+)? s\b", r"\1<time>"),
    _mask("time of one profiling measurement", r"\[\d+(?:\.\d+)? s\]", "[<time>]"),
    _mask("progress bar clocks", r"(?:-|\d+):[-\d]{2}:[-\d]{2} left (?:-|\d+):[-\d]{2}:[-\d]{2}", "<clock>"),
)


def mask(text: str, workspace: Path | None = None) -> str:
    if workspace is not None:
        for path in {str(workspace), str(workspace.resolve())}:
            text = text.replace(path + os.sep, "").replace(path, ".")
    for rule in MASKS:
        text = rule.pattern.sub(rule.replacement, text)
    return text


# -------------------------------------------------------------------------------------- comparison


def _line_pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.split(WILDCARD)))


def _matches_lines(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Line by line; a lone `...` takes any number of lines (dynamic programming, no backtracking)."""
    patterns = [None if line == WILDCARD else _line_pattern(line) for line in expected]
    reachable = {0}  # actual lines consumed so far, for each way of matching the patterns seen
    for pattern in patterns:
        if pattern is None:
            reachable = set(range(min(reachable), len(actual) + 1)) if reachable else set()
        else:
            reachable = {k + 1 for k in reachable if k < len(actual) and pattern.fullmatch(actual[k])}
        if not reachable:
            return False
    return len(actual) in reachable


def _matches_words(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """The same words in the same order, whatever the line breaks and padding."""
    pieces: list[str] = []
    for line in expected:
        if line == WILDCARD:
            pieces.append(r"[\s\S]*?")
        else:
            words = [".*?".join(re.escape(p) for p in word.split(WILDCARD)) for word in line.split()]
            pieces.append(r"\s+".join(words))
    pattern = r"\s*" + r"\s+".join(p for p in pieces if p) + r"\s*"
    return re.fullmatch(pattern, "\n".join(actual)) is not None


def normalise(text: str) -> list[str]:
    """Lines without trailing blanks, leading and trailing empty lines dropped."""
    lines = [line.rstrip() for line in text.expandtabs().splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare(expected: Sequence[str], actual: str, workspace: Path | None = None) -> str | None:
    """None when the output matches, else a unified diff of the masked texts."""
    want = normalise(mask("\n".join(expected)))
    got = normalise(mask(actual, workspace))
    if _matches_lines(want, got) or _matches_words(want, got):
        return None
    return "\n".join(difflib.unified_diff(want, got, "expected (masked)", "actual (masked)", lineterm=""))


# ------------------------------------------------------------------------------------------ running


def make_workspace(dest: Path, root: Path = ROOT) -> Path:
    """A fresh copy of what the examples read, with the repository's virtual environment linked in.

    `.venv` is a folder of links to the real one's parts plus its own up-to-date install stamp, so
    that `make demo` finds rota installed and never reinstalls it (from this copy) or touches the
    real environment's stamps.
    """
    dest.mkdir(parents=True)  # a fresh folder: examples must not find files from an earlier run
    for name in COPIED:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    if (dest / "pyproject.toml").exists():
        os.utime(dest / "pyproject.toml", (0, 0))
    venv = dest / ".venv"
    venv.mkdir()
    for part in bin_dir().parent.iterdir():
        if not part.name.startswith("."):
            (venv / part.name).symlink_to(part, target_is_directory=part.is_dir())
    (venv / ".planner").touch()
    return dest


def bin_dir() -> Path:
    """Where the `rota` under test lives: this interpreter's environment, else the repository's .venv."""
    here = Path(sys.executable).parent
    return here if (here / "rota").exists() else VENV / "bin"


def environment() -> dict[str, str]:
    drop = {"FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(
        PATH=f"{bin_dir()}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS=str(COLUMNS),
        LINES="50",
        NO_COLOR="1",
        TERM="dumb",
        PYTHONUNBUFFERED="1",  # stdout and stderr interleave as on a terminal
        PYTHONIOENCODING="utf-8",
        PYTHONDONTWRITEBYTECODE="1",
        MPLBACKEND="Agg",
        TZ="UTC",
    )
    return env


@dataclass(frozen=True)
class Result:
    status: int
    output: str
    seconds: float


def run(command: Command, workspace: Path, env: dict[str, str] | None = None) -> Result:
    start = time.perf_counter()
    proc = subprocess.run(
        ["bash", "-c", command.text],
        cwd=workspace,
        env=env if env is not None else environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=COMMAND_TIMEOUT_S,
    )
    return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), time.perf_counter() - start)


def check(command: Command, result: Result, workspace: Path) -> str | None:
    """None when the command did what its doc says, else what differs."""
    problems = []
    if result.status != command.expected_status:
        problems.append(f"exit status {result.status}, expected {command.expected_status}")
    diff = compare(command.expected, result.output, workspace)
    if diff is not None:
        problems.append(diff)
    if not problems:
        return None
    return f"$ {command.text}\n" + "\n".join(problems)


# -------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a doc's console examples and print what they print now.")
    parser.add_argument("docs", nargs="*", help="markdown files (default: README.md and docs/*.md)")
    parser.add_argument("--keep", type=Path, help="run in this folder (kept) instead of a temporary one")
    parser.add_argument("--from-line", type=int, default=0, help="print only blocks at or after this line")
    args = parser.parse_args(argv)
    paths = [Path(p).resolve() for p in args.docs] or doc_paths()
    failed = 0
    for path in paths:
        with tempfile.TemporaryDirectory(prefix="rota-docs-") as tmp:
            workspace = make_workspace((args.keep or Path(tmp)) / path.stem)
            for block in parse_doc(path):
                if block.skip is not None:
                    print(f"### {block.name}: skipped ({block.skip})\n")
                    continue
                for command in block.commands:
                    result = run(command, workspace)
                    problem = check(command, result, workspace)
                    failed += problem is not None
                    if block.line < args.from_line:
                        continue
                    verdict = "ok" if problem is None else "DIFFERS"
                    print(f"### {path.name}:{command.line}: {verdict}, status {result.status}, {result.seconds:.1f} s")
                    print(f"$ {command.text}\n{result.output.rstrip()}\n")
    print(f"{failed} command(s) differ from their docs", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
