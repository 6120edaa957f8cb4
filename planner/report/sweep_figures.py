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

    `setting` (cluster, window, seeds) heads every figure's title.
    """

    paths: list[Path] = []
    static = all(r.get("num_jobs") is not None for r in records)
    if static:
        return plots.plot_makespan_vs_jobs(records, out_dir / "makespan_vs_jobs", title=setting, formats=formats)
    paths += plots.plot_jct_vs_rate(records, out_dir / "jct_vs_rate", title=setting, formats=formats)
    rates = sorted({r["rate"] for r in records})
    ok_rates = [x for x in rates if all(r["status"] == "ok" for r in records if r["rate"] == x)]
    rate = cdf_rate if cdf_rate is not None else (ok_rates[-1] if ok_rates else None)
    if rate is None:
        return paths
    seed = min(r["seed"] for r in records)
    chosen = [r for r in records if r["rate"] == rate and r["seed"] == seed and r["status"] == "ok"]
    jct, rho_values = {}, {}
    for r in chosen:
        rows = read_job_csv(out_dir / "jobs" / f"{r['key']}.csv")
        jct[r["policy"]] = [float(x["jct_s"]) / 3600 for x in rows if x["in_window"] == "True" and x["jct_s"]]
    paths += plots.plot_cdf(
        jct,
        out_dir / f"jct_cdf_rate={rate:g}",
        xlabel="JCT (hours)",
        log_x=True,
        title=f"{setting}; {rate:g} jobs/hour, seed {seed}" if setting else f"{rate:g} jobs/hour, seed {seed}",
        formats=formats,
    )
    if any(r["policy"] == "isolated" for r in chosen):
        iso = next(r for r in chosen if r["policy"] == "isolated")
        ref = {
            x["job_id"]: float(x["jct_s"])
            for x in read_job_csv(out_dir / "jobs" / f"{iso['key']}.csv")
            if x["in_window"] == "True" and x["jct_s"]
        }
        for r in chosen:
            mine = {
                x["job_id"]: float(x["jct_s"])
                for x in read_job_csv(out_dir / "jobs" / f"{r['key']}.csv")
                if x["in_window"] == "True" and x["jct_s"]
            }
            if r["policy"] != "isolated":
                rho_values[r["policy"]] = list(rho(mine, ref).values())
        if rho_values:
            paths += plots.plot_cdf(
                rho_values,
                out_dir / f"rho_cdf_rate={rate:g}",
                xlabel="finish-time fairness rho",
                title=f"{setting}; {rate:g} jobs/hour, seed {seed}" if setting else f"{rate:g} jobs/hour, seed {seed}",
                formats=formats,
            )
    return paths
