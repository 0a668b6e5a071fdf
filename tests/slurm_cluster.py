"""A real one-node SLURM cluster for the tests: Debian's slurm-wlm and munge, started from a slurm.conf in a
temporary folder (its own munge key and socket, free ports, state, spool, pids and logs in that folder), stopped by
pid at the end. It does not touch a system munged or slurm.conf: every client is pointed at it by SLURM_CONF."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "sinfo", "squeue", "scontrol", "scancel", "srun")


def missing() -> str | None:
    """Why no cluster can be started here, or None."""
    absent = [p for p in DAEMONS if not Path(p).is_file()] + [c for c in CLIENTS if shutil.which(c) is None]
    if absent:
        return f"SLURM is not installed ({', '.join(absent)} missing; Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a one-node SLURM cluster needs root (slurmd runs jobs as their user)"
    return None


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _memory_mb() -> int:
    """A little under the machine's memory: slurmd refuses a node that claims more than it has."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 * 9 // 10
    return 1000


class Cluster:
    """munged, slurmctld and slurmd on this machine; `env` is what a client needs (SLURM_CONF)."""

    def __init__(self, root: Path):
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf)}
        self.pid_files = [root / "slurmd.pid", root / "slurmctld.pid", root / "munge" / "munged.pid"]

    def start(self, timeout: float = 60) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = munge / "munge.socket"
        # --force: the pytest folder above is private (0700), which munged would refuse for its socket
        self._run(["/usr/sbin/munged", "--force", f"--socket={socket_path}", f"--key-file={key}",
                   f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                   f"--seed-file={munge / 'munged.seed'}"])
        controller_port, node_port = _free_ports(2)
        (self.root / "state").mkdir()
        (self.root / "spool").mkdir()
        self.conf.write_text(self._conf(socket_path, controller_port, node_port))
        self._run(["/usr/sbin/slurmctld", "-f", str(self.conf)])
        self._run(["/usr/sbin/slurmd", "-f", str(self.conf)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.client(["sinfo", "-h", "-o", "%T"]).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the SLURM node did not become idle in {timeout:.0f} s (sinfo: {state!r}); logs in "
                           f"{self.root}")

    def _conf(self, munge_socket: Path, controller_port: int, node_port: int) -> str:
        r = self.root
        return "\n".join([
            "ClusterName=csekit", f"SlurmctldHost={self.host}", f"SlurmctldPort={controller_port}",
            f"SlurmdPort={node_port}", "AuthType=auth/munge", "CredType=cred/munge",
            # cred_expire: a requeued job may start again after it (default 120 s)
            f"AuthInfo=socket={munge_socket},cred_expire=5", "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=1", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}", f"SlurmdLogFile={r / 'slurmd.log'}", "SlurmUser=root",
            "ReturnToService=2", "JobRequeue=1", "KillWait=30",
            f"NodeName={self.host} CPUs={os.cpu_count()} RealMemory={_memory_mb()} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP", ""])

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command[:1])} failed: {done.stderr.strip()} (logs in {self.root})")

    def client(self, command: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **self.env})

    def jobs(self) -> list[str]:
        return self.client(["squeue", "-h", "-o", "%i"]).stdout.split()

    def stop(self) -> None:
        """Cancel what is left, then stop the daemons by their pids."""
        if self.conf.is_file():
            jobs = self.jobs()
            if jobs:
                self.client(["scancel", "--full", *jobs])
            deadline = time.monotonic() + 30
            while self.jobs() and time.monotonic() < deadline:
                time.sleep(0.5)
        for pid_file in self.pid_files:
            try:
                pid = int(pid_file.read_text())
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError):
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.1)
