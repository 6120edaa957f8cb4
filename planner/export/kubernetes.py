"""Kubernetes export: one manifest per assignment per round, gang-scheduled.

Pods are pinned with `nodeSelector` on the GPU-product label (key configurable,
default `nvidia.com/gpu.product`, which NVIDIA's GPU feature discovery sets; the
value per worker type: `--gpu-product`, else the cluster spec's `gpu_product`,
else GPU_PRODUCTS for the well-known types, else the type's name with a warning)
and on `kubernetes.io/hostname` (the plan's node), and ask for their GPUs in
`resources.limits`. A pod lives at most one round: `activeDeadlineSeconds`
ends it `grace` seconds before the round's end, with SIGTERM and
`terminationGracePeriodSeconds` = grace to checkpoint.

Gangs (one pod per node of the placement, so per-node GPU counts are exact):
- volcano: a `batch.volcano.sh/v1alpha1` Job, one task per node, `minAvailable`
  = all pods, `schedulerName: volcano`, optional queue;
- kueue: a suspended `batch/v1` Job labelled `kueue.x-k8s.io/queue-name` (one
  node), or a `jobset.x-k8s.io/v1alpha2` JobSet with one replicated Job per node
  (Kueue admits all of it or nothing).

Gang contract (common.gang_env): one pod per node runs each job's command once,
with ROTA_NODE_RANK = the pod's task / replicated-job index, ROTA_NUM_NODES,
ROTA_MASTER_PORT and ROTA_MASTER_ADDR: rank 0's DNS name in a multi-node gang
(Volcano's `svc` plugin / JobSet's headless service), the pod's own IP otherwise.

`check_manifest` is an offline structural check of every field emitted here
(types, required fields, DNS names, label syntax, unknown fields rejected).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from planner.errors import InputError
from planner.export.common import (
    DEFAULT_GRACE_S,
    ExportContext,
    assignment_label,
    commands_of,
    dns_name,
    gang_env,
    gpus_by_node,
    grace_for,
    header,
    launch_script,
    parse_map,
    require_valid,
    round_dir,
    write_files,
)
from planner.formats.schedule import Assignment, Round

DEFAULT_LABEL_KEY = "nvidia.com/gpu.product"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_IMAGE = "rota-workload:latest"
GANGS = ("volcano", "kueue")
# What NVIDIA's GPU feature discovery writes into nvidia.com/gpu.product for the usual model of each
# GPU (nvidia-smi's product name, spaces as '-'). Other variants (V100 32 GB, A100 40 GB or PCIe, H100
# PCIe, ...) carry other values: set them per worker type in the cluster spec (gpu_product) or with
# --gpu-product, and check with `kubectl get nodes -L nvidia.com/gpu.product`.
GPU_PRODUCTS = {
    "k80": "Tesla-K80",
    "p100": "Tesla-P100-PCIE-16GB",
    "v100": "Tesla-V100-SXM2-16GB",
    "t4": "Tesla-T4",
    "a10": "NVIDIA-A10",
    "a10g": "NVIDIA-A10G",
    "a100": "NVIDIA-A100-SXM4-80GB",
    "h100": "NVIDIA-H100-80GB-HBM3",
    "h200": "NVIDIA-H200",
    "l4": "NVIDIA-L4",
    "l40s": "NVIDIA-L40S",
}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the launch scripts) as readable literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)


def _labels(rnd: Round, name: str) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "rota", "rota/round": str(rnd["index"]), "rota/assignment": name}


def _pod_template(
    context: ExportContext,
    rnd: Round,
    a: Assignment,
    *,
    node: str,
    n_gpus: int,
    rank: int,
    n_nodes: int,
    master_addr: str | None,
    labels: dict,
    image: str,
    label_key: str,
    product: str,
    gpu_resource: str,
    grace: int,
    pin_nodes: bool,
    scheduler: str | None,
    progress_dir: str | None,
) -> dict:
    env = {"ROTA_NODE_RANK": str(rank), "ROTA_NUM_NODES": str(n_nodes)}
    commands = [
        (command, {**job, **gang_env(job["ROTA_JOB_ID"], num_nodes=n_nodes, node_rank=rank)})
        for command, job in commands_of(context, rnd, a, grace_s=grace, progress_dir=progress_dir)
    ]
    script = launch_script(commands)
    # rank 0's address: its DNS name in a gang over several nodes, else this pod's own IP
    master: dict[str, Any] = (
        {"name": "ROTA_MASTER_ADDR", "value": master_addr}
        if master_addr
        else {"name": "ROTA_MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    )
    selector = {label_key: product}
    if pin_nodes:
        selector["kubernetes.io/hostname"] = node
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": max(1, math.ceil(context.round_s) - grace),
        "terminationGracePeriodSeconds": grace,
        "nodeSelector": selector,
        "containers": [
            {
                "name": "job",
                "image": image,
                "command": ["/bin/sh", "-c", script],
                "env": [{"name": k, "value": v} for k, v in env.items()] + [master],
                "resources": {"limits": {gpu_resource: n_gpus}},
            }
        ],
    }
    if scheduler:
        spec = {"schedulerName": scheduler, **spec}
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def manifest(
    context: ExportContext,
    rnd: Round,
    a: Assignment,
    *,
    gang: str,
    queue: str | None,
    namespace: str | None,
    image: str,
    label_key: str,
    product: str,
    gpu_resource: str,
    grace: int,
    pin_nodes: bool,
    progress_dir: str | None,
) -> dict:
    label = assignment_label(a)
    name = dns_name(f"rota-r{rnd['index']:04d}-{label}")
    labels = _labels(rnd, name)
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    meta["annotations"] = {
        "rota/jobs": ",".join(a["jobs"]),
        "rota/worker-type": a["worker_type"],
        "rota/planned-steps": json.dumps(a["planned_steps"], sort_keys=True),
        "rota/gpus": ",".join(f"{g['node']}:{g['gpu']}" for g in a["gpus"]),
    }
    nodes = gpus_by_node(a)
    pods = [
        _pod_template(
            context,
            rnd,
            a,
            node=node,
            n_gpus=len(gpus),
            rank=k,
            n_nodes=len(nodes),
            master_addr=_master_dns(gang, name) if len(nodes) > 1 else None,
            labels=labels,
            image=image,
            label_key=label_key,
            product=product,
            gpu_resource=gpu_resource,
            grace=grace,
            pin_nodes=pin_nodes,
            scheduler=None,
            progress_dir=progress_dir,
        )
        for k, (node, gpus) in enumerate(nodes)
    ]
    if gang == "volcano":
        spec: dict[str, Any] = {"schedulerName": "volcano", "minAvailable": len(pods), "maxRetry": 1}
        if queue:
            spec["queue"] = queue
        if len(pods) > 1:  # a headless service and DNS names for the pods (rank 0's is ROTA_MASTER_ADDR)
            spec["plugins"] = {"svc": []}
        # A pod ended by the round's deadline ends the gang; the next round starts it afresh.
        spec["policies"] = [
            {"event": "PodFailed", "action": "TerminateJob"},
            {"event": "PodEvicted", "action": "TerminateJob"},
        ]
        spec["tasks"] = [{"name": f"node{k}", "replicas": 1, "template": pod} for k, pod in enumerate(pods)]
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta, "spec": spec}
    meta["labels"][QUEUE_LABEL] = queue or "default"
    if len(pods) == 1:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": pods[0]},
        }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "suspend": True,
            "network": {"enableDNSHostnames": True},  # rank 0's DNS name is ROTA_MASTER_ADDR
            "replicatedJobs": [
                {
                    "name": f"node{k}",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": pod,
                        }
                    },
                }
                for k, pod in enumerate(pods)
            ],
        },
    }


def _master_dns(gang: str, name: str) -> str:
    """The DNS name of rank 0's pod (task / replicated Job `node0`) in the gang's headless service:
    Volcano's svc plugin names pods <job>-<task>-<index> under the job's name; JobSet names them
    <jobset>-<replicatedJob>-<job index>-<pod index> under the JobSet's name."""
    return f"{name}-node0-0.{name}" if gang == "volcano" else f"{name}-node0-0-0.{name}"


