"""Kubernetes export: strict offline schema checks of every manifest, the GPU-product label values,
the gang contract in the pods, and Volcano's policy allow-lists.

Schemas: batch/v1 Jobs with kubernetes-validate (strict: unknown fields are errors). Volcano Jobs and
JobSets against the field structure of their CRDs, written down below (fields, types, minimums, enums
and required fields of the levels above the pod / Job template), with the embedded templates and the
metadata checked by kubernetes-validate as core/v1 PodTemplateSpec, batch/v1 JobSpec and ObjectMeta.
Read from:
  volcano-sh/volcano @ ed72c7c815a9fd547a787134676f73d42e9d049c (2026-08-20, v1.16.0-alpha.1-42)
    config/crd/volcano/bases/batch.volcano.sh_jobs.yaml (sha256 91b22fe5901f54f1...), version v1alpha1;
    pkg/webhooks/admission/jobs/validate/util.go (policyEventMap / policyActionMap);
  kubernetes-sigs/jobset @ 08dfbdfd682714a9ab929633eca8dc95315187e7 (2026-08-18, v0.13.0-devel-43)
    config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml (sha256 029f74bbb91b7d94...), version v1alpha2.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from conftest import DATA
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.export import export_schedule, load_context
from planner.export.kubernetes import VOLCANO_ACTIONS, VOLCANO_EVENTS, check_manifest
from planner.formats.cluster import read_cluster
from planner.formats.jobs import read_jobs
from planner.formats.safe_yaml import load_yaml
from planner.formats.schedule import write_schedule
from planner.formats.table import read_table
from planner.modes.next_round import make_policy_from
from planner.modes.plan import build_schedule
from planner.rounds.engine import EngineConfig, run_engine

K8S_VERSION = "1.37.0"
INPUTS = {"table": DATA / "throughputs.csv", "jobs": DATA / "jobs.csv", "cluster": DATA / "cluster.yaml"}

# ----------------------------------------------------------------- the CRDs' field structure

STR, INT0, INT1, INT, BOOL, ANY_OBJECT = ("str",), ("int", 0), ("int", 1), ("int", None), ("bool",), ("object",)


def obj(fields: dict[str, tuple], required: tuple[str, ...] = ()) -> tuple:
    return ("obj", fields, required)


def array(item: tuple) -> tuple:
    return ("list", item)


VOLCANO_POLICY = obj(
    {
        "action": STR,
        "event": (
            "enum",
            ("*", "PodPending", "PodRunning", "PodFailed", "PodEvicted", "Unknown", "TaskCompleted", "OutOfSync")
            + ("CommandIssued", "JobUpdated", "TaskFailed"),
        ),
        "events": array(STR),
        "exitCode": INT,
        "timeout": STR,
    }
)
VOLCANO_JOB = obj(
    {
        "apiVersion": STR,
        "kind": STR,
        "metadata": ("k8s", "ObjectMeta"),
        "spec": obj(
            {
                "maxRetry": INT0,
                "minAvailable": INT0,
                "minSuccess": INT1,
                "networkTopology": ANY_OBJECT,
                "plugins": ("map", array(STR)),
                "policies": array(VOLCANO_POLICY),
                "priorityClassName": STR,
                "queue": STR,
                "runningEstimate": STR,
                "schedulerName": STR,
                "tasks": array(
                    obj(
                        {
                            "dependsOn": ANY_OBJECT,
                            "maxRetry": INT0,
                            "minAvailable": INT0,
                            "name": STR,
                            "partitionPolicy": ANY_OBJECT,
                            "policies": array(VOLCANO_POLICY),
                            "replicas": INT0,
                            "template": ("k8s", "PodTemplateSpec"),
                            "topologyPolicy": ("enum", ("none", "best-effort", "restricted", "single-numa-node")),
                        }
                    )
                ),
                "ttlSecondsAfterFinished": INT0,
                "volumes": array(ANY_OBJECT),
            }
        ),
        "status": ANY_OBJECT,
    }
)
JOBSET = obj(
    {
        "apiVersion": STR,
        "kind": STR,
        "metadata": ("k8s", "ObjectMeta"),
        "spec": obj(
            {
                "coordinator": ANY_OBJECT,
                "failurePolicy": ANY_OBJECT,
                "managedBy": STR,
                "network": obj({"enableDNSHostnames": BOOL, "publishNotReadyAddresses": BOOL, "subdomain": STR}),
                "replicatedJobs": array(
                    obj(
                        {
                            "dependsOn": array(ANY_OBJECT),
                            "groupName": STR,
                            "name": STR,
                            "replicas": INT0,
                            "template": ("k8s", "JobTemplateSpec"),
                        },
                        required=("name", "template"),
                    )
                ),
                "startupPolicy": ANY_OBJECT,
                "successPolicy": ANY_OBJECT,
                "suspend": BOOL,
                "ttlSecondsAfterFinished": INT0,
                "volumeClaimPolicies": array(ANY_OBJECT),
            }
        ),
        "status": ANY_OBJECT,
    }
)
CRDS = {("batch.volcano.sh/v1alpha1", "Job"): VOLCANO_JOB, ("jobset.x-k8s.io/v1alpha2", "JobSet"): JOBSET}
# Volcano's admission webhook: the events and actions a user's policy may name.
WEBHOOK_EVENTS = {"*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed", "JobUpdated"}
WEBHOOK_ACTIONS = {"AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition", "TerminateJob"}
WEBHOOK_ACTIONS |= {"CompleteJob", "ResumeJob"}


def _k8s(kind: str, value: Any, where: str) -> list[str]:
    """An embedded core type, checked strictly by kubernetes-validate inside an object that holds it."""
    if kind == "PodTemplateSpec":
        doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": value}
    elif kind == "JobTemplateSpec":
        meta = {"name": "x", **(value.get("metadata") or {})} if isinstance(value, dict) else {}
        doc = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": value.get("spec")}
        if isinstance(value, dict) and set(value) - {"metadata", "spec"}:
            return [f"{where}: unknown field {sorted(set(value) - {'metadata', 'spec'})[0]}"]
    else:  # ObjectMeta
        doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": value}
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{where}.{'.'.join(map(str, exc.absolute_path))}: {exc.message}"]
    return []


def _scalar(value: Any, schema: tuple, where: str) -> list[str]:
    kind = schema[0]
    if kind == "str":
        return [] if isinstance(value, str) else [f"{where}: expected a string"]
    if kind == "bool":
        return [] if isinstance(value, bool) else [f"{where}: expected a boolean"]
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{where}: expected an integer"]
        return [] if schema[1] is None or value >= schema[1] else [f"{where}: below the minimum {schema[1]}"]
    if kind == "enum":
        return [] if value in schema[1] else [f"{where}: {value!r} is not one of the CRD's values"]
    return [] if isinstance(value, dict) else [f"{where}: expected an object"]  # "object": any mapping


def conform(value: Any, schema: tuple, where: str = "$") -> list[str]:
    """Problems of `value` against a description above (empty: it conforms)."""
    kind = schema[0]
    if kind in ("str", "bool", "int", "enum", "object"):
        return _scalar(value, schema, where)
    if kind == "k8s":
        return _k8s(schema[1], value, where)
    if kind == "list":
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        return [p for k, item in enumerate(value) for p in conform(item, schema[1], f"{where}[{k}]")]
    if not isinstance(value, dict):
        return [f"{where}: expected an object"]
    if kind == "map":
        return [p for k, item in value.items() for p in conform(item, schema[1], f"{where}.{k}")]
    fields, required = schema[1], schema[2]
    problems = [f"{where}.{k}: unknown field" for k in value if k not in fields]
    problems += [f"{where}.{k}: required" for k in required if k not in value]
    return problems + [p for k, item in value.items() if k in fields for p in conform(item, fields[k], f"{where}.{k}")]


def strict_problems(doc: dict) -> list[str]:
    """Strict schema problems of one manifest (empty: the API server accepts its structure)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRDS:
        problems = conform(doc, CRDS[key])
        if key[1] == "Job":
            for k, policy in enumerate(doc["spec"].get("policies", [])):
                if policy.get("event") not in WEBHOOK_EVENTS or policy.get("action") not in WEBHOOK_ACTIONS:
                    problems.append(f"spec.policies[{k}]: refused by Volcano's webhook")
        return problems
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.absolute_path))}: {exc.message}"]
    return []


