"""The base class of every method, the kit's seven and a researcher's own, and the one protocol between a method and
the training loop (each hook declared with its default): the encoder, the training pooler and projector, two-view
batches and the kit's InfoNCE, so an objective is its loss. Subclass it, write `loss` (or `forward`), declare its
hyper-parameters as an `Options` dataclass, and register it (docs/extending.md):

    @register("my-simcse")
    class MySimCSE(Objective):
        def loss(self, z):                       # z: (rows, views, hidden), one vector per view
            return self.info_nce(z[:, 0], z[:, 1])

A method that writes `loss` gets every kit feature, gradient caching included (the encoder runs chunk by chunk,
`loss` on the whole batch's vectors); one that writes `forward(batch)` instead trains uncached. The kit's SimCSE
(cse_kit.methods.simcse) is such a method: its loss is InfoNCE with a third view as hard negatives."""

from __future__ import annotations

import dataclasses
import typing

import torch
import torch.nn.functional as F
from torch import nn

from ..eval.encode import check_pooler, pooled_output
from ..eval.prompt import PromptReading
from .contrastive import cosine_matrix, gather_with_grad, projector_for
from .errors import MethodError

_ID_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def _field_types(options_class: type) -> dict[str, object]:
    hints = typing.get_type_hints(options_class)
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(options_class)}


def _parse_option(method: str, name: str, kind, value):
    """value (a --set string, or a Python value from a notebook) as the option's declared type."""
    allowed = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    base = next((t for t in (bool, int, float, str) if kind is t or t in typing.get_args(kind)), None)
    if type(None) in typing.get_args(kind) and (value is None or (isinstance(value, str) and value.strip().lower()
                                                                   in ("none", "null"))):
        return None
    if base is None:
        return value
    if isinstance(value, str) and base is bool:
        text = value.strip().lower()
        if text in ("true", "false", "1", "0", "yes", "no"):
            return text in ("true", "1", "yes")
    elif isinstance(value, str) and base is not str:
        try:
            return base(value)
        except ValueError:
            pass
    elif isinstance(value, base) and not (base is not bool and isinstance(value, bool)):
        return value
    elif base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise MethodError(f"{method}.{name} takes {allowed[base]}, got {value!r}")


def resolve_options(cls: type, given: dict) -> dict:
    """Every option of method `cls` (its Options dataclass), the given ones parsed and validated over the defaults;
    one line naming the allowed options for an unknown one, and the dataclass's own check's words for a bad value."""
    method, options_class = cls.method or cls.__name__, cls.Options
    if options_class is None:
        if given:
            raise MethodError(f"method {method} takes no options (got {', '.join(given)})" + (
                "; its settings are the configuration's own fields (--set name=value)" if cls.__module__.startswith(
                    "cse_kit.") else ": declare them in an Options dataclass on its class"))
        return {}
    kinds = _field_types(options_class)
    unknown = [name for name in given if name not in kinds]
    if unknown:
        raise MethodError(f"method {method} has no option {unknown[0]!r}; its options are: "
                          f"{', '.join(f'{method}.{name}' for name in kinds)}")
    parsed = {name: _parse_option(method, name, kinds[name], value) for name, value in given.items()}
    try:
        return dataclasses.asdict(options_class(**parsed))
    except (TypeError, ValueError) as error:
        raise MethodError(f"method {method}: {error}") from None


def variant_choices(options, variants: dict, names: dict | None = None) -> dict:
    """The paper-vs-code choices of `options` (an Options with a `variant`): each explicit setting over its variant's
    default. names: {a choice as `variants` names it: its option's name} where they differ."""
    names = names or {}
    return {choice: default if (value := getattr(options, names.get(choice, choice))) is None else value
            for choice, default in variants[options.variant].items()}


def check_choice(name: str, value, choices) -> None:
    """One line naming the allowed values of setting `name` (None: the variant's choice)."""
    if value is not None and value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")