def gpu_products(context: ExportContext, overrides: dict[str, str], label_key: str) -> tuple[dict[str, str], list[str]]:
    """The GPU-product label value of each worker type, and warnings for the types with no known value:
    --gpu-product, else the cluster spec's gpu_product, else GPU_PRODUCTS (for GPU feature
    discovery's label only), else the type's own name."""
    out, warnings = {}, []
    for name, wt in context.cluster.worker_types.items():
        known = GPU_PRODUCTS.get(name.lower()) if label_key == DEFAULT_LABEL_KEY else name
        value = overrides.get(name) or wt.gpu_product or known
        if value is None:
            value = name
            warnings.append(
                f"no {label_key} value known for worker type {name!r}: its pods select {label_key}={name}, "
                f"which GPU feature discovery does not set; give --gpu-product {name}=VALUE "
                f"or gpu_product in the cluster spec"
            )
        if not _LABEL_VALUE.match(value) or len(value) > 63:
            raise InputError(f"{value!r} is not a valid label value for worker type {name!r}", field="--gpu-product")
        out[name] = value
    return out, warnings


DRIVER = """#!/bin/bash
{header}# Usage: ./driver.sh              every round below, in order
#        ./driver.sh round-0003   one round (what the next-round loop runs)
# A round's manifests are applied together; the pods end themselves (activeDeadlineSeconds) and
# after ROUND_S seconds the round's objects are deleted before the next round is applied.
set -euo pipefail
cd "$(dirname "$0")"
ROUND_S=${{ROUND_S:-{round_s}}}
ROUNDS=({rounds})
{namespace_line}
run_round() {{
  local dir=$1
  ls "$dir"/*.yaml >/dev/null 2>&1 || return 0
  kubectl apply $NS -f "$dir"
  sleep "$ROUND_S"
  kubectl delete $NS -f "$dir" --ignore-not-found --wait=true
}}

if [ "$#" -gt 0 ]; then
  for dir in "$@"; do run_round "$dir"; done
else
  for dir in "${{ROUNDS[@]}}"; do run_round "$dir"; done
fi
"""


