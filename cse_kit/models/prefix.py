"""Deep prefixes (prefix-tuning, Li & Liang 2021) on a Hugging Face encoder through its public cache API: every
self-attention layer attends [P_k; K] and [P_v; V], the prefix key/values placed in the encoder's key/value cache
and the attention mask extended by the prefix's own columns. No modeling file is copied or patched.

As with the legacy `past_key_values` tuples DiffAug's code passes (transformers 4.15), the encoder shifts the real
tokens' position ids by the prefix length (the cache's length), unless position ids are given."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from torch import nn


class PrefixEncoder(nn.Module):
    """DiffAug's PrefixEncoder (diffaug/models.py:20-48), the prefix_projection form: an embedding of `positions`
    prefix positions through Linear -> Tanh -> Linear to layers x 2 (key, value) x hidden."""

    def __init__(self, positions: int, hidden: int, layers: int):
        super().__init__()
        self.embedding = nn.Embedding(positions, hidden)
        self.projection = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, layers * 2 * hidden))

    @property
    def positions(self) -> int:
        return self.embedding.num_embeddings

    def forward(self) -> torch.Tensor:
        """(positions, layers * 2 * hidden): every position's key and value for every layer."""
        return self.projection(self.embedding.weight)


def _cache_argument(encoder) -> str:
    """transformers renamed `past_key_values` to `cache` (5.x, deprecated alias until 5.40)."""
    return "cache" if "cache" in inspect.signature(encoder.forward).parameters else "past_key_values"


