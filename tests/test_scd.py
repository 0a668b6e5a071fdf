"""SCD on tiny BERTs: the loss against its formulas, gradients, the dropout rate each view really gets at every
site (with transformers' default attention, which hands the attention dropout to SDPA), the recipes, and
training on the smoke profile with one and two processes."""

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from transformers import BertConfig, BertModel
from transformers.models.bert.modeling_bert import BertSelfAttention

from cse_kit.methods import SCD
from cse_kit.methods.scd import VARIANTS, SCDProjector
from cse_kit.train import ProfileUnavailable, build_config, train

import kit_process

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "stocks fell sharply on monday",
             "she reads a book in the garden every evening", "two dogs run in the snow", "it rains"]


def _tiny(tokenizer, seed=0, **config):
    torch.manual_seed(seed)
    config = BertConfig(**{"vocab_size": tokenizer.vocab_size, "hidden_size": 32, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "intermediate_size": 64, **config})
    return BertModel(config, add_pooling_layer=False)


def _views(tokenizer, sentences):
    b = tokenizer(sentences, padding=True, return_tensors="pt")
    return {k: v.unsqueeze(1).expand(-1, 2, -1).contiguous() for k, v in b.items()}


@pytest.fixture()
def tok(minilm):
    return minilm[0]


def _formula(model, h_a, h_b, *, temp, weights, lam, reduction="mean"):
    """Paper Eq. 1-2 and 4 with the official code's c: BN is per-feature standardisation over the batch (biased
    variance, eps 1e-5, as BatchNorm1d in training), c_jk = sum_i zA_ij zB_ik / N."""
    n = len(h_a)
    cosines = [float(h_a[i] @ h_b[i] / (h_a[i].norm() * h_b[i].norm())) / temp for i in range(n)]
    self_contrast = sum(cosines) / (n if reduction == "mean" else 1)

    def standardise(p):
        return (p - p.mean(0)) / torch.sqrt(p.var(0, unbiased=False) + 1e-5)

    z_a, z_b = standardise(model.projector(h_a)), standardise(model.projector(h_b))
    c = torch.einsum("ij,ik->jk", z_a, z_b) / n
    diagonal = torch.eye(len(c), dtype=torch.bool)
    decorrelation = float(((1 - c[diagonal]) ** 2).sum() + lam * (c[~diagonal] ** 2).sum())
    return weights[0] * self_contrast + weights[1] * decorrelation, self_contrast, decorrelation


@pytest.mark.parametrize("variant", ["paper", "official-code", "released-checkpoints"])
def test_loss_is_the_formula_for_every_recipe(tok, variant):
    v = VARIANTS[variant]["bert"]
    model = SCD(_tiny(tok), temp=v["scd_temp"], self_contrast_weight=v["scd_self_contrast_weight"],
                decorrelation_weight=v["scd_decorrelation_weight"], lam=v["scd_lambda"],
                reduction=v["scd_reduction"], projector="48-40-24").train()
    torch.manual_seed(1)
    h_a, h_b = torch.randn(8, 32), torch.randn(8, 32)
    out = model.losses(h_a, h_b)
    with torch.no_grad():
        total, self_contrast, decorrelation = _formula(
            model, h_a, h_b, temp=v["scd_temp"], lam=v["scd_lambda"], reduction=v["scd_reduction"],
            weights=(v["scd_self_contrast_weight"], v["scd_decorrelation_weight"]))
    assert float(out["self_contrast"]) == pytest.approx(self_contrast, rel=1e-5)
    assert float(out["decorrelation"]) == pytest.approx(decorrelation, rel=1e-4)
    assert float(out["loss"].detach()) == pytest.approx(total, rel=1e-4)


def test_each_term_alone_is_its_weighted_formula(tok):
    torch.manual_seed(1)
    h_a, h_b = torch.randn(8, 32), torch.randn(8, 32)
    both = SCD(_tiny(tok), projector="48-40-24", decorrelation_weight=0.5).train()
    only_c = SCD(_tiny(tok), projector="48-40-24", decorrelation_weight=0.5, terms="decorrelation").train()
    only_c.projector.load_state_dict(both.projector.state_dict())
    only_s = SCD(_tiny(tok), terms="self_contrast")
    assert not hasattr(only_s, "projector")  # no parameter left without a gradient (DDP would refuse it)
    full = both.losses(h_a, h_b)
    assert float(only_s.losses(h_a, h_b)["loss"]) == pytest.approx(float(full["self_contrast"]), rel=1e-6)
    assert float(only_c.losses(h_a, h_b)["loss"]) == pytest.approx(0.5 * float(full["decorrelation"]), rel=1e-5)