# ----------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def schedule(tmp_path_factory) -> Path:
    """Three rounds of packed max-min fairness: co-located pairs, one-node jobs and a two-node gang."""
    table = read_table(INPUTS["table"])
    cluster = read_cluster(INPUTS["cluster"])
    jobs = read_jobs(INPUTS["jobs"], table=table, cluster=cluster)
    result = run_engine(jobs, table, cluster, make_policy_from("max_min_fairness_packed", {}))
    doc = build_schedule(
        result, inputs=INPUTS, policy="max_min_fairness_packed", options={}, config=EngineConfig(), rounds=3
    )
    path = tmp_path_factory.mktemp("k8s") / "schedule.json"
    write_schedule(doc, path)
    return path


def manifests(folder: Path) -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted(folder.glob("round-*/*.yaml"))]


def pods(doc: dict) -> list[dict]:
    if doc["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"] for rj in doc["spec"]["replicatedJobs"]]
    if doc["apiVersion"].startswith("batch.volcano.sh"):
        return [t["template"] for t in doc["spec"]["tasks"]]
    return [doc["spec"]["template"]]


def script_env(pod: dict) -> list[dict[str, str]]:
    """Each job's exported variables in the pod's launch script."""
    script = pod["spec"]["containers"][0]["command"][2]
    out = []
    for line in script.splitlines():
        if line.startswith("( export "):
            words = shlex.split(line[len("( export ") : line.index("; exec ")])
            out.append(dict(w.split("=", 1) for w in words))
    return out


