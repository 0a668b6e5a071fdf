"""DiffAug's module-compatibility diagnostics (Wang & Lu, EMNLP 2022, §3.2, Figure 3): how the two prefixes θ1, θ2
that stage 1 learns on the frozen encoder move during stage 1.

* Representation divergence (Eq. 6) δ = E ‖f(x; θ1) − f(x+; θ2)‖², against the same measure for two dropout views
  without prefixes (the SimCSE reference line).
* Weight convergence (Eq. 7-8) κ_k^m = (1/L)‖K_m‖_{2,1} − (1/l)‖P_k^m‖_{2,1}, κ_v^m likewise with values, and
  κ = (1/2M) Σ_m (κ_k^m + κ_v^m), with ‖A‖_{2,1} the sum of A's row norms.

The paper leaves open, and this module chooses:
* x+ = x: each sentence through θ1 and through θ2 (the two views of the method itself), and the dropout reference
  the same sentence encoded twice with the encoder's dropout on and no prefix.
* f is the sentence representation the method trains and tests with, PromptBERT's [MASK] state of the template
  (the sentence filled in by ids, as in training), L2-normalised as in ℓ_align; no template denoising and no MLP
  (both are training-only), the encoder in eval mode (no dropout) for the prefix views.
* A view attends the whole table's 2l positions with the other prefix's l masked out, as in training, so the real
  tokens' positions start after 2l.
* K_m are the layer-m keys of the templated sentence's real tokens (template included, padding excluded), encoded
  through the prefix being measured: the key projection of the layer's input hidden states. Rows are d-dimensional
  (all heads concatenated), as the prefix rows P_k^m, which are read from the table as the encoder's cache reads
  them (cse_kit.models.prefix.prefix_cache). κ is averaged over the sentences and over the two prefixes (each sentence
  through θ1 against rows 0..l-1 of the table, and through θ2 against rows l..2l-1).

Snapshots of stage 1 are written by the training loop (`stage1_snapshot_steps`) as `<run>/stage1/step-<n>.safetensors`;
`stage1_dynamics` measures every one of them and caches the curve beside them."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..io import write_json_atomic
from ..models.prefix import encode_with_prefix, prefix_half_mask
from .encode import pad_ids
from .prompt import Template, mask_states

#: The run's folder of stage-1 snapshots, and the cache of their measures inside it.
SNAPSHOT_DIR = "stage1"
CACHE_FILE = "dynamics.json"
_SNAPSHOT_NAME = re.compile(r"step-(\d{6,})\.safetensors")


def snapshot_path(run_dir, step: int) -> Path:
    """Where the training loop saves the stage-1 state after stage-1 step `step`."""
    return Path(run_dir) / SNAPSHOT_DIR / f"step-{step:06d}.safetensors"


def snapshot_steps(run_dir) -> list[int]:
    """The steps of the run's stage-1 snapshots, in order."""
    folder = Path(run_dir) / SNAPSHOT_DIR
    names = (_SNAPSHOT_NAME.fullmatch(p.name) for p in folder.glob("step-*.safetensors"))
    return sorted(int(m.group(1)) for m in names if m)


# --- the measures ----------------------------------------------------------------------------------------------


def representation_divergence(encoder, tokenizer, table: torch.Tensor, template_text: str, sentences: list[str],
                              prefix_len: int, batch_size: int = 64, max_seq_length: int | None = None) -> float:
    """δ (Eq. 6): the mean over `sentences` of ‖f(x; θ1) − f(x; θ2)‖², f the L2-normalised [MASK] state of the
    template, the encoder in eval mode; θ1 is rows 0..l-1 of the prefix `table` (2l, layers * 2 * hidden), θ2 rows
    l..2l-1. `max_seq_length` truncates each sentence's sub-words before it is filled in (None: whole sentences)."""
    return snapshot_measures(encoder, tokenizer, table, template_text, sentences, prefix_len, batch_size,
                             max_seq_length)[0]


def dropout_divergence(encoder, tokenizer, template_text: str, sentences: list[str], batch_size: int = 64,
                       seed: int = 0, max_seq_length: int | None = None) -> float:
    """The reference line of Figure 3(a): δ between two views of each sentence that differ by the encoder's dropout
    alone (train mode, no prefix), with the same normalised [MASK] representation. The dropout masks are drawn from
    `seed`, in a forked random state: the result is reproducible and the caller's random stream is left as it was.
    With every dropout probability 0 it is 0."""
    template = Template(tokenizer, template_text)
    total = 0.0
    with _mode(encoder, training=True), torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        for ids, mask in _templated_batches(tokenizer, template, sentences, batch_size, max_seq_length,
                                            _device(encoder)):
            first, second = (_plain_view(encoder, template, ids, mask) for _ in range(2))
            total += float(((first - second) ** 2).sum())
    return total / len(sentences)


