"""One training step, a unit of its own beside the loop: the loop trains with it, and bench/paper_speed.py and
bench/gpu_check.sh time it, so what is timed is what trains.

- Its shape: how a batch is padded (`pad_to`: resolve_padding, pad_length). Every batch padded to the training data's
  longest row is one shape, so a compiled step compiles once and a captured one (CUDA graphs) replays one graph.
- Its launches: the modules a method names (Objective.compiled_modules: the encoder, by default) compiled in place
  (`compile`: true, or a torch.compile mode; reduce-overhead captures them in CUDA graphs), so that state_dict keys
  and the exported model are unchanged; evaluation and export run them eagerly (eager).
- No host synchronisation: the step's outputs, its gradient norm and the step of the first non-finite loss stay on
  the device; readings() reads them, in one transfer, at the steps that log, evaluate or save. The host part (the
  batch, and what a method draws from it on the host: Objective.host_inputs) is done before the batch moves."""

from __future__ import annotations

import torch

from ..eval.encode import pad_length
from ..methods.grad_cache import average_gradients, backward_with, cached_step
from ..methods.objective import Objective
from .config import CAPTURED
from .optim import stage_gradients


def resolve_padding(setting: str, cuda: bool | None = None) -> str:
    """How a run pads its batches: `auto` is fixed on a GPU (one shape: the compiled, captured step) and longest on a
    CPU (no launch overhead to save there, and every padded position costs its full share)."""
    if setting != "auto":
        return setting
    cuda = torch.cuda.is_available() if cuda is None else cuda
    return "fixed" if cuda else "longest"


#: how each padding pads a run's batches, in the words a run's first lines use
PADDING_WORDS = {"longest": "each batch to its longest row", "fixed": "every batch to the training data's longest row",
                 "buckets": "each batch to the next of 8, 16, 32, ... tokens"}


def padding_line(setting: str, padding: str, fixed_length: int | None) -> str:
    """The line a run names its padding in: what `pad_to` resolved to, and the width of a fixed shape."""
    width = f" ({fixed_length} tokens)" if padding == "fixed" and fixed_length else ""
    asked = f"pad_to={setting} on this machine: " if setting != padding else ""
    return f"padding: {asked}pad_to={padding}, {PADDING_WORDS[padding]}{width}"


#: what torch.compile runs for a mode that captures CUDA graphs (CAPTURED) on a device without CUDA: inductor's
#: cudagraph trees skip every graph not on a CUDA device ("skipping cudagraphs due to cpu device"), so the step is
#: compiled as this mode without CUDA graphs is
WITHOUT_CUDA_GRAPHS = {"reduce-overhead": "compile=true (inductor's default mode)",
                       "max-autotune": "compile=max-autotune-no-cudagraphs"}


def compile_line(mode: bool | str, device_type: str) -> str | None:
    """One line for a mode that captures CUDA graphs asked for on a device without CUDA: what runs instead."""
    if mode not in CAPTURED or device_type == "cuda":
        return None
    return (f"compile={mode} captures the step in CUDA graphs, which need CUDA: on this {device_type} the step runs "
            f"as {WITHOUT_CUDA_GRAPHS[mode]}, nothing captured")


#: the graphs dynamo holds after a stage's first step and after every later step of it (counted over the run: a
#: two-stage method's main stage adds to its first stage's), each method's smoke preset compiled at fixed shapes
#: (pad_to=fixed) in any mode: the modes differ in what compiles a graph, not in what dynamo traces. One graph per
#: compiled module (Objective.compiled_modules: DiffCSE's discriminator, ESimCSE's momentum encoder) and per kind of
#: call of it (SCD's two dropout rates, ConSERT's augmented embeddings). PromptBERT's template denoising and DiffAug's
#: main stage feed a number of rows that varies with the batch: dynamo compiles once more, in the stage's second
#: step, with that size dynamic (automatic dynamic shapes), and never again. tests/test_step.py asserts each exactly.
COMPILED_GRAPHS = {
    "simcse-bert": {2: (1, 1)},
    "diffcse-bert-sts": {2: (2, 2)},
    "scd-bert": {2: (2, 2)},
    "esimcse-bert": {2: (2, 2)},
    "consert-bert": {2: (2, 2)},
    "promptbert-bert": {2: (2, 3)},
    "diffaug-semi-aux-bert": {1: (1, 1), 2: (3, 4)},
}


