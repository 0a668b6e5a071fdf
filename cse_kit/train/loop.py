"""The training loop on Hugging Face Accelerate: one CPU, one GPU or several (`accelerate launch`), AMP, a linear
schedule, dev evaluation every `eval_steps` with the best model kept apart, resumable checkpoints, a JSONL log.

The method is a cse_kit.methods.Objective, and the loop calls its hooks (stages, parameters, readings) as declared
there. What a run trains with is set up by cse_kit.train.setup (its stages, optimizers and schedules described
there). The step counter runs over both stages of a two-stage method, so evaluation, checkpoints and resume cross the
boundary unchanged."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path

import torch

from ..data import unverified_reads
from ..environment import describe
from ..eval.prefix_dynamics import snapshot_path
from ..io import (
    acquire_or_wait, ensure_dir, holder_lock, not_a_file, recover_dir, remove, swap_dir, write_json_atomic,
    write_tensors_atomic, write_text_atomic, writing,
)
from ..progress import STATUS_SECONDS, duration
from .checkpoint import (CHECKPOINT, STATE, RunStateError, checkpoint_step, read_checkpoint, trainer_state,
                         write_process_files)
from .config import NOT_COMPUTING, TrainConfig
from .determinism import deterministic_mode
from .export import export_encoder
from .memory import peak_memory
from .method_settings import former_layout
from .optim import set_weight_decay
from .preemption import StopVote
from .presets import official_run, precision_words
from .setup import RunSetup, rank_seed, set_up_run
from .step import TrainStep, compile_line, eager, optimizer_index, padding_line
from .tracking import RunTrackers


class NonFiniteLoss(RuntimeError):
    """The loss, the weights or the dev score stopped being finite; nothing of that step was saved."""


class TrainingStopped(Exception):
    """A process of the run asked to stop (preemption.stop_after_this_step: a pre-empted job): every process saved
    the checkpoint of the same step and stopped; training it again resumes there."""


class TrainingPruned(Exception):
    """train()'s on_dev stopped the run after a dev evaluation (a study's pruner, cse-kit tune --prune). Its
    checkpoint of that step resumes it; it is not a finished run (no summary). Not a TrainingStopped: no signal
    asked for it, and a pre-empted job's handler must not take it for one."""


#: The state a two-stage method has at the end of its first stage, saved in the run folder.
STAGE1_FILE = "stage1.safetensors"
#: The checkpoint being written beside the last one.
NEW_CHECKPOINT = ".checkpoint.new"


#: settings added since a run may have been saved, read at their defaults from its configuration: deterministic off,
#: pad_to auto (on a CPU each batch to its longest row, as every run before; a GPU run saved before pads fixed from
#: its checkpoint on: its numbers change by dropout's draws, not by what it computes)
SETTINGS_ADDED = {"pad_to": "auto", "deterministic": False}


def training_changes(old: dict, new: dict) -> dict:
    """{key: [old, new]} for the settings that compute (NOT_COMPUTING: where and how often are free to differ), a
    configuration saved before a kit method's settings moved into its Options read as it is now (former_layout)."""
    old, new = former_layout(old) if old else old, former_layout(new)
    if old:  # a setting added since the run was saved computes what the run computed at its default
        old = {**{k: v for k, v in SETTINGS_ADDED.items() if k not in old}, **old}
    return {k: [old.get(k), new.get(k)] for k in sorted(set(old) | set(new))
            if k not in NOT_COMPUTING and old.get(k) != new.get(k)}