@dataclass(frozen=True)
class WeightConvergence:
    """κ (Eq. 8) and its parts per layer m: κ_k^m (keys) and κ_v^m (values) (Eq. 7)."""

    kappa: float
    key: list[float]
    value: list[float]


def weight_convergence(encoder, tokenizer, table: torch.Tensor, template_text: str, sentences: list[str],
                       prefix_len: int, batch_size: int = 64, max_seq_length: int | None = None) -> WeightConvergence:
    """κ (Eq. 7-8): per layer m, the mean row norm of the keys K_m of a templated sentence's real tokens, encoded
    through a prefix, minus the mean row norm of that prefix's keys P_k^m; likewise for values; averaged over the
    sentences and the two prefixes (θ1: table rows 0..l-1, θ2: rows l..2l-1), then κ = mean over layers of
    (κ_k^m + κ_v^m) / 2. The encoder is in eval mode. Needs BERT-style layers
    (`encoder.encoder.layer[m].attention.self.key` / `.value`)."""
    return snapshot_measures(encoder, tokenizer, table, template_text, sentences, prefix_len, batch_size,
                             max_seq_length)[1]


def snapshot_measures(encoder, tokenizer, table: torch.Tensor, template_text: str, sentences: list[str],
                      prefix_len: int, batch_size: int = 64,
                      max_seq_length: int | None = None) -> tuple[float, WeightConvergence]:
    """(δ, κ) of one prefix table from one pass of each batch through each prefix: δ reads the pass's last layer at
    [MASK], κ its layers' inputs (half the work of measuring them apart: a snapshot of Figure 3 on the cpu profile
    was two passes of 1,000 sentences through both prefixes)."""
    template = Template(tokenizer, template_text)
    table = _checked_table(encoder, table, prefix_len)
    projections = _key_value_projections(encoder)
    layers, hidden = encoder.config.num_hidden_layers, encoder.config.hidden_size
    token_norms = torch.zeros(layers, 2, dtype=torch.float64)  # (layer, key/value): summed over sentences, prefixes
    divergence = 0.0
    with _mode(encoder, training=False), torch.no_grad():
        for ids, mask in _templated_batches(tokenizer, template, sentences, batch_size, max_seq_length,
                                            _device(encoder)):
            views = []
            for prefix in (0, 1):
                out = encode_with_prefix(encoder, ids, mask, table.expand(len(ids), -1, -1),
                                         _prefix_mask(len(ids), prefix, prefix_len, ids.device),
                                         output_hidden_states=True)
                views.append(_normalised_mask_states(out, ids, template))
                for m, pair in enumerate(projections):  # hidden_states[m] is layer m's input
                    for j, projection in enumerate(pair):
                        norms = _mean_row_norms(projection(out.hidden_states[m]), mask)
                        token_norms[m, j] += norms.sum().double().cpu()
            divergence += float(((views[0] - views[1]) ** 2).sum())
    # the table as the cache reads it: (rows, layers, key/value, hidden), both prefixes' rows weighted alike
    prefix_norms = table.view(2 * prefix_len, layers, 2, hidden).double().norm(dim=-1).mean(0).cpu()
    kappa = token_norms / (2 * len(sentences)) - prefix_norms
    return divergence / len(sentences), WeightConvergence(kappa=float(kappa.mean()), key=kappa[:, 0].tolist(),
                                                          value=kappa[:, 1].tolist())


# --- a run's stage-1 curve -------------------------------------------------------------------------------------


def stage1_dynamics(run_dir, encoder, tokenizer, template_text: str, prefix_len: int, sentences: list[str],
                    batch_size: int = 64, seed: int = 0, max_seq_length: int | None = None) -> dict:
    """Figure 3's curves for one run: {"points": [{"step", "delta", "kappa", "kappa_key", "kappa_value", "loss"}
    per stage-1 snapshot], "dropout_delta": the dropout reference}. `encoder` is the run's base encoder (stage 1
    leaves it as it was). `loss` is the mean of the stage-1 losses log.jsonl holds for the steps after the previous
    snapshot up to this one (the loop logs every log_steps and at every snapshot; exact with log_steps=1), None when
    it holds none. The result is cached in `<run>/stage1/dynamics.json` under a digest of the sentences, the
    settings, the encoder's config and the snapshots' content, so a second call reads it back."""
    run = Path(run_dir)
    steps = snapshot_steps(run)
    if not steps:
        raise ValueError(f"{run / SNAPSHOT_DIR} holds no stage-1 snapshots: train the run with "
                         "stage1_snapshot_steps=k (k > 0) to save one every k stage-1 steps")
    settings = {"sentences": list(sentences), "template": template_text, "prefix_len": prefix_len, "seed": seed,
                "max_seq_length": max_seq_length, "encoder": encoder.config.to_dict()}
    key = _digest(settings, [snapshot_path(run, step) for step in steps])
    cache_path = run / SNAPSHOT_DIR / CACHE_FILE
    cache = _read_cache(cache_path)
    if key in cache:
        return cache[key]
    from safetensors.torch import load_file

    measure = dict(encoder=encoder, tokenizer=tokenizer, template_text=template_text, sentences=sentences,
                   batch_size=batch_size, max_seq_length=max_seq_length)
    points = []
    for step, loss in zip(steps, interval_losses(run / "log.jsonl", steps)):
        table = load_file(str(snapshot_path(run, step)))["prefix"]
        delta, convergence = snapshot_measures(table=table, prefix_len=prefix_len, **measure)
        points.append({"step": step, "delta": delta, "kappa": convergence.kappa, "kappa_key": convergence.key,
                       "kappa_value": convergence.value, "loss": loss})
    result = {"points": points, "dropout_delta": dropout_divergence(seed=seed, **measure)}
    write_json_atomic(cache_path, {**cache, key: result})
    return result


