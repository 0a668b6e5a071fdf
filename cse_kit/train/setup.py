"""A run's set-up, in public: everything a run trains with, built from its TrainConfig (set_up_run) by the loop, and
its parts as the bench and the plan need them: the objective (build_objective), Accelerate (run_accelerator), the
data (training_data), the stages' steps (stage_steps), the optimizers and their schedules (optimization), the dev
evaluation (dev_evaluation).

A method with a first stage (DiffAug, or any method under a `sup-*` semi-supervised strategy: `two_stages`) trains
`stage1_steps` steps with its own optimizer over `stage1_parameters()` (lr `stage1_lr`), then the main stage with the
main optimizer over everything; DiffAug's two linear schedules are both sized to the main stage's length, as the
official DiffAug trainer (trainers.py:285-310)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ..data.registry import ORDERED_CORPORA
from ..environment import keep_freed_memory
from ..eval.dev import DevEvaluator
from ..eval.prompt import Template
from ..methods.grad_cache import refusal
from ..models import load_encoder
from .config import TrainConfig
from .data import Batches, is_nli, load_examples, subsample_examples, tokenize, tokenized_cache_dir
from .launch import check_processes
from .memory import reset_peak_rss
from .optim import build_optimizer, fused_update
from .precision import build_accelerator
from .step import compile_modules, resolve_padding


def rank_seed(seed: int, rank: int) -> int:
    """The seed of process `rank`: dropout masks must differ across processes (each sees other sentences, and the
    same mask on every rank would correlate their views); rank 0 keeps the configured seed, so one process is
    unchanged. The batch order is drawn from the configured seed on every rank (see Batches)."""
    return seed + 1000003 * rank


def build_objective(cfg: TrainConfig, tokenizer, encoder):
    """The configured method's objective around the encoder: each method builds itself from the config
    (`from_config`), so a method is its own module, registered by name (cse_kit.methods.registry)."""
    from ..methods.registry import method_class
    from ..methods.semi import SemiSupervised

    objective = method_class(cfg.method).from_config(cfg, tokenizer, encoder)
    if cfg.semi_strategy != "none":  # DiffAug Table 6's strategies wrap the method, whichever it is
        objective = SemiSupervised(objective, cfg.semi_strategy, cfg.aux_weight)
    reason = refusal(objective) if cfg.grad_cache else None
    if reason:
        raise ValueError(reason)
    return objective


def linear_schedule(steps: int, warmup: int):
    """The learning-rate factor at step s: linear warm-up over `warmup` steps, then linear decay to 0 at `steps`
    (HF Trainer's linear schedule, which every official code uses)."""
    return lambda s: min(1.0, (s + 1) / warmup) if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup))


def run_accelerator(cfg: TrainConfig):
    """Accelerate for this run (one CPU, one GPU or the processes `accelerate launch` started), with the run's peak
    memory counted from here."""
    from accelerate.utils import DistributedDataParallelKwargs

    from ..methods.registry import method_class

    if not torch.cuda.is_available():
        keep_freed_memory()
    # a two-stage method leaves parts unused in a stage (DiffAug's classifier in stage 2 without the auxiliary loss)
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)] \
        if method_class(cfg.method).two_stages or cfg.semi_strategy != "none" else []
    accelerator = build_accelerator(cfg.mixed_precision, kwargs_handlers=handlers)
    check_processes(accelerator.num_processes)
    if accelerator.device.type == "cuda":  # the summary's peak is this run's, not what the process held before
        torch.cuda.reset_peak_memory_stats(accelerator.device)
    reset_peak_rss()
    return accelerator