def graphs_table() -> str:
    """COMPILED_GRAPHS as the markdown table docs/training.md shows."""
    lines = ["| preset | stage | graphs after its first step | after every later step |", "|---|---|---|---|"]
    for preset, stages in COMPILED_GRAPHS.items():
        for stage, (first, later) in stages.items():
            lines.append(f"| {preset} | {'main' if stage == 2 else 'first'} | {first} | {later} |")
    return "\n".join(lines)


def pad_alike(objective, batches) -> None:
    """A method that pads inputs of its own (ESimCSE's x+) pads them as the run's batches are (Objective.padding)."""
    for module in objective.modules():
        if isinstance(module, Objective):
            module.padding = (batches.padding, batches.fixed_length)


def compile_modules(objective, mode: bool | str) -> None:
    """The objective's compiled_modules() compiled in place with torch.compile (mode: true for its default mode, or
    a mode's name). A graph break is allowed (a researcher's module may break; the kit's trace whole:
    tests/test_step.py)."""
    if mode is False:
        return
    kwargs = {} if mode is True else {"mode": mode}
    for module in objective.compiled_modules():
        module.compile(**kwargs)


def eager():
    """A block in which compiled modules run eagerly: evaluation and export, whose shapes differ from the step's (a
    compiled module would compile again for each, a captured one record a graph for each)."""
    return torch.compiler.set_stance("force_eager")


def clip_gradients(scaler, optimizer: torch.optim.Optimizer, parameters, max_norm: float) -> torch.Tensor:
    """Clip `parameters`' gradient norm to max_norm after unscaling the gradients of the optimizer that steps, once.
    Accelerate's clip_grad_norm_ unscales every prepared optimizer: DiffAug's prefixes and classifier are in both
    the main and the first-stage optimizer, so under fp16 their gradients were divided by the loss scale twice
    (2^-16 of their value). Gradients of parameters outside `optimizer` stay scaled, as in the official DiffAug
    stage 1, which unscales its optimizer2 and clips every parameter (trainers.py:615-618). The norm stays on the
    device."""
    if scaler is not None:
        scaler.unscale_(optimizer)
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def optimizer_index(stage: int) -> int:
    """Which optimizer and schedule a stage steps: [main, first stage]."""
    return 1 if stage == 1 else 0


