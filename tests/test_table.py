"""Throughput table: formats, validator rules, Gavel JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.formats.gavel_json import export_gavel, import_gavel, to_gavel
from planner.formats.table import (
    COLUMNS,
    NOTE_COLUMNS,
    RESTART_COLUMNS,
    JobType,
    ThroughputTable,
    append_rows,
    merge_tables,
    read_table,
    split_model_label,
    write_table,
)

HEADER = "worker_type,model,batch_size,scale_factor,partner_model,partner_batch_size,throughput,status"
GOOD = [
    "v100,ResNet-18,32,1,,,10.5,ok",
    "k80,ResNet-18,32,1,,,2.5,ok",
    "v100,LM,20,1,,,30,ok",
    "v100,ResNet-18,32,1,LM,20,6.0,ok",
    "v100,LM,20,1,ResNet-18,32,20.0,ok",
    "k80,LM,20,1,,,0,oom",
]


def write_csv(tmp_path, lines, header=HEADER, name="t.csv"):
    path = tmp_path / name
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def test_good_table_lookups(tmp_path):
    table = read_table(write_csv(tmp_path, GOOD))
    rn, lm = JobType("ResNet-18", 32), JobType("LM", 20)
    assert table.worker_types == ["k80", "v100"]
    assert table.solo("v100", rn) == 10.5
    assert table.solo("k80", lm) == 0.0  # oom: cannot run
    assert table.pair("v100", rn, lm) == (6.0, 20.0)
    assert table.pair("k80", rn, lm) == (0.0, 0.0)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_write_read_round_trip(tmp_path, fmt):
    table = read_table(write_csv(tmp_path, GOOD))
    target = tmp_path / f"copy.{fmt}"
    write_table(table, target)
    again = read_table(target)
    assert again.rows == table.rows


@pytest.mark.parametrize(
    "line,field,message",
    [
        ("v100,ResNet-18,32,1,,,nan,ok", "throughput", "NaN"),
        ("v100,ResNet-18,32,1,,,-1,ok", "throughput", "negative"),
        ("v100,ResNet-18,32,1,,,0,ok", "throughput", "status 'ok'"),
        ("v100,ResNet-18,32,1,,,abc,ok", "throughput", "expected a number"),
        ("v100,ResNet-18,32,0,,,1,ok", "scale_factor", ">= 1"),
        ("v100,ResNet-18,3.5,1,,,1,ok", "batch_size", "integer"),
        (",ResNet-18,32,1,,,1,ok", "worker_type", "required"),
        ("v100,,32,1,,,1,ok", "model", "required"),
        ("v100,ResNet-18,32,1,,,1,great", "status", "unknown status"),
        ("v100,ResNet-18,32,1,,,5,oom", "throughput", "must be 0 or empty"),
        ("v100,ResNet-18,32,1,,,,ok", "throughput", "required"),
        ("v100,ResNet-18,32,1,,8,1,ok", "partner_batch_size", "without partner_model"),
    ],
)
def test_bad_row_names_file_row_and_field(tmp_path, line, field, message):
    path = write_csv(tmp_path, ["k80,LM,20,1,,,3,ok", line])
    with pytest.raises(InputError) as info:
        read_table(path)
    text = str(info.value)
    assert str(path) in text and "row 2" in text and f"field '{field}'" in text and message in text
    assert "\n" not in text


def test_duplicate_key_names_both_rows(tmp_path):
    with pytest.raises(InputError, match=r"row 3: field 'worker_type': duplicate of row 1"):
        read_table(write_csv(tmp_path, ["v100,LM,20,1,,,3,ok", "k80,LM,20,1,,,1,ok", "v100,LM,20,1,,,4,ok"]))


def test_pair_without_partner_solo_row(tmp_path):
    lines = ["v100,ResNet-18,32,1,,,10,ok", "v100,ResNet-18,32,1,LM,20,6,ok", "v100,LM,20,1,ResNet-18,32,5,ok"]
    with pytest.raises(InputError, match=r"row 2: field 'partner_model': partner has no solo row"):
        read_table(write_csv(tmp_path, lines))


def test_pair_without_mirror_row(tmp_path):
    lines = ["v100,ResNet-18,32,1,,,10,ok", "v100,LM,20,1,,,5,ok", "v100,ResNet-18,32,1,LM,20,6,ok"]
    with pytest.raises(InputError, match=r"row 3: .*mirror pair row"):
        read_table(write_csv(tmp_path, lines))


def test_unknown_and_missing_columns(tmp_path):
    with pytest.raises(InputError, match=r"field 'colour': unknown column"):
        read_table(write_csv(tmp_path, ["v100,LM,20,1,,,3,ok,red"], header=HEADER + ",colour"))
    with pytest.raises(InputError, match=r"field 'throughput': required column is missing"):
        read_table(write_csv(tmp_path, ["v100,LM,20,1"], header="worker_type,model,batch_size,scale_factor"))


def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_table(tmp_path / "nope.csv")
    other = tmp_path / "t.xlsx"
    other.write_text("x")
    with pytest.raises(InputError, match="unsupported table format"):
        read_table(other)


def test_parquet_nan_is_rejected(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"worker_type": ["v100"], "model": ["LM"], "scale_factor": [1], "throughput": [float("nan")]}), path
    )
    with pytest.raises(InputError, match=r"row 1: field 'throughput': is NaN"):
        read_table(path)


def test_append_rows_replaces_same_key_and_is_readable(tmp_path):
    path = tmp_path / "t.csv"
    base = {"worker_type": "cpu", "model": "LM", "batch_size": 5, "scale_factor": 1}
    append_rows(path, [{**base, "throughput": 1.0, "status": "ok"}])
    append_rows(
        path,
        [{**base, "throughput": 2.0, "status": "ok"}, {**base, "batch_size": 10, "throughput": 0, "status": "oom"}],
    )
    table = read_table(path)
    assert len(table) == 2 and table.solo("cpu", JobType("LM", 5)) == 2.0
    assert not list(tmp_path.glob(".*.tmp"))  # the temp file was renamed away


def test_merge_later_wins(tmp_path):
    a = read_table(write_csv(tmp_path, ["v100,LM,20,1,,,3,ok"], name="a.csv"))
    b = read_table(write_csv(tmp_path, ["v100,LM,20,1,,,4,ok", "k80,LM,20,1,,,1,ok"], name="b.csv"))
    merged = merge_tables([a, b])
    assert merged.solo("v100", JobType("LM", 20)) == 4.0 and len(merged) == 2


def test_model_labels():
    assert split_model_label("ResNet-50 (batch size 128)") == ("ResNet-50", 128)
    assert split_model_label("A3C") == ("A3C", None)
    assert JobType("LM", 10, 4).label == "LM (batch size 10) x4"


def test_gavel_round_trip_is_lossless(gavel_dir, tmp_path):
    source = gavel_dir / "simulation_throughputs.json"
    original = json.loads(source.read_text())
    table = import_gavel(source)
    assert set(table.worker_types) == set(original)
    # through both file formats and back to Gavel JSON
    for fmt in ("csv", "parquet"):
        write_table(table, tmp_path / f"g.{fmt}")
        assert to_gavel(read_table(tmp_path / f"g.{fmt}")) == original
    export_gavel(table, tmp_path / "back.json")
    assert json.loads((tmp_path / "back.json").read_text()) == original


def test_gavel_values_land_in_the_right_rows(gavel_dir):
    table = import_gavel(gavel_dir / "simulation_throughputs.json")
    raw = json.loads((gavel_dir / "simulation_throughputs.json").read_text())
    a3c, lm = JobType("A3C", None, 1), JobType("LM", 5, 8)
    assert table.solo("v100", a3c) == raw["v100"]["('A3C', 1)"]["null"]
    assert table.solo("v100", lm) == pytest.approx(698.8, abs=0.1)  # spec §1.1
    assert table.solo("k80", JobType("ResNet-50", 128, 2)) == 0.0  # a Gavel zero: cannot run
    pair = raw["v100"]["('A3C', 1)"]["('ResNet-18 (batch size 16)', 1)"]
    assert table.pair("v100", a3c, JobType("ResNet-18", 16)) == tuple(pair)


def test_gavel_bad_json(tmp_path):
    path = tmp_path / "g.json"
    path.write_text('{"v100": {"(\'LM\', one)": {"null": 1}}}')
    with pytest.raises(InputError, match="is not"):
        import_gavel(path)
    path.write_text('{"v100": {"(\'LM (batch size 5)\', 1)": {"null": "fast"}}}')
    with pytest.raises(InputError, match="expected a number"):
        import_gavel(path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="invalid JSON"):
        import_gavel(path)


def test_from_records_defaults_columns():
    table = ThroughputTable.from_records([{"worker_type": "a", "model": "m", "scale_factor": 1, "throughput": 2}])
    # No row has a restart time or a note, so those columns are left out (older tables stay byte-identical).
    assert table.solo("a", JobType("m", None)) == 2
    assert set(table.to_frame().columns) == set(COLUMNS) - set(RESTART_COLUMNS) - set(NOTE_COLUMNS)


def test_pair_matrix_agrees_with_pair():
    records = []
    for w in ("v100", "k80"):
        for m in ("A", "B", "C"):
            records.append(dict(worker_type=w, model=m, scale_factor=1, throughput=2.0))
        records += [
            dict(worker_type=w, model="A", scale_factor=1, partner_model="B", throughput=1.5),
            dict(worker_type=w, model="B", scale_factor=1, partner_model="A", throughput=1.2),
            dict(worker_type=w, model="A", scale_factor=1, partner_model="A", throughput=1.1),
        ]
    records.append(dict(worker_type="v100", model="C", scale_factor=1, partner_model="B", throughput=0.9))
    records.append(
        dict(worker_type="v100", model="B", scale_factor=1, partner_model="C", throughput=0.0, status="oom")
    )  # measured but not runnable: no pair either way
    table = ThroughputTable.from_records(records)
    kinds = [JobType("C", None), JobType("A", None), JobType("B", None), JobType("Z", None)]  # Z: not in the table
    for w in ("v100", "k80", "t4"):
        own, partner = table.pair_matrix(w, kinds)
        for a, ka in enumerate(kinds):
            for b, kb in enumerate(kinds):
                assert (own[a, b], partner[a, b]) == table.pair(w, ka, kb), (w, ka, kb)
    own, _ = table.pair_matrix("v100", kinds)
    assert own[1, 2] == 1.5 and own[2, 1] == 1.2 and own[1, 1] == 1.1 and own[0, 2] == 0.0


def test_row_type_has_the_schema_columns(tmp_path):
    from planner.formats.table import RUNNABLE_STATUSES, STATUSES, TableRow

    assert set(TableRow.__annotations__) == set(COLUMNS)
    assert STATUSES == ("ok", "oom", "failed", "estimated") and set(RUNNABLE_STATUSES) <= set(STATUSES)
    rows = read_table(write_csv(tmp_path, GOOD)).rows
    assert all(set(r) == set(COLUMNS) for r in rows)


def test_every_shipped_measured_table_validates_and_keeps_its_provenance():
    """data/measured/ holds tables measured on real hardware; each row names the device and torch."""
    tables = sorted((Path(__file__).resolve().parents[1] / "data" / "measured").glob("*.csv"))
    assert tables, "data/measured/ has no table"
    for path in tables:
        table = read_table(path)  # full validation: pairs have their solo rows and mirror rows
        for row in table.rows:
            assert row["source"] == "measured" and row["status"] == "ok", (path.name, row)
            assert row["device_name"] and row["torch_version"] and row["measured_at"], (path.name, row)
            assert row["worker_type"] == path.stem  # the file is named after its worker type
