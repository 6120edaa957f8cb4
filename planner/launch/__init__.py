"""`rota run`: the round loop (loop.py) over launcher adapters (one module per launcher, each
implementing adapter.Launcher). Adapters import their launcher's client only when used."""

from __future__ import annotations

import importlib
from typing import Any

from planner.errors import InputError
from planner.launch.adapter import Launcher

# launcher name -> (module, class); aliases below
ADAPTERS = {
    "slurm": ("planner.launch.slurm", "SlurmLauncher"),
    "ray": ("planner.launch.ray", "RayLauncher"),
    "kubernetes": ("planner.launch.kubernetes", "KubernetesLauncher"),
}
ALIASES = {"k8s": "kubernetes"}


def launcher_name(name: str) -> str:
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in ADAPTERS:
        raise InputError(f"unknown launcher {name!r}; choose one of: slurm, ray, k8s", field="LAUNCHER")
    return key


def make_launcher(name: str, **options: Any) -> Launcher:
    module, cls = ADAPTERS[launcher_name(name)]
    launcher: Launcher = getattr(importlib.import_module(module), cls)(**options)
    return launcher