def training_data(cfg: TrainConfig, tokenizer, accelerator):
    """(the number of training examples, their batches, the NLI batches of a first stage or an auxiliary loss or
    None), tokenized by the main process first (the others then read its cache)."""
    template = Template(tokenizer, cfg.template) if cfg.template else None
    with accelerator.main_process_first():
        if is_nli(cfg.data):  # a label fraction is of the whole set (then capped), as every use of NLI in the run
            examples = subsample_examples(load_examples(cfg.data, cfg.data_dir), cfg.nli_fraction, cfg.nli_subset)
            examples = examples[:cfg.max_examples] if cfg.max_examples else examples
        else:
            examples = load_examples(cfg.data, cfg.data_dir, cfg.max_examples)
        dataset = tokenize(examples, tokenizer, cfg.max_seq_length, tokenized_cache_dir(cfg.data_dir), template)
        nli = _nli_dataset(cfg, tokenizer, template)
    padding = resolve_padding(cfg.pad_to, accelerator.device.type == "cuda")
    batches = Batches(dataset, cfg.batch_size, cfg.seed, tokenizer.pad_token_id, accelerator.process_index,
                      accelerator.num_processes, next_sentence=cfg.data in ORDERED_CORPORA,
                      length_buckets=cfg.length_buckets, special_tokens=tokenizer.num_special_tokens_to_add(),
                      padding=padding)
    nli_batches = nli and Batches(nli, cfg.nli_batch_size, cfg.seed, tokenizer.pad_token_id,
                                  accelerator.process_index, accelerator.num_processes, padding=padding)
    return len(dataset), batches, nli_batches


def _nli_dataset(cfg: TrainConfig, tokenizer, template):
    """The tokenized NLI triplets of a method's first stage and auxiliary loss, or None when it has neither."""
    if not cfg.nli_data or not (cfg.stage1_steps or cfg.aux_weight):
        return None
    examples = subsample_examples(load_examples(cfg.nli_data, cfg.data_dir), cfg.nli_fraction, cfg.nli_subset)
    return tokenize(examples, tokenizer, cfg.max_seq_length, tokenized_cache_dir(cfg.data_dir), template)


def main_stage_steps(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """The main stage's optimizer steps over epochs of `steps_per_epoch` batches (capped at max_steps)."""
    main_steps = steps_per_epoch // cfg.gradient_accumulation * cfg.epochs
    return min(main_steps, cfg.max_steps) if cfg.max_steps else main_steps


def stage_steps(cfg: TrainConfig, steps_per_epoch: int, stages) -> tuple[int, int]:
    """(the first stage's steps, 0 for a method without one; the main stage's steps) of a run over epochs of
    `steps_per_epoch` batches. stages: the objective, or anything that says as it does whether the method has a
    first stage (`two_stages`) and whether that stage has a schedule of its own (`stage1_own_schedule`)."""
    main_steps = main_stage_steps(cfg, steps_per_epoch)
    if not main_steps:
        raise ValueError(f"gradient_accumulation {cfg.gradient_accumulation} needs more than {steps_per_epoch} "
                         "batches")
    first_stage = cfg.stage1_steps if stages.two_stages else 0
    if first_stage > main_steps and not stages.stage1_own_schedule:
        warnings.warn(f"stage1_steps {first_stage} exceed the main stage's {main_steps} steps: both schedules are "
                      f"sized to the main stage (as the official DiffAug trainer), so stage 1 runs at learning "
                      f"rate 0 after step {main_steps}", stacklevel=4)
    return first_stage, main_steps


@dataclass
class Optimization:
    """What steps a run: the objective prepared by Accelerate (`unwrapped` its module), the trained parameters, the
    optimizers and their schedules (index 0 the main stage's, 1 the first stage's: step.optimizer_index)."""

    objective: Any
    unwrapped: Any
    params: list
    optimizers: list
    schedulers: list


def optimization(cfg: TrainConfig, objective, accelerator, first_stage: int, main_steps: int) -> Optimization:
    """The optimizers and schedules of a run of `first_stage` + `main_steps` steps, the objective and optimizers
    prepared by Accelerate. The objective moves to the device first: a fused AdamW needs its parameters on the
    GPU."""
    device = accelerator.device
    objective.to(device)
    named = [(n, p) for n, p in objective.named_parameters() if p.requires_grad]
    # one fused kernel updates every parameter on CUDA (a step 34 ms instead of 39 on an H100, issue figures) and
    # in a bf16 run on a CPU
    fused = fused_update(device.type, accelerator.mixed_precision)
    weight_decay = cfg.weight_decay_value()
    optimizers = [_main_optimizer(cfg, objective, named, weight_decay, fused)]
    if first_stage:
        names = {id(p): n for n, p in objective.named_parameters()}
        optimizers.append(build_optimizer([(names[id(p)], p) for p in objective.stage1_parameters()],
                                          cfg.optimizer_name(), cfg.stage1_lr, weight_decay, fused))
    compile_modules(objective, cfg.compile)  # in place: state_dict keys and the exported model are unchanged
    # DiffAug's stage 1 decays over the main stage's length (its trainer); a first stage that is a run of its own
    # (the semi-supervised strategies' supervised stage) over its own
    lengths = [main_steps, first_stage if objective.stage1_own_schedule else main_steps]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(opt, linear_schedule(length, cfg.warmup_steps))
                  for opt, length in zip(optimizers, lengths)]
    # the schedulers stay unprepared: Accelerate would step them once per process, but batch_size is global here
    prepared, *optimizers = accelerator.prepare(objective, *optimizers)
    return Optimization(prepared, accelerator.unwrap_model(prepared), [p for _, p in named], optimizers, schedulers)


