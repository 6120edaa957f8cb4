"""The Kubernetes launcher (planner/launch/kubernetes.py) and the export's driver: node states and job
states parsed from fixtures in the API's shape (tests/data/kubectl, hand-written, see its README),
and the kubectl code paths run against a fake kubectl that records its argv and answers from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.export import export_schedule, load_context
from planner.export.kubernetes_driver import STATE_FORMAT, Watch, deadline_patches, epoch
from planner.formats.cluster import read_cluster
from planner.formats.schedule import SCHEDULE_FORMAT
from planner.launch.adapter import JobState, Launcher
from planner.launch.kubernetes import KubectlError, KubernetesLauncher, nodes_state, results_from_pods, tolerates

FIXTURES = Path(__file__).parent / "data" / "kubectl"
T0 = epoch("2025-01-01T00:00:00Z")  # the fixtures' pods start then
assert T0 is not None

FAKE_KUBECTL = r'''#!PYTHON
"""A fake kubectl: appends its argv to $FAKE_LOG (one JSON list a line) and answers from fixtures.
get nodes: $FAKE_DIR/nodes.json; get pods: the files of $FAKE_PODS (comma-separated) in turn, the
last one again; $FAKE_FAIL=VERB: that verb fails; $FAKE_SLEEP: seconds to sleep first."""
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
time.sleep(float(os.environ.get("FAKE_SLEEP") or 0))
verb = next((a for a in args if a in ("get", "apply", "patch", "delete")), "")
words = args[args.index(verb):] if verb else []
if verb == os.environ.get("FAKE_FAIL"):
    print(f"error: the server refused {verb}", file=sys.stderr)
    sys.exit(1)
if verb == "get" and "nodes" in words:
    sys.stdout.write(open(os.path.join(os.environ["FAKE_DIR"], "nodes.json")).read())
elif verb == "get" and "pods" in words:
    files = os.environ["FAKE_PODS"].split(",")
    counter = os.environ["FAKE_LOG"] + ".pods"
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(n + 1))
    sys.stdout.write(open(os.path.join(os.environ["FAKE_DIR"], files[min(n, len(files) - 1)])).read())
else:
    print(f"{verb}: ok")
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake kubectl first on PATH; returns a function that reads the calls it got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(FAKE_KUBECTL.replace("PYTHON", sys.executable))
    script.chmod(0o755)
    log = tmp_path / "kubectl.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_DIR", str(FIXTURES))
    monkeypatch.delenv("FAKE_FAIL", raising=False)

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def two_job_schedule(folder: Path) -> Path:
    """One round of 360 s: job a on node n0, job b on node n1 (one T4 each)."""
    folder.mkdir(parents=True, exist_ok=True)
    cluster = {"worker_types": {"t4": {"gpus": 2, "gpus_per_node": 1, "nodes": ["n0", "n1"]}}}
    (folder / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    entry = {"total_steps": 1000, "arrival_s": 0, "scale_factor": 1, "command": "python train.py"}
    assignments = [
        {"jobs": [j], "worker_type": "t4", "gpus": [{"node": n, "gpu": 0}], "planned_steps": {j: 10}}
        for j, n in (("a", "n0"), ("b", "n1"))
    ]
    schedule = {
        "format": SCHEDULE_FORMAT,
        "policy": {"name": "fifo", "options": {}},
        "round_s": 360,
        "inputs": {"cluster": {"path": "cluster.yaml", "digest": None}},
        "rounds": [{"index": 0, "start_s": 0, "end_s": 360, "assignments": assignments}],
        "jobs": {"a": entry, "b": entry},
    }
    path = folder / "schedule.json"
    path.write_text(json.dumps(schedule))
    return path


class FakeClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)


# ----------------------------------------------------------------- pure functions on fixtures


def test_node_states_from_kubectl_get_nodes():
    cluster = read_cluster(FIXTURES / "cluster.yaml")
    doc = json.loads((FIXTURES / "nodes.json").read_text())
    state = nodes_state(doc, cluster)
    assert state.unusable() == {
        "gpu-a100-0": "tainted nvidia.com/gpu=present:NoSchedule",
        "gpu-v100-1": "cordoned",
        "gpu-t4-0": "not ready (KubeletNotReady)",
        "gpu-t4-1": "no allocatable nvidia.com/gpu",
        "gpu-t4-2": "tainted example.com/maintenance=planned:NoExecute",
    }
    # found by its kubernetes.io/hostname label, not its metadata.name
    assert state.nodes["gpu-v100-0"].usable and state.nodes["gpu-v100-0"].gpus == 4
    tolerated = nodes_state(
        doc, cluster, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert tolerated.nodes["gpu-a100-0"].usable and tolerated.nodes["gpu-a100-0"].gpus == 8
    assert "gpu-t4-2" in tolerated.unusable()  # a NoExecute taint it does not tolerate
    # another GPU resource name: no node offers it
    assert not any(s.usable for s in nodes_state(doc, cluster, gpu_resource="amd.com/gpu").nodes.values())


def test_a_spec_node_the_api_does_not_list_is_unknown(tmp_path):
    spec = yaml.safe_load((FIXTURES / "cluster.yaml").read_text())
    spec["worker_types"]["t4"] = {"gpus": 2, "gpus_per_node": 2, "nodes": ["gpu-t4-9"]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(spec))
    state = nodes_state(json.loads((FIXTURES / "nodes.json").read_text()), read_cluster(tmp_path / "c.yaml"))
    assert state.unusable()["gpu-t4-9"] == "unknown to the launcher"
    assert set(state.nodes) == {"gpu-a100-0", "gpu-v100-0", "gpu-v100-1", "gpu-t4-9"}  # cpu-0 is not in the spec


def test_tolerations_follow_the_api_rules():
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates([{"operator": "Exists"}], taint)  # empty key + Exists: everything
    assert tolerates([{"key": "k", "operator": "Equal", "value": "v"}], taint)  # empty effect: every effect
    assert not tolerates([{"key": "k", "operator": "Equal", "value": "w"}], taint)
    assert not tolerates([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], taint)
    assert not tolerates([{"key": "other", "operator": "Exists"}], taint)
    assert not tolerates([{"operator": "Equal", "value": "v"}], taint)  # empty key needs Exists


def test_job_states_from_kubectl_get_pods():
    doc = json.loads((FIXTURES / "pods-round-end.json").read_text())
    names = [
        "job-ok",
        "job-fail",
        "job-oom",
        "job-checkpointed",
        "job-ignored-sigterm",
        "job-pending",
        "job-evicted",
        "job-running",
        "job-deleted",
        "job-node-lost",
        "job-missing",
    ]
    expected = {f"rota-r0000-{n}": ([n], 1) for n in names}
    expected["rota-r0000-gang"] = (["gang-x", "gang-y"], 2)  # two co-located jobs on a two-pod gang
    results = results_from_pods(doc, expected)
    got = {j: (r.state, r.exit_code) for j, r in results.items()}
    assert got == {
        "job-ok": (JobState.COMPLETED, 0),
        "job-fail": (JobState.FAILED, 3),
        "job-oom": (JobState.FAILED, 137),
        "job-checkpointed": (JobState.COMPLETED, 0),  # stopped at the deadline after its checkpoint
        "job-ignored-sigterm": (JobState.KILLED, 137),
        "job-pending": (JobState.NOT_RUN, None),
        "job-evicted": (JobState.LOST, 137),
        "job-running": (JobState.KILLED, None),  # still running at the round's end
        "job-deleted": (JobState.CANCELLED, None),  # someone else's kubectl delete
        "job-node-lost": (JobState.LOST, 137),
        "job-missing": (JobState.NOT_RUN, None),  # no pod was ever created
        "gang-x": (JobState.FAILED, 1),
        "gang-y": (JobState.FAILED, 1),
    }
    assert "OOMKilled" in results["job-oom"].detail and "Evicted" in results["job-evicted"].detail
    assert "1 of 1 pod(s) never created" in results["job-missing"].detail
    assert "rota-r0000-someone-else" not in json.dumps([r.detail for r in results.values()])


def test_a_pod_that_vanished_mid_round_was_cancelled_unless_it_had_ended():
    doc = json.loads((FIXTURES / "pods-round-end.json").read_text())
    expected = {"rota-r0000-job-ok": (["ok"], 1), "rota-r0000-job-running": (["run"], 1)}
    watch = Watch(expected)
    watch.update(doc)
    watch.update({"kind": "List", "items": []})  # both gone (pod GC, someone's delete)
    states = {j["job_id"]: j["state"] for j in watch.jobs()}
    assert states == {"ok": "COMPLETED", "run": "CANCELLED"}


def test_deadlines_are_counted_from_the_round_start():
    doc = json.loads((FIXTURES / "pods-a-running.json").read_text())
    # the round started 10 s before the pod: the pod may run 300 - 10 s, not its manifest's 300
    assert deadline_patches(doc, deadline=T0 - 10 + 300) == [("rota-r0000-a-node0-0", 290)]
    assert deadline_patches(doc, deadline=T0 + 400) == []  # never raised
    assert deadline_patches(doc, deadline=T0 - 50) == [("rota-r0000-a-node0-0", 1)]  # already past: at once


# ----------------------------------------------------------------- the kubectl code paths


def test_cluster_state_runs_kubectl_with_context_and_kubeconfig(fake):
    launcher = KubernetesLauncher(context="prod", kubeconfig="/etc/kube/config", namespace="ml")
    protocol: Launcher = launcher  # mypy checks planner/launch/kubernetes.py against the protocol too
    assert all(callable(getattr(protocol, m)) for m in ("prepare", "launch", "wait", "collect", "cancel"))
    state = launcher.cluster_state(read_cluster(FIXTURES / "cluster.yaml"))
    assert state.nodes["gpu-v100-0"].usable and "gpu-v100-1" in state.unusable()
    assert fake() == [
        ["--context", "prod", "--kubeconfig", "/etc/kube/config", "--namespace", "ml", "get", "nodes", "-o", "json"]
    ]


def test_launch_wait_collect(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PODS", "pods-a-running.json,pods-ended.json")
    clock = FakeClock(T0 - 10)
    launcher = KubernetesLauncher(namespace="ml", clock=clock, sleep=clock.sleep, poll_s=5)
    context = load_context(two_job_schedule(tmp_path / "in"))
    prepared = launcher.prepare(context, tmp_path / "launch", {})
    assert (tmp_path / "launch" / "round-0000" / "rota-r0000-a.yaml").exists()
    handle = launcher.launch(prepared, round_start=T0 - 10)
    assert launcher.wait(handle, until=T0 + 600) is True  # every pod ended before the round's end
    result = launcher.collect(handle)
    assert result.error is None and result.index == 0
    assert {j: (r.state, r.exit_code) for j, r in result.jobs.items()} == {
        "a": (JobState.COMPLETED, 0),
        "b": (JobState.FAILED, 2),
    }
    calls = [c[2:] for c in fake()]  # without --namespace ml
    folder = str(tmp_path / "launch" / "round-0000")
    assert calls[0] == ["apply", "-f", folder]
    assert calls[1] == ["get", "pods", "-l", "rota/round=0", "-o", "json"]
    # pod a started at T0, 10 s into the round: it may run 290 s, to the round's deadline
    assert calls[2] == [
        "patch",
        "pod",
        "rota-r0000-a-node0-0",
        "--type=merge",
        "-p",
        '{"spec": {"activeDeadlineSeconds": 290}}',
    ]
    assert calls[-1] == ["delete", "-f", folder, "--ignore-not-found", "--wait=false"]
    assert all(c[:2] == ["--namespace", "ml"] for c in fake())


def test_wait_returns_at_until_and_the_round_end_drops_pods_that_never_started(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PODS", "pods-a-running.json")
    clock = FakeClock(T0)
    launcher = KubernetesLauncher(clock=clock, sleep=clock.sleep, poll_s=5, settle_s=30)
    handle = launcher.launch(launcher.prepare(load_context(two_job_schedule(tmp_path / "in")), tmp_path / "l", {}), T0)
    assert launcher.wait(handle, until=T0 + 20) is False and clock.now >= T0 + 20
    assert launcher.wait(handle, until=T0 + 10_000) is True  # a still runs: deleted settle_s after the end
    assert T0 + 360 + 30 <= clock.now < T0 + 360 + 40
    result = launcher.collect(handle)
    assert {j: r.state for j, r in result.jobs.items()} == {"a": JobState.KILLED, "b": JobState.NOT_RUN}
    assert sum(c[0] == "delete" for c in fake()) == 1


def test_cancel_deletes_the_round(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PODS", "pods-a-running.json,pods-deleting.json")
    launcher = KubernetesLauncher()
    prepared = launcher.prepare(load_context(two_job_schedule(tmp_path / "in")), tmp_path / "l", {})
    handle = launcher.launch(prepared, T0 - 10)
    launcher.poll(handle)
    launcher.cancel(handle)
    result = launcher.collect(handle)
    assert result.error == "cancelled"
    assert {j: r.state for j, r in result.jobs.items()} == {"a": JobState.CANCELLED, "b": JobState.NOT_RUN}
    assert [c[0] for c in fake()] == ["apply", "get", "patch", "delete", "get"]


def test_a_refused_apply_fails_the_round(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "apply")
    monkeypatch.setenv("FAKE_PODS", "pods-a-running.json")
    launcher = KubernetesLauncher()
    handle = launcher.launch(launcher.prepare(load_context(two_job_schedule(tmp_path / "in")), tmp_path / "l", {}), T0)
    assert launcher.wait(handle, until=T0) is True
    result = launcher.collect(handle)
    assert result.error == "kubectl apply failed (exit 1): error: the server refused apply"
    assert {r.state for r in result.jobs.values()} == {JobState.NOT_RUN}
    assert [c[0] for c in fake()] == ["apply", "delete"]  # what was applied is removed


def test_kubectl_failures_are_one_line_errors(fake, monkeypatch):
    cluster = read_cluster(FIXTURES / "cluster.yaml")
    monkeypatch.setenv("FAKE_FAIL", "get")
    with pytest.raises(KubectlError, match=r"^field 'kubectl': kubectl get nodes failed \(exit 1\): error: the server"):
        KubernetesLauncher().cluster_state(cluster)
    monkeypatch.delenv("FAKE_FAIL")
    monkeypatch.setenv("FAKE_SLEEP", "5")
    with pytest.raises(KubectlError, match="timed out after 0.5 s"):
        KubernetesLauncher(timeout_s=0.5).cluster_state(cluster)
    with pytest.raises(KubectlError, match="cannot run /nonexistent/kubectl"):
        KubernetesLauncher(kubectl=["/nonexistent/kubectl"]).cluster_state(cluster)


# ----------------------------------------------------------------- the export's driver


def test_driver_reports_each_jobs_state(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PODS", "pods-a-running.json,pods-ended.json")
    out = tmp_path / "launch"
    export_schedule("kubernetes", load_context(two_job_schedule(tmp_path / "in")), out, namespace="ml")
    env = {**os.environ, "POLL_S": "0.05", "PYTHON": sys.executable}
    run = subprocess.run(["sh", str(out / "driver.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 1, run.stderr  # b failed
    assert "a=COMPLETED\nb=FAILED\n" in run.stdout
    report = json.loads((out / "logs" / "k8s_state.json").read_text())
    assert report["format"] == STATE_FORMAT and report["exit_status"] == 1
    (rnd,) = report["rounds"]
    assert rnd["round"] == "round-0000" and rnd["deadline_at"] - rnd["applied_at"] == 300
    assert [(j["job_id"], j["state"], j["exit_code"]) for j in rnd["jobs"]] == [
        ("a", "COMPLETED", 0),
        ("b", "FAILED", 2),
    ]
    # (the pods' fixed start times lie before this round's start: no deadline to lower)
    assert [c[2] for c in fake()] == ["apply", "get", "get", "delete"]
    assert all(c[:2] == ["--namespace", "ml"] for c in fake())


def test_driver_deletes_the_round_when_apply_fails(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "apply")
    monkeypatch.setenv("FAKE_PODS", "pods-a-running.json")
    out = tmp_path / "launch"
    export_schedule("kubernetes", load_context(two_job_schedule(tmp_path / "in")), out)
    env = {**os.environ, "PYTHON": sys.executable, "STATE_FILE": str(tmp_path / "state.json")}
    run = subprocess.run(["sh", str(out / "driver.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 2 and "kubectl apply -f round-0000 failed" in run.stderr
    report = json.loads((tmp_path / "state.json").read_text())
    assert report["exit_status"] == 2 and report["rounds"][0]["error"].startswith("kubectl apply")
    assert [c[0] for c in fake()][:2] == ["apply", "delete"]
