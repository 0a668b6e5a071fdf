"""The training loop on Hugging Face Accelerate: one CPU, one GPU or several (`accelerate launch`), AMP, a linear
schedule, dev evaluation every `eval_steps` with the best model kept apart, resumable checkpoints, a JSONL log.

A method with a first stage (DiffAug, or any method under a `sup-*` semi-supervised strategy:
`stage1_parameters()`) trains `stage1_steps` steps on NLI batches with its own optimizer over those parameters (lr
`stage1_lr`), then the main stage with the main optimizer over everything; DiffAug's two linear schedules are both
sized to the main stage's length, as the official DiffAug trainer (trainers.py:285-310). The step counter runs over both stages, so evaluation, checkpoints and resume cross the boundary unchanged."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import torch

from ..data import unverified_reads
from ..data.registry import ORDERED_CORPORA
from ..environment import describe, keep_freed_memory
from ..eval.dev import DevEvaluator
from ..eval.prefix_dynamics import snapshot_path
from ..io import (
    acquire_or_wait, ensure_dir, holder_lock, not_a_file, recover_dir, remove, swap_dir, write_json_atomic,
    write_tensors_atomic, write_text_atomic, writing,
)
from ..models import load_model
from ..prompt import Template
from .config import TrainConfig
from .data import Batches, is_nli, load_examples, subsample_examples, tokenize, tokenized_cache_dir
from .export import export_encoder
from .launch import check_processes
from .optim import build_optimizer, set_weight_decay
from .preemption import StopVote
from .presets import official_run, precision_words
from .tracking import RunTrackers


class NonFiniteLoss(RuntimeError):
    """The loss, the weights or the dev score stopped being finite; nothing of that step was saved."""


class RunStateError(ValueError):
    """A run folder's files cannot be resumed from; the message names the file and the fix."""


class TrainingStopped(Exception):
    """A process of the run asked to stop (preemption.stop_after_this_step: a pre-empted job): every process saved
    the checkpoint of the same step and stopped; training it again resumes there."""


#: The state a two-stage method has at the end of its first stage, saved in the run folder.
STAGE1_FILE = "stage1.safetensors"
#: The checkpoint being written beside the last one.
NEW_CHECKPOINT = ".checkpoint.new"
#: Settings that do not change what is trained: a resumed run may differ from its checkpoint in these.
NOT_TRAINING = ("output_dir", "data_dir", "extra", "log_steps", "save_steps", "checkpoint_minutes", "keep_checkpoint",
                "stage1_snapshot_steps", "log_with")


def _mixed_precision(setting: str) -> str:
    if setting == "fp16" and not torch.cuda.is_available():  # Accelerate's fp16 needs an accelerator; the header
        return "no"  # says so (presets.precision_words)
    if setting != "auto":
        return setting
    if not torch.cuda.is_available():
        return "no"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def training_changes(old: dict, new: dict) -> dict:
    """{key: [old, new]} for the settings that change training."""
    return {k: [old.get(k), new.get(k)] for k in sorted(set(old) | set(new))
            if k not in NOT_TRAINING and old.get(k) != new.get(k)}


def _read_json(path: Path, fix: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunStateError(f"{path} is damaged ({e}); {fix}") from None


def _finite_weights(model) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def rank_seed(seed: int, rank: int) -> int:
    """The seed of process `rank`: dropout masks must differ across processes (each sees other sentences, and the
    same mask on every rank would correlate their views); rank 0 keeps the configured seed, so one process is
    unchanged. The batch order is drawn from the configured seed on every rank (see Batches)."""
    return seed + 1000003 * rank


def load_encoder(ref: str, dropout: float | None = None):
    """(tokenizer, encoder) without BERT's next-sentence pooler, as SimCSE and DiffCSE build it."""
    kwargs = {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    try:  # SimCSE/DiffCSE build their encoders without BERT's NSP pooler
        return load_model(ref, add_pooling_layer=False, **kwargs)
    except TypeError:
        return load_model(ref, **kwargs)


def build_objective(cfg: TrainConfig, tokenizer, encoder):
    """The configured method's objective around the encoder: each method builds itself from the config
    (`from_config`), so adding a method touches its own module, the registry and its config fields only."""
    from ..methods import METHODS
    from ..methods.semi import SemiSupervised

    objective = METHODS[cfg.method].from_config(cfg, tokenizer, encoder)
    if cfg.semi_strategy != "none":  # DiffAug Table 6's strategies wrap the method, whichever it is
        objective = SemiSupervised(objective, cfg.semi_strategy, cfg.aux_weight)
    return objective


def linear_schedule(steps: int, warmup: int):
    """The learning-rate factor at step s: linear warm-up over `warmup` steps, then linear decay to 0 at `steps`
    (HF Trainer's linear schedule, which every official code uses)."""
    return lambda s: min(1.0, (s + 1) / warmup) if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup))