def step_batch(batches, nli_batches, step: int, first_stage: int, micro: int, accumulation: int, *,
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


class TrainStep:
    """The optimizer steps of a run: `step(s)` takes the step after s of the current stage (the gradients of its
    micro-batches' losses, averaged as HF Trainer accumulates, clipped, its optimizer and schedule stepped) and
    returns its stage; nothing in it waits for the device. `objective` is Accelerate's prepared module, `unwrapped`
    its module; optimizers and schedulers are [main, first stage] (optimizer_index)."""

    def __init__(self, cfg, accelerator, objective, unwrapped, params: list, optimizers: list, schedulers: list,
                 batches, nli_batches, first_stage: int):
        self.cfg, self.accelerator, self.objective, self.unwrapped = cfg, accelerator, objective, unwrapped
        self.params, self.optimizers, self.schedulers = params, optimizers, schedulers
        self.batches, self.nli_batches, self.first_stage = batches, nli_batches, first_stage
        device = accelerator.device
        pad_alike(unwrapped, batches)
        self.first_bad = torch.full((), -1, dtype=torch.long, device=device)  # step of the first non-finite loss
        self.grad_norm = None  # the last step's, before clipping (where max_grad_norm clips)
        self.out = {}  # the last forward's outputs
        self.read = None  # readings() of the last step, once read (a step that logs and evaluates reads them once)
        self.captured = cfg.compile in CAPTURED and device.type == "cuda"

    def step(self, step: int) -> int:
        """Step `step` + 1 of the run. Returns its stage (1: a first stage's, 2: the main stage's)."""
        stage = 1 if step < self.first_stage else 2
        current = optimizer_index(stage)
        if self.first_stage:
            self.unwrapped.stage = stage
        micro_batches = 1 if stage == 1 else self.cfg.gradient_accumulation
        cached = stage == 2 and self.cfg.grad_cache > 0
        if self.captured:  # a new iteration: the graphs' outputs of the last step may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with stage_gradients(self.unwrapped, stage, self.params):
            for micro in range(micro_batches):
                batch = self.batch(step, stage, micro)
                out = self.cached_forward_backward(batch, micro_batches) if cached else self.forward(batch)
                loss = out["loss"] / micro_batches
                if not cached:  # a cached step backpropagated its parts itself
                    self.accelerator.backward(loss)
                self.first_bad.masked_fill_((self.first_bad < 0) & ~torch.isfinite(loss.detach()), step + 1)
            if cached:
                average_gradients(self.params)
        if self.cfg.max_grad_norm:
            self.grad_norm = clip_gradients(self.accelerator.scaler, self.optimizers[current].optimizer,
                                            self.unwrapped.clipped_parameters() if self.first_stage else self.params,
                                            self.cfg.max_grad_norm)
        self.optimizers[current].step()
        self.schedulers[current].step()
        self.objective.zero_grad(set_to_none=True)  # stage 1 leaves the encoder's unused gradients too
        self.out, self.read = out, None
        return stage

    def host_batch(self, step: int, stage: int, micro: int) -> dict:
        """The step's micro-th batch on the host, with what the method draws from it there (host_inputs)."""
        batch = step_batch(self.batches, self.nli_batches, step, self.first_stage, micro,
                           self.cfg.gradient_accumulation, with_main=stage == 2,
                           with_nli=stage == 1 or bool(self.cfg.aux_weight))
        return self.unwrapped.host_inputs(batch)

    def batch(self, step: int, stage: int, micro: int) -> dict:
        """The step's micro-th batch, on the device (copied from pinned memory without waiting, on a GPU)."""
        device = self.accelerator.device
        cuda = device.type == "cuda"
        return {k: (v.pin_memory() if cuda else v).to(device, non_blocking=True)
                for k, v in self.host_batch(step, stage, micro).items()}

    def forward(self, batch: dict) -> dict:
        """The objective's outputs on a batch."""
        with self.accelerator.autocast():
            return self.objective(batch)

    def cached_forward_backward(self, batch: dict, micro_batches: int) -> dict:
        """A main-stage batch with gradient caching, `grad_cache` rows at a time: its gradients (1 / micro_batches of
        them, scaled once by the fp16 GradScaler where there is one) accumulated, its outputs returned. It runs on the
        unwrapped objective: DDP reduces only after its own forward, so the step's gradients are averaged over the
        processes after the last micro-batch (average_gradients)."""
        scaler = self.accelerator.scaler
        return cached_step(self.unwrapped, batch, self.cfg.grad_cache,
                           backward_with(scaler.scale if scaler is not None else None, 1 / micro_batches),
                           self.accelerator.autocast)

    def readings(self) -> dict:
        """The last step's outputs and gradient norm as numbers, read from the device in one transfer (at a step that
        logs or evaluates), once a step."""
        if self.read is None:
            self.read = self._read()
        return self.read

    def _read(self) -> dict:
        values = dict(self.out)
        if self.grad_norm is not None:
            values["grad_norm"] = self.grad_norm
        tensors = {k: v for k, v in values.items() if torch.is_tensor(v)}
        numbers = torch.stack([v.detach().float().reshape(()).to(self.first_bad.device)
                               for v in tensors.values()]).tolist() if tensors else []
        return {k: float(v) for k, v in {**values, **dict(zip(tensors, numbers))}.items()}

    def first_non_finite(self) -> int | None:
        """The step of the first non-finite loss so far, or None (read from the device: at log, evaluation and
        checkpoint steps only)."""
        bad = int(self.first_bad)
        return bad if bad >= 0 else None
