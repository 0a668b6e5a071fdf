"""DiffAug's Figure 3 measures (cse_kit.eval.prefix_dynamics) against hand computations on a tiny random BERT, and
the stage-1 snapshots the training loop saves for them."""

import json

import pytest
import torch
from safetensors.torch import load_file

from cse_kit.eval import prefix_dynamics
from cse_kit.eval.prefix_dynamics import (dropout_divergence, representation_divergence, snapshot_path,
                                          stage1_dynamics, weight_convergence)
from cse_kit.models.prefix import encode_with_prefix
from cse_kit.eval.prompt import PROMPTBERT_BERT, Template
from cse_kit.train import build_config, train

SENTENCES = ["A man is playing a guitar.", "Two dogs run through the snow, chasing a red ball!", "The cat sleeps."]
PREFIX_LEN = 3


def _tiny_bert(tokenizer, dropout: float = 0.1):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return BertModel(config, add_pooling_layer=False).eval()


@pytest.fixture(scope="module")
def bert(minilm):
    return minilm[0], _tiny_bert(minilm[0])


@pytest.fixture(scope="module")
def table(bert):
    config = bert[1].config
    return torch.randn(2 * PREFIX_LEN, 2 * config.num_hidden_layers * config.hidden_size,
                       generator=torch.Generator().manual_seed(1))


def _templated(tokenizer, sentence):
    template = Template(tokenizer)
    return torch.tensor([template.wrap_ids(tokenizer(sentence, add_special_tokens=False)["input_ids"])])


def _through_half(model, ids, table, prefix, **kwargs):
    """One sentence through one prefix, given as the l rows alone with positions after the whole table (what the
    measure's masked half of the table amounts to)."""
    half = table[prefix * PREFIX_LEN:(prefix + 1) * PREFIX_LEN]
    positions = torch.arange(2 * PREFIX_LEN, 2 * PREFIX_LEN + ids.shape[1])[None]
    return encode_with_prefix(model, ids, torch.ones_like(ids), half[None], torch.ones(1, PREFIX_LEN), positions,
                              **kwargs)


def test_representation_divergence_is_the_mean_squared_distance_of_the_normalised_mask_states(bert, table):
    tokenizer, model = bert
    expected = []
    for sentence in SENTENCES:
        ids = _templated(tokenizer, sentence)
        at = ids[0].tolist().index(tokenizer.mask_token_id)
        with torch.no_grad():
            u, v = (_through_half(model, ids, table, p).last_hidden_state[0, at] for p in (0, 1))
        expected.append(float(((u / u.norm() - v / v.norm()) ** 2).sum()))
    got = representation_divergence(model, tokenizer, table, PROMPTBERT_BERT, SENTENCES, PREFIX_LEN, batch_size=2)
    assert got == pytest.approx(sum(expected) / len(expected), rel=1e-5) and got > 0
    same = torch.cat([table[:PREFIX_LEN], table[:PREFIX_LEN]])
    assert representation_divergence(model, tokenizer, same, PROMPTBERT_BERT, SENTENCES, PREFIX_LEN) == \
        pytest.approx(0, abs=1e-10)
    with pytest.raises(ValueError, match="prefix_len"):
        representation_divergence(model, tokenizer, table, PROMPTBERT_BERT, SENTENCES, PREFIX_LEN + 1)


def _l21(rows: torch.Tensor) -> float:
    return sum(float(torch.linalg.vector_norm(row)) for row in rows)