class Objective(nn.Module):
    """A contrastive objective around `encoder` (the plain Hugging Face model that is exported), and the one protocol
    between a method and the training loop: every hook the loop and the results store call is declared here, with
    the default a one-stage method evaluated with its training pooler takes; a method overrides what makes it that
    method. Batches hold input_ids / attention_mask (/ token_type_ids) of shape (rows, views, length): a corpus gives
    each sentence twice (two dropout views), NLI triplets give (anchor, entailment, contradiction). `self.options` is
    the Options dataclass's instance, `self.temp` the run's temperature, `self.pooler` its pooler, `self.projector`
    its training projector (`--set projector=mlp|batchnorm|none`), `self.tokenizer` the model's tokenizer."""

    #: a dataclass of the method's hyper-parameters (defaults and a __post_init__ check), or None
    Options = None
    method = None  # set by @register
    #: the paper the method reproduces or comes from (its title), for the published model card; None: none
    paper: str | None = None
    #: its BibTeX entry, cited on the published model card; None: none
    citation: str | None = None
    #: whether a first stage trains `stage1_parameters()` for `stage1_steps` steps (on NLI batches, at `stage1_lr`,
    #: with an optimizer of its own) before the main stage trains every parameter
    two_stages = False
    #: whether the first stage's linear schedule decays over its own steps (a run of its own, as ConSERT's sup-sbert)
    #: rather than over the main stage's (DiffAug's trainer)
    stage1_own_schedule = False
    #: the stage being trained, 1 or 2 (the main stage): set by the loop before each step of a two-stage method
    stage = 2
    #: the length test and dev sentences are cut at (ConSERT's official evaluation); None: whole, as SentEval
    test_max_length: int | None = None
    #: {a name an option had as a TrainConfig field before it moved into Options: the option}, for the kit's own
    #: methods, so presets, notebooks' parameters, `--set lam=...`, saved run configs and resumes keep working and a
    #: run's identity keeps its key (cse_kit.train.method_settings); an option not named here kept its name
    former_names: dict[str, str] = {}
    #: (how the run pads its batches, the data's longest row or None): what a method that pads inputs of its own
    #: pads them to (cse_kit.eval.encode.pad_length; set by the step, cse_kit.train.step)
    padding: tuple[str, int | None] = ("longest", None)

    @classmethod
    def check_run(cls, cfg) -> None:
        """The method's demands on the run's shared settings (pooler, projector, template, data...): a ValueError of
        one line naming the fix where one is not met. cfg.method_options holds the method's resolved options."""

    @classmethod
    def variant_of(cls, cfg) -> str:
        """The run's paper-vs-code variant: its `variant` option, else "paper" (the kit's protocol)."""
        return cfg.method_options.get("variant", "paper")

    def __init__(self, encoder: nn.Module, *, pooler: str = "cls_before_pooler", projector: str | None = "mlp",
                 temp: float = 0.05, options=None, tokenizer=None):
        """projector None: the method's own heads stand in for a training projector (`project` and the default
        `embed` are then its to write)."""
        super().__init__()
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.pooler = check_pooler(pooler)
        self.temp = temp
        if projector is not None:
            self.projector = projector_for(projector, encoder)
        self.options = options

    @classmethod
    def options_of(cls, cfg):
        """The run's Options instance (its method_options over the defaults), or None for a method without."""
        return cls.Options(**resolve_options(cls, cfg.method_options)) if cls.Options is not None else None

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "Objective":
        return cls(encoder, pooler=cfg.pooler, projector=cfg.projector, temp=cfg.temp, options=cls.options_of(cfg),
                   tokenizer=tokenizer)

    # --- what is evaluated, exported, and selects the checkpoint ---

    @property
    def test_pooler(self) -> str:
        """The pooler the test model is read with (and that cse_kit.json states): the training pooler."""
        return self.pooler

    def test_model(self) -> tuple[nn.Module, str]:
        """(model, pooler) evaluated and exported: the bare encoder with the test pooler."""
        return self.encoder, self.test_pooler

    def test_reading(self) -> PromptReading | None:
        """How a prompt pooler reads the exported model (its cse_kit.json's "prompt", with a trained head's weights
        beside it); None: the run's template as it is."""
        return None

    @property
    def dev_pooler(self) -> str:
        """The pooler of the vector that selects the checkpoint: the test pooler."""
        return self.test_pooler

    def dev_reading(self) -> tuple[str, str | PromptReading | None]:
        """(pooler, template or reading) of the dev vector that selects the checkpoint; a template of None is the
        run's own."""
        return self.dev_pooler, None

    # --- stages, their parameters and schedules ---

    def learning_rates(self) -> dict[str, float]:
        """{parameter name (as named_parameters gives it): its own learning rate} for the method's own trainable
        parts that train at another rate than the run's lr (a learned temperature, say); the main stage's schedule
        scales them too. Every other trainable parameter takes the run's lr."""
        return {}

    def stage1_parameters(self) -> list[nn.Parameter]:
        """What the first stage of a `two_stages` method trains: every parameter."""
        return list(self.parameters())

    def clipped_parameters(self) -> list[nn.Parameter]:
        """Whose gradient norm a step of a `two_stages` method clips to max_grad_norm: every parameter."""
        return list(self.parameters())

    def stage1_state(self) -> dict[str, torch.Tensor]:
        """What a `two_stages` method keeps of its first stage in the run folder (stage1.safetensors, and its
        snapshots), beside the checkpoints: nothing."""
        return {}

    # --- the step (cse_kit.train.step) ---

    def host_inputs(self, batch: dict) -> dict:
        """The batch, on the host before it moves to the device, with what the method draws from its ids there
        (ESimCSE's repetitions: per-sentence Python work that would otherwise wait for the device): nothing."""
        return batch

    def compiled_modules(self) -> list[nn.Module]:
        """What `compile` compiles in place (the run's step: cse_kit.train.step.compile_modules): the encoder."""
        return [self.encoder]

    # --- what a method uses ---

    def pooled(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): every view's pooled encoder output, all views in one pass (each row its own dropout
        mask)."""
        rows, views = batch["input_ids"].shape[:2]
        flat = {k: v.flatten(0, 1) for k, v in batch.items() if k in _ID_KEYS}
        return pooled_output(self.encoder, self.pooler, **flat).view(rows, views, -1)

    def project(self, pooled: torch.Tensor) -> torch.Tensor:
        """The projector over every view at once (BatchNorm's statistics are the whole batch's)."""
        return self.projector(pooled.flatten(0, 1)).view(pooled.shape)

    def embed(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): each view's training sentence vector, the pooled output through the projector
        (what the semi-supervised strategies' NLI head reads, cse_kit.methods.semi)."""
        return self.project(self.pooled(batch))

    @staticmethod
    def gather(x: torch.Tensor) -> torch.Tensor:
        """Every process's rows of x, the gradient flowing back to this process's own (one process: x itself), so a
        loss over them is the global batch's on any number of GPUs."""
        return gather_with_grad(x)

    def info_nce(self, z1: torch.Tensor, z2: torch.Tensor, hard_negatives: torch.Tensor | None = None, *,
                 hard_negative_weight: float = 0.0, queue: torch.Tensor | None = None,
                 temp: float | None = None) -> torch.Tensor:
        """The kit's InfoNCE (SimCSE's loss, and every kit method's that uses it): the mean cross-entropy of
        cos(z1_i, z2_j) / temp over j, labels on the diagonal, every process's rows gathered first (the global
        batch's negatives on any number of GPUs). hard_negatives: a third view's vectors, cos(z1_i, h_j) / temp as
        more columns, each row's own plus `hard_negative_weight` (supervised SimCSE); queue: negatives every row
        shares (ESimCSE's momentum queue), already global and detached, after the in-batch columns; temp: the
        run's unless given."""
        temp = self.temp if temp is None else temp
        z1, z2 = self.gather(z1), self.gather(z2)
        logits = cosine_matrix(z1, z2) / temp
        if hard_negatives is not None:
            negatives = cosine_matrix(z1, self.gather(hard_negatives)) / temp
            negatives = negatives + hard_negative_weight * torch.eye(len(z1), device=z1.device, dtype=negatives.dtype)
            logits = torch.cat([logits, negatives], dim=1)
        if queue is not None:
            logits = torch.cat([logits, cosine_matrix(z1, queue.to(z1.dtype)) / temp], dim=1)
        return F.cross_entropy(logits.float(), torch.arange(len(z1), device=z1.device))

    # --- what a method writes ---

    def loss(self, z: torch.Tensor):
        """The loss of one batch from its vectors z (rows, views, hidden): a tensor, or a dict with "loss" and
        whatever else to log."""
        raise NotImplementedError(f"{type(self).__qualname__} writes neither loss(z) nor forward(batch)")

    def forward(self, batch: dict) -> dict:
        return self._outputs(self.loss(self.embed(batch)))

    @staticmethod
    def _outputs(result) -> dict:
        out = result if isinstance(result, dict) else {"loss": result}
        if "loss" not in out:
            raise MethodError("a method's loss returns a tensor or a dict with 'loss'")
        return {k: (v if k == "loss" else v.detach() if torch.is_tensor(v) else v) for k, v in out.items()}

    # --- gradient caching (cse_kit.methods.grad_cache): the encoder chunk by chunk, the loss on the whole batch. The
    # defaults cache a method that writes `loss`; one that writes `forward` writes these too, or is refused ---

    def cache_refusal(self) -> str | None:
        """Why this method cannot take a cached step (one line), or None."""
        if type(self).loss is Objective.loss and type(self).cache_loss is Objective.cache_loss:
            return f"{self.method} writes forward(batch), not loss(z), so its step cannot be split"
        return None

    def cache_inputs(self, batch: dict) -> dict:
        """{stream: its rows' inputs}: every random draw that is not the encoder's own dropout, made once for the
        whole batch ("shared": what only the loss reads)."""
        return {"main": {k: v for k, v in batch.items() if k in _ID_KEYS}}

    def cache_encode(self, stream: str, inputs: dict) -> torch.Tensor:
        """The per-row part (the encoder) on one chunk of a stream's rows."""
        return self.pooled(inputs)

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        """(what to backpropagate, the step's outputs) from every row's representation (`reps`, by stream)."""
        out = self._outputs(self.loss(self.project(reps["main"])))
        return out["loss"], out