def _main_optimizer(cfg: TrainConfig, objective, named: list, weight_decay: float, fused: bool):
    """The main stage's optimizer: the run's lr, and a group of its own (marked `own_lr`, which a resume with
    changes keeps) for each parameter the method trains at a learning rate of its own (`learning_rates`)."""
    own = objective.learning_rates()
    unknown = sorted(set(own) - {n for n, _ in named})
    if unknown:
        raise ValueError(f"method {cfg.method} gives a learning rate of its own to {', '.join(unknown)}, which "
                         "is no trainable parameter's name (named_parameters)")
    optimizer = build_optimizer([(n, p) for n, p in named if n not in own], cfg.optimizer_name(), cfg.lr,
                                weight_decay, fused)
    for name, parameter in named:
        if name in own:
            optimizer.add_param_group({"params": [parameter], "lr": own[name], "own_lr": own[name],
                                       "weight_decay": weight_decay, "decay": True})
    return optimizer


def dev_evaluation(cfg: TrainConfig, tokenizer, objective, device) -> tuple[DevEvaluator, str, int | None]:
    """(the dev evaluator that selects the checkpoint, the test pooler, the length test sentences are cut at). The
    dev vector is the test vector, unless the objective reads another (PromptBERT's official dev evaluation,
    ConSERT's dev pooler); ConSERT's code also cuts its test sentences."""
    dev_pooler, dev_template = objective.dev_reading()
    evaluator = DevEvaluator(tokenizer, dev_pooler, cfg.data_dir, sickr=cfg.metric in ("sickr_spearman", "avg_sts"),
                             transfer=cfg.metric == "transfer_devacc", device=device,
                             template=cfg.template if dev_template is None else dev_template,
                             max_length=objective.test_max_length, dev_data=cfg.dev_data)
    return evaluator, objective.test_pooler, objective.test_max_length


@dataclass
class RunSetup:
    """Everything a run trains with: its configuration, Accelerate, the tokenizer, the data (`examples` of them in
    `batches`; the NLI batches of a first stage or an auxiliary loss), the stages' steps, what steps it
    (Optimization's fields) and the dev evaluation."""

    objective: Any
    unwrapped: Any
    params: list
    optimizers: list
    schedulers: list
    cfg: TrainConfig
    accelerator: Any
    tokenizer: Any
    examples: int
    batches: Batches
    nli_batches: Batches | None
    first_stage: int
    main_steps: int
    evaluator: DevEvaluator
    test_pooler: str
    test_max_length: int | None

    @property
    def total(self) -> int:
        return self.first_stage + self.main_steps


def set_up_run(cfg: TrainConfig) -> RunSetup:
    """Everything the run of `cfg` trains with, built in the order its random numbers are drawn in (a resumed run
    restores them from its checkpoint)."""
    from accelerate.utils import set_seed

    accelerator = run_accelerator(cfg)
    set_seed(rank_seed(cfg.seed, accelerator.process_index))
    tokenizer, encoder = load_encoder(cfg.model, cfg.dropout)
    objective = build_objective(cfg, tokenizer, encoder)
    examples, batches, nli_batches = training_data(cfg, tokenizer, accelerator)
    first_stage, main_steps = stage_steps(cfg, batches.steps_per_epoch, objective)
    optimized = optimization(cfg, objective, accelerator, first_stage, main_steps)
    evaluator, test_pooler, test_max_length = dev_evaluation(cfg, tokenizer, optimized.unwrapped, accelerator.device)
    return RunSetup(**vars(optimized), cfg=cfg, accelerator=accelerator, tokenizer=tokenizer, examples=examples,
                    batches=batches, nli_batches=nli_batches, first_stage=first_stage, main_steps=main_steps,
                    evaluator=evaluator, test_pooler=test_pooler, test_max_length=test_max_length)