# ----------------------------------------------------------------- tests


@pytest.mark.parametrize("gang", ["volcano", "kueue"])
def test_manifests_pass_strict_schema_checks(schedule, tmp_path, gang):
    export_schedule("kubernetes", load_context(schedule), tmp_path, gang=gang, queue="research", namespace="ml")
    docs = manifests(tmp_path)
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    if gang == "volcano":
        assert kinds == {("batch.volcano.sh/v1alpha1", "Job")}
    else:
        assert kinds == {("batch/v1", "Job"), ("jobset.x-k8s.io/v1alpha2", "JobSet")}
    for doc in docs:
        assert strict_problems(doc) == [], doc["metadata"]["name"]


def test_the_strict_checks_catch_mistakes(schedule, tmp_path):
    for gang in ("volcano", "kueue"):
        export_schedule("kubernetes", load_context(schedule), tmp_path / gang, gang=gang)
    docs = manifests(tmp_path / "volcano") + manifests(tmp_path / "kueue")
    volcano = next(d for d in docs if d["kind"] == "Job" and d["apiVersion"].startswith("batch.volcano"))
    jobset = next(d for d in docs if d["kind"] == "JobSet")
    batch = next(d for d in docs if d["apiVersion"] == "batch/v1")
    cases = [
        (volcano, lambda d: d["spec"].update(minAvailble=1), "spec.minAvailble: unknown field"),
        (volcano, lambda d: d["spec"].update(maxRetry=-1), "spec.maxRetry: below the minimum 0"),
        (volcano, lambda d: d["spec"]["policies"].append({"event": "PodRunning", "action": "AbortJob"}), "webhook"),
        (volcano, lambda d: d["spec"]["tasks"][0]["template"]["spec"].update(nodeSelectr={}), "nodeSelectr"),
        (jobset, lambda d: d["spec"]["network"].update(enableDNSHostnames="yes"), "expected a boolean"),
        (jobset, lambda d: d["spec"]["replicatedJobs"][0].pop("name"), "name: required"),
        (jobset, lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"].update(completions="1"), "completions"),
        (batch, lambda d: d["spec"].update(backofLimit=0), "backofLimit"),
        (batch, lambda d: d["metadata"].update(labelz={}), "labelz"),
    ]
    for doc, mutate, expected in cases:
        broken = copy.deepcopy(doc)
        mutate(broken)
        problems = strict_problems(broken)
        assert any(expected in p for p in problems), (expected, problems)


def test_volcano_allow_lists_are_the_webhooks():
    assert VOLCANO_EVENTS == WEBHOOK_EVENTS and VOLCANO_ACTIONS == WEBHOOK_ACTIONS
    base = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "x"},
        "spec": {
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "t",
                    "replicas": 1,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}},
                }
            ],
        },
    }

    def problems(*policies: tuple[str, str]) -> list[str]:
        doc = copy.deepcopy(base)
        doc["spec"]["policies"] = [{"event": e, "action": a} for e, a in policies]
        return check_manifest(doc)

    assert problems(("PodFailed", "RestartPartition"), ("PodPending", "RestartPod"), ("JobUpdated", "ResumeJob")) == []
    for event in ("PodRunning", "OutOfSync", "CommandIssued"):  # in the CRD's enum, refused by the webhook
        assert any("not accepted by Volcano" in p for p in problems((event, "AbortJob"))), event
    for action in ("SyncJob", "EnqueueJob", "OpenQueue"):
        assert any("not accepted by Volcano" in p for p in problems(("PodFailed", action))), action
    assert any("given twice" in p for p in problems(("PodFailed", "AbortJob"), ("PodFailed", "RestartJob")))
    assert any("only one" in p for p in problems(("*", "AbortJob"), ("PodFailed", "RestartJob")))


