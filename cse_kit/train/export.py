"""The trained encoder as a plain Hugging Face model (+ tokenizer + cse_kit.json saying method, pooler, profile, and
for the prompt poolers how the template is read, with a trained head's weights beside it), and optionally as a
sentence-transformers model whose embeddings equal the kit's."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Mapping
from functools import cached_property
from pathlib import Path

from ..eval.encode import POOLERS
from ..eval.prompt import PROMPT_HEADS, PromptReading
from ..io import atomic_dir, write_json_atomic
from ..models import quiet_transformers, trust_remote_code
from ..models.adapters import HoulsbyAdapters
from ..models.prefix import PrefixedEncoder

METADATA = "cse_kit.json"
PROMPT_HEAD = "prompt_head.safetensors"  # the trained head a PromptReading applies (cse_kit.eval.prompt.PROMPT_HEADS)


class _SentenceTransformersPooling(Mapping):
    """kit pooler -> the sentence-transformers Pooling mode that computes the same vector: the poolers that declare
    one (cse_kit.eval.encode.POOLERS, read as it is now, so a pooler added there is exportable at once)."""

    def __getitem__(self, pooler: str) -> str:
        mode = POOLERS[pooler].st_pooling_mode if pooler in POOLERS else None
        if mode is None:
            raise KeyError(pooler)
        return mode

    def __iter__(self) -> Iterator[str]:
        return (name for name, pooler in POOLERS.items() if pooler.st_pooling_mode is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


ST_POOLING = _SentenceTransformersPooling()


def export_encoder(encoder, tokenizer, out_dir, metadata: dict, prompt: PromptReading | None = None) -> Path:
    """The model directory, written whole or not at all; `prompt` (the prompt poolers' reading) goes into
    cse_kit.json, its head's weights into PROMPT_HEAD."""
    from safetensors.torch import save_file

    with atomic_dir(out_dir) as tmp, quiet_transformers():
        encoder.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if prompt is not None and prompt.head is not None:
            save_file({k: v.detach().contiguous().cpu() for k, v in prompt.head.state_dict().items()},
                      str(tmp / PROMPT_HEAD))
        write_json_atomic(tmp / METADATA, {**metadata, **({"prompt": prompt.describe()} if prompt else {})})
    return Path(out_dir)


def read_metadata(model_dir) -> dict | None:
    path = Path(model_dir) / METADATA
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is damaged ({e}): copy the model folder again (or export the run again)") from None


class ExportSettings:
    """How a model is read, as its cse_kit.json states it (None where it states nothing, or where the model is no kit
    export): `pooler`, the pooler it was trained for; `prompt`, the prompt poolers' reading of the template (read,
    and its trained head loaded, when first asked for); `max_length`, the length its test sentences are cut at.
    `cse-kit eval` and the results store read a model through this alike."""

    def __init__(self, model_dir):
        self.model_dir = Path(model_dir)
        self.metadata = (read_metadata(model_dir) or {}) if self.model_dir.is_dir() else {}

    @property
    def pooler(self) -> str | None:
        return self.metadata.get("pooler")

    @property
    def max_length(self) -> int | None:
        return self.metadata.get("max_length")

    @cached_property
    def prompt(self) -> PromptReading | None:
        """The cse_kit.json's "prompt", with the head saved beside it; an export that states only a template is read
        with the defaults."""
        meta, model_dir = self.metadata, self.model_dir
        if "prompt" not in meta:
            return PromptReading(meta["template"]) if meta.get("template") else None
        settings = dict(meta["prompt"])
        kind = settings.pop("head")
        head = None
        if kind is not None:
            from safetensors.torch import load_file
            from transformers import AutoConfig

            path = model_dir / PROMPT_HEAD
            if not path.is_file():
                raise FileNotFoundError(f"{model_dir}/{METADATA} reads the template through a trained {kind} head, "
                                        f"and {PROMPT_HEAD} is missing: copy the whole model directory, or export "
                                        "the run again")
            head = build_prompt_head(kind, AutoConfig.from_pretrained(model_dir,
                                                                     trust_remote_code=trust_remote_code()))
            head.load_state_dict(load_file(str(path)))
            head.eval()
        return PromptReading(**settings, head=head, head_kind=kind)


def build_prompt_head(kind: str, config):
    """A freshly made head of `kind` (PROMPT_HEADS) for an encoder of `config`, to load saved weights into."""
    if kind == "mlm_transform":
        from transformers.models.bert.modeling_bert import BertPredictionHeadTransform

        return BertPredictionHeadTransform(config)
    if kind == "mlp":
        from ..methods.contrastive import MLPProjector

        return MLPProjector(config.hidden_size)
    raise ValueError(f"unknown prompt head {kind!r}; choose one of: {', '.join(PROMPT_HEADS)}")


def export_sentence_transformers(model_dir, out_dir, pooler: str | None = None) -> Path:
    """A sentence-transformers model of an exported encoder (pooler from its cse_kit.json unless given)."""
    try:
        from sentence_transformers import SentenceTransformer
        try:  # sentence-transformers >= 6 moved the modules
            from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
        except ImportError:
            from sentence_transformers.models import Pooling, Transformer
    except ImportError:
        raise ImportError("sentence-transformers is not installed: pip install -e '.[st]'") from None
    pooler = pooler or (read_metadata(model_dir) or {}).get("pooler")
    if (Path(model_dir) / PrefixedEncoder.FILE).is_file():
        raise ValueError(f"{model_dir} attends a learned prefix at every layer (DiffAug), which sentence-transformers' "
                         "Transformer module cannot pass to the encoder: evaluate it with cse-kit eval")
    if (Path(model_dir) / HoulsbyAdapters.FILE).is_file():
        raise ValueError(f"{model_dir} holds bottleneck adapters (DiffAug Table 3), which sentence-transformers' "
                         "Transformer module does not load: evaluate it with cse-kit eval")
    if pooler not in ST_POOLING:
        raise ValueError(f"pooler {pooler!r} has no sentence-transformers equivalent; exportable: "
                         f"{', '.join(ST_POOLING)}")
    from ..environment import kernel_loading

    # Hub kernels as the kit loads the encoder: its keyword is model_kwargs from sentence-transformers 6, model_args
    # before
    keyword = "model_kwargs" if "model_kwargs" in inspect.signature(Transformer).parameters else "model_args"
    transformer = Transformer(str(model_dir), **{keyword: kernel_loading()})
    dim = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    pooling = Pooling(dim(), pooling_mode=ST_POOLING[pooler])
    with atomic_dir(out_dir) as tmp:
        SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(tmp))
    return Path(out_dir)
