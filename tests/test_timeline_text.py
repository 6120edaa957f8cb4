"""rota schedule show prints job ids and node names as written (no rich markup, no emoji codes)."""

from __future__ import annotations

from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app


def test_schedule_show_prints_user_text_literally(tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,model,batch_size,duration_s\n[bold]a:x:,ResNet-18,64,3600\nplain,LM,20,3600\n")
    out = tmp_path / "s.json"
    runner = CliRunner()
    args = ["plan", "--table", str(DATA / "throughputs.csv"), "--jobs", str(jobs)]
    planned = runner.invoke(app, [*args, "--cluster", str(DATA / "cluster.yaml"), "--out", str(out)])
    assert planned.exit_code == 0, planned.output
    shown = runner.invoke(app, ["schedule", "show", str(out), "--rounds", "0"])
    assert shown.exit_code == 0, shown.output
    assert "[bold]a:x:" in shown.output
