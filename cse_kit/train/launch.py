"""How many processes a run was asked for, where the launcher may start fewer without saying so: `accelerate
launch --cpu --num_processes N` (or a MULTI_CPU Accelerate config) starts ONE process unless mpirun is given a
hostfile (`--mpirun_hostfile`), since its CPU launcher runs the script directly instead of through torchrun; and
`srun` starts N tasks that each know their place only from SLURM's variables (join_srun_step)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: What starts N CPU processes (torchrun ships with torch; gloo is its CPU backend).
CPU_COMMAND = "torchrun --nproc_per_node {n} -m cse_kit.cli train ..."


def _option(argv: list[str], name: str) -> str | None:
    """The value of --name (or its dashed spelling) in argv, as `--name v` or `--name=v`."""
    names = {f"--{name}", f"--{name.replace('_', '-')}"}
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key in names:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def _launcher_argv() -> list[str]:
    """The parent process's command line (Linux /proc), or [] where it cannot be read."""
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def requested_cpu_processes(argv: list[str] | None = None) -> int:
    """How many processes `accelerate launch` was asked to start on CPUs (1 when it did not launch this one, or
    launched it otherwise): its --num_processes, else the num_processes of its MULTI_CPU config file."""
    if os.environ.get("ACCELERATE_USE_CPU") != "True":  # set by accelerate's simple (non-torchrun) launcher only
        return 1
    argv = _launcher_argv() if argv is None else argv
    if not any(Path(arg).name.startswith("accelerate") for arg in argv[:3]):  # `accelerate` or -m accelerate...
        return 1
    value = _option(argv, "num_processes")
    if value is None:
        from accelerate.commands.config.config_args import default_config_file, load_config_from_file

        config_file = _option(argv, "config_file") or default_config_file
        if not Path(config_file).is_file():
            return 1
        config = load_config_from_file(config_file)
        value = config.num_processes if str(config.distributed_type).endswith("MULTI_CPU") else 1
    return int(value)


def check_processes(started: int, argv: list[str] | None = None) -> None:
    """Refuse to train in fewer processes than the launcher was asked for, naming the command that works."""
    requested = requested_cpu_processes(argv)
    if requested > started:
        raise ValueError(
            f"accelerate launch was asked for {requested} CPU processes but started {started}: its CPU launcher "
            "only starts several through mpirun with a hostfile (--mpirun_hostfile). Start them with "
            + CPU_COMMAND.format(n=requested) + " (the same arguments), which forms a gloo group")


def join_srun_step(environ=None) -> None:
    """The tasks of an `srun` step (`srun --ntasks N python -m cse_kit.cli train ...` under sbatch) as one process
    group: torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), which Accelerate reads,
    from SLURM's. Without them each task trained the whole run alone, all into one output folder. Nothing changes
    under torchrun (RANK is set), outside a step of several tasks, or in a batch script itself (no step)."""
    env = os.environ if environ is None else environ
    tasks = int(env.get("SLURM_STEP_NUM_TASKS", "1"))
    if tasks < 2 or "RANK" in env:
        return
    master = "127.0.0.1"
    if int(env.get("SLURM_STEP_NUM_NODES", "1")) > 1:  # the step's first node
        master = subprocess.run(["scontrol", "show", "hostnames", env["SLURM_STEP_NODELIST"]], capture_output=True,
                                text=True, check=True).stdout.split()[0]
    env.update(RANK=env["SLURM_PROCID"], WORLD_SIZE=str(tasks), LOCAL_RANK=env["SLURM_LOCALID"], MASTER_ADDR=master,
               MASTER_PORT=env.get("MASTER_PORT", str(20000 + int(env["SLURM_JOB_ID"]) % 20000)))