def export_kubernetes(
    context: ExportContext,
    out_dir: Path,
    *,
    gang: str = "volcano",
    queue: str | None = None,
    namespace: str | None = None,
    image: str = DEFAULT_IMAGE,
    label_key: str = DEFAULT_LABEL_KEY,
    gpu_product: list[str] | dict | None = None,
    gpu_resource: str = DEFAULT_GPU_RESOURCE,
    grace_s: float = DEFAULT_GRACE_S,
    pin_nodes: bool = True,
    progress_dir: str | None = None,
    **_ignored,
) -> list[Path]:
    if gang not in GANGS:
        raise InputError(f"unknown gang scheduler {gang!r}; use one of {', '.join(GANGS)}", field="--gang")
    if not _LABEL_KEY.match(label_key):
        raise InputError(f"{label_key!r} is not a valid label key", field="--label-key")
    if namespace and not (_DNS_LABEL.match(namespace) and len(namespace) <= 63):
        raise InputError(f"{namespace!r} is not a valid namespace (a DNS label)", field="--namespace")
    if not _LABEL_KEY.match(gpu_resource):
        raise InputError(f"{gpu_resource!r} is not a valid resource name", field="--gpu-resource")
    if not image or any(ch.isspace() or not ch.isprintable() for ch in image):
        raise InputError(
            f"{image!r} is not an image reference (empty, or with spaces or control characters)", field="--image"
        )
    products = parse_map(gpu_product, "--gpu-product")
    unknown = set(products) - set(context.cluster.names)
    if unknown:
        raise InputError(f"worker type {sorted(unknown)[0]!r} is not in the cluster", field="--gpu-product")
    require_valid(context)
    product_of, warnings = gpu_products(context, products, label_key)
    context.notes.extend(warnings)
    grace = grace_for(context, grace_s)
    files: dict[str, str] = {}
    rounds = []
    for rnd in context.document.rounds:
        rounds.append(round_dir(rnd["index"]))
        for a in rnd["assignments"]:
            doc = manifest(
                context,
                rnd,
                a,
                gang=gang,
                queue=queue,
                namespace=namespace,
                image=image,
                label_key=label_key,
                product=product_of[a["worker_type"]],
                gpu_resource=gpu_resource,
                grace=grace,
                pin_nodes=pin_nodes,
                progress_dir=progress_dir,
            )
            problems = check_manifest(doc)
            if problems:  # a bad option value (e.g. a product label value) surfaces here
                raise InputError(f"{doc['metadata']['name']}: {problems[0]}", field="manifest")
            rel = f"{round_dir(rnd['index'])}/{doc['metadata']['name']}.yaml"
            files[rel] = header(context, f"round {rnd['index']}, {assignment_label(a)}") + to_yaml(doc)
    ns = f'NS="--namespace {namespace}"' if namespace else 'NS=""'
    files["driver.sh"] = DRIVER.format(
        header=header(context, "Kubernetes driver"),
        round_s=math.ceil(context.round_s),
        rounds=" ".join(rounds),
        namespace_line=ns,
    )
    return write_files(out_dir, files, executable=["driver.sh"])