def test_forward_encodes_view_zero_at_each_rate_with_cls_before_pooler(tok):
    """Rates 0 and 0: both views are the encoder's [CLS] of the sentence without dropout, so the loss is the formula
    on it (the reference pass runs the encoder in eval mode: its own dropout rate is 0.1)."""
    model = SCD(_tiny(tok), dropout_low=0.0, dropout_high=0.0, projector="48-40-24").train()
    batch = _views(tok, SENTENCES)
    out = model(batch)
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model.encoder.eval()(**b).last_hidden_state[:, 0]
        total, _, _ = _formula(model, h, h, temp=1.0, weights=(1.0, 0.005), lam=0.013)
    assert float(out["loss"]) == pytest.approx(total, rel=1e-4)
    assert float(out["cosine"]) == pytest.approx(1.0, abs=1e-5)


def test_gradients_reach_encoder_and_projector(tok):
    model = SCD(_tiny(tok), projector="48-40-24", decorrelation_weight=1.0).train()
    model(_views(tok, SENTENCES))["loss"].backward()
    for name in ("encoder.embeddings.word_embeddings.weight", "encoder.encoder.layer.0.attention.self.query.weight",
                 "encoder.encoder.layer.1.output.dense.weight", "projector.0.weight", "projector.6.weight"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_projector_is_the_papers_layer_list():
    p = SCDProjector(768, [4096, 4096, 4096])
    kinds = [type(m).__name__ for m in p]
    assert kinds == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU", "Linear"]
    assert [(m.in_features, m.out_features, m.bias is not None) for m in p if isinstance(m, nn.Linear)] == \
        [(768, 4096, True), (4096, 4096, False), (4096, 4096, False)]
    model = SCD(BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64)), projector="64-64-96")
    assert not model.bn.affine and model.bn.num_features == 96


def test_projector_starts_from_the_official_init(tok):
    """The official cl_init calls init_weights() after building the projector (scd/models.py:110-135, 379): every
    Linear weight N(0, initializer_range), every bias zero, BatchNorm untouched (torch's default was Kaiming-uniform:
    std 0.0208 for the first 4096-wide layer, 0.0090 for the others, biases up to 0.036)."""
    torch.manual_seed(0)
    model = SCD(_tiny(tok, initializer_range=0.05), projector="512-512-512")
    linears = [m for m in model.projector if isinstance(m, nn.Linear)]
    for layer in linears:
        assert abs(float(layer.weight.std()) - 0.05) < 0.002 and abs(float(layer.weight.mean())) < 0.002
    assert linears[0].bias is not None and not linears[0].bias.any()
    for norm in (m for m in model.projector if isinstance(m, nn.BatchNorm1d)):
        assert (norm.weight == 1).all() and not norm.bias.any()


class _DropoutMeter:
    """Fraction of elements each dropout site zeroes, per encoder pass (pass 0 = view A, pass 1 = view B).

    The nn.Dropout sites (embeddings, attention output, feed-forward output) are measured on their own output.
    The attention probabilities are dropped inside the attention kernel (SDPA), where no hook reaches; so the
    value projection is replaced by one-hot vectors (key k -> unit vector k in every head): each head's output
    is then its row of dropped, rescaled attention probabilities, zero exactly where an entry was dropped
    (softmax entries are never zero)."""

    def __init__(self, encoder, length):
        self.passes, self.handles = [], []
        self.handles.append(encoder.register_forward_pre_hook(lambda m, a, k: self.passes.append({}), with_kwargs=True))
        for name, module in encoder.named_modules():
            if isinstance(module, nn.Dropout) and not name.endswith("attention.self.dropout"):
                self.handles.append(module.register_forward_hook(self._site(name)))
            if isinstance(module, BertSelfAttention):
                heads, size = module.num_attention_heads, module.attention_head_size
                assert size >= length, "each head needs one value dimension per key"
                one_hot = torch.zeros(length, heads, size)
                one_hot[torch.arange(length), :, torch.arange(length)] = 1.0
                self.handles.append(module.value.register_forward_hook(
                    lambda m, a, out, v=one_hot.flatten(1): v.expand(out.shape[0], -1, -1)))
                self.handles.append(module.register_forward_hook(self._attention(name, heads, size, length)))

    def _record(self, site, zeroed, total):
        z, t = self.passes[-1].get(site, (0, 0))
        self.passes[-1][site] = (z + zeroed, t + total)

    def _site(self, name):
        kind = "embeddings" if name.startswith("embeddings") else name.split(".")[-2]  # output / attention.output
        kind = "attention output" if ".attention." in name else kind

        def hook(module, args, out):
            live = args[0] != 0
            self._record(kind, int((out[live] == 0).sum()), int(live.sum()))
        return hook

    def _attention(self, name, heads, size, length):
        def hook(module, args, out):
            probs = out[0].view(out[0].shape[0], length, heads, size)[..., :length]  # (batch, query, head, key)
            self._record("attention probabilities", int((probs == 0).sum()), probs.numel())
        return hook

    def rates(self):
        return [{site: z / t for site, (z, t) in p.items()} for p in self.passes]

    def remove(self):
        for h in self.handles:
            h.remove()