def test_gpu_product_label_values(schedule, tmp_path):
    """GPU feature discovery's values by default; the cluster spec's, then --gpu-product, override."""

    def selectors(out: Path) -> dict[str, str]:
        found = {}
        for doc in manifests(out):
            for pod in pods(doc):
                found[doc["metadata"]["annotations"]["rota/worker-type"]] = pod["spec"]["nodeSelector"][
                    "nvidia.com/gpu.product"
                ]
        return found

    guessed = load_context(schedule)
    export_schedule("kubernetes", guessed, tmp_path / "a")
    assert selectors(tmp_path / "a") == {
        "a100": "NVIDIA-A100-SXM4-80GB",
        "v100": "Tesla-V100-SXM2-16GB",
        "t4": "Tesla-T4",
    }
    # every guessed type is named (an a100 or v100 node may carry another model's value)
    assert sorted(n.split("'")[1] for n in guessed.notes if n.startswith("guessed nvidia.com/gpu.product=")) == [
        "a100",
        "t4",
        "v100",
    ]
    spec = yaml.safe_load((DATA / "cluster.yaml").read_text())
    spec["worker_types"]["v100"]["gpu_product"] = "Tesla-V100-SXM2-32GB"
    spec["worker_types"]["a100"]["gpu_product"] = "NVIDIA-A100-SXM4-40GB"
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(spec))
    ctx = load_context(schedule, cluster=tmp_path / "cluster.yaml")
    export_schedule("kubernetes", ctx, tmp_path / "b", gpu_product=["a100=A100-PCIE-40GB"])
    assert selectors(tmp_path / "b") == {"a100": "A100-PCIE-40GB", "v100": "Tesla-V100-SXM2-32GB", "t4": "Tesla-T4"}
    assert len(ctx.notes) == 1 and ctx.notes[0].startswith(
        "guessed nvidia.com/gpu.product=Tesla-T4 for worker type 't4'"
    )


def test_unknown_gpu_product_warns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("cluster.yaml").write_text("worker_types:\n  mi300x: {gpus: 2}\n")
    Path("jobs.csv").write_text("job_id,model,batch_size,duration_s,command\nj,ResNet-18,64,600,run\n")
    Path("t.csv").write_text("worker_type,model,batch_size,scale_factor,throughput\nmi300x,ResNet-18,64,1,50\n")
    runner = CliRunner()
    plan = ["plan", "--table", "t.csv", "--jobs", "jobs.csv", "--cluster", "cluster.yaml", "--out", "s.json"]
    assert runner.invoke(app, [*plan, "--rounds", "1"]).exit_code == 0
    result = runner.invoke(app, ["export", "kubernetes", "s.json", "--out", "k8s"])
    assert result.exit_code == 0, result.output
    assert "warning: no nvidia.com/gpu.product value known for worker type 'mi300x'" in " ".join(result.output.split())
    (doc,) = manifests(Path("k8s"))
    assert pods(doc)[0]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "mi300x"
    result = runner.invoke(app, ["export", "kubernetes", "s.json", "--out", "k8s", "--gpu-product", "mi300x=AMD"])
    assert result.exit_code == 0 and "warning" not in result.output


