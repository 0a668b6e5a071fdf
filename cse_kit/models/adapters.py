"""DiffAug's other augmentation modules (Table 3, Appendix F): two sets of Houlsby adapters or of LoRA on one
encoder, one set per view, in place of the two prefixes (cse_kit.models.prefix). The official DiffAug code has only the
prefix; these follow the paper's equations.

Adapters are the kit's own (peft has no bottleneck adapter): forward hooks on the encoder's modules, no modeling
file copied. LoRA is peft's: two named adapters, "view1" and "view2"."""

from __future__ import annotations

import contextlib
import copy
import re
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

#: Where Houlsby et al. insert their adapters (google-research/adapter-bert, modeling.py): after the projection and
#: dropout of the self-attention output and of the FFN, before the residual add and LayerNorm. BERT / RoBERTa names.
ADAPTER_SITES = re.compile(r"(^|\.)layer\.\d+\.(attention\.output|output)\.dropout$")
#: peft's LoRA adapter names of the two views
LORA_VIEWS = ("view1", "view2")


def adapter_sites(encoder: nn.Module) -> list[nn.Module]:
    return [m for name, m in encoder.named_modules() if ADAPTER_SITES.search(name)]


class HoulsbyAdapters(nn.Module):
    """Two sets of bottleneck adapters h <- h + f(h W_down) W_up (DiffAug Eq. 14) at every ADAPTER_SITES module,
    f = GELU, without the biases Houlsby's code adds (Eq. 14 has none), initialised near the identity as Houlsby's
    code (truncated normal, std 1e-3). `use(k)` applies set k (0: view 1's, 1: view 2's); outside it every call
    applies the average of the sets' outputs, the test-time module (one module per view is the training device;
    the average treats the views alike, as the prefix test model attends both prefixes)."""

    FILE = "adapters.safetensors"

    def __init__(self, encoder: nn.Module, rank: int, sets: int = 2, init_std: float = 1e-3):
        super().__init__()
        sites = adapter_sites(encoder)
        if not sites:
            raise ValueError(f"{type(encoder).__name__} has no module named like layer.<i>.attention.output.dropout "
                             "or layer.<i>.output.dropout (BERT / RoBERTa) to put adapters after")
        hidden = encoder.config.hidden_size
        self.down = nn.Parameter(nn.init.trunc_normal_(torch.empty(sets, len(sites), hidden, rank), std=init_std,
                                                       a=-2 * init_std, b=2 * init_std))
        self.up = nn.Parameter(nn.init.trunc_normal_(torch.empty(sets, len(sites), rank, hidden), std=init_std,
                                                     a=-2 * init_std, b=2 * init_std))
        self.active: int | None = None
        for i, site in enumerate(sites):
            site.register_forward_hook(lambda _module, _inputs, h, i=i: self.adapt(i, h))

    def adapt(self, site: int, h: torch.Tensor) -> torch.Tensor:
        down, up = self.down[:, site], self.up[:, site]
        if self.active is not None:
            return h + F.gelu(h @ down[self.active]) @ up[self.active]
        return h + torch.stack([F.gelu(h @ d) @ u for d, u in zip(down, up)]).mean(0)

    @contextlib.contextmanager
    def use(self, k: int):
        self.active = k
        try:
            yield
        finally:
            self.active = None


class AdaptedEncoder(nn.Module):
    """An encoder with trained adapters applied as at test time (their sets' average): a DiffAug adapter model. The
    adapters cannot be merged into the weights (f is not linear), so it is saved as the plain Hugging Face encoder
    plus `adapters.safetensors`; the kit's model loader (cse-kit eval) puts the two back together."""

    def __init__(self, encoder: nn.Module, adapters: HoulsbyAdapters):
        super().__init__()
        self.encoder, self.adapters = encoder, adapters

    @property
    def config(self):
        return self.encoder.config

    def forward(self, *args, **kwargs):
        return self.encoder(*args, **kwargs)

    def save_pretrained(self, out_dir, **kwargs) -> None:
        from safetensors.torch import save_file

        self.encoder.save_pretrained(out_dir, **kwargs)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.adapters.state_dict().items()},
                  str(Path(out_dir) / HoulsbyAdapters.FILE))

    @classmethod
    def attach(cls, model_dir, encoder: nn.Module) -> nn.Module:
        """The encoder with the adapters saved beside it, or the encoder itself when there are none."""
        from safetensors.torch import load_file

        path = Path(model_dir) / HoulsbyAdapters.FILE
        if not path.is_file():
            return encoder
        state = load_file(str(path))
        sets, sites, hidden, rank = state["down"].shape
        expected = (len(adapter_sites(encoder)), encoder.config.hidden_size)
        if (sites, hidden) != expected:
            raise ValueError(f"{path} holds adapters for {sites} sites of width {hidden}, not for this encoder's "
                             f"{expected[0]} of width {expected[1]}: it belongs to another model; export the run again")
        adapters = HoulsbyAdapters(encoder, rank, sets)
        adapters.load_state_dict(state)
        return cls(encoder, adapters.to(next(encoder.parameters()).dtype))


def add_lora_views(encoder: nn.Module, rank: int) -> nn.Module:
    """The encoder as a peft model with one LoRA adapter per view on the query and value projections (Eq. 15), every
    weight trainable (peft freezes the base model; DiffAug's stage 2 trains it)."""
    from peft import LoraConfig, get_peft_model

    # Eq. 15's scale s >= 1 has no value in the paper: lora_alpha = r gives s = alpha / r = 1
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=["query", "value"])
    with warnings.catch_warnings():  # peft reads transformers' deprecated is_gradient_checkpointing: not ours to fix
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")
        model = get_peft_model(encoder, config, adapter_name=LORA_VIEWS[0])
    model.add_adapter(LORA_VIEWS[1], config)
    model.requires_grad_(True)
    return model


@contextlib.contextmanager
def lora_view(model: nn.Module, k: int):
    """View k's LoRA active for the calls inside. peft's set_adapter also freezes the other adapter; both must stay
    trainable, since autograd drops the gradient of a weight frozen between its forward and the backward."""
    model.set_adapter(LORA_VIEWS[k])
    for weight in lora_weights(model).values():
        weight.requires_grad_(True)
    yield


def merged_lora_average(model: nn.Module) -> nn.Module:
    """A plain Hugging Face encoder (a copy) with the average of the two views' LoRA updates merged into its weights:
    W + s (B1 A1 + B2 A2) / 2, exactly (peft's "cat" combination keeps both ranks). Test time treats the views
    alike, as the prefix test model attends both prefixes; the average keeps the update at the scale each view
    trained with, where their sum would double it."""
    merged = copy.deepcopy(model)
    merged.add_weighted_adapter(list(LORA_VIEWS), [0.5, 0.5], "average", combination_type="cat")
    return merged.merge_and_unload(adapter_names=["average"])


def lora_weights(model: nn.Module) -> dict[str, nn.Parameter]:
    """Both views' LoRA matrices by name."""
    return {name: p for name, p in model.named_parameters() if ".lora_A." in name or ".lora_B." in name}
