"""Every console example in README.md and docs/*.md runs as written and prints what the doc shows.

How examples are written, masked and compared: tests/docs_examples.py. The blocks of one document
run in order in one fresh workspace (a copy of data/, the benchmark scripts and the Makefile), so
later examples use the files earlier ones wrote. A block behind a skip marker is reported as skipped
with the marker's reason (`pytest -rs` lists them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_examples import (
    Block,
    Command,
    DocError,
    bin_dir,
    check,
    compare,
    doc_paths,
    make_workspace,
    mask,
    normalise,
    parse_doc,
    run,
)

BLOCKS: list[Block] = [block for path in doc_paths() for block in parse_doc(path)]


class Workspaces:
    """One workspace per document; a block runs only after the blocks before it in its document."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.done: dict[str, set[int]] = {}

    def ready_for(self, block: Block) -> Path:
        path = self.base / block.doc.replace("/", "_")
        if block.doc not in self.done:
            make_workspace(path)
            self.done[block.doc] = set()
        # When a block is selected alone (-k), first replay the ones it builds on, unchecked.
        for earlier in BLOCKS:
            if earlier.doc == block.doc and earlier.line < block.line and earlier.skip is None:
                if earlier.line not in self.done[block.doc]:
                    for command in earlier.commands:
                        run(command, path)
                    self.done[block.doc].add(earlier.line)
        return path


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory: pytest.TempPathFactory) -> Workspaces:
    return Workspaces(tmp_path_factory.mktemp("docs"))


def test_examples_found() -> None:
    assert (bin_dir() / "rota").exists(), f"no rota in {bin_dir()}: install the package (make demo)"
    docs = {block.doc for block in BLOCKS}
    assert {"README.md", "docs/launchers.md", "docs/simulation.md"} <= docs
    assert sum(len(block.commands) for block in BLOCKS if block.skip is None) >= 50


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_example(block: Block, workspaces: Workspaces) -> None:
    if block.skip is not None:
        pytest.skip(f"{block.name}: {block.skip}")
    path = workspaces.ready_for(block)
    try:
        for command in block.commands:
            problem = check(command, run(command, path), path)
            assert problem is None, f"{block.doc}:{command.line}\n{problem}"
    finally:
        workspaces.done[block.doc].add(block.line)


# ------------------------------------------------------------------- the rules the check relies on


def _parse(tmp_path: Path, text: str) -> list[Block]:
    (tmp_path / "doc.md").write_text(text, encoding="utf-8")
    return parse_doc(tmp_path / "doc.md", root=tmp_path)


def test_parse_commands_outputs_continuations_and_markers(tmp_path: Path) -> None:
    blocks = _parse(
        tmp_path,
        "Text.\n\n```console\n$ echo a \\\n    b\na b\n$ cat <<'EOF'\n> x\n> EOF\nx\n```\n\n"
        "```\nnot an example\n```\n\n"
        "<!-- docs-test: skip: takes an hour -->\n```\n$ sleep 3600\n```\n",
    )
    assert [(b.line, b.skip) for b in blocks] == [(3, None), (18, "takes an hour")]
    first, second = blocks[0].commands
    assert first == Command(4, "echo a \\\n    b", ("a b",))
    assert second == Command(7, "cat <<'EOF'\nx\nEOF", ("x",))


@pytest.mark.parametrize(
    "text",
    [
        "```\nsome output\n$ rota policies\n```\n",  # a command hidden after text
        "<!-- docs-test: skip -->\n```\n$ true\n```\n",  # a skip without a reason
        "<!-- docs-test: skip: why -->\n```\nplain\n```\n",  # a marker on a block that is no example
    ],
)
def test_malformed_examples_are_errors(tmp_path: Path, text: str) -> None:
    with pytest.raises(DocError):
        _parse(tmp_path, text)


def test_an_error_line_means_exit_status_2() -> None:
    assert Command(1, "rota table validate bad.csv", ("error: bad.csv: row 1: ...",)).expected_status == 2
    assert Command(1, "rota table validate t.csv", ("ok t.csv: 3 rows",)).expected_status == 0


def test_masks_hide_timings_and_versions_but_not_results() -> None:
    shown = "policy p: optimal, objective 1.14583, build 2.1 ms, solve 78.7 ms, 12 job classes"
    printed = "policy p: optimal, objective 1.14583, build 0.9 ms, solve 3.9 ms, 12 job classes"
    assert mask(shown) == mask(printed)
    assert mask("│ re-solves / solver time │ 90 / 0.16 s │") == mask("│ re-solves / solver time │ 90 / 0.37 s │")
    assert mask("wrote round.json and state.json in 49 ms") == mask("wrote round.json and state.json in 3 s")
    assert mask("rota 0.1.0") == mask("rota 0.2.0")
    for result in ("makespan 7.31 h", "expected finish 93.3 min", "round 0: 0 s - 360 s", "utilisation 88.1 %"):
        assert mask(result) == result
    assert mask("│ re-solves / solver time │ 90 / 0.16 s │") != mask("│ re-solves / solver time │ 91 / 0.16 s │")


def test_workspace_paths_are_masked(tmp_path: Path) -> None:
    assert mask(f"wrote {tmp_path}/out/s.json", tmp_path) == "wrote out/s.json"


@pytest.mark.parametrize(
    ("expected", "actual", "same"),
    [
        (["a", "...", "d"], "a\nb\nc\nd\n", True),
        (["a", "...", "b"], "a\nb\n", True),  # a lone ... may match no line
        (["a ...", "c"], "a b\nc\n", True),  # ... inside a line
        (["a", "c"], "a\nb\nc\n", False),
        (["x 1.0 y"], "x 1.1 y", False),  # results are compared
        (["long text that", "wraps here"], "long text\nthat wraps here\n", True),  # rich re-wrapped it
        (["│ a │ 1 │"], "│ a   │   1 │", True),  # a table re-padded
        (["│ a │ 1 │"], "│ a │ │ 1", False),
    ],
)
def test_compare(expected: list[str], actual: str, same: bool) -> None:
    assert (compare(expected, actual) is None) is same


def test_normalise_drops_trailing_blanks() -> None:
    assert normalise("\n a  \nb\t\n\n") == [" a", "b"]