@pytest.mark.parametrize("attention", [None, "eager"])
def test_each_view_gets_its_own_rate_at_every_dropout_site(tok, attention):
    """None: transformers' default attention (SDPA here), which takes the attention dropout as a probability."""
    encoder = _tiny(tok, num_hidden_layers=3, **({"attn_implementation": attention} if attention else {}))
    assert encoder.config._attn_implementation == (attention or "sdpa")
    model = SCD(encoder, dropout_low=0.05, dropout_high=0.155, projector="16-16-16").train()
    length = 16
    torch.manual_seed(0)
    ids = torch.randint(1000, 20000, (256, 1, length)).expand(-1, 2, -1).contiguous()
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    meter = _DropoutMeter(encoder, length)
    try:
        with torch.no_grad():
            model(batch)
    finally:
        meter.remove()
    view_a, view_b = meter.rates()
    sites = {"embeddings", "attention probabilities", "attention output", "output"}
    assert set(view_a) == set(view_b) == sites
    for site in sites:
        assert view_a[site] == pytest.approx(0.05, abs=0.01), site
        assert view_b[site] == pytest.approx(0.155, abs=0.01), site
    assert all(m.p == 0.1 for m in encoder.modules() if isinstance(m, nn.Dropout))  # the checkpoint's rates again


def test_models_that_keep_a_dropout_rate_as_a_number_are_refused(tok):
    encoder = _tiny(tok)
    encoder.encoder.layer[0].attention.self.attention_dropout = 0.1
    with pytest.raises(ValueError, match="attention_dropout"):
        SCD(encoder)


def test_recipes_and_presets_carry_their_sources_values():
    paper = build_config("scd-bert", "paper")
    assert (paper.method, paper.lr, paper.batch_size, paper.epochs, paper.pooler, paper.max_seq_length) == \
        ("scd", 3e-5, 192, 1, "cls_before_pooler", 32)
    assert (paper.scd_dropout_low, paper.scd_dropout_high, paper.scd_decorrelation_weight, paper.scd_lambda,
            paper.scd_temp, paper.scd_reduction, paper.scd_projector) == \
        (0.05, 0.15, 0.005, 0.013, 1.0, "mean", "4096-4096-4096")
    assert (paper.metric, paper.eval_steps) == ("sickr_spearman", 250)
    roberta = build_config("scd-roberta", "paper")
    assert (roberta.model, roberta.scd_dropout_low, roberta.scd_dropout_high, roberta.scd_decorrelation_weight,
            roberta.scd_lambda) == ("roberta-base", 0.065, 0.24, 0.0033, 0.028)
    official = build_config("scd-bert-official", "paper")
    assert (official.scd_self_contrast_weight, official.scd_decorrelation_weight, official.scd_lambda,
            official.scd_dropout_low, official.scd_dropout_high, official.scd_temp, official.scd_reduction) == \
        (1.0, 0.005225, 0.012, 0.05, 0.155, 0.05, "mean")
    released = build_config("scd-bert-released", "paper")
    assert (released.scd_decorrelation_weight, released.scd_reduction, released.scd_temp) == (1.05, "sum", 0.05)
    assert build_config("scd-bert", "smoke").scd_projector == "512-512-512"
    assert build_config("scd-bert", "cpu").scd_projector == "4096-4096-4096"
    with pytest.raises(ProfileUnavailable, match="RoBERTa"):
        build_config("scd-roberta", "cpu")


