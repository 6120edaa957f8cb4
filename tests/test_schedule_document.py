"""The typed schedule document: it reads what rota writes and writes it back byte for
byte; malformed documents name the field at fault. And the export registry."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import DATA

from planner.errors import InputError
from planner.export import FORMATS, REGISTRY, canonical_format
from planner.formats.cluster import read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.schedule import (
    SCHEDULE_FORMAT,
    Schedule,
    load_schedule,
    read_schedule,
    schedule_csv,
    write_schedule,
)
from planner.formats.table import read_table
from planner.modes.next_round import make_policy_from, next_round
from planner.modes.plan import build_schedule
from planner.rounds.engine import EngineConfig, run_engine

TABLE = read_table(DATA / "throughputs.csv")
CLUSTER = read_cluster(DATA / "cluster.yaml")
JOBS = read_jobs(DATA / "jobs.csv", table=TABLE, cluster=CLUSTER)
INPUTS = {"table": DATA / "throughputs.csv", "jobs": DATA / "jobs.csv", "cluster": DATA / "cluster.yaml"}


@pytest.fixture(scope="module")
def planned() -> dict:
    result = run_engine(JOBS, TABLE, CLUSTER, make_policy_from("max_min_fairness_packed", {}))
    schedule = build_schedule(
        result, inputs=INPUTS, policy="max_min_fairness_packed", options={"seed": 0}, config=EngineConfig(), rounds=5
    )
    return json.loads(json.dumps(schedule.to_json()))


@pytest.fixture(scope="module")
def next_round_schedule() -> dict:
    step = next_round(TABLE, CLUSTER, jobs=JOBS, policy="max_min_fairness_perf", rounds=2)
    step = next_round(TABLE, CLUSTER, state=step.state, rounds=2)
    return json.loads(json.dumps(step.schedule.to_json()))


@pytest.mark.parametrize("which", ["planned", "next_round_schedule"])
def test_round_trip_is_byte_identical(which, request, tmp_path):
    data = request.getfixturevalue(which)
    document = Schedule.from_json(data, "s.json")
    assert json.dumps(document.to_json(), indent=1) == json.dumps(data, indent=1)
    assert document.rounds is data["rounds"]  # taken as they are, not copied
    write_schedule(data, tmp_path / "dict.json", tmp_path / "dict.csv")
    write_schedule(document, tmp_path / "typed.json", tmp_path / "typed.csv")
    assert (tmp_path / "dict.json").read_bytes() == (tmp_path / "typed.json").read_bytes()
    assert (tmp_path / "dict.csv").read_bytes() == (tmp_path / "typed.csv").read_bytes()
    assert schedule_csv(document) == schedule_csv(data)
    assert load_schedule(tmp_path / "typed.json") == document


def test_fields_of_a_planned_schedule(planned):
    document = Schedule.from_json(planned)
    assert document.policy is not None and document.policy["name"] == "max_min_fairness_packed"
    assert document.inputs is not None and set(document.inputs) == {"table", "jobs", "cluster"}
    assert document.next_round is None and document.extra == {}
    assert len(document.rounds) == 5 and document.rounds_total is not None and document.rounds_total >= 5


def test_unknown_keys_are_kept_and_missing_ones_written_as_null(planned):
    data = {"format": SCHEDULE_FORMAT, "round_s": 60, "rounds": [], "jobs": {}, "note": "by hand"}
    out = Schedule.from_json(data).to_json()
    assert out["note"] == "by hand" and list(out)[-1] == "note"
    assert out["created_at"] is None and out["allocation"] is None and "next_round" not in out
    assert list(out)[:6] == ["format", "created_at", "rota_version", "inputs", "policy", "round_s"]


def _broken(planned, mutate):
    data = copy.deepcopy(planned)
    mutate(data)
    return data


@pytest.mark.parametrize(
    "mutate,field,message",
    [
        (lambda d: d.update(format="x"), "format", "expected 'rota.schedule/v1'"),
        (lambda d: d.update(round_s=0), "round_s", "positive number"),
        (lambda d: d.update(rounds={}), "rounds", "must be a list"),
        (lambda d: d["jobs"][next(iter(d["jobs"]))].pop("total_steps"), "jobs.", "'total_steps' must be a number"),
        (lambda d: d["rounds"][1].pop("end_s"), "rounds[1]", "needs index, start_s, end_s"),
        (
            lambda d: d["rounds"][2]["assignments"][0].update(gpus=[]),
            "rounds[2].assignments[0]",
            "'gpus' must be a non-empty list",
        ),
        (lambda d: d.update(policy="fifo"), "policy", "expected an object, got 'fifo'"),
        (lambda d: d.update(rounds_total=True), "rounds_total", "expected an integer"),
    ],
)
def test_malformed_documents_name_the_field(planned, mutate, field, message):
    with pytest.raises(InputError) as info:
        Schedule.from_json(_broken(planned, mutate), "s.json")
    assert str(info.value.field).startswith(field) and message in str(info.value)
    assert str(info.value).startswith("s.json: ")
    with pytest.raises(InputError, match="the schedule is not a JSON object"):
        Schedule.from_json([], "s.json")


def test_read_schedule_checks_format_and_main_keys(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"format": "rota.state/v1"}))
    with pytest.raises(InputError, match=r"s.json: field 'format': unsupported format 'rota.state/v1'"):
        read_schedule(path)
    path.write_text(json.dumps({"format": SCHEDULE_FORMAT, "rounds": [], "jobs": {}}))
    with pytest.raises(InputError, match=r"field 'round_s': is required"):
        read_schedule(path)
    with pytest.raises(InputError, match="file not found"):
        read_schedule(tmp_path / "none.json")


def test_export_registry():
    assert FORMATS == ("slurm", "kubernetes", "ray", "csv")
    assert canonical_format(" K8S ") == "kubernetes" and canonical_format("flat-csv") == "csv"
    for fmt in REGISTRY.values():
        assert callable(fmt.exporter())
    with pytest.raises(InputError, match=r"field 'FORMAT': unknown export format 'pbs'; choose one of: slurm"):
        canonical_format("PBS")