def _is_better(new: float, best: float | None) -> bool:
    return math.isfinite(new) and (best is None or new > best)


#: seconds between two of a run's status lines (its step and the time left), the first after its first step
STATUS_SECONDS = 30.0


def duration(seconds: float) -> str:
    """A time as a person reads it: 40 s, 12 min, 3 h 05 min."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def train(cfg: TrainConfig, *, progress: bool = True, resume_with_changes: bool = False,
          announce=partial(print, flush=True), status=None) -> dict:
    """Train (or resume, or return the finished run in cfg.output_dir). Returns the run summary. announce(line)
    takes the header line a run starts with (a notebook's progress stream, not its output). status(line), when
    given, hears where the run is (its step and the time left) after its first step, then every STATUS_SECONDS: the
    progress a notebook's kernel shows, where no progress bar is drawn.

    A run resumes only with the configuration it was started with (what differs is named), unless
    resume_with_changes: then the new settings apply from the checkpoint's step on (lr and weight decay reset
    on the optimizer, the schedule recomputed) and each change is recorded in the summary. One trainer per run
    folder (run_lock): a second one waits for the first and then resumes or returns its run. What the run logs also
    goes to the trackers of cfg.log_with (cse_kit.train.tracking; by default TensorBoard beside log.jsonl)."""
    trackers = RunTrackers(cfg.log_with, announce)  # an unknown tracker is refused before anything loads
    with run_lock(Path(cfg.output_dir)):
        try:
            return _train(cfg, progress=progress, resume_with_changes=resume_with_changes, announce=announce,
                          status=status, trackers=trackers)
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


def _train(cfg: TrainConfig, *, progress: bool, resume_with_changes: bool, announce, status, trackers) -> dict:
    """train() under the run folder's lock."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm import tqdm

    run = Path(cfg.output_dir)
    summary_path = run / "summary.json"
    restart = f"remove {run / 'checkpoint'} to train this run again from step 0"
    if summary_path.is_file():
        summary = _read_json(summary_path, f"remove {summary_path} to finish the run again from its checkpoint")
        changed = training_changes(summary.get("config", {}), cfg.to_dict())
        if changed:
            raise ValueError(f"{run} holds a finished run with a different configuration ({', '.join(changed)} "
                             "differ); choose another output_dir")
        # the same run, found where it now is: a copied or moved folder (or results store) keeps working
        return {**summary, "config": cfg.to_dict(), "model": str(run / "model")}
    checkpoint = recover_dir(run / "checkpoint")
    resumed = (checkpoint / "trainer_state.json").is_file()
    changes = {}
    if resumed and (run / "config.json").is_file():
        changes = training_changes(_read_json(run / "config.json", restart), cfg.to_dict())
        if changes and not resume_with_changes:
            raise ValueError(
                f"{run} holds a checkpoint trained with another configuration: "
                + ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
                + f". Resuming would not train what the new configuration says. Use another output_dir, {restart}, "
                "or resume on purpose with --resume-with-changes (recorded in the summary)")
    if not torch.cuda.is_available():
        keep_freed_memory()
    # cpu=True lets several CPU processes (torchrun) form a gloo group; on GPUs Accelerate picks NCCL
    from accelerate.utils import DistributedDataParallelKwargs

    from ..methods import METHODS

    # a two-stage method leaves parts unused in a stage (DiffAug's classifier in stage 2 without the auxiliary loss)
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)] \
        if hasattr(METHODS[cfg.method], "stage1_parameters") or cfg.semi_strategy != "none" else []
    accelerator = Accelerator(mixed_precision=_mixed_precision(cfg.mixed_precision), cpu=not torch.cuda.is_available(),
                              kwargs_handlers=handlers)
    check_processes(accelerator.num_processes)
    if accelerator.device.type == "cuda":  # the summary's peak is this run's, not what the process held before
        torch.cuda.reset_peak_memory_stats(accelerator.device)
    _reset_peak_rss()
    seed = rank_seed(cfg.seed, accelerator.process_index)
    set_seed(seed)
    tokenizer, encoder = load_encoder(cfg.model, cfg.dropout)
    objective = build_objective(cfg, tokenizer, encoder)
    template = Template(tokenizer, cfg.template) if cfg.template else None
    with accelerator.main_process_first():
        if is_nli(cfg.data):  # a label fraction is of the whole set (then capped), as every use of NLI in the run
            examples = subsample_examples(load_examples(cfg.data, cfg.data_dir), cfg.nli_fraction, cfg.nli_subset)
            examples = examples[:cfg.max_examples] if cfg.max_examples else examples
        else:
            examples = load_examples(cfg.data, cfg.data_dir, cfg.max_examples)
        dataset = tokenize(examples, tokenizer, cfg.max_seq_length, tokenized_cache_dir(cfg.data_dir), template)
        nli = _nli_dataset(cfg, tokenizer, template)
    batches = Batches(dataset, cfg.batch_size, cfg.seed, tokenizer.pad_token_id, accelerator.process_index,
                      accelerator.num_processes, next_sentence=cfg.data in ORDERED_CORPORA,
                      length_buckets=cfg.length_buckets, special_tokens=tokenizer.num_special_tokens_to_add())
    nli_batches = nli and Batches(nli, cfg.nli_batch_size, cfg.seed, tokenizer.pad_token_id,
                                  accelerator.process_index, accelerator.num_processes)
    accumulation = cfg.gradient_accumulation
    main_steps = batches.steps_per_epoch // accumulation * cfg.epochs
    main_steps = min(main_steps, cfg.max_steps) if cfg.max_steps else main_steps
    if not main_steps:
        raise ValueError(f"gradient_accumulation {accumulation} needs more than {batches.steps_per_epoch} batches")
    first_stage = cfg.stage1_steps if hasattr(objective, "stage1_parameters") else 0
    if first_stage > main_steps and not getattr(objective, "stage1_own_schedule", False):
        warnings.warn(f"stage1_steps {first_stage} exceed the main stage's {main_steps} steps: both schedules are "
                      f"sized to the main stage (as the official DiffAug trainer), so stage 1 runs at learning "
                      f"rate 0 after step {main_steps}", stacklevel=2)
    total = first_stage + main_steps
    objective.to(accelerator.device)  # before the optimizer: a fused AdamW needs its parameters on the GPU
    named = [(n, p) for n, p in objective.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    # on CUDA one fused kernel updates every parameter (a step 34 ms instead of 39 on an H100, issue figures)
    fused = accelerator.device.type == "cuda"
    weight_decay = cfg.weight_decay_value()
    optimizer = build_optimizer(named, cfg.optimizer_name(), cfg.lr, weight_decay, fused)
    optimizers = [optimizer]
    if first_stage:
        names = {id(p): n for n, p in objective.named_parameters()}
        optimizers.append(build_optimizer([(names[id(p)], p) for p in objective.stage1_parameters()],
                                          cfg.optimizer_name(), cfg.stage1_lr, weight_decay, fused))
    if cfg.compile:
        objective.encoder.compile()  # in place: state_dict keys and the exported model are unchanged
    # DiffAug's stage 1 decays over the main stage's length (its trainer); a first stage that is a run of its own
    # (the semi-supervised strategies' supervised stage) over its own
    lengths = [main_steps, first_stage if getattr(objective, "stage1_own_schedule", False) else main_steps]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(opt, linear_schedule(length, cfg.warmup_steps))
                  for opt, length in zip(optimizers, lengths)]
    # the schedulers stay unprepared: Accelerate would step them once per process, but batch_size is global here
    objective, *optimizers = accelerator.prepare(objective, *optimizers)
    optimizer, scheduler = optimizers[0], schedulers[0]
    for s in schedulers:
        accelerator.register_for_checkpointing(s)
    unwrapped = accelerator.unwrap_model(objective)
    test_pooler = getattr(unwrapped, "test_pooler", cfg.pooler)
    # the vector that selects the checkpoint: the test vector, unless the objective reads another (PromptBERT's
    # official dev evaluation, ConSERT's dev pooler); ConSERT's code also cuts its test sentences
    test_max_length = getattr(unwrapped, "test_max_length", None)
    dev_pooler, dev_template = unwrapped.dev_reading() if hasattr(unwrapped, "dev_reading") else \
        (getattr(unwrapped, "dev_pooler", test_pooler), cfg.template)
    evaluator = DevEvaluator(tokenizer, dev_pooler, cfg.data_dir, sickr=cfg.metric in ("sickr_spearman", "avg_sts"),
                             transfer=cfg.metric == "transfer_devacc", device=accelerator.device,
                             template=dev_template, max_length=test_max_length)

    state = {"step": 0, "best": None, "best_step": None, "seconds": {"train": 0.0, "eval": 0.0, "checkpoint": 0.0},
             "resumed_with_changes": [], "evaluations_since_best": 0, "stopped_early": False}
    if resumed:
        state = {**state, **_read_json(checkpoint / "trainer_state.json", restart)}
        try:
            accelerator.load_state(str(checkpoint))
        except Exception as e:  # safetensors, torch.load and pickle each raise their own types
            raise RunStateError(f"the checkpoint {checkpoint} cannot be loaded ({type(e).__name__}: {e}); it is "
                                f"truncated or damaged: {restart} (the best model so far, {run / 'model'}, is "
                                "replaced by the new run's)") from None
        if changes:
            for group in optimizer.param_groups:  # the checkpoint restored the old ones
                group.update(initial_lr=cfg.lr)
            set_weight_decay(optimizer, weight_decay)
            scheduler.base_lrs = [cfg.lr] * len(optimizer.param_groups)
            for group, factor in zip(optimizer.param_groups, scheduler.lr_lambdas):
                group["lr"] = cfg.lr * factor(scheduler.last_epoch)
            state["resumed_with_changes"].append({"step": state["step"], "changes": changes})
    log_path = run / "log.jsonl"
    environment = describe(accelerator.device)
    if accelerator.is_main_process:
        run.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run / "config.json", cfg.to_dict())
        write_json_atomic(run / "environment.json", environment)
        _truncate_log(log_path, state["step"], restart)  # drop what was logged after the checkpoint we resume from
    trackers.start(cfg, run, state["step"] if resumed else None, accelerator.is_main_process)

    def log(record):
        if accelerator.is_main_process:
            with writing(log_path), log_path.open("a") as f:  # a torn last line is dropped on resume
                f.write(json.dumps(record) + "\n")
            trackers.log(record)

    def stop(what: str):
        step = checkpoint_step(checkpoint)
        good = (f"The last good checkpoint is {checkpoint} (step {step})" if step is not None
                else "No checkpoint was written yet")
        best = f", the best model {run / 'model'} (step {state['best_step']})" if state["best_step"] else ""
        raise NonFiniteLoss(
            f"{what} at step {state['step']}; training stopped and nothing of this step was saved. {good}{best}. "
            f"Lower lr{', or use bf16 instead of fp16' if accelerator.mixed_precision == 'fp16' else ''}, then start "
            "a new output_dir (or resume with --resume-with-changes).")

    def save_checkpoint():
        if not _finite_weights(objective):
            stop("the weights are not finite")
        t = time.perf_counter()
        tmp = run / NEW_CHECKPOINT
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        accelerator.wait_for_everyone()
        with writing(checkpoint, partial=tmp), _quiet_tied_weights():  # a full disk or Ctrl-C leaves no tmp
            accelerator.save_state(str(tmp))  # every process writes its own RNG states
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            with writing(checkpoint, partial=tmp):
                write_json_atomic(tmp / "trainer_state.json", state)
                swap_dir(tmp, checkpoint)
        accelerator.wait_for_everyone()
        state["seconds"]["checkpoint"] += time.perf_counter() - t

    def checkpoint_due(step: int) -> bool:
        """Every save_steps steps, else every checkpoint_minutes (decided on the main process at log and evaluation
        steps and shared, so every process saves at the same step)."""
        if cfg.save_steps:
            return step % cfg.save_steps == 0
        if step % cfg.log_steps and step % cfg.eval_steps:
            return False
        due = [time.monotonic() - last_save[0] >= 60 * cfg.checkpoint_minutes]
        if accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(due, from_process=0)
        return due[0]

    def evaluation_due(step: int) -> bool:
        """Every eval_steps steps and at the last; with eval_epoch_end, the main stage's eval_steps are counted from
        each epoch's start and each epoch's end is evaluated too (SentenceTransformer.fit)."""
        if step == total:
            return True
        in_stage = step - first_stage
        if not cfg.eval_epoch_end or in_stage <= 0:
            return step % cfg.eval_steps == 0
        in_epoch = in_stage % (batches.steps_per_epoch // accumulation)
        return in_epoch == 0 or in_epoch % cfg.eval_steps == 0

    def snapshot_due(step: int) -> bool:
        """A stage-1 step after which its state is saved: every stage1_snapshot_steps and the last."""
        every = cfg.stage1_snapshot_steps
        return bool(every) and step <= first_stage and (step % every == 0 or step == first_stage)

    def check_loss() -> None:
        """The first non-finite loss is kept on the device and read here, at log, evaluation and checkpoint steps
        only: reading it every step would stall the GPU on every step."""
        bad = int(first_bad)
        if bad >= 0:
            state["step"] = bad
            stop("the loss is not finite (nan or inf)")

    last_save = [time.monotonic()]
    first_bad = torch.full((), -1, dtype=torch.long, device=accelerator.device)
    cuda = accelerator.device.type == "cuda"
    if accelerator.is_main_process:
        announce(_header(cfg, len(dataset), first_stage, main_steps, run, state["step"] if resumed else None,
                         precision_words(cfg, accelerator.mixed_precision)))
        official = official_run(cfg)
        if official:
            announce(official)
    bar = tqdm(total=total, initial=state["step"], disable=not (progress and accelerator.is_main_process),
               desc=cfg.preset or cfg.method, dynamic_ncols=True)
    started, first_step, last_status = time.monotonic(), state["step"], [None]

    def say_where(step: int) -> None:
        now = time.monotonic()
        if status is None or not accelerator.is_main_process or step == total or \
                (last_status[0] is not None and now - last_status[0] < STATUS_SECONDS):
            return
        last_status[0] = now
        stage = f" (stage 1 of {first_stage} steps)" if step <= first_stage else ""
        left = (now - started) / (step - first_step) * (total - step)
        status(f"step {step}/{total}{stage}, about {duration(left)} left")

    last_dev = None
    objective.train()
    stop_vote = StopVote(accelerator.num_processes)
    while state["step"] < total:
        t = time.perf_counter()
        stage = 1 if state["step"] < first_stage else 2
        current = 1 if stage == 1 else 0  # the stage's optimizer and schedule: [main, first stage]
        if first_stage:
            unwrapped.stage = stage
        micro_batches = 1 if stage == 1 else accumulation
        for micro in range(micro_batches):  # gradients of separate losses, averaged (HF Trainer's accumulation)
            batch = _step_batch(batches, nli_batches, state["step"], first_stage, micro, accumulation,
                                with_main=stage == 2, with_nli=stage == 1 or bool(cfg.aux_weight))
            batch = {k: (v.pin_memory() if cuda else v).to(accelerator.device, non_blocking=True)
                     for k, v in batch.items()}
            with accelerator.autocast():
                out = objective(batch)
            loss = out["loss"] / micro_batches
            first_bad.masked_fill_((first_bad < 0) & ~torch.isfinite(loss.detach()), state["step"] + 1)
            accelerator.backward(loss)
        if cfg.max_grad_norm:
            grad_norm = clip_gradients(accelerator.scaler, optimizers[current].optimizer,
                           unwrapped.clipped_parameters() if first_stage else params, cfg.max_grad_norm)
        optimizers[current].step()
        schedulers[current].step()
        objective.zero_grad(set_to_none=True)  # stage 1 leaves the encoder's unused gradients too
        state["step"] += 1
        step = state["step"]
        state["seconds"]["train"] += time.perf_counter() - t
        bar.update(1)
        say_where(step)
        # a snapshot step is logged too, so that every snapshot's interval has a logged loss (Figure 3)
        logged = step % cfg.log_steps == 0 or step == total or snapshot_due(step)
        due = evaluation_due(step)
        if logged or due:
            check_loss()
        if logged:
            record = {"step": step, "lr": schedulers[current].get_last_lr()[0],
                      **({"stage": stage} if first_stage else {}), **{k: float(v.detach()) for k, v in out.items()},
                      **({"grad_norm": float(grad_norm)} if cfg.max_grad_norm else {})}
            log(record)
            bar.set_postfix(loss=f"{record['loss']:.4f}", dev=last_dev)
        if (step == first_stage or snapshot_due(step)) and accelerator.is_main_process:  # DiffAug Figure 3
            stage1_state = unwrapped.stage1_state()
            if snapshot_due(step):
                write_tensors_atomic(snapshot_path(run, step), stage1_state)
            if step == first_stage:  # what the first stage learnt
                write_tensors_atomic(run / STAGE1_FILE, stage1_state)
        if due:
            t = time.perf_counter()
            test_model = _test_model(accelerator.unwrap_model(objective))
            dev = evaluator(test_model)
            state["seconds"]["eval"] += time.perf_counter() - t
            score = dev[cfg.metric]
            if not math.isfinite(score):
                stop(f"the dev {cfg.metric} is {score} (the embeddings are not finite)")
            last_dev = f"{score:.2f}"
            log({"step": step, "dev": dev})
            bar.set_postfix(loss=f"{float(loss.detach()):.4f}", dev=last_dev)
            state["evaluations_since_best"] += 1
            if _is_better(score, state["best"]):
                if not _finite_weights(objective):
                    stop("the weights are not finite")
                state["best"], state["best_step"], state["evaluations_since_best"] = score, step, 0
                if accelerator.is_main_process:
                    export_encoder(test_model, tokenizer, run / "model",
                                   _metadata(cfg, step, dev, test_pooler, test_max_length),
                                   unwrapped.test_reading() if hasattr(unwrapped, "test_reading") else None)
        patience = cfg.early_stopping_patience
        state["stopped_early"] = bool(patience) and step < total and state["evaluations_since_best"] >= patience
        if (step < total and not state["stopped_early"] and checkpoint_due(step)) or \
                ((step == total or state["stopped_early"]) and cfg.keep_checkpoint):
            check_loss()
            save_checkpoint()
            last_save[0] = time.monotonic()
        if state["stopped_early"]:
            break
        if stop_vote.agreed():
            if checkpoint_step(checkpoint) != step:
                check_loss()
                save_checkpoint()
            raise TrainingStopped(f"{run} stopped after step {step} of {total}; its checkpoint resumes there")
        objective.train()
    bar.close()
    summary = {"config": cfg.to_dict(), "steps": state["step"], "best": state["best"], "best_step": state["best_step"],
               "stopped_early": state["stopped_early"],
               "metric": cfg.metric, "model": str(run / "model"), "seconds": state["seconds"],
               "environment": environment, "processes": accelerator.num_processes,
               "mixed_precision": accelerator.mixed_precision,
               "seeds": [rank_seed(cfg.seed, r) for r in range(accelerator.num_processes)],
               "resumed_with_changes": state["resumed_with_changes"], "unverified_data": unverified_reads(),
               **_peak_memory(accelerator)}
    if accelerator.is_main_process:
        write_json_atomic(summary_path, summary)
        if not cfg.keep_checkpoint:  # a finished run needs only its best model (a DiffCSE cpu run's was 611 MB)
            shutil.rmtree(checkpoint, ignore_errors=True)
    accelerator.wait_for_everyone()
    return summary


def _header(cfg: TrainConfig, examples: int, first_stage: int, main_steps: int, run: Path,
            resumed_at: int | None, precision: str) -> str:
    """The one line a run starts with: what trains, on what, how long, in which precision, where, and whether it
    resumes."""
    stages = f"{first_stage} stage-1 + {main_steps} steps" if first_stage else f"{main_steps} steps"
    start = f"resuming at step {resumed_at}" if resumed_at is not None else "fresh"
    return (f"{cfg.method} ({cfg.preset or 'no preset'}, {cfg.profile or 'no'} profile): {cfg.model} on {cfg.data} "
            f"({examples} examples), {stages}, batch {cfg.batch_size}, {precision}; {start}; output {run}")


def _reset_peak_rss() -> None:
    """Start the process's peak resident set size afresh (Linux >= 4.0: VmHWM), so that a run inside a longer
    process (a notebook, a test session) reports its own peak, not the largest of the runs before it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the peak is then the process's since it started
        pass


def _peak_rss_bytes() -> int | None:
    """The process's peak resident set size since _reset_peak_rss (else since it started), or None where the OS
    does not report it."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    if sys.platform == "win32":
        return None
    import resource  # POSIX only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def _peak_memory(accelerator) -> dict:
    """The summary's peak memory, the largest over the processes (bytes, None where not measurable): the GPU memory
    tensors held since the run started or resumed (torch.cuda.max_memory_allocated; the caching allocator's reserve
    and the CUDA context that nvidia-smi adds are not in it) and the peak resident set size."""
    cuda = accelerator.device.type == "cuda"
    gpu = torch.cuda.max_memory_allocated(accelerator.device) if cuda else None
    rss = _peak_rss_bytes()
    unknown = -1  # a tensor holds no None
    peaks = torch.tensor([unknown if v is None else v for v in (gpu, rss)], device=accelerator.device)
    gpu, rss = (None if v == unknown else v for v in accelerator.reduce(peaks, reduction="max").tolist())
    return {"peak_gpu_memory_bytes": gpu, "peak_rss_bytes": rss}


@contextlib.contextmanager
def _quiet_tied_weights():
    """Accelerate warns "Removed shared tensor ... while saving" at every checkpoint of DiffCSE: the generator's
    decoder is tied to its word embeddings, saved once and tied again on load (resume is exact, tested)."""
    notices = logging.getLogger("accelerate.utils.other")
    level = notices.level
    notices.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notices.setLevel(level)


def _test_model(objective):
    """What is evaluated and exported: the objective's test model (e.g. supervised SimCSE's encoder with its MLP as
    the pooler), else its encoder."""
    return objective.test_model()[0] if hasattr(objective, "test_model") else objective.encoder


def _metadata(cfg: TrainConfig, step: int, dev: dict, pooler: str, max_length: int | None) -> dict:
    """cse_kit.json: how the model is evaluated (pooler, template, the length test sentences are cut at) and where
    it comes from."""
    return {"method": cfg.method, "pooler": pooler, "profile": cfg.profile, "preset": cfg.preset,
            "base_model": cfg.model, "step": step, "dev": dev, **({"template": cfg.template} if cfg.template else {}),
            **({"max_length": max_length} if max_length else {})}


def _nli_dataset(cfg: TrainConfig, tokenizer, template):
    """The tokenized NLI triplets of a method's first stage and auxiliary loss, or None when it has neither."""
    if not cfg.nli_data or not (cfg.stage1_steps or cfg.aux_weight):
        return None
    examples = subsample_examples(load_examples(cfg.nli_data, cfg.data_dir), cfg.nli_fraction, cfg.nli_subset)
    return tokenize(examples, tokenizer, cfg.max_seq_length, tokenized_cache_dir(cfg.data_dir), template)


def clip_gradients(scaler, optimizer: torch.optim.Optimizer, parameters, max_norm: float) -> torch.Tensor:
    """Clip `parameters`' gradient norm to max_norm after unscaling the gradients of the optimizer that steps, once.
    Accelerate's clip_grad_norm_ unscales every prepared optimizer: DiffAug's prefixes and classifier are in both
    the main and the first-stage optimizer, so under fp16 their gradients were divided by the loss scale twice
    (2^-16 of their value). Gradients of parameters outside `optimizer` stay scaled, as in the official DiffAug
    stage 1, which unscales its optimizer2 and clips every parameter (trainers.py:615-618)."""
    if scaler is not None:
        scaler.unscale_(optimizer)
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def _step_batch(batches, nli_batches, step: int, first_stage: int, micro: int, accumulation: int, *,
                with_main: bool, with_nli: bool) -> dict:
    """The inputs of one forward: the main data's batch (main stage), NLI triplets as `nli_*` (first stage, and
    each main-stage batch when there is an auxiliary loss). The NLI stream continues across the stage boundary."""
    batch = {}
    main_index = (step - first_stage) * accumulation + micro
    if with_main:
        batch.update(batches(main_index))
    if with_nli:
        nli_index = step if step < first_stage else first_stage + main_index
        batch.update({f"nli_{k}": v for k, v in nli_batches(nli_index).items() if k != "example_index"})
    return batch


def checkpoint_step(checkpoint: Path):
    path = checkpoint / "trainer_state.json"
    return json.loads(path.read_text())["step"] if path.is_file() else None


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