def test_weight_convergence_is_eq_7_8_on_keys_and_values_computed_by_hand(bert, table):
    tokenizer, model = bert
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    inputs = {}  # layer -> the hidden states entering it
    hooks = [layer.register_forward_pre_hook(lambda _, args, kwargs, m=m: inputs.__setitem__(
        m, args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
        for m, layer in enumerate(model.encoder.layer)]
    # the cache's layout (official get_prompt): (P, 2 x layers, heads, head_dim), layer m's key 2m, value 2m + 1
    kv = table.view(2 * PREFIX_LEN, 2 * layers, heads, -1).flatten(2)
    kappa = torch.zeros(layers, 2, dtype=torch.float64)
    try:
        for sentence in SENTENCES:
            ids = _templated(tokenizer, sentence)
            for p in (0, 1):
                with torch.no_grad():
                    _through_half(model, ids, table, p)
                rows = slice(p * PREFIX_LEN, (p + 1) * PREFIX_LEN)
                for m in range(layers):
                    attention = model.encoder.layer[m].attention.self
                    with torch.no_grad():
                        keys, values = attention.key(inputs[m][0]), attention.value(inputs[m][0])
                    length = ids.shape[1]
                    kappa[m, 0] += _l21(keys) / length - _l21(kv[rows, 2 * m]) / PREFIX_LEN
                    kappa[m, 1] += _l21(values) / length - _l21(kv[rows, 2 * m + 1]) / PREFIX_LEN
    finally:
        for hook in hooks:
            hook.remove()
    kappa /= 2 * len(SENTENCES)
    got = weight_convergence(model, tokenizer, table, PROMPTBERT_BERT, SENTENCES, PREFIX_LEN, batch_size=2)
    assert got.key == pytest.approx(kappa[:, 0].tolist(), rel=1e-5)
    assert got.value == pytest.approx(kappa[:, 1].tolist(), rel=1e-5)
    assert got.kappa == pytest.approx(float(kappa.sum()) / (2 * layers), rel=1e-5)


def test_dropout_divergence_is_seeded_and_zero_without_dropout(bert, minilm):
    tokenizer, model = bert
    state = torch.get_rng_state()
    first = dropout_divergence(model, tokenizer, PROMPTBERT_BERT, SENTENCES, seed=3)
    assert first > 0 and torch.equal(torch.get_rng_state(), state)  # the caller's random stream is untouched
    assert dropout_divergence(model, tokenizer, PROMPTBERT_BERT, SENTENCES, seed=3) == first
    assert dropout_divergence(model, tokenizer, PROMPTBERT_BERT, SENTENCES, seed=4) != first
    assert not model.training  # the encoder's mode is given back
    no_dropout = _tiny_bert(tokenizer, dropout=0.0)
    assert dropout_divergence(no_dropout, tokenizer, PROMPTBERT_BERT, SENTENCES) == 0


@pytest.fixture(scope="module")
def snapshot_run(data_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("snapshots") / "run"
    cfg = build_config("diffaug-semi-bert", "smoke", {"output_dir": str(run), "data_dir": str(data_dir),
                                                      "stage1_steps": 4, "stage1_snapshot_steps": 2})
    train(cfg, progress=False)
    return run, cfg


def test_stage1_snapshots_are_saved_every_k_steps_and_the_last_is_the_boundary_state(snapshot_run):
    from cse_kit.train.loop import STAGE1_FILE

    run, _ = snapshot_run
    assert sorted(p.name for p in (run / "stage1").glob("step-*")) == ["step-000002.safetensors",
                                                                       "step-000004.safetensors"]
    last, boundary = load_file(str(snapshot_path(run, 4))), load_file(str(run / STAGE1_FILE))
    assert last.keys() == boundary.keys() and all(torch.equal(last[k], boundary[k]) for k in last)
    assert not torch.equal(load_file(str(snapshot_path(run, 2)))["prefix"], last["prefix"])
    with pytest.raises(ValueError, match="stage1_snapshot_steps must be >= 0"):
        build_config("diffaug-semi-bert", "smoke", {"stage1_snapshot_steps": -1})


def test_stage1_dynamics_measures_every_snapshot_once_and_reads_the_cache_back(snapshot_run, monkeypatch):
    from cse_kit.models import load_encoder

    run, cfg = snapshot_run
    tokenizer, encoder = load_encoder(cfg.model, cfg.dropout)
    args = (run, encoder, tokenizer, cfg.template, cfg.prefix_len, SENTENCES)
    result = stage1_dynamics(*args)
    assert [p["step"] for p in result["points"]] == [2, 4]
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    stage1 = {r["step"]: r["loss"] for r in log if r.get("stage") == 1}
    assert [p["loss"] for p in result["points"]] == [stage1[2], stage1[4]]  # smoke logs every 2 steps
    table = load_file(str(snapshot_path(run, 4)))["prefix"]
    last = result["points"][-1]
    assert last["delta"] == representation_divergence(encoder, tokenizer, table, cfg.template, SENTENCES,
                                                      cfg.prefix_len)
    assert last["kappa"] == weight_convergence(encoder, tokenizer, table, cfg.template, SENTENCES,
                                               cfg.prefix_len).kappa
    assert result["dropout_delta"] > 0 and len(last["kappa_key"]) == encoder.config.num_hidden_layers
    assert (run / "stage1" / "dynamics.json").is_file()

    def recomputed(*_, **__):
        raise AssertionError("the cached curve was recomputed")

    for name in ("representation_divergence", "weight_convergence", "dropout_divergence"):
        monkeypatch.setattr(prefix_dynamics, name, recomputed)
    assert stage1_dynamics(*args) == result
    with pytest.raises(ValueError, match="stage1_snapshot_steps=k"):
        stage1_dynamics(run.parent, encoder, tokenizer, cfg.template, cfg.prefix_len, SENTENCES)
