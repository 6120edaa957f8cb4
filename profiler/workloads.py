"""Users' own training jobs given as a Python entry point (`--workload`).

`--workload [NAME=]package.module:factory` names a factory with the reference
models' interface: it takes a `models.spec.BuildContext` (batch size, device,
scale, options) and returns either a `models.spec.Built` (model, optimizer,
make_batch, train_step, samples_per_step: measured exactly like a reference
model, checkpoint cost included) or a zero-argument callable that runs one
training step (measured the same way, without a checkpoint: there is no state
the profiler can see). NAME is the table's `model` (default: the module's last
component). The module is imported from the current folder, as `python -m`
would, after the installed packages.

Entry points are checked in a short child interpreter before anything runs
(the parent imports no torch): a module that fails to import, or a factory
whose signature is not `factory(ctx)` (one required positional parameter for
the context, any other parameter optional), is a one-line error naming it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from models.spec import BuildContext, Built, WorkloadSpec
from planner.errors import InputError

USER_FAMILY = "user"  # WorkloadSpec.family of every --workload / --command job
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_ENTRY = re.compile(r"^(?:(?P<name>[^=\s]+)=)?(?P<module>[A-Za-z_][\w.]*):(?P<function>[A-Za-z_]\w*)$")
CHECK_TIMEOUT_S = 300.0  # importing a user's module may import torch and more


class WorkloadShapeError(TypeError):
    """A factory returned something the profiler cannot run: the user's mistake, not a failed row."""


def check_name(name: str, option: str) -> str:
    if not NAME.match(name):
        raise InputError(
            f"name {name!r} must start with a letter or digit and use only letters, digits and . _ + -", field=option
        )
    return name


def parse_workload(text: str, batch_sizes: Sequence[int] = (), scale_factors: Sequence[int] = (1,)) -> WorkloadSpec:
    """'[NAME=]package.module:factory' → a spec measured at `batch_sizes` (none: no batch size) and
    `scale_factors` (data-parallel above 1, see profiler.worker)."""
    match = _ENTRY.match(text.strip())
    if not match:
        raise InputError(f"expected [NAME=]package.module:factory, got {text!r}", field="--workload")
    entry = f"{match['module']}:{match['function']}"
    name = check_name(match["name"] or match["module"].rsplit(".", 1)[-1], "--workload")
    return WorkloadSpec(
        name, USER_FAMILY, entry, tuple(batch_sizes), user_scale_factors(scale_factors), f"workload {entry}"
    )


def user_scale_factors(scale_factors: Sequence[int]) -> tuple[int, ...]:
    """A user job's scale factors: 1 always (its solo row anchors the rest), then the asked ones."""
    return tuple(sorted({1, *scale_factors}))


def is_user(spec: WorkloadSpec) -> bool:
    return spec.family == USER_FAMILY


# --------------------------------------------------------------------------- the import check

_CHECK = r"""
import importlib, inspect, json, sys, traceback
sys.path.append(sys.argv[1])
problems = {}
P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.VAR_POSITIONAL)
VARIADIC = (P.VAR_POSITIONAL, P.VAR_KEYWORD)
for entry in json.loads(sys.argv[2]):
    module, _, name = entry.partition(":")
    try:
        factory = getattr(importlib.import_module(module), name)
    except BaseException as exc:
        problems[entry] = "cannot import it: " + (traceback.format_exception_only(type(exc), exc)[-1].strip())
        continue
    if not callable(factory):
        problems[entry] = f"is a {type(factory).__name__}, not a factory function"
        continue
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        continue  # no signature to inspect (a builtin): let the measurement find out
    parameters = list(signature.parameters.values())
    positional = [p for p in parameters if p.kind in POSITIONAL]  # these come before the others
    others = [p.name for p in parameters[1:] if p.default is P.empty and p.kind not in VARIADIC]
    if not positional:
        why = "it takes no positional parameter"
    elif positional[0].default is not P.empty:
        why = f"its first parameter, {positional[0].name}, has a default, so it is not a context parameter"
    elif others:
        why = "it also requires " + ", ".join(others)
    else:
        continue
    problems[entry] = (
        f"the factory must take one required positional argument, the context ({why}); expected "
        f"`def factory(ctx: models.spec.BuildContext) -> models.spec.Built | step callable` (other "
        f"parameters optional), found `def {name}{signature}`"
    )
print(json.dumps(problems))
"""


def check_entry_points(entries: Sequence[str], folder: str | None = None) -> None:
    """Import every 'module:function' in a child interpreter; InputError for the first that is not usable."""
    if not entries:
        return
    folder = folder or os.getcwd()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHECK, folder, json.dumps(list(entries))],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    except subprocess.TimeoutExpired:
        raise InputError(
            f"importing {', '.join(entries)} took over {CHECK_TIMEOUT_S:.0f} s", field="--workload"
        ) from None
    lines = done.stdout.strip().splitlines()
    try:
        problems = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        problems = None
    if problems is None:  # the check itself died (a crash while importing, os._exit, ...)
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise InputError(f"cannot import {', '.join(entries)}: {detail}", field="--workload")
    for entry in entries:
        if entry in problems:
            raise InputError(f"{entry}: {problems[entry]}", field="--workload")


# --------------------------------------------------------------------------- in the worker


def as_built(result: Any, ctx: BuildContext, entry: str) -> Built:
    """A factory's return value as a `Built`, or WorkloadShapeError saying what was wrong."""
    if isinstance(result, Built):
        problems = [name for name in ("make_batch", "train_step") if not callable(getattr(result, name))]
        if problems:
            raise WorkloadShapeError(f"{entry} returned a Built whose {' and '.join(problems)} is not callable")
        if not isinstance(result.samples_per_step, int) or result.samples_per_step < 1:
            raise WorkloadShapeError(
                f"{entry} returned samples_per_step={result.samples_per_step!r}; expected an integer >= 1"
            )
        return result
    if callable(result):
        step = result
        return Built(None, None, lambda: None, lambda model, batch: step(), ctx.batch_size or 1)
    raise WorkloadShapeError(
        f"{entry} returned {type(result).__name__}; expected models.spec.Built "
        "(model, optimizer, make_batch, train_step, samples_per_step) or a zero-argument step callable"
    )