# --------------------------------------------------------------------------- offline structural check

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}\Z")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?\Z")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
# The policy events and actions Volcano's admission webhook accepts (policyEventMap / policyActionMap
# in pkg/webhooks/admission/jobs/validate/util.go, volcano-sh/volcano ed72c7c8, v1.16.0-alpha.1+):
# the CRD's enum also lists PodRunning, OutOfSync and CommandIssued, which the webhook refuses.
VOLCANO_EVENTS = frozenset(
    {"*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed", "JobUpdated"}
)
VOLCANO_ACTIONS = frozenset(
    {
        "AbortJob",
        "RestartJob",
        "RestartTask",
        "RestartPod",
        "RestartPartition",
        "TerminateJob",
        "CompleteJob",
        "ResumeJob",
    }
)
# job plugins Volcano's controller registers (pkg/controllers/job/plugins, same commit)
VOLCANO_PLUGINS = frozenset({"env", "svc", "ssh", "mpi", "pytorch", "tensorflow", "ray", "hcclrank"})
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([KMGTPE]i?|[mun]|e[0-9]+)?\Z")


class _Checker:
    def __init__(self):
        self.problems: list[str] = []

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def fields(self, obj: Any, where: str, allowed: dict[str, bool]) -> bool:
        """`allowed`: field -> required. False when obj is not a mapping."""
        if not isinstance(obj, dict):
            self.fail(where, "expected a mapping")
            return False
        for key in obj:
            if key not in allowed:
                self.fail(f"{where}.{key}", "unknown field")
        for key, required in allowed.items():
            if required and key not in obj:
                self.fail(f"{where}.{key}", "required field missing")
        return True

    def integer(self, obj: dict, key: str, where: str, minimum: int = 0) -> None:
        if key in obj:
            v = obj[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                self.fail(f"{where}.{key}", f"expected an integer >= {minimum}, got {v!r}")

    def string(self, obj: dict, key: str, where: str, pattern: re.Pattern | None = None, limit: int = 0) -> None:
        if key in obj:
            v = obj[key]
            if not isinstance(v, str) or not v:
                self.fail(f"{where}.{key}", f"expected a non-empty string, got {v!r}")
            elif pattern is not None and not pattern.match(v):
                self.fail(f"{where}.{key}", f"{v!r} is not valid")
            elif limit and len(v) > limit:
                self.fail(f"{where}.{key}", f"longer than {limit} characters")

    def boolean(self, obj: dict, key: str, where: str) -> None:
        if key in obj and not isinstance(obj[key], bool):
            self.fail(f"{where}.{key}", f"expected true or false, got {obj[key]!r}")

    def label_map(self, obj: dict, key: str, where: str, values: bool = True) -> None:
        if key not in obj:
            return
        m = obj[key]
        if not isinstance(m, dict):
            self.fail(f"{where}.{key}", "expected a mapping")
            return
        for k, v in m.items():
            if not isinstance(k, str) or not _LABEL_KEY.match(k):
                self.fail(f"{where}.{key}", f"invalid key {k!r}")
            if not isinstance(v, str):
                self.fail(f"{where}.{key}.{k}", f"values must be strings, got {v!r}")
            elif values and not _LABEL_VALUE.match(v):
                self.fail(f"{where}.{key}.{k}", f"invalid label value {v!r}")

    # objects -------------------------------------------------------------
    def metadata(self, meta: Any, where: str, top: bool) -> None:
        allowed = {"name": top, "namespace": False, "labels": False, "annotations": False}
        if not self.fields(meta, where, allowed):
            return
        self.string(meta, "name", where, _DNS_LABEL, 63)
        self.string(meta, "namespace", where, _DNS_LABEL, 63)
        self.label_map(meta, "labels", where)
        self.label_map(meta, "annotations", where, values=False)

    def pod_template(self, tpl: Any, where: str, restart: tuple[str, ...]) -> None:
        if not self.fields(tpl, where, {"metadata": False, "spec": True}):
            return
        if "metadata" in tpl:
            self.metadata(tpl["metadata"], f"{where}.metadata", top=False)
        spec, w = tpl.get("spec"), f"{where}.spec"
        if not self.fields(
            spec,
            w,
            {
                "schedulerName": False,
                "restartPolicy": False,
                "activeDeadlineSeconds": False,
                "terminationGracePeriodSeconds": False,
                "nodeSelector": False,
                "containers": True,
            },
        ):
            return
        if spec.get("restartPolicy", "Always") not in restart:
            self.fail(f"{w}.restartPolicy", f"must be one of {', '.join(restart)}")
        self.string(spec, "schedulerName", w)
        self.integer(spec, "activeDeadlineSeconds", w, 1)
        self.integer(spec, "terminationGracePeriodSeconds", w, 0)
        self.label_map(spec, "nodeSelector", w)
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            self.fail(f"{w}.containers", "expected a non-empty list")
            return
        for k, c in enumerate(containers):
            self.container(c, f"{w}.containers[{k}]")

    def container(self, c: Any, where: str) -> None:
        if not self.fields(
            c, where, {"name": True, "image": True, "command": False, "args": False, "env": False, "resources": False}
        ):
            return
        self.string(c, "name", where, _DNS_LABEL, 63)
        self.string(c, "image", where)
        for key in ("command", "args"):
            if key in c and (not isinstance(c[key], list) or not all(isinstance(s, str) for s in c[key])):
                self.fail(f"{where}.{key}", "expected a list of strings")
        for k, e in enumerate(c.get("env", [])):
            self.env_var(e, f"{where}.env[{k}]")
        res = c.get("resources")
        if res is not None and self.fields(res, f"{where}.resources", {"limits": False, "requests": False}):
            for kind in ("limits", "requests"):
                for name, q in (res.get(kind) or {}).items():
                    ok = (isinstance(q, int) and not isinstance(q, bool) and q >= 0) or (
                        isinstance(q, str) and _QUANTITY.match(q)
                    )
                    if not isinstance(name, str) or not _LABEL_KEY.match(name):
                        self.fail(f"{where}.resources.{kind}", f"invalid resource name {name!r}")
                    if not ok:
                        self.fail(f"{where}.resources.{kind}.{name}", f"invalid quantity {q!r}")

    def env_var(self, e: Any, where: str) -> None:
        if not self.fields(e, where, {"name": True, "value": False, "valueFrom": False}):
            return
        self.string(e, "name", where, _ENV_NAME)
        if "value" in e and not isinstance(e["value"], str):
            self.fail(f"{where}.value", f"expected a string, got {e['value']!r}")
        if "valueFrom" in e:
            if "value" in e:
                self.fail(f"{where}.valueFrom", "may not be given with value")
            ref = e["valueFrom"]
            if self.fields(ref, f"{where}.valueFrom", {"fieldRef": True}) and self.fields(
                ref["fieldRef"], f"{where}.valueFrom.fieldRef", {"fieldPath": True}
            ):
                self.string(ref["fieldRef"], "fieldPath", f"{where}.valueFrom.fieldRef")

    def job_spec(self, spec: Any, where: str) -> None:
        if not self.fields(
            spec,
            where,
            {
                "suspend": False,
                "parallelism": False,
                "completions": False,
                "completionMode": False,
                "backoffLimit": False,
                "activeDeadlineSeconds": False,
                "ttlSecondsAfterFinished": False,
                "template": True,
            },
        ):
            return
        self.boolean(spec, "suspend", where)
        if spec.get("completionMode", "NonIndexed") not in ("NonIndexed", "Indexed"):
            self.fail(f"{where}.completionMode", "must be NonIndexed or Indexed")
        for key in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
            self.integer(spec, key, where)
        self.integer(spec, "activeDeadlineSeconds", where, 1)
        if "template" in spec:
            self.pod_template(spec["template"], f"{where}.template", ("Never", "OnFailure"))

    def volcano_spec(self, spec: Any) -> None:
        allowed = {
            "schedulerName": False,
            "minAvailable": True,
            "queue": False,
            "maxRetry": False,
            "policies": False,
            "plugins": False,
            "tasks": True,
        }
        if not self.fields(spec, "spec", allowed):
            return
        self.volcano_policies(spec.get("policies", []))
        plugins = spec.get("plugins", {})
        if not isinstance(plugins, dict) or not all(
            isinstance(v, list) and all(isinstance(a, str) for a in v) for v in plugins.values()
        ):
            self.fail("spec.plugins", "expected a mapping of plugin name to a list of arguments")
        elif set(plugins) - VOLCANO_PLUGINS:
            self.fail("spec.plugins", f"unknown plugin {sorted(set(plugins) - VOLCANO_PLUGINS)[0]!r}")
        self.string(spec, "schedulerName", "spec")
        self.string(spec, "queue", "spec")
        self.integer(spec, "minAvailable", "spec", 1)
        self.integer(spec, "maxRetry", "spec")
        tasks = spec.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            self.fail("spec.tasks", "expected a non-empty list")
            return
        replicas = 0
        for k, t in enumerate(tasks):
            w = f"spec.tasks[{k}]"
            if self.fields(t, w, {"name": True, "replicas": True, "template": True}):
                self.string(t, "name", w, _DNS_LABEL, 63)
                self.integer(t, "replicas", w, 1)
                replicas += t.get("replicas", 0) if isinstance(t.get("replicas"), int) else 0
                self.pod_template(t.get("template"), f"{w}.template", ("Never", "OnFailure"))
        if isinstance(spec.get("minAvailable"), int) and spec["minAvailable"] > replicas:
            self.fail("spec.minAvailable", f"{spec['minAvailable']} is more than the {replicas} pods")

    def volcano_policies(self, policies: Any) -> None:
        """What Volcano's webhook checks: a known event and action, each event once, `*` alone."""
        if not isinstance(policies, list):
            self.fail("spec.policies", "expected a list")
            return
        events: list[str] = []
        for k, pol in enumerate(policies):
            if self.fields(pol, f"spec.policies[{k}]", {"event": True, "action": True}):
                if pol["event"] not in VOLCANO_EVENTS:
                    self.fail(f"spec.policies[{k}].event", f"event {pol['event']!r} is not accepted by Volcano")
                elif pol["event"] in events:
                    self.fail(f"spec.policies[{k}].event", f"event {pol['event']!r} given twice")
                events.append(pol["event"])
                if pol["action"] not in VOLCANO_ACTIONS:
                    self.fail(f"spec.policies[{k}].action", f"action {pol['action']!r} is not accepted by Volcano")
        if "*" in events and len(events) > 1:
            self.fail("spec.policies", "event '*' must be the only one")

    def jobset_spec(self, spec: Any) -> None:
        if not self.fields(spec, "spec", {"suspend": False, "network": False, "replicatedJobs": True}):
            return
        self.boolean(spec, "suspend", "spec")
        network = spec.get("network", {})
        if self.fields(network, "spec.network", {"enableDNSHostnames": False, "subdomain": False}):
            self.boolean(network, "enableDNSHostnames", "spec.network")
            self.string(network, "subdomain", "spec.network", _DNS_LABEL, 63)
        jobs = spec.get("replicatedJobs")
        if not isinstance(jobs, list) or not jobs:
            self.fail("spec.replicatedJobs", "expected a non-empty list")
            return
        for k, rj in enumerate(jobs):
            w = f"spec.replicatedJobs[{k}]"
            if self.fields(rj, w, {"name": True, "replicas": True, "template": True}):
                self.string(rj, "name", w, _DNS_LABEL, 63)
                self.integer(rj, "replicas", w, 1)
                if self.fields(rj.get("template"), f"{w}.template", {"spec": True}):
                    self.job_spec(rj["template"].get("spec"), f"{w}.template.spec")


def check_manifest(doc: Any) -> list[str]:
    """Problems with one manifest (empty = it has the shape the API server accepts)."""
    c = _Checker()
    if not c.fields(doc, "$", {"apiVersion": True, "kind": True, "metadata": True, "spec": True}):
        return c.problems
    kind = (doc.get("apiVersion"), doc.get("kind"))
    c.metadata(doc.get("metadata"), "metadata", top=True)
    spec = doc.get("spec")
    if kind == ("batch/v1", "Job"):
        c.job_spec(spec, "spec")
    elif kind == ("batch.volcano.sh/v1alpha1", "Job"):
        c.volcano_spec(spec)
    elif kind == ("jobset.x-k8s.io/v1alpha2", "JobSet"):
        c.jobset_spec(spec)
    else:
        c.fail("$", f"unsupported apiVersion/kind {kind[0]}/{kind[1]}")
    return c.problems