@pytest.mark.parametrize("setting, message", [
    ({"scd_dropout_low": 0.2, "scd_dropout_high": 0.1}, "scd: SCD's dropout rates need 0 <= dropout_low <= "
                                                         "dropout_high"),
    ({"scd_terms": "neither"}, "scd: unknown terms"), ({"scd_reduction": "max"}, "scd: unknown reduction"),
    ({"scd_projector": "4096x4096"}, "joined by '-'"), ({"dropout": 0.1}, "scd.dropout_low / scd.dropout_high"),
    ({"scd_temp": 0.0}, "scd: SCD's temp must be positive")])
def test_bad_scd_settings_fail_clearly(setting, message):
    with pytest.raises(ValueError, match=message):
        build_config("scd-bert", "paper", setting)


@pytest.mark.parametrize("terms", ["self_contrast", "decorrelation"])
def test_table3_single_term_runs_train_on_smoke(terms, data_dir, tmp_path):
    cfg = build_config("scd-bert", "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir),
                                             "scd_terms": terms, "max_steps": 2, "log_steps": 1, "eval_steps": 2})
    summary = train(cfg, progress=False)
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r for r in log if "loss" in r]
    assert summary["steps"] == 2 and len(losses) == 2
    absent = "decorrelation" if terms == "self_contrast" else "self_contrast"
    assert all(terms in r and absent not in r for r in losses)


@pytest.mark.slow  # about a minute: three CLI starts, two of them sharing the CPU
def test_two_processes_compute_the_one_process_loss(data_dir, tmp_path):
    """Dropout 0 in both views makes the run deterministic; the loss (and, from step 2, the gradients) of two
    processes on half batches must equal one process's on the whole batch, BatchNorm statistics included."""
    settings = ["--set", "scd_dropout_low=0", "--set", "scd_dropout_high=0", "--set", "lr=1e-3", "--set",
                "log_steps=1", "--set", "max_steps=3", "--set", "eval_steps=100", "--set", "scd_decorrelation_weight=1"]
    base = ["train", "--preset", "scd-bert", "--profile", "smoke", "--data-dir", str(data_dir), "--no-progress",
            *settings]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one", tmp_path / "two"
    kit_process.run([*base, "--output-dir", str(one)], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                    "29531", "-m", "cse_kit.cli", *base, "--output-dir", str(two)], env=env, check=True,
                   capture_output=True)
    assert json.loads((two / "summary.json").read_text())["processes"] == 2
    logs = [[json.loads(x) for x in (d / "log.jsonl").read_text().splitlines() if '"loss"' in x] for d in (one, two)]
    assert len(logs[0]) == 3
    for key in ("loss", "decorrelation", "off_diagonal"):
        assert [r[key] for r in logs[0]] == pytest.approx([r[key] for r in logs[1]], rel=1e-4), key


class _HashEncoder:
    """A deterministic stand-in encoder: each sentence -> a fixed random 8-d vector of norm ~3 (not normalised)."""

    def encode(self, sentences):
        import zlib

        import numpy as np

        return np.stack([np.random.default_rng(zlib.crc32(s.encode())).normal(size=8) for s in sentences])


def test_sts_filter_geometry_is_the_official_computation(data_dir):
    """sts_filter.py's alignment and uniformity, recomputed here with its own tensor operations (align_loss,
    uniform_loss on ref - random) from the STS-B test pairs with gold >= 4 in SentEval's sorted order."""
    from cse_kit.data import load_sts
    from cse_kit.eval.geometry import sts_filter_align_uniform

    pairs = sorted((p for p in load_sts("STSBenchmark", "test", data_dir) if p.score >= 4.0),
                   key=lambda p: (len(p.sent1.split()), len(p.sent2.split()), p.score))
    enc = _HashEncoder()
    ref, pos = torch.tensor(enc.encode([p.sent1 for p in pairs])), torch.tensor(enc.encode([p.sent2 for p in pairs]))
    random = torch.cat([ref[:128], pos[128:]])
    alignment = (ref - pos).norm(p=2, dim=1).pow(2).mean()
    uniformity = torch.pdist(ref - random, p=2).pow(2).mul(-2).exp().mean().log()
    out = sts_filter_align_uniform(enc, data_dir)
    assert out["n_positive"] == len(pairs) > 128
    assert out["alignment"] == pytest.approx(float(alignment), rel=1e-9)
    assert out["uniformity"] == pytest.approx(float(uniformity), rel=1e-6)
