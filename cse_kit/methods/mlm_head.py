"""`cse-kit fit-mlm-head`: a masked-LM from an encoder-only checkpoint, for DiffCSE's generator where no masked-LM
checkpoint is available (offline, all-MiniLM-L6-v2 ships without its MLM head). The body is frozen and the
decoder tied to the word embeddings; only the head's transform and output bias are fitted, on local text."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..data import load_corpus
from ..io import atomic_dir, write_json_atomic
from ..models import FITTED_MLM, fit_mlm_command, fitted_mlm_dir, load_model, quiet_transformers
from ..progress import Steps, say
from .masking import mlm_corrupt, special_token_ids

#: What the first-use fit of all-MiniLM-L6-v2-mlm costs on the 2-core CPU this kit is developed on (300 steps and two
#: accuracy passes over 1,000 held-out sentences, the body run once per batch without gradients): 238 CPU-seconds
#: (`/usr/bin/time cse-kit fit-mlm-head`, 11 min 39 s of wall time while other jobs loaded the machine 6-fold); the
#: design card's papermill run spent 2 min 21 s of wall time in it
FIRST_USE_COST = "about 4 CPU-minutes, 2 to 3 minutes on an idle 2-core CPU"


def _masked_batch(tokenizer, sentences, ratio, max_length, special_ids, generator):
    b = tokenizer(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    special = torch.isin(b["input_ids"], special_ids) | (b["attention_mask"] == 0)
    corrupted, selected = mlm_corrupt(b["input_ids"], special, ratio, tokenizer.mask_token_id, len(tokenizer),
                                      generator)
    return corrupted, b["attention_mask"], b["input_ids"], selected


def _head_transform(mlm):
    """The MLM head's layers between the body and the (tied) decoder, e.g. BERT's dense + GELU + LayerNorm."""
    decoder = mlm.get_output_embeddings()
    for module in mlm.modules():  # BertLMPredictionHead / RobertaLMHead-like: a transform then the decoder
        if hasattr(module, "transform") and getattr(module, "decoder", None) is decoder:
            return module.transform
    raise ValueError(f"{type(mlm).__name__} has no head transform this tool knows; fit-mlm-head supports BERT")


def masked_token_accuracy(mlm, tokenizer, sentences, *, ratio=0.15, max_length=32, batch_size=64, seed=0) -> float:
    """Top-1 accuracy of predicting the original token at the selected (MLM-corrupted) positions."""
    g = torch.Generator().manual_seed(seed)
    special_ids = special_token_ids(tokenizer)
    right = total = 0
    head_transform = _head_transform(mlm)
    mlm.eval()
    with torch.inference_mode():
        for i in range(0, len(sentences), batch_size):
            ids, mask, original, selected = _masked_batch(tokenizer, sentences[i:i + batch_size], ratio, max_length,
                                                          special_ids, g)
            hidden = mlm.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[selected]
            pred = mlm.get_output_embeddings()(head_transform(hidden)).argmax(-1)
            right += int((pred == original[selected]).sum())
            total += int(selected.sum())
    return 100.0 * right / max(total, 1)


def fit_mlm_head(model: str, output_dir, *, corpus: str = "Wiki1M-sample", data_dir=None, steps: int = 300,
                 batch_size: int = 64, lr: float = 5e-3, ratio: float = 0.15, max_length: int = 32,
                 holdout: int = 1000, seed: int = 0, progress: bool = True) -> dict:
    from transformers import AutoModelForMaskedLM

    tokenizer, base = load_model(model)
    torch.manual_seed(seed)
    mlm = AutoModelForMaskedLM.from_config(base.config)
    missing, _ = mlm.base_model.load_state_dict(base.state_dict(), strict=False)
    if missing:
        raise ValueError(f"{model}'s weights do not fit a masked-LM body (missing {missing[:3]}...)")
    mlm.tie_weights()
    body = set(id(p) for p in mlm.base_model.parameters())
    head = [p for p in mlm.parameters() if id(p) not in body]
    mlm.base_model.requires_grad_(False)
    sentences = load_corpus(corpus, data_dir)
    test, train = sentences[:holdout], sentences[holdout:]
    before = masked_token_accuracy(mlm, tokenizer, test, ratio=ratio, max_length=max_length)
    opt = torch.optim.AdamW(head, lr=lr)
    head_transform = _head_transform(mlm)
    g = torch.Generator().manual_seed(seed)
    special_ids = special_token_ids(tokenizer)
    start = time.perf_counter()
    mlm.train()
    bar = Steps(steps, f"fitting {model}'s MLM head", enabled=progress)
    for step in range(steps):
        rows = torch.randint(len(train), (batch_size,), generator=g).tolist()
        ids, mask, original, selected = _masked_batch(tokenizer, [train[r] for r in rows], ratio, max_length,
                                                      special_ids, g)
        with torch.no_grad():  # the body is frozen: run it once, then the head on the selected positions only
            hidden = mlm.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[selected]
        logits = mlm.get_output_embeddings()(head_transform(hidden))
        loss = torch.nn.functional.cross_entropy(logits, original[selected])
        loss.backward()
        opt.step()
        opt.zero_grad()
        bar.update(1, **({"loss": f"{float(loss.detach()):.3f}"} if (step + 1) % 10 == 0 else {}))
    after = masked_token_accuracy(mlm, tokenizer, test, ratio=ratio, max_length=max_length)
    bar.close(f"masked-token accuracy {after:.1f}% on {len(test)} held-out sentences")
    report = {"base_model": model, "corpus": corpus, "steps": steps, "batch_size": batch_size, "lr": lr,
              "mask_ratio": ratio, "heldout_sentences": len(test), "masked_token_accuracy": after,
              "accuracy_before_fitting": before, "seconds": time.perf_counter() - start,
              "trained": "MLM head transform and output bias; body frozen, decoder tied to the word embeddings"}
    with atomic_dir(output_dir) as tmp, quiet_transformers():
        mlm.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json_atomic(Path(tmp) / "mlm_head.json", report)
    return report


def make_on_first_use(name: str, output_dir: Path, data_dir=None) -> None:
    """Fit the masked-LM `name` of FITTED_MLM into output_dir unless it is there, under a file lock so that
    processes asking at once fit it once (the others wait, then find it)."""
    from filelock import FileLock

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(output_dir.parent / f".{name}.lock"):
        if (output_dir / "config.json").is_file():
            return
        say(f"{name}: not made on this machine yet; fitting it now (once, then cached in {output_dir}; "
            f"{FIRST_USE_COST})")
        # the fit seeds and draws from torch's global generator; a training run asks for its generator after it
        # seeded, so without the fork a run that fits first initialised its new layers from other numbers than a
        # run that finds the fit cached (DiffCSE's cpu profile: STS-B dev 79.830 against 79.815 at step 8)
        with torch.random.fork_rng(devices=[]):
            fit_mlm_head(FITTED_MLM[name], output_dir, data_dir=data_dir)


def load_generator(ref: str, data_dir=None):
    """A masked LM for DiffCSE's generator (or ESimCSE's masked prediction). A FITTED_MLM name (the cpu profile's
    all-MiniLM-L6-v2-mlm) is fitted on first use, then cached."""
    from transformers import AutoModelForMaskedLM

    from ..data import DataError
    from ..models import ModelNotFoundError

    if ref in FITTED_MLM:
        try:
            make_on_first_use(ref, fitted_mlm_dir(ref, data_dir), data_dir)
        except DataError as e:
            raise ModelNotFoundError(f"{ref} is made on first use by `{fit_mlm_command(ref, data_dir)}`, which fits "
                                     f"it on the Wiki1M sample, but: {e}") from None
    return load_model(ref, model_class=AutoModelForMaskedLM, data_dir=data_dir)[1]
