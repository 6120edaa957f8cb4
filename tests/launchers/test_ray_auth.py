"""A Ray cluster with token authentication (RAY_AUTH_MODE=token on its nodes), and a rota that has no
token for it: one line that says so and how to give it (planner/export/ray_driver.py: connect_ray),
not Ray's 20 warnings over 20 s of retries and 'Failed to connect'. With the token, it connects.

Every client runs in its own process (a Ray client reads its authentication mode once per process),
with HOME in a temporary folder, so a ~/.ray/auth_token on the machine plays no part.
"""

from __future__ import annotations

import inspect
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner.export import ray_driver, ray_profile
from tests.launchers.ray_cluster import AUTH_VARIABLES, FakeNode, running_cluster

ROOT = Path(__file__).resolve().parents[2]
NODES = [FakeNode("head-0", 0, "CPU")]
TOKEN = secrets.token_hex(32)  # the form `ray get-auth-token --generate` writes
SWEEP = ["-t", str(ROOT / "data" / "gavel" / "simulation_throughputs.csv"), "-c", "v100=2,k80=2", "-p", "fifo_perf"]
SWEEP += ["--seeds", "0", "--rates", "0.05", "--window", "2:4", "--no-plots", "--json"]


def refused(address: str) -> str:
    return (
        f"the Ray cluster at {address!r} requires an authentication token, and this process has none or a "
        "wrong one: set RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN, or in a file named by "
        "RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token)"
    )


@pytest.fixture(scope="module")
def ray_cluster():
    pytest.importorskip("ray")
    import ray.exceptions

    if not hasattr(ray.exceptions, "AuthenticationError"):
        pytest.skip("this Ray has no token authentication")
    yield from running_cluster(NODES, "the Ray token tests", env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN})


def _env(home: Path, **auth: str) -> dict[str, str]:
    """This environment, less every Ray address and token setting, plus `auth`."""
    env = {k: v for k, v in os.environ.items() if k not in (*AUTH_VARIABLES, "RAY_ADDRESS")}
    return {**env, "HOME": str(home), "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", **auth}


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _rota(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "planner.cli", *args], cwd, env)


NO_TOKEN = {
    "no token": {},
    "token mode, no token": {"RAY_AUTH_MODE": "token"},
    "a wrong token": {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64},
    "a token but no token mode": {"RAY_AUTH_TOKEN": TOKEN},
}


@pytest.mark.parametrize("auth", NO_TOKEN.values(), ids=NO_TOKEN.keys())
def test_a_sweep_without_the_token_is_one_line_that_says_how_to_give_it(ray_cluster, tmp_path, auth):
    done = _rota("sweep", *SWEEP, "--ray", ray_cluster.address, "--out", "sw", cwd=tmp_path, env=_env(tmp_path, **auth))
    assert done.returncode == 2, done.stdout + done.stderr
    # one line: no traceback, and Ray's own warning of the refused try kept off stderr
    assert done.stderr.splitlines() == [f"error: field '--ray': {refused(ray_cluster.address)}"], done.stderr
    assert not (tmp_path / "sw" / "results.jsonl").exists()


def test_with_the_token_the_sweep_runs_on_the_cluster(ray_cluster, tmp_path):
    env = _env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    done = _rota("sweep", *SWEEP, "--ray", ray_cluster.address, "--out", "sw", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = [json.loads(line) for line in (tmp_path / "sw" / "results.jsonl").read_text().splitlines()]
    assert record["metrics"]["jobs_finished"] > 0


def test_the_token_in_a_file_named_by_ray_auth_token_path(ray_cluster, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    env = _env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    code = f"from planner.modes.sweep_ray import connected\nwith connected({ray_cluster.address!r}) as ray:\n"
    code += "    print(int(ray.cluster_resources()['CPU']))"
    done = _run([sys.executable, "-c", code], tmp_path, env)
    assert done.returncode == 0 and done.stdout == "2\n", done.stdout + done.stderr


def test_rota_run_ray_says_it_for_its_address(ray_cluster, tmp_path):
    code = "from planner.errors import InputError\nfrom planner.launch.ray import RayLauncher\n"
    code += f"try:\n    RayLauncher({ray_cluster.address!r})._connect()\nexcept InputError as exc:\n    print(exc)"
    done = _run([sys.executable, "-c", code], tmp_path, _env(tmp_path))
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    assert done.stdout == f"field '--address': {refused(ray_cluster.address)}\n"


def test_the_exported_driver_says_it_before_any_round(ray_cluster, tmp_path):
    shutil.copy(ray_driver.__file__, tmp_path / "ray_driver.py")  # alone, as `rota export ray` writes it
    (tmp_path / "ray_plan.json").write_text('{"rounds": []}')
    command = [sys.executable, "ray_driver.py", "ray_plan.json", "--address", ray_cluster.address]
    done = _run(command, tmp_path, _env(tmp_path))
    assert done.returncode == 2 and done.stderr == f"error: {refused(ray_cluster.address)}\n", done.stderr
    assert not (tmp_path / "ray_state.json").exists()
    done = _run(command, tmp_path, _env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN))
    assert done.returncode == 0, done.stdout + done.stderr


def test_auto_is_told_after_ray_s_retries(ray_cluster, tmp_path):
    """'auto' gets no quick try (ray.init may find a token file there itself): Ray retries, here twice
    (RAY_gcs_server_port_wait_time_s, Ray's own setting), then the same line, after Ray's warnings."""
    shutil.copy(ray_driver.__file__, tmp_path / "ray_driver.py")
    (tmp_path / "ray_plan.json").write_text('{"rounds": []}')
    env = _env(tmp_path, RAY_ADDRESS=ray_cluster.address, RAY_gcs_server_port_wait_time_s="2")
    done = _run([sys.executable, "ray_driver.py", "ray_plan.json"], tmp_path, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == f"error: {refused('auto')}", done.stderr
    assert "Traceback" not in done.stderr


def test_the_two_drivers_have_the_same_lines():
    """ray_profile.py is copied alone next to its plan, so it has its own copy of ray_driver.py's."""
    assert ray_profile.TOKEN_HELP == ray_driver.TOKEN_HELP
    for name in ("connect_ray", "token_refused"):
        assert inspect.getsource(getattr(ray_profile, name)) == inspect.getsource(getattr(ray_driver, name)), name
