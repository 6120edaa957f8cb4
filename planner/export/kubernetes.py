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

Topology (a gang over several nodes whose schedule entry names the `switch` they share, from
the cluster spec's node domains): the Job carries `rota/switch` and `rota/nvlink-domain`, and,
unless `topology_label` is empty, the gang scheduler is told to keep the gang in one switch:
- volcano: `spec.networkTopology: {mode: hard, highestTierAllowed: 1}`: all pods inside one
  tier-1 HyperNode (Volcano's network topology aware scheduling; tier 1 must be the leaf switches);
- kueue: every pod template gets `kueue.x-k8s.io/podset-required-topology: <topology_label>`
  (Kueue's topology-aware scheduling: each PodSet inside one domain of that node label; default
  `network.topology.nvidia.com/leaf`, the leaf-switch label NVIDIA's Topograph writes), and a
  two-node gang's two PodSets share `kueue.x-k8s.io/podset-group-name` so Kueue puts them in the
  same domain (Kueue groups exactly two PodSets; larger gangs rely on the pinned hostnames).
Both need the scheduler's topology set up (HyperNodes; a TAS ResourceFlavor); without it such a
gang waits, so `--topology-label ''` leaves the hints out.

Gang contract (common.gang_env): one pod per node runs each job's command once,
with ROTA_NODE_RANK = the pod's task / replicated-job index, ROTA_NUM_NODES,
ROTA_MASTER_PORT and ROTA_MASTER_ADDR: rank 0's DNS name in a multi-node gang
(Volcano's `svc` plugin / JobSet's headless service), the pod's own IP otherwise.

Each pod gets /dev/shm as a memory-backed emptyDir (PyTorch's data loaders share memory there;
the container runtime's default is 64 MiB), unless shm=False; `shm_size` sets its sizeLimit.
A pod template (`--pod-template`, `read_pod_template`) adds the site's own pod and container
fields (volumes, tolerations, requests, secrets, ...); rota's own fields cannot be overridden.

The round's clock is the driver's (kubernetes_driver.py): Kubernetes counts activeDeadlineSeconds
from the pod's start, so the driver lowers it as each pod starts, to end the pod at the round's
deadline; the manifest's value is only the safety net.

`check_manifest` is an offline structural check of every field emitted here
(types, required fields, DNS names, label syntax, unknown fields rejected).
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
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
from planner.export.kubernetes_driver import ROUNDS_FORMAT, items
from planner.formats.files import parse_json, read_text
from planner.formats.safe_yaml import load_yaml
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
# Topology hints for a gang over several nodes of one switch (see the module's doc).
DEFAULT_TOPOLOGY_LABEL = "network.topology.nvidia.com/leaf"  # Topograph's leaf-switch node label
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"
VOLCANO_SWITCH_TIER = 1  # the HyperNode tier of a leaf switch


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the launch scripts) as readable literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)


# --------------------------------------------------------------------------- pod template

SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# What a pod template may add, and the fields rota sets itself (with why, for the error message).
TEMPLATE_POD_KEYS = (
    "serviceAccountName",
    "priorityClassName",
    "nodeSelector",
    "tolerations",
    "imagePullSecrets",
    "volumes",
)
TEMPLATE_CONTAINER_KEYS = ("env", "resources", "volumeMounts", "imagePullPolicy", "workingDir")
ROTA_POD_FIELDS = {
    "restartPolicy": "a pod lives one round",
    "activeDeadlineSeconds": "the round's deadline",
    "terminationGracePeriodSeconds": "it is --grace",
    "schedulerName": "the gang scheduler sets it (--gang)",
    "containers": "rota writes the job container; add to it under 'container:'",
}
ROTA_CONTAINER_FIELDS = {
    "name": "rota names the job container",
    "image": "use --image or the job list's 'image' column",
    "command": "the launch wrapper runs the jobs' commands",
    "args": "the launch wrapper runs the jobs' commands",
}


@dataclass(frozen=True)
class PodTemplate:
    """A site's additions to every pod (`pod`: PodSpec fields) and to its job container (`container`)."""

    pod: dict[str, Any] = field(default_factory=dict)
    container: dict[str, Any] = field(default_factory=dict)
    path: str = "<pod template>"


def _section(data: dict, name: str, allowed: tuple[str, ...], own: dict[str, str], path: object) -> dict[str, Any]:
    part = data.get(name)
    if part is None:
        return {}
    if not isinstance(part, dict):
        raise InputError(f"expected a mapping of {name} fields", path=path, field=name)
    for key in part:
        if key in own:
            raise InputError(
                f"set by rota ({own[key]}); a pod template cannot override it", path=path, field=f"{name}.{key}"
            )
        if key not in allowed:
            raise InputError(f"unknown key (expected one of: {', '.join(allowed)})", path=path, field=f"{name}.{key}")
    return part


def _names(value: Any, key: str) -> list[Any]:
    return [v.get(key) for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _own_values(pod: dict, container: dict, *, label_key: str, gpu_resource: str, shm: bool, path: object) -> None:
    """The template names no value rota sets: its GPU resource, selectors, ROTA_* variables, /dev/shm."""
    _own_container_values(container, gpu_resource, path)
    _own_volumes(pod, container, shm, path)
    for key in pod.get("nodeSelector") or {}:
        if key in (label_key, HOSTNAME_LABEL):
            raise InputError(
                "set by rota (the worker type's GPU product / the planned node); a pod template cannot override it",
                path=path,
                field=f"pod.nodeSelector.{key}",
            )


def _own_container_values(container: dict, gpu_resource: str, path: object) -> None:
    resources = container.get("resources")
    for kind in ("limits", "requests"):
        part = resources.get(kind) if isinstance(resources, dict) else None
        if isinstance(part, dict) and gpu_resource in part:
            raise InputError(
                "set by rota (the planned GPUs of each pod); a pod template cannot override it",
                path=path,
                field=f"container.resources.{kind}.{gpu_resource}",
            )
    for k, name in enumerate(_names(container.get("env"), "name")):
        if isinstance(name, str) and name.startswith("ROTA_"):
            raise InputError(
                f"{name} is set by rota (the ROTA_* variables say what the round expects)",
                path=path,
                field=f"container.env[{k}].name",
            )


def _own_volumes(pod: dict, container: dict, shm: bool, path: object) -> None:
    volumes = _names(pod.get("volumes"), "name")
    for k, name in enumerate(volumes):
        if name in volumes[:k]:
            raise InputError(f"volume {name!r} given twice", path=path, field=f"pod.volumes[{k}].name")
        if shm and name == SHM_VOLUME:
            raise InputError(
                f"{SHM_VOLUME!r} is rota's /dev/shm volume: rename yours, or give --no-shm",
                path=path,
                field=f"pod.volumes[{k}].name",
            )
    known = set(volumes) | ({SHM_VOLUME} if shm else set())
    for k, mount in enumerate(container.get("volumeMounts") or []):
        if not isinstance(mount, dict):
            continue
        if shm and mount.get("mountPath") == SHM_PATH:
            raise InputError(
                f"rota mounts a memory-backed volume at {SHM_PATH} (--shm-size sets its size); give --no-shm "
                "to mount your own",
                path=path,
                field=f"container.volumeMounts[{k}].mountPath",
            )
        if "name" in mount and mount["name"] not in known:
            raise InputError(
                f"no volume named {mount['name']!r} under pod.volumes",
                path=path,
                field=f"container.volumeMounts[{k}].name",
            )


def read_pod_template(
    path: str | Path,
    *,
    label_key: str = DEFAULT_LABEL_KEY,
    gpu_resource: str = DEFAULT_GPU_RESOURCE,
    shm: bool = True,
) -> PodTemplate:
    """A pod template file (YAML), checked: known keys, none of rota's own fields or values, and the
    same structural check as every manifest; InputError naming the file and the field otherwise.

        pod:          # merged into every PodSpec: lists appended, maps merged
          serviceAccountName: trainer
          tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
          volumes: [{name: data, persistentVolumeClaim: {claimName: datasets}}]
        container:    # merged into the job container
          env: [{name: HF_HOME, value: /data/hf}]
          volumeMounts: [{name: data, mountPath: /data}]
          resources: {requests: {cpu: "8", memory: 64Gi}, limits: {memory: 64Gi}}
    """
    data = load_yaml(read_text(path), path)
    if not isinstance(data, dict) or not data:
        raise InputError("expected a mapping with 'pod' and/or 'container' (see docs/launchers.md)", path=path)
    for key in data:
        if key not in ("pod", "container"):
            raise InputError("unknown key (expected pod, container)", path=path, field=str(key))
    pod = _section(data, "pod", TEMPLATE_POD_KEYS, ROTA_POD_FIELDS, path)
    container = _section(data, "container", TEMPLATE_CONTAINER_KEYS, ROTA_CONTAINER_FIELDS, path)
    _own_values(pod, container, label_key=label_key, gpu_resource=gpu_resource, shm=shm, path=path)
    checker = _Checker()
    checker.pod_extras(pod, "pod")
    checker.container({"name": "job", "image": "image", **container}, "container")
    if checker.problems:
        where, _, message = checker.problems[0].partition(": ")
        raise InputError(message, path=path, field=where)
    return PodTemplate(pod, container, str(path))


def merge_template(spec: dict[str, Any], template: PodTemplate) -> None:
    """Add the template to a pod spec with one container (in place): lists appended, maps merged
    (read_pod_template has refused every key rota sets), single values set."""
    template = PodTemplate(copy.deepcopy(template.pod), copy.deepcopy(template.container), template.path)  # no aliases
    for key, value in template.pod.items():
        if isinstance(value, list):
            spec[key] = [*spec.get(key, []), *value]
        elif isinstance(value, dict):
            spec[key] = {**spec.get(key, {}), **value}
        else:
            spec[key] = value
    (container,) = spec["containers"]
    for key, value in template.container.items():
        if key == "resources":
            res = container.setdefault("resources", {})
            for kind in ("limits", "requests"):
                if value.get(kind):
                    res[kind] = {**res.get(kind, {}), **value[kind]}
        elif isinstance(value, list):
            container[key] = [*container.get(key, []), *value]
        else:
            container[key] = value


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
    shm: bool = True,
    shm_size: str | None = None,
    template: PodTemplate | None = None,
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
        selector[HOSTNAME_LABEL] = node
    container: dict[str, Any] = {
        "name": "job",
        "image": image,
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": k, "value": v} for k, v in env.items()] + [master],
        "resources": {"limits": {gpu_resource: n_gpus}},
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": max(1, math.ceil(context.round_s) - grace),
        "terminationGracePeriodSeconds": grace,
        "nodeSelector": selector,
        "containers": [container],
    }
    if shm:  # PyTorch's DataLoader workers share tensors through /dev/shm; runtimes give 64 MiB by default
        container["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        if shm_size:
            empty_dir["sizeLimit"] = shm_size
        spec["volumes"] = [{"name": SHM_VOLUME, "emptyDir": empty_dir}]
    if template is not None:
        merge_template(spec, template)
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
    shm: bool = True,
    shm_size: str | None = None,
    template: PodTemplate | None = None,
    topology_label: str | None = DEFAULT_TOPOLOGY_LABEL,
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
    for key in ("switch", "nvlink_domain"):
        if key in a:
            meta["annotations"][f"rota/{key.replace('_', '-')}"] = a[key]
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
            shm=shm,
            shm_size=shm_size,
            template=template,
        )
        for k, (node, gpus) in enumerate(nodes)
    ]
    one_switch = len(pods) > 1 and bool(a.get("switch")) and bool(topology_label)
    if gang == "volcano":
        spec: dict[str, Any] = {"schedulerName": "volcano", "minAvailable": len(pods), "maxRetry": 1}
        if queue:
            spec["queue"] = queue
        if one_switch:  # every pod inside one leaf-switch HyperNode
            spec["networkTopology"] = {"mode": "hard", "highestTierAllowed": VOLCANO_SWITCH_TIER}
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
    if one_switch:  # Kueue TAS: each PodSet in one domain of the label; two PodSets as one group
        for pod in pods:
            hints = {KUEUE_REQUIRED_TOPOLOGY: str(topology_label)}
            if len(pods) == 2:
                hints[KUEUE_PODSET_GROUP] = name
            pod["metadata"]["annotations"] = hints
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


def node_index(nodes_doc: Any) -> dict[str, dict]:
    """The Node objects of `kubectl get nodes -o json` by each name a cluster spec may give them:
    the `kubernetes.io/hostname` label (what pods are pinned with) and metadata.name."""
    out: dict[str, dict] = {}
    for node in items(nodes_doc):
        meta: dict = node["metadata"] if isinstance(node.get("metadata"), dict) else {}
        labels: dict = meta["labels"] if isinstance(meta.get("labels"), dict) else {}
        for name in (labels.get(HOSTNAME_LABEL), meta.get("name")):
            if isinstance(name, str) and name:
                out.setdefault(name, node)
    return out


def node_labels(node: dict) -> dict[str, Any]:
    labels = (node.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def read_nodes_json(path: str | Path) -> dict:
    """A saved `kubectl get nodes -o json` (a List of Node objects), or InputError naming the file."""
    doc = parse_json(read_text(path), path)
    if (
        not isinstance(doc, dict)
        or doc.get("kind") not in ("List", "NodeList")
        or not isinstance(doc.get("items"), list)
    ):
        raise InputError("expected the output of 'kubectl get nodes -o json' (a List of Node objects)", path=path)
    return doc


def products_from_nodes(
    nodes_doc: dict, context: ExportContext, label_key: str, *, path: object, pin_nodes: bool = True
) -> tuple[dict[str, str], list[str]]:
    """Each worker type's `label_key` value, read from its nodes (the cluster spec's node names, matched
    to the hostname label or the node name), and warnings; InputError when a worker type matches no
    node, a node is missing or unlabelled, or one type's nodes disagree."""
    known = node_index(nodes_doc)
    sample = ", ".join(sorted(known)[:4]) + (", ..." if len(known) > 4 else "")
    out, warnings = {}, []
    for name, wt in context.cluster.worker_types.items():
        missing = [n for n in wt.nodes if n not in known]
        if missing:
            what = (
                f"worker type {name!r} matches no node"
                if len(missing) == len(wt.nodes)
                else f"node {missing[0]!r} of worker type {name!r} is not in it"
            )
            raise InputError(
                f"{what}: the cluster spec's nodes ({', '.join(wt.nodes[:3])}{', ...' if len(wt.nodes) > 3 else ''}) "
                f"must be named as 'kubectl get nodes' shows them (this file has {sample or 'no nodes'})",
                path=path,
            )
        values: dict[str, str] = {}
        for n in wt.nodes:
            value = node_labels(known[n]).get(label_key)
            if not isinstance(value, str) or not value:
                raise InputError(f"node {n!r} (worker type {name!r}) has no {label_key} label", path=path)
            values[n] = value
            hostname = node_labels(known[n]).get(HOSTNAME_LABEL)
            if pin_nodes and hostname != n:
                warnings.append(
                    f"node {n!r} of the cluster spec is Kubernetes node {n!r} with {HOSTNAME_LABEL}={hostname}: "
                    f"pods pinned to {HOSTNAME_LABEL}={n} will not schedule there; name it {hostname} in the "
                    "cluster spec, or give --no-pin-nodes"
                )
        distinct = sorted(set(values.values()))
        if len(distinct) > 1:
            raise InputError(
                f"the nodes of worker type {name!r} carry different {label_key} values ({', '.join(distinct)}): "
                "one nodeSelector cannot match them all; split the worker type, or label the nodes alike and "
                "give that label with --label-key",
                path=path,
            )
        out[name] = distinct[0]
    return out, warnings


def gpu_products(
    context: ExportContext, overrides: dict[str, str], label_key: str, from_nodes: dict[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """The GPU-product label value of each worker type, and a warning for each one guessed:
    --gpu-product, else the nodes' own value (--nodes-json), else the cluster spec's gpu_product, else
    a guess: GPU_PRODUCTS (for GPU feature discovery's label only), else the type's own name."""
    from_nodes = from_nodes or {}
    out, warnings = {}, []
    for name, wt in context.cluster.worker_types.items():
        value = overrides.get(name) or from_nodes.get(name) or wt.gpu_product
        if name not in overrides and name in from_nodes and wt.gpu_product not in (None, from_nodes[name]):
            warnings.append(
                f"worker type {name!r}: the cluster spec's gpu_product {wt.gpu_product} is not what its nodes carry "
                f"({label_key}={from_nodes[name]}); the nodes' value is used"
            )
        hint = f"give --nodes-json (kubectl get nodes -o json), --gpu-product {name}=VALUE or gpu_product"
        if value is None:
            guess = GPU_PRODUCTS.get(name.lower()) if label_key == DEFAULT_LABEL_KEY else None
            value = guess or name
            if guess:
                warnings.append(
                    f"guessed {label_key}={guess} for worker type {name!r} (other {name} models carry other "
                    f"values): {hint}"
                )
            else:
                warnings.append(
                    f"no {label_key} value known for worker type {name!r}: its pods select {label_key}={name}, "
                    f"which only nodes labelled so match; {hint}"
                )
        if not _LABEL_VALUE.match(value) or len(value) > 63:
            raise InputError(f"{value!r} is not a valid label value for worker type {name!r}", field="--gpu-product")
        out[name] = value
    return out, warnings


def _check_image(image: str, field: str, who: str = "") -> str:
    if not image or any(ch.isspace() or not ch.isprintable() for ch in image):
        raise InputError(
            f"{who}{image!r} is not an image reference (empty, or with spaces or control characters)", field=field
        )
    return image


def image_of(context: ExportContext, rnd: Round, a: Assignment, default: str) -> str:
    """The assignment's image: its jobs' own (the job list's `image`), else `default`. Co-located jobs
    run in one container, so they must name the same image."""
    chosen: dict[str, str] = {}
    for jid in a["jobs"]:
        chosen.setdefault(context.images.get(jid, default), jid)
    if len(chosen) > 1:
        (i1, j1), (i2, j2) = list(chosen.items())[:2]
        raise InputError(
            f"jobs {j1!r} ({i1}) and {j2!r} ({i2}) share GPUs in round {rnd['index']} but name different images; "
            "co-located jobs run in one container: give them one image",
            field="image",
        )
    return next(iter(chosen))


DRIVER_FILE = "kubernetes_driver.py"
ROUNDS_FILE = "k8s_rounds.json"
STATE_FILE = "k8s_state.json"
DRIVER = """#!/bin/sh
{header}# Usage: ./driver.sh              every round below, in order
#        ./driver.sh round-0003   one round (what the next-round loop runs)
# Runs {driver} (Python 3, standard library only) with the rounds listed in {rounds}. Per round:
# kubectl apply; the round's deadline kept from the round's start (Kubernetes counts a pod's
# activeDeadlineSeconds from the pod's own start, so the driver lowers it as each pod starts);
# each job's state read from its pods (kubectl get pods -l rota/round=N -o json), printed as
# job=STATE lines and written to the state report (rota.k8s-state/v1); then kubectl delete.
# ROUND_S and GRACE_S (seconds) override the plan's; STATE_FILE where the report goes; KUBECTL the
# kubectl command (e.g. "kubectl --context prod"). Needs: apply, get, patch and delete on pods and
# the round's objects. Exit status: 0 every job completed, 1 a job did not, 2 kubectl apply failed
# or no such round, 128+N after signal N (the round's objects are deleted).
cd "$(dirname "$0")" || exit 2
exec "${{PYTHON:-python3}}" {driver} {rounds} "$@"
"""


def _check_shm(shm: bool, shm_size: str | None) -> None:
    if shm_size is not None and (not shm or quantity(shm_size) is None or quantity(shm_size) == 0):
        why = "give it without --no-shm" if not shm else "expected a positive quantity such as 8Gi or 512Mi"
        raise InputError(f"{shm_size!r}: {why}", field="--shm-size")


def state_file(progress_dir: str | None) -> str:
    """Where the driver writes its job state report: next to the progress folder, else under logs/."""
    if not progress_dir:
        return f"logs/{STATE_FILE}"
    folder = progress_dir.rstrip("/") or "/"
    return f"{folder}-{STATE_FILE}" if folder != "/" else f"/{STATE_FILE}"


def _check_names(
    gang: str, label_key: str, topology_label: str | None, namespace: str | None, gpu_resource: str
) -> None:
    if gang not in GANGS:
        raise InputError(f"unknown gang scheduler {gang!r}; use one of {', '.join(GANGS)}", field="--gang")
    if not _LABEL_KEY.match(label_key):
        raise InputError(f"{label_key!r} is not a valid label key", field="--label-key")
    if topology_label and not _LABEL_KEY.match(topology_label):
        raise InputError(
            f"{topology_label!r} is not a valid label key (give '' to leave topology hints out)",
            field="--topology-label",
        )
    if namespace and not (_DNS_LABEL.match(namespace) and len(namespace) <= 63):
        raise InputError(f"{namespace!r} is not a valid namespace (a DNS label)", field="--namespace")
    if not _LABEL_KEY.match(gpu_resource):
        raise InputError(f"{gpu_resource!r} is not a valid resource name", field="--gpu-resource")


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
    pod_template: str | Path | PodTemplate | None = None,
    shm: bool = True,
    shm_size: str | None = None,
    nodes_json: str | Path | dict | None = None,
    topology_label: str | None = DEFAULT_TOPOLOGY_LABEL,
    **_ignored,
) -> list[Path]:
    _check_names(gang, label_key, topology_label, namespace, gpu_resource)
    _check_image(image, "--image")
    _check_shm(shm, shm_size)
    products = parse_map(gpu_product, "--gpu-product")
    unknown = set(products) - set(context.cluster.names)
    if unknown:
        raise InputError(f"worker type {sorted(unknown)[0]!r} is not in the cluster", field="--gpu-product")
    template = (
        pod_template
        if isinstance(pod_template, PodTemplate) or pod_template is None
        else read_pod_template(pod_template, label_key=label_key, gpu_resource=gpu_resource, shm=shm)
    )
    require_valid(context)
    for jid in dict.fromkeys(j for r in context.document.rounds for a in r["assignments"] for j in a["jobs"]):
        if jid in context.images:
            _check_image(context.images[jid], "image", f"job {jid!r}: ")
    from_nodes: dict[str, str] = {}
    if nodes_json is not None:
        doc = nodes_json if isinstance(nodes_json, dict) else read_nodes_json(nodes_json)
        from_nodes, node_warnings = products_from_nodes(
            doc, context, label_key, path=nodes_json if not isinstance(nodes_json, dict) else None, pin_nodes=pin_nodes
        )
        context.notes.extend(node_warnings)
    product_of, warnings = gpu_products(context, products, label_key, from_nodes)
    context.notes.extend(warnings)
    grace = grace_for(context, grace_s)
    files: dict[str, str] = {}
    rounds = []
    for rnd in context.document.rounds:
        objects = []
        for a in rnd["assignments"]:
            doc = manifest(
                context,
                rnd,
                a,
                gang=gang,
                queue=queue,
                namespace=namespace,
                image=image_of(context, rnd, a, image),
                label_key=label_key,
                product=product_of[a["worker_type"]],
                gpu_resource=gpu_resource,
                grace=grace,
                pin_nodes=pin_nodes,
                progress_dir=progress_dir,
                shm=shm,
                shm_size=shm_size,
                template=template,
                topology_label=topology_label,
            )
            problems = check_manifest(doc)
            if problems:  # a bad option value (e.g. a product label value) surfaces here
                raise InputError(f"{doc['metadata']['name']}: {problems[0]}", field="manifest")
            rel = f"{round_dir(rnd['index'])}/{doc['metadata']['name']}.yaml"
            files[rel] = header(context, f"round {rnd['index']}, {assignment_label(a)}") + to_yaml(doc)
            name = doc["metadata"]["name"]
            objects.append({"name": name, "manifest": rel, "jobs": list(a["jobs"]), "pods": len(gpus_by_node(a))})
        rounds.append({"dir": round_dir(rnd["index"]), "index": rnd["index"], "objects": objects})
    plan = {
        "format": ROUNDS_FORMAT,
        "schedule": context.schedule_path.name,
        "round_s": context.round_s,
        "grace_s": grace,
        "namespace": namespace,
        "state_file": state_file(progress_dir),
        "rounds": rounds,
    }
    files[ROUNDS_FILE] = json.dumps(plan, indent=1) + "\n"
    files[DRIVER_FILE] = (Path(__file__).parent / DRIVER_FILE).read_text(encoding="utf-8")
    files["driver.sh"] = DRIVER.format(
        header=header(context, "Kubernetes driver"), driver=DRIVER_FILE, rounds=ROUNDS_FILE
    )
    return write_files(out_dir, files, executable=["driver.sh", DRIVER_FILE])


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
_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?\Z")
_SUFFIX = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1)}
_SUFFIX |= {s: Fraction(1000**k) for k, s in enumerate("kMGTPE", start=1)}
_SUFFIX |= {f"{s}i": Fraction(1024**k) for k, s in enumerate("KMGTPE", start=1)}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
# The volume sources a pod template may use, with their fields (field -> required) as in core/v1.
VOLUME_SOURCES: dict[str, dict[str, bool]] = {
    "emptyDir": {"medium": False, "sizeLimit": False},
    "persistentVolumeClaim": {"claimName": True, "readOnly": False},
    "hostPath": {"path": True, "type": False},
    "configMap": {"name": False, "items": False, "defaultMode": False, "optional": False},
    "secret": {"secretName": False, "items": False, "defaultMode": False, "optional": False},
    "nfs": {"server": True, "path": True, "readOnly": False},
    "csi": {
        "driver": True,
        "readOnly": False,
        "fsType": False,
        "volumeAttributes": False,
        "nodePublishSecretRef": False,
    },
}
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
ENV_SOURCES: dict[str, dict[str, bool]] = {
    "fieldRef": {"fieldPath": True, "apiVersion": False},
    "secretKeyRef": {"name": False, "key": True, "optional": False},
    "configMapKeyRef": {"name": False, "key": True, "optional": False},
    "resourceFieldRef": {"resource": True, "containerName": False, "divisor": False},
}


def quantity(text: Any) -> Fraction | None:
    """A Kubernetes resource quantity ('500m', '64Gi', '1e3', 8) as a number; None if it is not one."""
    if isinstance(text, int) and not isinstance(text, bool):
        return Fraction(text) if text >= 0 else None
    if not isinstance(text, str) or not _QUANTITY.match(text):
        return None
    match = re.match(r"^([0-9.]+)(.*)\Z", text)
    assert match is not None
    number, suffix = match.groups()
    if suffix[:1] in ("e", "E"):
        return Fraction(number) * Fraction(10) ** int(suffix[1:])
    return Fraction(number) * _SUFFIX[suffix]


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
                **dict.fromkeys(TEMPLATE_POD_KEYS, False),
            },
        ):
            return
        if spec.get("restartPolicy", "Always") not in restart:
            self.fail(f"{w}.restartPolicy", f"must be one of {', '.join(restart)}")
        self.string(spec, "schedulerName", w)
        self.integer(spec, "activeDeadlineSeconds", w, 1)
        self.integer(spec, "terminationGracePeriodSeconds", w, 0)
        self.label_map(spec, "nodeSelector", w)
        volumes = self.pod_extras(spec, w)
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            self.fail(f"{w}.containers", "expected a non-empty list")
            return
        for k, c in enumerate(containers):
            self.container(c, f"{w}.containers[{k}]")
            for m, mount in enumerate(c.get("volumeMounts") or [] if isinstance(c, dict) else []):
                if isinstance(mount, dict) and mount.get("name") not in volumes:
                    self.fail(f"{w}.containers[{k}].volumeMounts[{m}].name", f"no volume named {mount.get('name')!r}")

    def list_of(self, obj: dict, key: str, where: str) -> list:
        """obj[key] when it is a list (else a problem and []); [] when it is absent."""
        value = obj.get(key, [])
        if not isinstance(value, list):
            self.fail(f"{where}.{key}", "expected a list")
            return []
        return value

    def pod_extras(self, spec: dict, w: str) -> set[str]:
        """The PodSpec fields a pod template may add; the names of the pod's volumes."""
        self.string(spec, "serviceAccountName", w, _DNS_SUBDOMAIN, 253)
        self.string(spec, "priorityClassName", w, _DNS_SUBDOMAIN, 253)
        self.label_map(spec, "nodeSelector", w)
        for k, secret in enumerate(self.list_of(spec, "imagePullSecrets", w)):
            if self.fields(secret, f"{w}.imagePullSecrets[{k}]", {"name": True}):
                self.string(secret, "name", f"{w}.imagePullSecrets[{k}]", _DNS_SUBDOMAIN, 253)
        for k, tol in enumerate(self.list_of(spec, "tolerations", w)):
            self.toleration(tol, f"{w}.tolerations[{k}]")
        names: set[str] = set()
        for k, vol in enumerate(self.list_of(spec, "volumes", w)):
            self.volume(vol, f"{w}.volumes[{k}]")
            if isinstance(vol, dict) and isinstance(vol.get("name"), str):
                if vol["name"] in names:
                    self.fail(f"{w}.volumes[{k}].name", f"volume {vol['name']!r} given twice")
                names.add(vol["name"])
        return names

    def toleration(self, tol: Any, w: str) -> None:
        allowed = {"key": False, "operator": False, "value": False, "effect": False, "tolerationSeconds": False}
        if not self.fields(tol, w, allowed):
            return
        if tol.get("key") not in (None, "") and (not isinstance(tol["key"], str) or not _LABEL_KEY.match(tol["key"])):
            self.fail(f"{w}.key", f"{tol['key']!r} is not a valid label key")
        operator = tol.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            self.fail(f"{w}.operator", "must be Equal or Exists")
        if operator == "Exists" and tol.get("value") not in (None, ""):
            self.fail(f"{w}.value", "must be empty when operator is Exists")
        if not tol.get("key") and operator != "Exists":
            self.fail(f"{w}.operator", "must be Exists when key is empty")
        if "value" in tol and not isinstance(tol["value"], str):
            self.fail(f"{w}.value", f"expected a string, got {tol['value']!r}")
        if tol.get("effect", "") not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            self.fail(f"{w}.effect", "must be NoSchedule, PreferNoSchedule or NoExecute")
        if "tolerationSeconds" in tol and tol.get("effect") != "NoExecute":
            self.fail(f"{w}.tolerationSeconds", "only with effect NoExecute")
        self.integer(tol, "tolerationSeconds", w, 0)

    def volume(self, vol: Any, w: str) -> None:
        if not self.fields(vol, w, {"name": True, **dict.fromkeys(VOLUME_SOURCES, False)}):
            return
        self.string(vol, "name", w, _DNS_LABEL, 63)
        sources = [k for k in vol if k in VOLUME_SOURCES]
        if len(sources) != 1:
            self.fail(w, f"expected exactly one volume source ({', '.join(VOLUME_SOURCES)})")
            return
        kind, src, ws = sources[0], vol[sources[0]], f"{w}.{sources[0]}"
        if not self.fields(src, ws, VOLUME_SOURCES[kind]):
            return
        for key in ("readOnly", "optional"):
            self.boolean(src, key, ws)
        for key in ("claimName", "path", "server", "driver", "fsType", "name", "secretName"):
            self.string(src, key, ws)
        if src.get("medium", "") not in ("", "Memory"):
            self.fail(f"{ws}.medium", "must be empty or Memory")
        if "sizeLimit" in src and quantity(src["sizeLimit"]) is None:
            self.fail(f"{ws}.sizeLimit", f"invalid quantity {src['sizeLimit']!r}")
        if src.get("type", "") not in HOST_PATH_TYPES:
            self.fail(f"{ws}.type", f"must be one of {', '.join(t for t in HOST_PATH_TYPES if t)}")
        self.volume_lists(src, ws)

    def volume_lists(self, src: dict, ws: str) -> None:
        """A volume source's nested fields: items (configMap, secret), the CSI driver's mappings."""
        self.integer(src, "defaultMode", ws, 0)
        for k, item in enumerate(self.list_of(src, "items", ws)):
            if self.fields(item, f"{ws}.items[{k}]", {"key": True, "path": True, "mode": False}):
                self.string(item, "key", f"{ws}.items[{k}]")
                self.string(item, "path", f"{ws}.items[{k}]")
                self.integer(item, "mode", f"{ws}.items[{k}]", 0)
        attributes = src.get("volumeAttributes", {})
        if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
            self.fail(f"{ws}.volumeAttributes", "expected a mapping of strings")
        ref = src.get("nodePublishSecretRef")
        if ref is not None and self.fields(ref, f"{ws}.nodePublishSecretRef", {"name": True}):
            self.string(ref, "name", f"{ws}.nodePublishSecretRef")

    def volume_mount(self, mount: Any, w: str) -> None:
        allowed = {"name": True, "mountPath": True, "readOnly": False, "subPath": False, "subPathExpr": False}
        if not self.fields(mount, w, {**allowed, "mountPropagation": False}):
            return
        for key in ("name", "mountPath", "subPath", "subPathExpr"):
            self.string(mount, key, w)
        self.boolean(mount, "readOnly", w)
        if "subPath" in mount and "subPathExpr" in mount:
            self.fail(f"{w}.subPathExpr", "may not be given with subPath")
        if mount.get("mountPropagation", "None") not in ("None", "HostToContainer", "Bidirectional"):
            self.fail(f"{w}.mountPropagation", "must be None, HostToContainer or Bidirectional")

    def container(self, c: Any, where: str) -> None:
        allowed = {"name": True, "image": True, "command": False, "args": False, "env": False, "resources": False}
        if not self.fields(c, where, {**allowed, "volumeMounts": False, "imagePullPolicy": False, "workingDir": False}):
            return
        if c.get("imagePullPolicy", "IfNotPresent") not in ("Always", "IfNotPresent", "Never"):
            self.fail(f"{where}.imagePullPolicy", "must be Always, IfNotPresent or Never")
        self.string(c, "workingDir", where)
        paths: set[Any] = set()
        for k, mount in enumerate(self.list_of(c, "volumeMounts", where)):
            self.volume_mount(mount, f"{where}.volumeMounts[{k}]")
            if isinstance(mount, dict) and mount.get("mountPath") in paths:
                self.fail(f"{where}.volumeMounts[{k}].mountPath", f"{mount['mountPath']!r} mounted twice")
            paths.add(mount.get("mountPath") if isinstance(mount, dict) else None)
        self.string(c, "name", where, _DNS_LABEL, 63)
        self.string(c, "image", where)
        for key in ("command", "args"):
            if key in c and (not isinstance(c[key], list) or not all(isinstance(s, str) for s in c[key])):
                self.fail(f"{where}.{key}", "expected a list of strings")
        for k, e in enumerate(self.list_of(c, "env", where)):
            self.env_var(e, f"{where}.env[{k}]")
        res = c.get("resources")
        if res is not None and self.fields(res, f"{where}.resources", {"limits": False, "requests": False}):
            self.resources(res, f"{where}.resources")

    def resources(self, res: dict, where: str) -> None:
        """Names and quantities; a request is at most its limit (the API server refuses more)."""
        values: dict[str, dict[str, Fraction]] = {"limits": {}, "requests": {}}
        for kind in ("limits", "requests"):
            part = res.get(kind) or {}
            if not isinstance(part, dict):
                self.fail(f"{where}.{kind}", "expected a mapping of resource name to quantity")
                continue
            for name, q in part.items():
                if not isinstance(name, str) or not _LABEL_KEY.match(name):
                    self.fail(f"{where}.{kind}", f"invalid resource name {name!r}")
                value = quantity(q)
                if value is None:
                    self.fail(f"{where}.{kind}.{name}", f"invalid quantity {q!r}")
                else:
                    values[kind][name] = value
        for name, request in values["requests"].items():
            limit = values["limits"].get(name)
            if limit is not None and request > limit:
                self.fail(
                    f"{where}.requests.{name}", f"{res['requests'][name]} is more than its limit {res['limits'][name]}"
                )

    def env_var(self, e: Any, where: str) -> None:
        if not self.fields(e, where, {"name": True, "value": False, "valueFrom": False}):
            return
        self.string(e, "name", where, _ENV_NAME)
        if "value" in e and not isinstance(e["value"], str):
            self.fail(f"{where}.value", f"expected a string, got {e['value']!r}")
        if "valueFrom" in e:
            if "value" in e:
                self.fail(f"{where}.valueFrom", "may not be given with value")
            ref, w = e["valueFrom"], f"{where}.valueFrom"
            if not self.fields(ref, w, dict.fromkeys(ENV_SOURCES, False)):
                return
            if len(ref) != 1:
                self.fail(w, f"expected exactly one of {', '.join(ENV_SOURCES)}")
                return
            kind, source = next(iter(ref.items()))
            if self.fields(source, f"{w}.{kind}", ENV_SOURCES[kind]):
                for key in ENV_SOURCES[kind]:
                    if key == "optional":
                        self.boolean(source, key, f"{w}.{kind}")
                    elif key == "divisor":
                        if quantity(source[key] if key in source else 1) is None:
                            self.fail(f"{w}.{kind}.divisor", f"invalid quantity {source[key]!r}")
                    else:
                        self.string(source, key, f"{w}.{kind}")

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
            "networkTopology": False,
            "tasks": True,
        }
        if not self.fields(spec, "spec", allowed):
            return
        self.volcano_policies(spec.get("policies", []))
        self.network_topology(spec)
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

    def network_topology(self, spec: dict) -> None:
        """Volcano's job-level network topology: mode hard or soft; highestTierAllowed, a tier >= 1."""
        if "networkTopology" not in spec:
            return
        topology, w = spec["networkTopology"], "spec.networkTopology"
        if not self.fields(topology, w, {"mode": True, "highestTierAllowed": False}):
            return
        if topology["mode"] not in ("hard", "soft"):
            self.fail(f"{w}.mode", f"must be hard or soft, got {topology['mode']!r}")
        self.integer(topology, "highestTierAllowed", w, 1)

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