def test_bad_gpu_product_in_the_cluster_spec(tmp_path):
    from planner.errors import InputError

    (tmp_path / "c.yaml").write_text("worker_types:\n  t4: {gpus: 2, gpu_product: [Tesla-T4]}\n")
    with pytest.raises(InputError, match="gpu_product"):
        read_cluster(tmp_path / "c.yaml")


def _port(job_id: str) -> str:
    return str(29500 + int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:4], "big") % 1000)


@pytest.mark.parametrize("gang", ["volcano", "kueue"])
def test_gang_contract_in_the_pods(schedule, tmp_path, gang):
    export_schedule("kubernetes", load_context(schedule), tmp_path, gang=gang)
    sizes = set()
    for doc in manifests(tmp_path):
        name, templates = doc["metadata"]["name"], pods(doc)
        sizes.add(len(templates))
        for rank, pod in enumerate(templates):
            env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
            assert env["ROTA_NODE_RANK"]["value"] == str(rank) and env["ROTA_NUM_NODES"]["value"] == str(len(templates))
            master = env["ROTA_MASTER_ADDR"]
            if len(templates) == 1:
                assert master == {"name": "ROTA_MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
            elif gang == "volcano":  # the svc plugin: pod <job>-<task>-<index> under the job's headless service
                assert doc["spec"]["plugins"] == {"svc": []} and doc["spec"]["tasks"][0]["name"] == "node0"
                assert master["value"] == f"{name}-node0-0.{name}"
            else:  # JobSet: <jobset>-<replicatedJob>-<job index>-<pod index> under the JobSet's service
                assert doc["spec"]["network"] == {"enableDNSHostnames": True}
                assert doc["spec"]["replicatedJobs"][0]["name"] == "node0"
                assert master["value"] == f"{name}-node0-0-0.{name}" and len(master["value"].split(".")[0]) <= 63
            jobs = json.loads(doc["metadata"]["annotations"]["rota/planned-steps"])
            exported = script_env(pod)
            assert sorted(e["ROTA_JOB_ID"] for e in exported) == sorted(jobs)
            for e in exported:
                assert e["ROTA_MASTER_PORT"] == _port(e["ROTA_JOB_ID"])
                assert e["ROTA_NODE_RANK"] == str(rank) and e["ROTA_NUM_NODES"] == str(len(templates))
    assert sizes == {1, 2}


# ----------------------------------------------------------------- pod templates, images, /dev/shm, node labels

KUBECTL = Path(__file__).parent / "data" / "kubectl"
TEMPLATE = """\
pod:
  serviceAccountName: trainer
  priorityClassName: research-high
  imagePullSecrets: [{name: regcred}]
  nodeSelector: {topology.kubernetes.io/zone: eu-west-1a}
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: datasets}
  - name: ckpt
    nfs: {server: nfs.example.com, path: /exports/ckpt}
container:
  imagePullPolicy: Always
  env:
  - {name: HF_HOME, value: /data/hf}
  - name: WANDB_API_KEY
    valueFrom: {secretKeyRef: {name: wandb, key: api-key}}
  volumeMounts:
  - {name: data, mountPath: /data, readOnly: true}
  - {name: ckpt, mountPath: /ckpt}
  resources:
    requests: {cpu: "8", memory: 64Gi}
    limits: {memory: 64Gi}
"""


@pytest.mark.parametrize("gang", ["volcano", "kueue"])
def test_pod_template_is_merged_into_every_pod(schedule, tmp_path, gang):
    (tmp_path / "tpl.yaml").write_text(TEMPLATE)
    out = tmp_path / "out"
    export_schedule(
        "kubernetes", load_context(schedule), out, gang=gang, pod_template=tmp_path / "tpl.yaml", shm_size="16Gi"
    )
    docs = manifests(out)
    assert docs
    for path in out.glob("round-*/*.yaml"):  # plain YAML: no anchors or aliases shared between pods
        load_yaml(path.read_text(), path)
    for doc in docs:
        assert strict_problems(doc) == [], doc["metadata"]["name"]
        assert check_manifest(doc) == []
        for pod in pods(doc):
            spec = pod["spec"]
            (container,) = spec["containers"]
            assert spec["serviceAccountName"] == "trainer" and spec["priorityClassName"] == "research-high"
            assert spec["imagePullSecrets"] == [{"name": "regcred"}]
            assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
            # maps merged: rota's selectors kept, the template's added
            assert spec["nodeSelector"]["topology.kubernetes.io/zone"] == "eu-west-1a"
            assert set(spec["nodeSelector"]) == {
                "nvidia.com/gpu.product",
                "kubernetes.io/hostname",
                "topology.kubernetes.io/zone",
            }
            # lists appended after rota's own entries
            assert [v["name"] for v in spec["volumes"]] == ["dshm", "data", "ckpt"]
            assert spec["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
            assert [m["mountPath"] for m in container["volumeMounts"]] == ["/dev/shm", "/data", "/ckpt"]
            env = [e["name"] for e in container["env"]]
            assert env[:2] == ["ROTA_NODE_RANK", "ROTA_NUM_NODES"] and env[-2:] == ["HF_HOME", "WANDB_API_KEY"]
            limits = container["resources"]["limits"]
            assert limits["memory"] == "64Gi" and limits["nvidia.com/gpu"] >= 1
            assert container["resources"]["requests"] == {"cpu": "8", "memory": "64Gi"}
            assert container["imagePullPolicy"] == "Always"
            assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 300


def test_shm_by_default_and_no_shm(schedule, tmp_path):
    export_schedule("kubernetes", load_context(schedule), tmp_path / "a")
    pod = pods(manifests(tmp_path / "a")[0])[0]["spec"]
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    export_schedule("kubernetes", load_context(schedule), tmp_path / "b", shm=False)
    pod = pods(manifests(tmp_path / "b")[0])[0]["spec"]
    assert "volumes" not in pod and "volumeMounts" not in pod["containers"][0]
    for bad, why in (("lots", "expected a positive quantity"), ("0", "expected a positive quantity")):
        with pytest.raises(InputError, match=f"field '--shm-size': '{bad}': {why}"):
            export_schedule("kubernetes", load_context(schedule), tmp_path / "c", shm_size=bad)
    with pytest.raises(InputError, match="give it without --no-shm"):
        export_schedule("kubernetes", load_context(schedule), tmp_path / "c", shm=False, shm_size="1Gi")


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("pod: {restartPolicy: Always}\n", "pod.restartPolicy", "set by rota (a pod lives one round)"),
        ("pod: {activeDeadlineSeconds: 9999}\n", "pod.activeDeadlineSeconds", "set by rota"),
        ("container: {command: [sleep]}\n", "container.command", "set by rota"),
        ("container: {image: other}\n", "container.image", "use --image or the job list's 'image' column"),
        ("pod: {hostNetwork: true}\n", "pod.hostNetwork", "unknown key (expected one of: serviceAccountName"),
        ("pods: {}\n", "pods", "unknown key (expected pod, container)"),
        ("container: {resources: {limits: {nvidia.com/gpu: 8}}}\n", "container.resources.limits.nvidia.com/gpu", ""),
        ("container: {env: [{name: ROTA_ROUND, value: '9'}]}\n", "container.env[0].name", "ROTA_ROUND is set by rota"),
        ("pod: {nodeSelector: {kubernetes.io/hostname: x}}\n", "pod.nodeSelector.kubernetes.io/hostname", ""),
        ("pod: {tolerations: [{key: a, operator: Maybe}]}\n", "pod.tolerations[0].operator", "Equal or Exists"),
        ("pod: {volumes: [{name: d, hostPath: {path: /x}, emptyDir: {}}]}\n", "pod.volumes[0]", "exactly one"),
        ("pod: {volumes: [{name: dshm, emptyDir: {}}]}\n", "pod.volumes[0].name", "or give --no-shm"),
        ("container: {volumeMounts: [{name: nope, mountPath: /x}]}\n", "container.volumeMounts[0].name", "no volume"),
        ("container: {volumeMounts: [{name: dshm, mountPath: /dev/shm}]}\n", "container.volumeMounts[0].mountPath", ""),
        (
            "container: {resources: {requests: {cpu: '8'}, limits: {cpu: 4000m}}}\n",
            "container.resources.requests.cpu",
            "more than its limit",
        ),
        ("container: {resources: {limits: {memory: 64GB}}}\n", "container.resources.limits.memory", "invalid quantity"),
        (
            "container: {env: [{name: X, valueFrom: {secretKeyRef: {name: s}}}]}\n",
            "container.env[0].valueFrom.secretKeyRef.key",
            "required",
        ),
        ("container: {imagePullPolicy: Sometimes}\n", "container.imagePullPolicy", "Always, IfNotPresent or Never"),
        ("pod: {volumes: [{name: a, emptyDir: {}}, {name: a, emptyDir: {}}]}\n", "pod.volumes[1].name", "given twice"),
        ("pod: &a {serviceAccountName: x}\n", None, "anchors and aliases"),
        ("- a list\n", None, "expected a mapping with 'pod' and/or 'container'"),
    ],
)
def test_pod_template_errors_name_the_file_and_field(schedule, tmp_path, text, field, message):
    (tmp_path / "tpl.yaml").write_text(text)
    result = CliRunner().invoke(
        app,
        [
            "export",
            "kubernetes",
            str(schedule),
            "--out",
            str(tmp_path / "out"),
            "--pod-template",
            str(tmp_path / "tpl.yaml"),
        ],
    )
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert f"{tmp_path / 'tpl.yaml'}" in line and message in line, line
    if field is not None:
        assert f"field '{field}'" in line, line
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_the_template_may_mount_its_own_shm_with_no_shm(schedule, tmp_path):
    (tmp_path / "tpl.yaml").write_text(
        "pod: {volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 1Gi}}]}\n"
        "container: {volumeMounts: [{name: dshm, mountPath: /dev/shm}]}\n"
    )
    export_schedule("kubernetes", load_context(schedule), tmp_path / "o", shm=False, pod_template=tmp_path / "tpl.yaml")
    pod = pods(manifests(tmp_path / "o")[0])[0]["spec"]
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]


