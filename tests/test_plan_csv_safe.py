"""`rota plan --csv` is opened in spreadsheets too: a job id or node name that a spreadsheet would
run as a formula gets a single quote in front (OWASP), as in the flat CSV export."""

from __future__ import annotations

import csv
import io

from conftest import DATA

from planner.formats.cluster import read_cluster
from planner.formats.jobs import parse_jobs
from planner.formats.schedule import schedule_csv
from planner.formats.table import read_table
from planner.modes.next_round import next_round


def test_formula_like_job_ids_are_quoted_in_the_plan_csv():
    table, cluster = read_table(DATA / "throughputs.csv"), read_cluster(DATA / "cluster.yaml")
    ids = ['=HYPERLINK("http://x","y")', "+1", "-2", "@SUM(A1)", "plain"]
    rows = [{"job_id": jid, "model": "ResNet-18", "batch_size": 64, "total_steps": 1000} for jid in ids]
    planned = next_round(table, cluster, jobs=parse_jobs(rows, table=table, cluster=cluster))
    cells = {r["job_id"] for r in csv.DictReader(io.StringIO(schedule_csv(planned.schedule)))}
    assert cells == {"'" + jid for jid in ids[:4]} | {"plain"}
