"""A real single-host Slurm for launcher tests: one slurmctld and one `slurmd -N NAME` per node
of a rota cluster spec, all on this machine (each slurmd on its own port), with typed GPU GRES.

There are no GPUs: each node's GRES files are symlinks to /dev/null, which Slurm accepts as
devices (plain files it refuses; file-less GPUs it drops, and then marks the node INVAL). Slurm
still allocates them by index and exports SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES as on a real
cluster. Needs root (slurmd runs jobs as their users) and Debian's slurm-wlm and munge.

    cluster = SlurmCluster(read_cluster("data/cluster.yaml"), Path("/tmp/x"))
    cluster.start()            # munged if none runs, slurmctld, the slurmds; waits until idle
    subprocess.run(["sinfo"], env=cluster.env())
    cluster.stop()             # only the processes start() started

Everything is written under the state folder; nothing else on the machine is touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from planner.formats.cluster import Cluster

DAEMONS = ("slurmctld", "slurmd", "munged")


def missing_tools() -> list[str]:
    """The Slurm and munge programs that are not installed."""
    return [
        name
        for name in (*DAEMONS, "sbatch", "squeue", "scancel", "scontrol", "srun", "sinfo", "munge")
        if shutil.which(name) is None and not Path("/usr/sbin", name).exists()
    ]


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def free_ports(count: int) -> list[int]:
    """`count` TCP ports that are free now (the OS picks them, so parallel runs do not collide)."""
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


@dataclass
class SlurmCluster:
    cluster: Cluster
    root: Path
    cpus_per_node: int = 8
    processes: list[subprocess.Popen] = field(default_factory=list)
    started_munged: int | None = None  # pid of a munged this object started

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def nodes(self) -> list[str]:
        return [n for w in self.cluster.worker_types.values() for n in w.nodes]

    def env(self) -> dict[str, str]:
        """The environment Slurm's client commands need to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ------------------------------------------------------------------ configuration

    def write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        (self.root / "ctld").mkdir(parents=True, exist_ok=True)
        fake = self.root / "fakegpu"
        fake.mkdir(exist_ok=True)
        most = max(w.gpus_per_node for w in self.cluster.worker_types.values())
        for i in range(most):
            link = fake / f"nvidia{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        lines = [
            "ClusterName=rota-test",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"StateSaveLocation={self.root}/ctld",
            f"SlurmdSpoolDir={self.root}/spool-%n",
            f"SlurmctldPidFile={self.root}/slurmctld.pid",
            f"SlurmdPidFile={self.root}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.root}/slurmctld.log",
            f"SlurmdLogFile={self.root}/slurmd-%n.log",
            "SlurmdParameters=config_overrides",  # trust the CPU counts below, not this small host
            "ProctrackType=proctrack/linuxproc",  # no cgroups needed
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "GresTypes=gpu",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "KillWait=5",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        gres = ["AutoDetect=off"]
        port = iter(node_ports)
        for w in self.cluster.worker_types.values():
            last = w.gpus_per_node - 1
            for node in w.nodes:
                lines.append(
                    f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={next(port)} "
                    f"CPUs={self.cpus_per_node} RealMemory=4000 Gres=gpu:{w.name}:{w.gpus_per_node}"
                )
                files = f"{fake}/nvidia[0-{last}]" if last else f"{fake}/nvidia0"
                gres.append(f"NodeName={node} Name=gpu Type={w.name} File={files}")
        lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.root / "gres.conf").write_text("\n".join(gres) + "\n")

    # ------------------------------------------------------------------ processes

    def _start_munged(self) -> None:
        if subprocess.run([_tool("munge"), "-n"], capture_output=True).returncode == 0:
            return  # a munged already runs: use it, and leave it alone
        for folder in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            os.makedirs(folder, exist_ok=True)
            shutil.chown(folder, "munge", "munge")
        proc = subprocess.Popen(
            ["runuser", "-u", "munge", "--", _tool("munged"), "--foreground"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "munged.log", "wb"),  # noqa: SIM115 (lives as long as the daemon)
        )
        self.processes.append(proc)
        self.started_munged = proc.pid
        self._wait(lambda: subprocess.run([_tool("munge"), "-n"], capture_output=True).returncode == 0, "munged", 10)

    def _daemon(self, *args: str, log: str) -> None:
        proc = subprocess.Popen(
            [*args, "-D", "-f", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / log, "wb"),  # noqa: SIM115 (lives as long as the daemon)
            env=self.env(),
            start_new_session=True,  # its own group: a signal meant for the test runner never reaches it
        )
        self.processes.append(proc)

    def idle_nodes(self) -> set[str]:
        return self._nodes_in_state("idle")

    def _wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up; logs under {self.root}:\n{self.log_tail()}")
            time.sleep(0.2)

    def start(self, timeout_s: float = 60) -> None:
        self.write_config()
        self._start_munged()
        self._daemon(_tool("slurmctld"), log="slurmctld.stderr")
        for node in self.nodes:
            (self.root / f"spool-{node}").mkdir(exist_ok=True)
            self._daemon(_tool("slurmd"), "-N", node, log=f"slurmd-{node}.stderr")
        self._wait(lambda: self.idle_nodes() >= set(self.nodes), "the nodes", timeout_s)

    def settle(self, timeout_s: float = 120) -> list[str]:
        """Bring the cluster back to idle between tests: cancel what an earlier test left in the
        queue, resume nodes it left drained, and wait until every node is idle again, so that no
        test's job waits for another test's leftovers. Returns what had to be cleaned up."""
        env = self.env()
        left = subprocess.run([_tool("squeue"), "-h", "-o", "%i"], capture_output=True, text=True, env=env)
        leftovers = left.stdout.split() if left.returncode == 0 else []
        if leftovers:
            subprocess.run([_tool("scancel"), *leftovers], capture_output=True, env=env)
        busy = sorted(set(self.nodes) - self.idle_nodes())
        for node in busy:
            if node not in self._nodes_in_state("alloc,mix,comp"):
                subprocess.run(
                    [_tool("scontrol"), "update", f"nodename={node}", "state=resume"], capture_output=True, env=env
                )
        self._wait(lambda: self.idle_nodes() >= set(self.nodes), "idle nodes between tests", timeout_s)
        return [f"job {j}" for j in leftovers] + [f"node {n}" for n in busy]

    def _nodes_in_state(self, states: str) -> set[str]:
        out = subprocess.run(
            [_tool("sinfo"), "-h", "-N", "-t", states, "-o", "%N"], capture_output=True, text=True, env=self.env()
        )
        return set(out.stdout.split()) if out.returncode == 0 else set()

    def stop(self) -> None:
        """Stop exactly the processes start() started: daemons first, munged last."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.processes.clear()

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for log in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.stderr")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            if text:
                out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)
