"""Pre-emption of a training run: a scheduler's signal stops the run after its current step, with a checkpoint that
resumes there, in every process of the run at the same step.

A signal handler only records the request (stop_after_this_step); the loop acts between two steps, where the model,
the optimizers and the random states are consistent. In a run of several processes the signal may reach one of
them (`kill`), or all of them a little apart (SLURM signals every task of a step): at the end of each step they vote
(StopVote), so all stop after the same step and save one checkpoint together.

`Preemption` is the handler of SIGTERM and SIGUSR2 for a process that trains: the parallel runner's worker jobs
(cse_kit.results.parallel) and `cse-kit train` in a SLURM job (SlurmTraining). Outside training (loading, an evaluation
after it, a wait for another run) leaving at once loses nothing: every write is atomic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_stop_asked: list[int] = []  # the signals received since the last vote
_stopped_by: list[int] = []  # the signal the processes stopped for


def stop_after_this_step(signum: int) -> None:
    """Ask the running training loop to save a checkpoint after its current step and raise TrainingStopped, for
    signal signum. It only records the request, so a signal handler may call it."""
    _stop_asked.append(signum)


class StopVote:
    """Whether every process of a run stops after this step: any one asked (stop_after_this_step). One all-reduce
    of one number per step, on a gloo (CPU) group, so a GPU run is not made to wait for its device each step; one
    process decides alone. The number is the highest signal asked for: SIGTERM (SLURM ends or requeues the job)
    outranks SIGUSR2 (the job requeues itself), whichever process received which."""

    def __init__(self, num_processes: int):
        self.group = None
        self.distributed = num_processes > 1
        if self.distributed:  # every process builds its vote at the same place: new_group is collective
            import torch.distributed as dist

            if dist.get_backend() != "gloo":
                self.group = dist.new_group(backend="gloo")

    def agreed(self) -> bool:
        n = len(_stop_asked)  # a signal handled from here on (after the all-reduce, at the latest) counts next time
        asked = max(_stop_asked[:n], default=0)
        del _stop_asked[:n]
        if self.distributed:  # on the host (gloo): the vote never waits for a GPU
            import torch
            import torch.distributed as dist

            vote = torch.tensor([asked])
            dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self.group)
            asked = int(vote.item())
        if asked:
            _stopped_by.append(asked)
        return bool(asked)


#: the training loop's module, which imports this one: its train() is known by its name there
LOOP = f"{__package__}.loop"


def _training(frame) -> bool:
    """Whether the interrupted frame is inside the training loop's train()."""
    while frame is not None and not (frame.f_code.co_name == "train" and frame.f_globals.get("__name__") == LOOP):
        frame = frame.f_back
    return frame is not None


class Preemption:
    """The SIGTERM and SIGUSR2 handler: while a run trains, it stops after its current step (the caller catches
    loop.TrainingStopped and calls leave); at any other time leave() at once. leave acts on the signal the run's
    processes agreed on (stopped_by); a signal after leaving (SLURM's SIGTERM after a requeue asked from inside)
    changes nothing."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR2)

    def __init__(self):
        self.signum, self.leaving = None, False
        for signum in self.SIGNALS:
            signal.signal(signum, self.on_signal)

    def on_signal(self, signum: int, frame) -> None:
        if self.leaving:
            return
        self.signum = self.signum or signum
        if _training(frame):
            stop_after_this_step(signum)
        else:
            self.leave("no run was training")

    @property
    def stopped_by(self) -> int:
        """The signal the run stopped for, agreed by its processes (another one may have received it), else the
        one this process received."""
        return _stopped_by[-1] if _stopped_by else self.signum

    def leave(self, what: str):
        raise NotImplementedError


class SlurmTraining(Preemption):
    """`cse-kit train` in a SLURM job (one process, or the tasks of `srun --ntasks N`). After SIGUSR2 (`scancel
    --signal=USR2`, `sbatch --signal=USR2@90` before the time limit) the first process requeues the job (`scontrol
    requeue`), which restarts it: the same command resumes at the checkpoint. After SIGTERM (`scontrol requeue`,
    pre-emption, the time limit, `scancel`) SLURM requeues the job or ends it, and a requeue from inside would undo
    a `scancel`. The process then exits 128 + the signal's number."""

    def __init__(self, job: str):
        self.job = job
        self.main = os.environ.get("RANK", "0") == "0"
        super().__init__()

    def leave(self, what: str):
        self.leaving = True
        signum = self.stopped_by
        if signum == signal.SIGUSR2:
            then = self._requeue() if self.main else "the first process requeues the job"
        else:
            then = "SLURM requeues this job or ends it"
        if self.main:
            print(f"cse-kit: {signal.Signals(signum).name}: {what}; {then}", file=sys.stderr, flush=True)
        sys.exit(128 + signum)

    def _requeue(self) -> str:
        done = subprocess.run(["scontrol", "requeue", self.job], capture_output=True, text=True)
        if done.returncode:
            return (f"`scontrol requeue {self.job}` failed ({(done.stderr or done.stdout).strip()}): run the same "
                    "command again to resume")
        return f"requeued job {self.job}: it resumes there"


def slurm_training() -> SlurmTraining | None:
    """The pre-emption handler of `cse-kit train` where it runs in a SLURM job, else None."""
    job = os.environ.get("SLURM_JOB_ID")
    return SlurmTraining(job) if job else None
