"""The figures of a finished sweep: JCT (or makespan) vs load, JCT CDF, rho CDF."""

from __future__ import annotations

from pathlib import Path

from planner.modes.metrics import rho
from planner.modes.sweep import read_job_csv
from planner.report import plots


def make_sweep_plots(
    records: list[dict], out_dir: Path, formats, *, cdf_rate: float | None = None, setting: str = ""
) -> list[Path]:
    """The figures of a finished sweep: JCT (or makespan) vs load, JCT CDF, rho CDF.

    `setting` (cluster, window, seeds) heads every figure's title. A sweep over one trace
    has no load axis: its figures are the CDFs.
    """
    seed = min(r["seed"] for r in records)
    if all(r.get("trace") for r in records):
        chosen = [r for r in records if r["seed"] == seed and r["status"] == "ok"]
        return _cdfs(chosen, out_dir, "trace", f"{setting}; seed {seed}" if setting else f"seed {seed}", formats)
    if all(r.get("num_jobs") is not None for r in records):
        return plots.plot_makespan_vs_jobs(records, out_dir / "makespan_vs_jobs", title=setting, formats=formats)
    paths = plots.plot_jct_vs_rate(records, out_dir / "jct_vs_rate", title=setting, formats=formats)
    rates = sorted({r["rate"] for r in records})
    ok_rates = [x for x in rates if all(r["status"] == "ok" for r in records if r["rate"] == x)]
    rate = cdf_rate if cdf_rate is not None else (ok_rates[-1] if ok_rates else None)
    if rate is None:
        return paths
    chosen = [r for r in records if r["rate"] == rate and r["seed"] == seed and r["status"] == "ok"]
    label = f"{rate:g} jobs/hour, seed {seed}"
    return paths + _cdfs(chosen, out_dir, f"rate={rate:g}", f"{setting}; {label}" if setting else label, formats)


def _window_jct(out_dir: Path, record: dict) -> dict[str, float]:
    """Job id -> JCT (seconds) of the measured jobs of one point."""
    rows = read_job_csv(out_dir / "jobs" / f"{record['key']}.csv")
    return {x["job_id"]: float(x["jct_s"]) for x in rows if x["in_window"] == "True" and x["jct_s"]}


def _cdfs(chosen: list[dict], out_dir: Path, suffix: str, title: str, formats) -> list[Path]:
    """JCT CDF per policy, and the rho CDF when `isolated` ran on the same jobs."""
    jct = {r["policy"]: _window_jct(out_dir, r) for r in chosen}
    hours = {policy: [v / 3600 for v in values.values()] for policy, values in jct.items()}
    paths = plots.plot_cdf(
        hours, out_dir / f"jct_cdf_{suffix}", xlabel="JCT (hours)", log_x=True, title=title, formats=formats
    )
    if "isolated" in jct:
        rho_values = {p: list(rho(mine, jct["isolated"]).values()) for p, mine in jct.items() if p != "isolated"}
        if rho_values:
            paths += plots.plot_cdf(
                rho_values,
                out_dir / f"rho_cdf_{suffix}",
                xlabel="finish-time fairness rho",
                title=title,
                formats=formats,
            )
    return paths