def _jobs_with_images(tmp_path: Path, images: dict[str, str]) -> Path:
    rows = list(csv.DictReader((DATA / "jobs.csv").open()))
    for row in rows:
        row["image"] = images.get(row["job_id"], "")
    path = tmp_path / "jobs.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _image_by_jobs(out: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for doc in manifests(out):
        for pod in pods(doc):
            found.setdefault(doc["metadata"]["annotations"]["rota/jobs"], set()).add(
                pod["spec"]["containers"][0]["image"]
            )
    return found


def test_per_job_image_column(schedule, tmp_path):
    context = load_context(schedule)
    solo = next(a["jobs"][0] for r in context.document.rounds for a in r["assignments"] if len(a["jobs"]) == 1)
    jobs = _jobs_with_images(tmp_path, {solo: "registry.example.com/team/trainer:v2"})
    export_schedule("kubernetes", load_context(schedule, jobs=jobs), tmp_path / "o", image="base:1")
    found = _image_by_jobs(tmp_path / "o")
    assert found[solo] == {"registry.example.com/team/trainer:v2"}
    assert {i for label, images in found.items() if label != solo for i in images} == {"base:1"}
    # co-located jobs share one container: different images are refused
    pair = next(a["jobs"] for r in context.document.rounds for a in r["assignments"] if len(a["jobs"]) == 2)
    jobs = _jobs_with_images(tmp_path, {pair[0]: "one:1", pair[1]: "two:2"})
    with pytest.raises(InputError, match=r"field 'image': jobs .* share GPUs in round \d+ but name different images"):
        export_schedule("kubernetes", load_context(schedule, jobs=jobs), tmp_path / "p")
    jobs = _jobs_with_images(tmp_path, {solo: "bad image"})
    with pytest.raises(InputError, match=f"field 'image': job '{solo}': 'bad image' is not an image reference"):
        export_schedule("kubernetes", load_context(schedule, jobs=jobs), tmp_path / "q")