def _read_json(path: Path, fix: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunStateError(f"{path} is damaged ({e}); {fix}") from None


def _finite_weights(model) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def _is_better(new: float, best: float | None) -> bool:
    return math.isfinite(new) and (best is None or new > best)


def train(cfg: TrainConfig, *, progress: bool = True, resume_with_changes: bool = False,
          announce=partial(print, flush=True), status=None, on_dev=None) -> dict:
    """Train (or resume, or return the finished run in cfg.output_dir). Returns the run summary. announce(line)
    takes the header line a run starts with (a notebook's progress stream, not its output). status(line), when
    given, hears where the run is (its step and the time left) after its first step, then every STATUS_SECONDS: the
    progress a notebook's kernel shows, where no progress bar is drawn.

    A run resumes only with the configuration it was started with (what differs is named), unless
    resume_with_changes: then the new settings apply from the checkpoint's step on (lr and weight decay reset
    on the optimizer, the schedule recomputed) and each change is recorded in the summary. One trainer per run
    folder (run_lock): a second one waits for the first and then resumes or returns its run. What the run logs also
    goes to the trackers of cfg.log_with (cse_kit.train.tracking; by default TensorBoard beside log.jsonl).

    on_dev(step, score), when given, hears each dev evaluation's score (cfg.metric) on the main process; where it
    returns True before the last step, the run saves its checkpoint there and raises TrainingPruned."""
    trackers = RunTrackers(cfg.log_with, announce)  # an unknown tracker is refused before anything loads
    with run_lock(Path(cfg.output_dir)), deterministic_mode(cfg.deterministic, cfg.method):
        try:
            return _train(cfg, progress=progress, resume_with_changes=resume_with_changes, announce=announce,
                          status=status, trackers=trackers, on_dev=on_dev)
        finally:  # a stopped or failed run's trackers keep what they were sent
            trackers.finish()


@contextlib.contextmanager
def run_lock(run: Path):
    """Hold the run folder's lock, `.<name>.lock` beside it (its file says who holds it; beside, so that a run
    refused before it starts leaves no folder), for the block; while another trainer holds it, say so on stderr,
    naming it, and wait. Processes other than the first of a multi-process run (torchrun, accelerate launch:
    RANK > 0) train under their first process's lock."""
    if int(os.environ.get("RANK", "0")) != 0:
        yield
        return
    not_a_file(run, "output_dir")
    lock = holder_lock(ensure_dir(run.parent, "output_dir") / f".{run.name}.lock")
    acquire_or_wait(lock, f"waiting for {run}: another trainer trains into it",
                    lambda message: print(f"cse-kit: {message}", file=sys.stderr, flush=True))
    try:
        remove(run / NEW_CHECKPOINT)  # half-written by a killed trainer; no other trainer writes it now
        yield
    finally:
        lock.release()


def _train(cfg: TrainConfig, *, progress: bool, resume_with_changes: bool, announce, status, trackers,
           on_dev) -> dict:
    """train() under the run folder's lock: a finished run is returned as it is; any other is set up, resumed from its
    checkpoint where it has one, trained step by step and finished."""
    run = Path(cfg.output_dir)
    finished = _finished_run(cfg, run)
    if finished is not None:
        return finished
    checkpoint = recover_dir(run / CHECKPOINT)
    resumed = (checkpoint / STATE).is_file()
    changes = _resume_changes(cfg, run, checkpoint, resume_with_changes) if resumed else {}
    training = _Training(**vars(set_up_run(cfg)), run=run, checkpoint=checkpoint)
    if resumed:
        training.resume(changes)
    training.start(announce, resumed, trackers)
    training.train_steps(_Progress(training, progress, status), on_dev)
    return training.finish()


def _finished_run(cfg: TrainConfig, run: Path) -> dict | None:
    """The summary of the run finished in `run`, or None; refused when it was trained with another configuration."""
    summary_path = run / "summary.json"
    if not summary_path.is_file():
        return None
    summary = _read_json(summary_path, f"remove {summary_path} to finish the run again from its checkpoint")
    changed = training_changes(summary.get("config", {}), cfg.to_dict())
    if changed:
        raise ValueError(f"{run} holds a finished run with a different configuration ({', '.join(changed)} "
                         "differ); choose another output_dir")
    # the same run, found where it now is: a copied or moved folder (or results store) keeps working
    return {**summary, "config": cfg.to_dict(), "model": str(run / "model")}


def _restart(run: Path) -> str:
    """The fix a message about a run's checkpoint names."""
    return f"remove {run / 'checkpoint'} to train this run again from step 0"


def _resume_changes(cfg: TrainConfig, run: Path, checkpoint: Path, resume_with_changes: bool) -> dict:
    """What cfg changes against the configuration the checkpoint was trained with (training_changes); refused
    unless resume_with_changes."""
    if not (run / "config.json").is_file():
        return {}
    changes = training_changes(_read_json(run / "config.json", _restart(run)), cfg.to_dict())
    if changes and not resume_with_changes:
        raise ValueError(
            f"{run} holds a checkpoint trained with another configuration: "
            + ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
            + f". Resuming would not train what the new configuration says. Use another output_dir, {_restart(run)}, "
            "or resume on purpose with --resume-with-changes (recorded in the summary)")
    return changes


@dataclass
class LoopState:
    """What a checkpoint saves of the loop (in trainer_state.json, cse_kit.train.checkpoint), at step 0 when made: the
    step, the best dev score and its step, the seconds spent training, evaluating and checkpointing, the resumes
    with changes, the dev evaluations since the best, whether the run stopped early. Its fields are the file's keys,
    in this order."""

    step: int = 0
    best: float | None = None
    best_step: int | None = None
    seconds: dict = field(default_factory=lambda: {"train": 0.0, "eval": 0.0, "checkpoint": 0.0})
    resumed_with_changes: list = field(default_factory=list)
    evaluations_since_best: int = 0
    stopped_early: bool = False

    @classmethod
    def saved(cls, saved: dict, fix: str) -> LoopState:
        """The state a checkpoint saved; a key it lacks (saved before that key was added) at its value at step 0."""
        unknown = sorted(set(saved) - {f.name for f in fields(cls)})
        if unknown:
            raise RunStateError(f"the checkpoint's trainer state has keys this version does not know "
                                f"({', '.join(unknown)}: written by a newer cse-kit); resume with that version, "
                                f"or {fix}")
        return cls(**saved)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Training(RunSetup):
    """One run as the steps of the loop share it: what it trains with (RunSetup), its folders, and `state`, what a
    checkpoint saves (LoopState)."""

    run: Path
    checkpoint: Path
    state: LoopState = field(default_factory=LoopState)
    environment: dict = field(default_factory=dict)
    last_save: float = 0.0
    step: TrainStep | None = None
    trackers: RunTrackers | None = None

    def resume(self, changes: dict) -> None:
        """Continue from the checkpoint: the loop's state, the weights, optimizers, schedules and random states; with
        changes (resume_with_changes), the new settings from the checkpoint's step on, recorded in the state."""
        accelerator = self.accelerator
        fix = _restart(self.run)
        self.state = LoopState.saved(read_checkpoint(
            self.checkpoint, accelerator.process_index, accelerator.num_processes, self.unwrapped, self.optimizers,
            self.schedulers, accelerator.scaler, f"{fix} (the best model so far, {self.run / 'model'}, is replaced by "
            "the new run's)"), fix)
        if changes:
            self._apply_changes(changes)

    def _apply_changes(self, changes: dict) -> None:
        """The new lr and weight decay on the main optimizer (the checkpoint restored the old ones), its schedule
        recomputed from the new lr (a method's own learning rates kept)."""
        cfg, optimizer, scheduler = self.cfg, self.optimizers[0], self.schedulers[0]
        lrs = [group.get("own_lr", cfg.lr) for group in optimizer.param_groups]  # a method's own rates stay
        for group, lr in zip(optimizer.param_groups, lrs):
            group.update(initial_lr=lr)
        set_weight_decay(optimizer, cfg.weight_decay_value())
        scheduler.base_lrs = lrs
        for group, lr, factor in zip(optimizer.param_groups, lrs, scheduler.lr_lambdas):
            group["lr"] = lr * factor(scheduler.last_epoch)
        self.state.resumed_with_changes.append({"step": self.state.step, "changes": changes})

    @property
    def log_path(self) -> Path:
        return self.run / "log.jsonl"

    def start(self, announce, resumed: bool, trackers: RunTrackers) -> None:
        """The run folder's configuration and environment written, its log cut back to the checkpoint's step (what
        was logged after it is trained again), its trackers started, and the run's header line announced."""
        accelerator, cfg = self.accelerator, self.cfg
        self.environment = describe(accelerator.device)
        if accelerator.is_main_process:
            self.run.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.run / "config.json", cfg.to_dict())
            write_json_atomic(self.run / "environment.json", self.environment)
            _truncate_log(self.log_path, self.state.step, _restart(self.run))
        trackers.start(cfg, self.run, self.state.step if resumed else None, accelerator.is_main_process)
        self.trackers = trackers
        self.last_save = time.monotonic()
        self.step = TrainStep(cfg, accelerator, self.objective, self.unwrapped, self.params, self.optimizers,
                              self.schedulers, self.batches, self.nli_batches, self.first_stage)
        if accelerator.is_main_process:
            announce(_header(cfg, self.examples, self.first_stage, self.main_steps, self.run,
                             self.state.step if resumed else None,
                             precision_words(cfg, accelerator.mixed_precision)))
            for line in (official_run(cfg), padding_line(cfg.pad_to, self.batches.padding, self.batches.fixed_length),
                         compile_line(cfg.compile, accelerator.device.type)):
                if line:
                    announce(line)

    def train_steps(self, progress: _Progress, on_dev) -> None:
        """Step until the last step, an early stop, a stop the run's processes agree on (TrainingStopped) or one
        on_dev asks for after a dev evaluation (TrainingPruned): after each step its losses logged, DiffAug's
        stage-1 states saved, the dev evaluation run and a checkpoint written, where due."""
        self.objective.train()
        stop_vote = StopVote(self.accelerator.num_processes)
        while self.state.step < self.total:
            stage = self.optimizer_step()
            step = self.state.step
            progress.stepped(step)
            # a snapshot step is logged too, so that every snapshot's interval has a logged loss (Figure 3)
            logged = step % self.cfg.log_steps == 0 or step == self.total or self.snapshot_due(step)
            due = self.evaluation_due(step)
            if logged or due:
                self.check_loss()
            if logged:
                progress.show(self.log_losses(step, stage))
            self.save_stage1(step)
            if due:
                score = self.evaluate(step)
                progress.show(self.step.readings()["loss"], score)
                if on_dev and self.from_main(lambda: bool(on_dev(step, score))) and step < self.total:
                    self.stop_at(step, TrainingPruned(f"{self.run} was pruned after its dev evaluation at step "
                                                      f"{step} of {self.total}; its checkpoint resumes there"))
            if self.checkpoint_after(step):
                break
            self.stop_if_agreed(step, stop_vote)
            self.objective.train()
        progress.close()

    def optimizer_step(self) -> int:
        """One step of the current stage (cse_kit.train.step.TrainStep), counted and timed. Returns its stage."""
        t = time.perf_counter()
        stage = self.step.step(self.state.step)
        self.state.step += 1
        self.state.seconds["train"] += time.perf_counter() - t
        return stage

    def log(self, record: dict) -> None:
        if self.accelerator.is_main_process:
            with writing(self.log_path), self.log_path.open("a") as f:  # a torn last line is dropped on resume
                f.write(json.dumps(record) + "\n")
            self.trackers.log(record)

    def log_losses(self, step: int, stage: int) -> float:
        """The step's learning rate, losses and gradient norm into the log, read from the device here. Returns the
        loss."""
        record = {"step": step, "lr": self.schedulers[optimizer_index(stage)].get_last_lr()[0],
                  **({"stage": stage} if self.first_stage else {}), **self.step.readings()}
        self.log(record)
        return record["loss"]

    def snapshot_due(self, step: int) -> bool:
        """A stage-1 step after which its state is saved: every stage1_snapshot_steps and the last."""
        every = self.cfg.stage1_snapshot_steps
        return bool(every) and step <= self.first_stage and (step % every == 0 or step == self.first_stage)

    def save_stage1(self, step: int) -> None:
        """DiffAug Figure 3: the first stage's state at its snapshot steps, and what it learnt at its last step."""
        if not ((step == self.first_stage or self.snapshot_due(step)) and self.accelerator.is_main_process):
            return
        stage1_state = self.unwrapped.stage1_state()
        if self.snapshot_due(step):
            write_tensors_atomic(snapshot_path(self.run, step), stage1_state)
        if step == self.first_stage:
            write_tensors_atomic(self.run / STAGE1_FILE, stage1_state)

    def evaluation_due(self, step: int) -> bool:
        """Every eval_steps steps and at the last; with eval_epoch_end, the main stage's eval_steps are counted from
        each epoch's start and each epoch's end is evaluated too (SentenceTransformer.fit)."""
        if step == self.total:
            return True
        in_stage = step - self.first_stage
        if not self.cfg.eval_epoch_end or in_stage <= 0:
            return step % self.cfg.eval_steps == 0
        in_epoch = in_stage % (self.batches.steps_per_epoch // self.cfg.gradient_accumulation)
        return in_epoch == 0 or in_epoch % self.cfg.eval_steps == 0

    def evaluate(self, step: int) -> float:
        """The dev evaluation, logged; a better score than the best so far exports the model as the run's best.
        Returns the score."""
        t = time.perf_counter()
        test_model = self.unwrapped.test_model()[0]
        with eager():  # compiled modules: the dev sets' shapes are not the step's
            dev = self.evaluator(test_model)
        self.state.seconds["eval"] += time.perf_counter() - t
        score = dev[self.cfg.metric]
        if not math.isfinite(score):
            self.stop(f"the dev {self.cfg.metric} is {score} (the embeddings are not finite)")
        self.log({"step": step, "dev": dev})
        self.state.evaluations_since_best += 1
        if _is_better(score, self.state.best):
            if not _finite_weights(self.objective):
                self.stop("the weights are not finite")
            self.state.best, self.state.best_step, self.state.evaluations_since_best = score, step, 0
            if self.accelerator.is_main_process:
                with eager():
                    export_encoder(test_model, self.tokenizer, self.run / "model",
                                   _metadata(self.cfg, step, dev, self.test_pooler, self.test_max_length),
                                   self.unwrapped.test_reading())
        return score

    def check_loss(self) -> None:
        """The first non-finite loss is kept on the device and read here, at log, evaluation and checkpoint steps
        only: reading it every step would stall the GPU on every step."""
        bad = self.step.first_non_finite()
        if bad is not None:
            self.state.step = bad
            self.stop("the loss is not finite (nan or inf)")

    def stop(self, what: str):
        """Raise NonFiniteLoss: what went wrong at which step, and what is left to go on from."""
        step = checkpoint_step(self.checkpoint)
        good = (f"The last good checkpoint is {self.checkpoint} (step {step})" if step is not None
                else "No checkpoint was written yet")
        best = f", the best model {self.run / 'model'} (step {self.state.best_step})" \
            if self.state.best_step else ""
        fp16 = self.accelerator.mixed_precision == "fp16"
        raise NonFiniteLoss(
            f"{what} at step {self.state.step}; training stopped and nothing of this step was saved. {good}{best}. "
            f"Lower lr{', or use bf16 instead of fp16' if fp16 else ''}, then start "
            "a new output_dir (or resume with --resume-with-changes).")

    def checkpoint_after(self, step: int) -> bool:
        """A checkpoint where one is due, and at the end where it is kept. Returns whether training stops early (its
        dev score not better for early_stopping_patience evaluations)."""
        patience, total = self.cfg.early_stopping_patience, self.total
        stopped = bool(patience) and step < total and self.state.evaluations_since_best >= patience
        self.state.stopped_early = stopped
        if (step < total and not stopped and self.checkpoint_due(step)) or \
                ((step == total or stopped) and self.cfg.keep_checkpoint):
            self.check_loss()
            self.save_checkpoint()
            self.last_save = time.monotonic()
        return stopped

    def checkpoint_due(self, step: int) -> bool:
        """Every save_steps steps, else every checkpoint_minutes (decided on the main process at log and evaluation
        steps and shared, so every process saves at the same step)."""
        cfg = self.cfg
        if cfg.save_steps:
            return step % cfg.save_steps == 0
        if step % cfg.log_steps and step % cfg.eval_steps:
            return False
        return self.from_main(lambda: time.monotonic() - self.last_save >= 60 * cfg.checkpoint_minutes)

    def from_main(self, decide):
        """decide() on the main process, its answer shared with every process (so all act at the same step)."""
        answer = [decide() if self.accelerator.is_main_process else None]
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(answer, from_process=0)
        return answer[0]

    def save_checkpoint(self) -> None:
        """The weights, optimizers, schedules, random states and the loop's state, written beside the last
        checkpoint and then swapped for it (a kill at any point leaves one whole checkpoint)."""
        accelerator, checkpoint = self.accelerator, self.checkpoint
        if not _finite_weights(self.objective):
            self.stop("the weights are not finite")
        t = time.perf_counter()
        tmp = self.run / NEW_CHECKPOINT
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        accelerator.wait_for_everyone()
        with writing(checkpoint, partial=tmp):  # a full disk or Ctrl-C leaves no tmp
            write_process_files(tmp, accelerator.process_index, self.unwrapped, self.optimizers,
                                main=accelerator.is_main_process)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            with writing(checkpoint, partial=tmp):
                write_json_atomic(tmp / STATE, trainer_state(tmp, self.state.to_dict(), self.schedulers,
                                                             accelerator.scaler, accelerator.num_processes))
                swap_dir(tmp, checkpoint)
        accelerator.wait_for_everyone()
        self.state.seconds["checkpoint"] += time.perf_counter() - t

    def stop_if_agreed(self, step: int, stop_vote: StopVote) -> None:
        """Pre-emption (preemption.stop_after_this_step, in any process of the run): a checkpoint at this step, then
        TrainingStopped."""
        if stop_vote.agreed():
            self.stop_at(step, TrainingStopped(f"{self.run} stopped after step {step} of {self.total}; its "
                                               "checkpoint resumes there"))

    def stop_at(self, step: int, stopped: Exception):
        """A checkpoint at this step (where the last one is not of it), then raise `stopped`."""
        if checkpoint_step(self.checkpoint) != step:
            self.check_loss()
            self.save_checkpoint()
        raise stopped

    def finish(self) -> dict:
        """The run's summary, written to summary.json; the checkpoint removed unless keep_checkpoint."""
        from ..methods.registry import method_class, method_digest

        accelerator, cfg, state = self.accelerator, self.cfg, self.state
        summary = {"config": cfg.to_dict(), "steps": state.step, "best": state.best,
                   "best_step": state.best_step, "stopped_early": state.stopped_early,
                   "metric": cfg.metric, "model": str(self.run / "model"), "seconds": state.seconds,
                   "environment": self.environment, "processes": accelerator.num_processes,
                   "mixed_precision": accelerator.mixed_precision,
                   "seeds": [rank_seed(cfg.seed, r) for r in range(accelerator.num_processes)],
                   "resumed_with_changes": state.resumed_with_changes, "unverified_data": unverified_reads(),
                   # which version of a researcher's method trained it (None: the kit's own), as a record says
                   "method_source": method_digest(method_class(cfg.method)), **peak_memory(accelerator)}
        if accelerator.is_main_process:
            write_json_atomic(self.run / "summary.json", summary)
            if not cfg.keep_checkpoint:  # a finished run needs only its best model (a DiffCSE cpu run's was 611 MB)
                shutil.rmtree(self.checkpoint, ignore_errors=True)
        accelerator.wait_for_everyone()
        return summary


class _Progress:
    """What a run shows while it trains: a progress bar with the last loss and dev score, and, where status is
    given, its step and the time left after its first step and then every STATUS_SECONDS."""

    def __init__(self, training: _Training, progress: bool, status):
        from tqdm import tqdm

        main = training.accelerator.is_main_process
        self.bar = tqdm(total=training.total, initial=training.state.step, disable=not (progress and main),
                        desc=training.cfg.preset or training.cfg.method, dynamic_ncols=True)
        self.status = status if main else None
        self.total, self.first_stage = training.total, training.first_stage
        self.started, self.first_step, self.last_status = time.monotonic(), training.state.step, None
        self.dev = None

    def stepped(self, step: int) -> None:
        self.bar.update(1)
        now = time.monotonic()
        if self.status is None or step == self.total or \
                (self.last_status is not None and now - self.last_status < STATUS_SECONDS):
            return
        self.last_status = now
        stage = f" (stage 1 of {self.first_stage} steps)" if step <= self.first_stage else ""
        left = (now - self.started) / (step - self.first_step) * (self.total - step)
        self.status(f"step {step}/{self.total}{stage}, about {duration(left)} left")

    def show(self, loss: float, dev: float | None = None) -> None:
        if dev is not None:
            self.dev = f"{dev:.2f}"
        self.bar.set_postfix(loss=f"{loss:.4f}", dev=self.dev)

    def close(self) -> None:
        self.bar.close()


def _header(cfg: TrainConfig, examples: int, first_stage: int, main_steps: int, run: Path,
            resumed_at: int | None, precision: str) -> str:
    """The one line a run starts with: what trains, on what, how long, in which precision, where, and whether it
    resumes."""
    stages = f"{first_stage} stage-1 + {main_steps} steps" if first_stage else f"{main_steps} steps"
    start = f"resuming at step {resumed_at}" if resumed_at is not None else "fresh"
    batch = f"batch {cfg.batch_size}" + (f" in chunks of {cfg.grad_cache} (gradient caching)" if cfg.grad_cache else "")
    return (f"{cfg.method} ({cfg.preset or 'no preset'}, {cfg.profile or 'no'} profile): {cfg.model} on {cfg.data} "
            f"({examples} examples), {stages}, {batch}, {precision}; {start}; output {run}")


def _metadata(cfg: TrainConfig, step: int, dev: dict, pooler: str, max_length: int | None) -> dict:
    """cse_kit.json: how the model is evaluated (pooler, template, the length test sentences are cut at) and where
    it comes from."""
    return {"method": cfg.method, "pooler": pooler, "profile": cfg.profile, "preset": cfg.preset,
            "base_model": cfg.model, "step": step, "dev": dev, **({"template": cfg.template} if cfg.template else {}),
            **({"max_length": max_length} if max_length else {})}


def _truncate_log(path: Path, step: int, fix: str) -> None:
    """Keep the log up to `step`. A torn last line (a kill in the middle of a write) is dropped; a damaged line
    before it means the file was edited, which is named."""
    if not path.is_file():
        return
    lines = [line for line in path.read_text().splitlines() if line]
    keep = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break
            raise RunStateError(f"{path}:{i + 1} is damaged ({e}); repair or remove that line, or {fix}") from None
        if record["step"] <= step:
            keep.append(line)
    write_text_atomic(path, "".join(line + "\n" for line in keep))
