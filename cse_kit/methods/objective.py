"""The base class of a researcher's own method: the encoder, the training pooler and projector, two-view batches
and the kit's InfoNCE, so an objective is its loss. Subclass it, write `loss` (or `forward`), declare its
hyper-parameters as an `Options` dataclass, and register it (docs/extending.md):

    @register("my-simcse")
    class MySimCSE(Objective):
        def loss(self, z):                       # z: (rows, views, hidden), one vector per view
            return self.info_nce(z[:, 0], z[:, 1])

A method that writes `loss` gets every kit feature, gradient caching included (the encoder runs chunk by chunk,
`loss` on the whole batch's vectors); one that writes `forward(batch)` instead trains uncached."""

from __future__ import annotations

import dataclasses
import typing

import torch
from torch import nn

from ..eval.encode import check_pooler, pool
from .contrastive import gather_with_grad, info_nce, projector_for
from .registry import MethodError

#: the poolers that read more than the last layer (the encoder must return its hidden states)
ALL_LAYER_POOLERS = ("avg_top2", "avg_first_last", "avg_emb_last")
_ID_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def _field_types(options_class: type) -> dict[str, object]:
    hints = typing.get_type_hints(options_class)
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(options_class)}


def _parse_option(method: str, name: str, kind, value):
    """value (a --set string, or a Python value from a notebook) as the option's declared type."""
    allowed = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    base = next((t for t in (bool, int, float, str) if kind is t or t in typing.get_args(kind)), None)
    if value is None and type(None) in typing.get_args(kind):
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
    method = getattr(cls, "method", cls.__name__)
    options_class = getattr(cls, "Options", None)
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


class Objective(nn.Module):
    """A contrastive objective around `encoder` (the plain Hugging Face model that is exported). Batches hold
    input_ids / attention_mask (/ token_type_ids) of shape (rows, views, length): a corpus gives each sentence twice
    (two dropout views), NLI triplets give (anchor, entailment, contradiction). `self.options` is the Options
    dataclass's instance, `self.temp` the run's temperature, `self.pooler` its pooler, `self.projector` its training
    projector (`--set projector=mlp|batchnorm|none`), `self.tokenizer` the model's tokenizer."""

    #: a dataclass of the method's hyper-parameters (defaults and a __post_init__ check), or None
    Options = None
    method = None  # set by @register

    def __init__(self, encoder: nn.Module, *, pooler: str = "cls_before_pooler", projector: str = "mlp",
                 temp: float = 0.05, options=None, tokenizer=None):
        super().__init__()
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.pooler = check_pooler(pooler)
        self.temp = temp
        self.projector = projector_for(projector, encoder)
        self.options = options

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "Objective":
        values = resolve_options(cls, cfg.method_options)
        options = cls.Options(**values) if cls.Options is not None else None
        return cls(encoder, pooler=cfg.pooler, projector=cfg.projector, temp=cfg.temp, options=options,
                   tokenizer=tokenizer)

    def test_model(self) -> tuple[nn.Module, str]:
        """(model, pooler) evaluated and exported: the bare encoder with the training pooler."""
        return self.encoder, self.pooler

    # --- what a method uses ---

    def pooled(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): every view's pooled encoder output, all views in one pass (each row its own dropout
        mask)."""
        rows, views = batch["input_ids"].shape[:2]
        flat = {k: v.flatten(0, 1) for k, v in batch.items() if k in _ID_KEYS}
        outputs = self.encoder(**flat, output_hidden_states=self.pooler in ALL_LAYER_POOLERS)
        return pool(outputs, flat["attention_mask"], self.pooler).view(rows, views, -1)

    def project(self, pooled: torch.Tensor) -> torch.Tensor:
        """The projector over every view at once (BatchNorm's statistics are the whole batch's)."""
        return self.projector(pooled.flatten(0, 1)).view(pooled.shape)

    def embed(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): each view's training vector, the pooled output through the projector."""
        return self.project(self.pooled(batch))

    @staticmethod
    def gather(x: torch.Tensor) -> torch.Tensor:
        """Every process's rows of x, the gradient flowing back to this process's own (one process: x itself), so a
        loss over them is the global batch's on any number of GPUs."""
        return gather_with_grad(x)

    def info_nce(self, z1: torch.Tensor, z2: torch.Tensor, hard_negatives: torch.Tensor | None = None,
                 temp: float | None = None, hard_negative_weight: float = 0.0) -> torch.Tensor:
        """The kit's InfoNCE: cos(z1_i, z2_j) / temp with in-batch negatives gathered across processes, labels on
        the diagonal (SimCSE's loss; hard_negatives: a third view's vectors as extra negatives)."""
        return info_nce(z1, z2, self.temp if temp is None else temp, hard_negatives, hard_negative_weight)

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

    # --- gradient caching (cse_kit.methods.grad_cache): the encoder chunk by chunk, `loss` on the whole batch ---

    def cache_refusal(self) -> str | None:
        if type(self).loss is Objective.loss:
            return f"{self.method} writes forward(batch), not loss(z), so its step cannot be split"
        return None

    def cache_inputs(self, batch: dict) -> dict:
        return {"main": {k: v for k, v in batch.items() if k in _ID_KEYS}}

    def cache_encode(self, stream: str, inputs: dict) -> torch.Tensor:
        return self.pooled(inputs)

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        out = self._outputs(self.loss(self.project(reps["main"])))
        return out["loss"], out