@pytest.fixture(scope="module")
def fixture_schedule(tmp_path_factory) -> Path:
    """A schedule on the cluster of tests/data/kubectl (nodes named as its nodes.json names them)."""
    inputs = {**INPUTS, "cluster": KUBECTL / "cluster.yaml"}
    table = read_table(inputs["table"])
    cluster = read_cluster(inputs["cluster"])
    jobs = read_jobs(inputs["jobs"], table=table, cluster=cluster)
    result = run_engine(jobs, table, cluster, make_policy_from("max_min_fairness", {}))
    doc = build_schedule(result, inputs=inputs, policy="max_min_fairness", options={}, config=EngineConfig(), rounds=2)
    path = tmp_path_factory.mktemp("k8s-nodes") / "schedule.json"
    write_schedule(doc, path)
    return path


def test_gpu_products_read_from_kubectl_get_nodes(fixture_schedule, tmp_path):
    context = load_context(fixture_schedule)
    export_schedule("kubernetes", context, tmp_path / "o", nodes_json=KUBECTL / "nodes.json")
    found = {
        doc["metadata"]["annotations"]["rota/worker-type"]: pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
        for doc in manifests(tmp_path / "o")
        for pod in pods(doc)
    }
    assert found and set(found.items()) <= {
        ("a100", "NVIDIA-A100-SXM4-40GB"),  # not the built-in guess (80GB)
        ("v100", "Tesla-V100-SXM2-32GB"),
        ("t4", "Tesla-T4"),
    }
    assert context.notes == []  # nothing guessed