def interval_losses(log_path, steps: list[int]) -> list[float | None]:
    """For each snapshot step, the mean of the stage-1 losses logged at the steps after the previous snapshot up to
    it (None where none was logged)."""
    log_path = Path(log_path)
    lines = log_path.read_text().splitlines() if log_path.is_file() else []
    logged = [(r["step"], r["loss"]) for r in map(json.loads, filter(None, lines))
              if r.get("stage") == 1 and "loss" in r]
    means = []
    for previous, step in zip([0, *steps], steps):
        window = [loss for at, loss in logged if previous < at <= step]
        means.append(sum(window) / len(window) if window else None)
    return means


# --- helpers ---------------------------------------------------------------------------------------------------


def _device(encoder) -> torch.device:
    return next(encoder.parameters()).device


@contextmanager
def _mode(module, training: bool):
    """The module in train or eval mode for the block, then back in the mode it had."""
    was = module.training
    module.train(training)
    try:
        yield
    finally:
        module.train(was)


def _checked_table(encoder, table: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """The prefix table on the encoder's device and dtype, once its shape is that of two prefixes of prefix_len."""
    config = encoder.config
    expected = (2 * prefix_len, 2 * config.num_hidden_layers * config.hidden_size)
    if tuple(table.shape) != expected:
        raise ValueError(f"the prefix table has shape {tuple(table.shape)}, not {expected} (2 x prefix_len "
                         f"{prefix_len} rows, layers x key/value x hidden columns): pass the stage-1 state's "
                         "'prefix' of a run of this encoder, with the run's prefix_len")
    return table.to(_device(encoder), next(encoder.parameters()).dtype)


def _templated_batches(tokenizer, template: Template, sentences: list[str], batch_size: int,
                       max_seq_length: int | None, device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(input_ids, attention_mask) of the sentences filled into the template by ids, right-padded per batch."""
    if not sentences:
        raise ValueError("no sentences to measure: pass a fixed sample (e.g. STS-B dev sentences)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(sentences), batch_size):
        sub_words = tokenizer(list(sentences[start:start + batch_size]), add_special_tokens=False)["input_ids"]
        ids, mask = pad_ids([template.wrap_ids(ids[:max_seq_length]) for ids in sub_words], tokenizer.pad_token_id)
        yield ids.to(device), mask.to(device)


def _prefix_mask(rows: int, prefix: int, prefix_len: int, device) -> torch.Tensor:
    """(rows, 2l): every row through prefix 0 (θ1: table rows 0..l-1) or 1 (θ2: rows l..2l-1)."""
    return prefix_half_mask(torch.full((rows,), prefix, device=device), prefix_len)


def _normalised_mask_states(out, ids, template: Template) -> torch.Tensor:
    return F.normalize(mask_states(out.last_hidden_state, ids, template.mask_token_id).float(), dim=-1)


def _plain_view(encoder, template: Template, ids, mask) -> torch.Tensor:
    return _normalised_mask_states(encoder(input_ids=ids, attention_mask=mask, return_dict=True), ids, template)


def _key_value_projections(encoder) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """Each layer's key and value Linear (BERT and RoBERTa: encoder.encoder.layer[m].attention.self)."""
    try:
        return [(layer.attention.self.key, layer.attention.self.value) for layer in encoder.encoder.layer]
    except AttributeError:
        raise ValueError(f"weight_convergence reads BERT-style layers (encoder.encoder.layer[m].attention.self.key "
                         f"and .value), which {type(encoder).__name__} lacks: pass the bare encoder (e.g. BertModel, "
                         "RobertaModel), not a wrapper") from None


def _mean_row_norms(rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(batch,): (1/L) ‖A‖_{2,1} of each sentence's rows (batch, length, d), over its L real tokens."""
    norms = rows.float().norm(dim=-1) * mask
    return norms.sum(1) / mask.sum(1)


def _digest(settings: dict, files: list[Path]) -> str:
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def _read_cache(path: Path) -> dict:
    """The cached curves, or {} when there are none or the file is damaged (they are recomputed)."""
    try:
        cache = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return cache if isinstance(cache, dict) else {}
