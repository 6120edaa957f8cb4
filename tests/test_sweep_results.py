"""results.jsonl: a torn last line is cut away and its point runs again; other damage is an error."""

from __future__ import annotations

import json

import pytest
from test_sweep import spec, table_path  # noqa: F401  (the fixture)

import planner.modes.sweep as sweep
from planner.errors import InputError
from planner.modes.sweep import load_results, run_sweep
from planner.modes.sweep_results import append_result, read_results

TIMING = ("wall_s", "solver_s", "jobs_per_wall_s")  # measured, so they differ between runs


def _untimed(text: str) -> list[dict]:
    """The records of a results file's text, without their timing fields; every line must parse."""
    records = [json.loads(line) for line in text.split("\n")[:-1]]
    for r in records:
        for k in TIMING:
            (r["metrics"] or {}).pop(k, None)
    return records


def _record(key: str, **extra) -> dict:
    return {"key": key, "policy": "fifo", "seed": 0, "rate": 1.0, "num_jobs": None, "status": "ok", **extra}


@pytest.fixture
def finished(table_path, tmp_path):  # noqa: F811
    """A finished 4-point sweep: (folder, its results lines, the spec)."""
    out = tmp_path / "sw"
    run_sweep(spec(table_path), out)
    return out, (out / "results.jsonl").read_text().splitlines(keepends=True), spec(table_path)


def _counting_run_point(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = sweep.run_point
    monkeypatch.setattr(sweep, "run_point", lambda s, p, o: calls.append(p.key) or real(s, p, o))
    return calls


@pytest.mark.parametrize(
    "cut", [1, 20, 60, -2, -1], ids=["first-byte", "inside-key", "after-key", "before-brace", "no-newline"]
)
def test_a_torn_last_line_is_cut_away_and_its_point_runs_again(finished, monkeypatch, cut):
    out, lines, s = finished
    torn = lines[-1][:cut] if cut > 0 else lines[-1][: len(lines[-1]) + cut]
    assert not torn.endswith("\n")
    (out / "results.jsonl").write_text("".join(lines[:-1]) + torn)
    calls = _counting_run_point(monkeypatch)
    warnings: list[str] = []
    records = run_sweep(s, out, on_warning=warnings.append)
    last_key = json.loads(lines[-1])["key"]
    assert calls == [last_key]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith(f"{out / 'results.jsonl'}: line 4 was cut off")
    if f'"key": "{last_key}"' in torn:  # the torn text still shows the point's key
        assert warnings[0].endswith(f"point {last_key} runs again")
    else:
        assert warnings[0].endswith("its point runs again")
    # The rerun's record starts on a fresh line: the file is the finished run's, line for line.
    assert _untimed((out / "results.jsonl").read_text()) == _untimed("".join(lines))
    assert [r["key"] for r in records] == [json.loads(line)["key"] for line in lines]


def test_a_last_line_that_is_not_json_is_cut_away_too(finished, monkeypatch):
    out, lines, s = finished
    (out / "results.jsonl").write_text("".join(lines[:-1]) + "\0\0\0\0\n")  # a crash can leave zeros
    calls = _counting_run_point(monkeypatch)
    warnings: list[str] = []
    run_sweep(s, out, on_warning=warnings.append)
    assert calls == [json.loads(lines[-1])["key"]] and len(warnings) == 1
    assert _untimed((out / "results.jsonl").read_text()) == _untimed("".join(lines))


def test_a_whole_file_needs_no_repair(finished, monkeypatch):
    out, lines, s = finished
    calls = _counting_run_point(monkeypatch)
    warnings: list[str] = []
    run_sweep(s, out, on_warning=warnings.append)
    assert calls == [] and warnings == []
    assert (out / "results.jsonl").read_text() == "".join(lines)


def test_without_a_warning_callback_the_cut_is_a_python_warning(finished):
    out, lines, s = finished
    (out / "results.jsonl").write_text("".join(lines[:-1]) + lines[-1][:20])
    with pytest.warns(UserWarning, match="line 4 was cut off"):
        run_sweep(s, out)


@pytest.mark.parametrize(
    "bad",
    ['{"key": "x"', "not json", "[1, 2]", '{"policy": "fifo"}'],
    ids=["torn", "text", "not-an-object", "no-key"],
)
def test_a_damaged_line_before_the_last_is_an_error_naming_it(finished, bad):
    out, lines, s = finished
    path = out / "results.jsonl"
    path.write_text("".join(lines[:2]) + bad + "\n" + "".join(lines[2:]))
    before = path.read_bytes()
    with pytest.raises(InputError) as info:
        run_sweep(s, out)
    message = str(info.value)
    assert message.startswith(f"{path}: line 3 is not a sweep record (") and "\n" not in message
    assert path.read_bytes() == before  # left for the user to look at


def test_blank_lines_are_ignored(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_record("a")) + "\n\n  \n" + json.dumps(_record("b")) + "\n")
    results = read_results(path)
    assert list(results.records) == ["a", "b"] and results.torn is None


def test_appends_start_on_a_fresh_line(tmp_path):
    path = tmp_path / "results.jsonl"
    append_result(path, _record("a"))
    with path.open("a") as f:
        f.write('{"key": "b", "pol')  # something left an unfinished line
    append_result(path, _record("c"))
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["key"] == "a" and json.loads(lines[2])["key"] == "c"
    assert lines[1] == '{"key": "b", "pol'
    with pytest.raises(InputError, match="line 2 is not a sweep record"):
        read_results(path)


def test_load_results_reads_without_repairing(tmp_path):
    out = tmp_path
    text = json.dumps(_record("a")) + "\n" + '{"key": "b'
    (out / "results.jsonl").write_text(text)
    assert list(load_results(out)) == ["a"]
    assert (out / "results.jsonl").read_text() == text
    torn = read_results(out / "results.jsonl").torn
    assert torn is not None and (torn.line, torn.key) == (2, None)