def test_nodes_json_errors(fixture_schedule, tmp_path):
    nodes = json.loads((KUBECTL / "nodes.json").read_text())

    def export(doc: Any, **options: Any) -> None:
        (tmp_path / "nodes.json").write_text(json.dumps(doc))
        export_schedule(
            "kubernetes", load_context(fixture_schedule), tmp_path / "o", nodes_json=tmp_path / "nodes.json", **options
        )

    other = copy.deepcopy(nodes)
    other["items"] = [n for n in other["items"] if "a100" not in n["metadata"]["name"]]
    with pytest.raises(InputError, match="worker type 'a100' matches no node: the cluster spec's nodes"):
        export(other)
    other = copy.deepcopy(nodes)
    other["items"] = [n for n in other["items"] if n["metadata"]["name"] != "gpu-t4-1"]
    with pytest.raises(InputError, match="node 'gpu-t4-1' of worker type 't4' is not in it"):
        export(other)
    other = copy.deepcopy(nodes)
    other["items"][2]["metadata"]["labels"]["nvidia.com/gpu.product"] = "Tesla-V100-SXM2-16GB"
    with pytest.raises(InputError, match="the nodes of worker type 'v100' carry different nvidia.com/gpu.product"):
        export(other)
    with pytest.raises(InputError, match="node 'gpu-a100-0' .* has no example.com/gpu label"):
        export(nodes, label_key="example.com/gpu")
    with pytest.raises(InputError, match="expected the output of 'kubectl get nodes -o json'"):
        export({"kind": "Node", "metadata": {"name": "x"}})


def test_driver_files(schedule, tmp_path):
    export_schedule("kubernetes", load_context(schedule), tmp_path, namespace="ml", progress_dir="/shared/progress")
    plan = json.loads((tmp_path / "k8s_rounds.json").read_text())
    assert plan["format"] == "rota.k8s-rounds/v1" and plan["namespace"] == "ml" and plan["grace_s"] == 60
    assert plan["state_file"] == "/shared/progress-k8s_state.json"
    for rnd in plan["rounds"]:
        for obj in rnd["objects"]:
            doc = yaml.safe_load((tmp_path / obj["manifest"]).read_text())
            assert doc["metadata"]["name"] == obj["name"] and len(pods(doc)) == obj["pods"]
            assert doc["metadata"]["annotations"]["rota/jobs"].split(",") == obj["jobs"]
    subprocess.run(["bash", "-n", str(tmp_path / "driver.sh")], check=True)
    assert 'exec "${PYTHON:-python3}" kubernetes_driver.py k8s_rounds.json' in (tmp_path / "driver.sh").read_text()