def prefix_cache(table: torch.Tensor, config):
    """A fresh key/value cache holding the prefix: table (batch, P, layers * 2 * hidden) laid out as the official
    get_prompt reads it (models.py:55-63: view (batch, P, 2 * layers, heads, head_dim), layer i's key at 2i, value at
    2i + 1). Fresh per forward: the encoder appends the real tokens' keys to it."""
    from transformers import DynamicCache

    heads = config.num_attention_heads
    batch, positions, _ = table.shape
    kv = table.view(batch, positions, 2 * config.num_hidden_layers, heads, config.hidden_size // heads)
    # (2 * layers) x (batch, heads, P, head_dim); unbind, not kv[i]: the backward of each of 2 * layers index
    # selects would fill a zero tensor the size of the whole table (a CPU step spent 11% of its time there)
    kv = kv.permute(2, 0, 3, 1, 4).unbind(0)
    cache = DynamicCache()
    for layer in range(config.num_hidden_layers):
        cache.update(kv[2 * layer], kv[2 * layer + 1], layer)
    return cache


def prefix_half_mask(prefixes: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """(rows, 2l) attention mask over a table of two prefixes: row i attends prefix prefixes[i] only (0: positions
    0..l-1, θ1; 1: positions l..2l-1, θ2), as DiffAug's official code selects them (diffaug/models.py:194-229)."""
    halves = torch.arange(2 * prefix_len, device=prefixes.device) // prefix_len
    return (halves.unsqueeze(0) == prefixes.unsqueeze(1)).long()


def encode_with_prefix(encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, table: torch.Tensor,
                       prefix_mask: torch.Tensor, position_ids: torch.Tensor | None = None,
                       output_hidden_states: bool = False):
    """The encoder's output with every layer attending the prefix positions that `prefix_mask` (batch, P) keeps."""
    mask = torch.cat([prefix_mask.to(attention_mask.dtype), attention_mask], dim=1)
    return encoder(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                   output_hidden_states=output_hidden_states, return_dict=True,
                   **{_cache_argument(encoder): prefix_cache(table, encoder.config)})


class PrefixedEncoder(nn.Module):
    """An encoder with a fixed prefix table attended by every input at every layer: a trained DiffAug model at test
    time (both prefixes, no dropout). Saved as the plain Hugging Face encoder plus `prefix.safetensors`; the kit's
    model loader puts the two back together."""

    FILE = "prefix.safetensors"

    def __init__(self, encoder: nn.Module, table: torch.Tensor):
        super().__init__()
        self.encoder = encoder
        self.register_buffer("prefix", table.detach().clone())

    @property
    def config(self):
        return self.encoder.config

    @property
    def prefix_length(self) -> int:
        return self.prefix.shape[0]

    def forward(self, input_ids, attention_mask=None, position_ids=None, output_hidden_states=False, **_):
        rows = len(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        ones = torch.ones(rows, self.prefix_length, dtype=attention_mask.dtype, device=attention_mask.device)
        return encode_with_prefix(self.encoder, input_ids, attention_mask, self.prefix.expand(rows, -1, -1), ones,
                                  position_ids, output_hidden_states)

    def save_pretrained(self, out_dir, **kwargs) -> None:
        from safetensors.torch import save_file

        self.encoder.save_pretrained(out_dir, **kwargs)
        save_file({"prefix": self.prefix.contiguous().cpu()}, str(Path(out_dir) / self.FILE))

    @classmethod
    def attach(cls, model_dir, encoder: nn.Module) -> nn.Module:
        """The encoder with the prefix saved beside it (a kit export), or the prefix of an official DiffAug
        checkpoint (its BertForCL weights hold `prefix_encoder.*`), or the encoder itself when there is none."""
        from safetensors.torch import load_file

        path = Path(model_dir) / cls.FILE
        if path.is_file():
            table = load_file(str(path))["prefix"]
        else:
            state = _official_prefix_state(Path(model_dir))
            if not state:
                return encoder
            table = official_prefix_table(state, encoder.config.num_hidden_layers)
        expected = 2 * encoder.config.num_hidden_layers * encoder.config.hidden_size
        if table.ndim != 2 or table.shape[1] != expected:
            raise ValueError(f"{path} holds a prefix of shape {tuple(table.shape)}, not (P, {expected}) for this "
                             f"encoder ({encoder.config.num_hidden_layers} layers x 2 x {encoder.config.hidden_size}): "
                             "it belongs to another model; export the run again")
        return cls(encoder, table.to(next(encoder.parameters()).dtype))


#: The official BertForCL's names (diffaug/models.py:31-37, 143): prefix_encoder.embedding, prefix_encoder.trans1.{0,2}
OFFICIAL_PREFIX = "prefix_encoder."
OFFICIAL_NAMES = {"embedding.weight": "embedding.weight", "trans1.0.weight": "projection.0.weight",
                  "trans1.0.bias": "projection.0.bias", "trans1.2.weight": "projection.2.weight",
                  "trans1.2.bias": "projection.2.bias"}


def _official_prefix_state(model_dir: Path) -> dict[str, torch.Tensor]:
    """The `prefix_encoder.*` tensors of an official DiffAug checkpoint's weights file, or {} (any other model)."""
    safetensors, pickle = model_dir / "model.safetensors", model_dir / "pytorch_model.bin"
    if safetensors.is_file():
        from safetensors import safe_open

        with safe_open(str(safetensors), "pt") as f:
            return {k: f.get_tensor(k) for k in f.keys() if k.startswith(OFFICIAL_PREFIX)}
    if pickle.is_file():
        state = torch.load(pickle, map_location="cpu", weights_only=True, mmap=True)
        return {k: v.clone() for k, v in state.items() if k.startswith(OFFICIAL_PREFIX)}
    return {}


def official_prefix_table(state: dict[str, torch.Tensor], layers: int) -> torch.Tensor:
    """The prefix table a released DiffAug model attends at test time: its PrefixEncoder run once over all its
    positions, without dropout (sentemb_forward's get_prompt in eval mode, models.py:374-379)."""
    names = {k.removeprefix(OFFICIAL_PREFIX): v for k, v in state.items()}
    missing = sorted(set(OFFICIAL_NAMES) - set(names))
    if missing:
        raise ValueError(f"the checkpoint's prefix encoder lacks {', '.join(OFFICIAL_PREFIX + m for m in missing)}: "
                         "it is not DiffAug's prefix_projection PrefixEncoder")
    positions, hidden = names["embedding.weight"].shape
    prefix = PrefixEncoder(positions, hidden, layers)
    prefix.load_state_dict({OFFICIAL_NAMES[k]: names[k].float() for k in OFFICIAL_NAMES})
    with torch.no_grad():
        return prefix()
