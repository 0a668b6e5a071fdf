"""ConSERT in the kit. Every preset trains on the smoke profile. Each augmentation is checked on a tiny model: shuffle
moves the positions only, the cutoffs zero the right rows and columns at the stated rate, and without augmentation or
dropout the two views are identical. Settings that cannot work are refused. The loss's equality with the official
code's computation is tested in tests/test_consert_official.py."""

import json

import numpy as np
import pytest
import torch

from cse_kit.methods.consert import ConSERT, View, pick, random_order
from cse_kit.methods.semi import SemiSupervised
from cse_kit.models import build_smoke_model
from cse_kit.train import PRESETS, build_config, train

CONSERT_PRESETS = [p for p, (_, s) in PRESETS.items() if s["method"] == "consert"]
SENTENCES = ["A man is playing a guitar.", "Two dogs run through the deep snow, chasing a small red ball!",
             "The cat sleeps.", "Rain.", "She said no twice and left the room without a word."]


def _cfg(data_dir, tmp_path, preset, **changes):
    return build_config(preset, "smoke", {"output_dir": str(tmp_path / "run"), "data_dir": str(data_dir), **changes})


@pytest.mark.parametrize("preset", CONSERT_PRESETS)
def test_every_consert_preset_trains_on_the_smoke_profile(preset, data_dir, tmp_path):
    cfg = _cfg(data_dir, tmp_path, preset)
    summary = train(cfg, progress=False)
    run = tmp_path / "run"
    assert summary["steps"] == 128 // 16 and np.isfinite(summary["best"])
    steps = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "loss" in r]
    supervised = cfg.consert_supervision != "none"
    assert steps and all(np.isfinite(r["loss"]) and r["contrastive"] > 0 for r in steps)
    assert all(("softmax" in r) == supervised for r in steps)
    meta = json.loads((run / "model" / "cse_kit.json").read_text())
    assert (meta["method"], meta["pooler"], meta["preset"]) == ("consert", "avg_top2", preset)


# --------------------------------------------------------------------------------------------------------------
# the augmentations, on a tiny model
# --------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    tokenizer, encoder = build_smoke_model("smoke-bert")
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    return tokenizer, encoder.eval(), batch["input_ids"], batch["attention_mask"]


def _layer_input(kit, view):
    """What the first transformer layer receives: the embedding output as the view left it."""
    seen = []
    hook = kit.encoder.encoder.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        with torch.no_grad():
            kit.encode(view)
    finally:
        hook.remove()
    return seen[0]


def _plain(kit, ids, mask):
    return _layer_input(kit, View(ids, mask, mask))


def test_shuffle_permutes_the_real_positions_only_and_equals_reordering_the_tokens(tiny):
    tokenizer, encoder, ids, mask = tiny
    kit = ConSERT(encoder)
    torch.manual_seed(0)
    view = kit.draw_view("shuffle", 0.0, ids, mask)
    assert view.input_ids is ids and view.attention_mask is mask and view.cut is None
    length = ids.shape[1]
    moved = 0
    with torch.no_grad():
        vectors = kit.encode(view)
    for i, n in enumerate(mask.sum(1).tolist()):
        positions = view.position_ids[i]
        assert sorted(positions[:n].tolist()) == list(range(n))  # [CLS] and [SEP] included, as the official code
        assert positions[n:].tolist() == list(range(n, length))  # padding keeps its positions
        moved += positions[:n].tolist() != list(range(n))
        # token j at position p_j is the sentence with its tokens reordered so that token j sits at p_j
        reordered = torch.empty(n, dtype=torch.long)
        reordered[positions[:n]] = ids[i, :n]
        with torch.no_grad():
            expected = encoder(input_ids=reordered[None]).last_hidden_state[0].mean(0)
        torch.testing.assert_close(vectors[i], expected, atol=1e-5, rtol=1e-5)
    assert moved >= 3


def test_shuffle_of_roberta_permutes_its_own_positions_or_the_official_arange():
    tokenizer, encoder = build_smoke_model("smoke-roberta")
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    pad = encoder.embeddings.padding_idx
    for choice, first in (("model", pad + 1), ("from_zero", 0)):
        torch.manual_seed(0)
        view = ConSERT(encoder, shuffle_positions=choice).draw_view("shuffle", 0.0, ids, mask)
        for i, n in enumerate(mask.sum(1).tolist()):
            assert sorted(view.position_ids[i, :n].tolist()) == list(range(first, first + n))
            rest = view.position_ids[i, n:].tolist()
            assert rest == ([pad] * len(rest) if choice == "model" else list(range(n, ids.shape[1])))


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.5])
def test_token_cutoff_zeroes_int_n_rate_real_token_rows(tiny, rate):
    tokenizer, encoder, ids, mask = tiny
    kit = ConSERT(encoder)
    plain = _plain(kit, ids, mask)
    got = _layer_input(kit, kit.draw_view("token_cutoff", rate, ids, mask))
    for i, n in enumerate(mask.sum(1).tolist()):
        zero = (got[i] == 0).all(-1)
        assert int(zero.sum()) == int(n * rate) and not zero[n:].any()
        torch.testing.assert_close(got[i][~zero], plain[i][~zero], rtol=0, atol=0)


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.5])
def test_feature_cutoff_zeroes_int_d_rate_columns_at_every_position(tiny, rate):
    tokenizer, encoder, ids, mask = tiny
    kit = ConSERT(encoder)
    hidden = encoder.config.hidden_size
    plain = _plain(kit, ids, mask)
    got = _layer_input(kit, kit.draw_view("feature_cutoff", rate, ids, mask))
    columns = []
    for i in range(len(ids)):
        zero = (got[i] == 0).all(0)
        assert int(zero.sum()) == int(hidden * rate)
        torch.testing.assert_close(got[i][:, ~zero], plain[i][:, ~zero], rtol=0, atol=0)
        columns.append(tuple(torch.nonzero(zero).flatten().tolist()))
    assert len(set(columns)) > 1  # drawn per sentence


def test_dropout_augmentation_zeroes_real_token_elements_exactly_or_at_the_rate(tiny):
    tokenizer, encoder, ids, mask = tiny
    hidden = encoder.config.hidden_size
    kit = ConSERT(encoder, dropout_aug="exact")
    plain = _plain(kit, ids, mask)
    got = _layer_input(kit, kit.draw_view("dropout", 0.3, ids, mask))
    for i, n in enumerate(mask.sum(1).tolist()):
        zero = got[i] == 0
        assert int(zero.sum()) == int(n * hidden * 0.3) and not zero[n:].any()
        torch.testing.assert_close(got[i][~zero], plain[i][~zero], rtol=0, atol=0)  # not rescaled
    # bernoulli: every real element on its own, with probability 0.3 (many rows: the count is near 30%)
    many_ids, many_mask = ids.repeat(40, 1), mask.repeat(40, 1)
    kit = ConSERT(encoder, dropout_aug="bernoulli")
    cut = kit.draw_view("dropout", 0.3, many_ids, many_mask).cut
    real = many_mask.bool().unsqueeze(-1).expand_as(cut)
    assert not cut[~real].any() and abs(cut[real].float().mean().item() - 0.3) < 0.01
    assert len({int(c.sum()) for c in cut}) > 1


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_span_keeps_a_contiguous_span_and_pools_over_the_whole_sentence(tiny, rate):
    tokenizer, encoder, ids, mask = tiny
    kit = ConSERT(encoder)
    torch.manual_seed(1)
    view = kit.draw_view("span", rate, ids, mask)
    assert view.pool_mask is mask and view.position_ids is None and view.cut is None
    for i, n in enumerate(mask.sum(1).tolist()):
        kept = torch.nonzero(view.attention_mask[i]).flatten().tolist()
        assert len(kept) == max(int(n * (1 - rate)), 1) and kept == list(range(kept[0], kept[0] + len(kept)))
        assert kept[-1] < n
        outside = torch.ones(ids.shape[1], dtype=torch.bool)
        outside[kept] = False
        assert (view.input_ids[i][outside] == 0).all() and (view.input_ids[i][kept] == ids[i][kept]).all()
    with torch.no_grad():
        hidden = encoder(input_ids=view.input_ids, attention_mask=view.attention_mask).last_hidden_state
        torch.testing.assert_close(kit.encode(view), (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))


def test_draws_are_uniform_over_the_real_positions():
    torch.manual_seed(0)
    valid = torch.zeros(4000, 12, dtype=torch.bool)
    valid[:, :10] = True
    chosen = pick(valid, torch.full((4000,), 3)).float()
    assert not chosen[:, 10:].any() and (chosen.sum(1) == 3).all()
    assert (chosen[:, :10].mean(0) - 0.3).abs().max() < 0.03
    first = random_order(valid)[:, 0]
    assert torch.bincount(first, minlength=12)[10:].sum() == 0
    assert (torch.bincount(first, minlength=10)[:10].float() / 4000 - 0.1).abs().max() < 0.02


def test_without_augmentation_or_dropout_the_two_views_are_identical(tiny):
    tokenizer, _, ids, mask = tiny
    batch = {"input_ids": torch.stack([ids, ids], 1), "attention_mask": torch.stack([mask, mask], 1)}
    _, quiet = build_smoke_model("smoke-bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    kit = ConSERT(quiet, augmentations=(("none", 0.0), ("none", 0.0))).train()
    z1, z2 = kit.encode(View(ids, mask, mask)), kit.encode(View(ids, mask, mask))
    assert torch.equal(z1, z2)
    # each row's positive has cosine 1; its negatives are the other rows of both views: the official sum of the
    # two directions, times cl_rate 0.15 (unsup_scale scaled)
    h = torch.nn.functional.normalize(z1.detach(), dim=-1)
    cos = h @ h.T / kit.temp
    off = ~torch.eye(len(h), dtype=torch.bool)
    expected = 2 * (torch.logsumexp(torch.cat([cos, cos.masked_fill(~off, float("-inf"))], 1), 1) - 1 / kit.temp).mean()
    out = kit(batch)
    torch.testing.assert_close(out["contrastive"], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["loss"].detach(), 0.15 * expected, atol=1e-5, rtol=1e-5)
    # with the checkpoint's dropout (0.1) in train mode the two passes differ
    _, noisy = build_smoke_model("smoke-bert")
    noisy_kit = ConSERT(noisy).train()
    assert not torch.equal(noisy_kit.encode(View(ids, mask, mask)), noisy_kit.encode(View(ids, mask, mask)))


def test_the_adversarial_view_moves_each_token_by_noise_norm(tiny):
    tokenizer, encoder, ids, mask = tiny
    kit = ConSERT(encoder, supervision="joint", augmentations=(("none", 0.0), ("adversarial", 0.0)), noise_norm=0.5)
    flat_ids, flat_mask = ids[:3].repeat_interleave(3, 0), mask[:3].repeat_interleave(3, 0)  # 3 triplets
    flat_ids[1::3], flat_mask[1::3] = ids[3:4].expand(3, -1), mask[3:4].expand(3, -1)
    plain = View(flat_ids, flat_mask, flat_mask)
    kept = []
    loss = kit.nli_loss(kit.encode(plain, kept).view(3, 3, -1))
    moved = kit.adversarial_view(plain, kept[0], loss).embeddings - kept[0]
    norms = moved.norm(dim=-1)[flat_mask.bool()]
    torch.testing.assert_close(norms, torch.full_like(norms, 0.5))


def test_the_training_vectors_are_the_unaugmented_ones(tiny):
    tokenizer, encoder, ids, mask = tiny
    kit = ConSERT(encoder, augmentations=(("token_cutoff", 0.5), ("shuffle", 0.0)))
    with torch.no_grad():
        got = kit.embed({"input_ids": torch.stack([ids, ids.flip(0)], 1),
                         "attention_mask": torch.stack([mask, mask.flip(0)], 1)})
        hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    assert got.shape == (len(ids), 2, encoder.config.hidden_size)
    torch.testing.assert_close(got[:, 0], mean)
    torch.testing.assert_close(got[:, 1], mean.flip(0))
    # the semi-supervised strategies' NLI head reads them (cse_kit.methods.semi)
    semi = SemiSupervised(kit, "joint", alpha=0.1)
    batch = {"input_ids": torch.stack([ids, ids], 1), "attention_mask": torch.stack([mask, mask], 1),
             "nli_input_ids": torch.stack([ids, ids.flip(0), ids.roll(1, 0)], 1),
             "nli_attention_mask": torch.stack([mask, mask.flip(0), mask.roll(1, 0)], 1)}
    out = semi(batch)
    assert {"loss", "contrastive", "nli"} <= set(out) and torch.isfinite(out["loss"])


@pytest.mark.parametrize("changes, message", [
    ({"consert_aug2": "adversarial"}, "set supervision=joint"),
    ({"consert_aug1": "token_cutoff", "consert_rate1": 0.0}, "a rate in \\(0, 1\\)"),
    ({"consert_rate2": 0.1}, "no rate"),
    ({"consert_aug1": "crop"}, "consert: unknown aug1"),
    ({"projector": "mlp"}, "no projector"),
    ({"data": "SNLI-triplets"}, "NLI triplets with sbert or joint"),
    ({"consert_variant": "released"}, "consert: unknown variant"),
    ({"consert_dropout_aug": "gaussian"}, "consert: unknown dropout_aug"),
    ({"consert_test_pooler": "prompt_mask"}, "consert: unknown test_pooler"),
])
def test_settings_that_cannot_work_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        build_config("consert-bert", "smoke", changes)


def test_the_variants_set_the_five_choices_and_each_can_be_set_alone():
    official = build_config("consert-bert", "paper")
    tokenizer, encoder = build_smoke_model("smoke-bert")
    kit = ConSERT.from_config(official, tokenizer, encoder)
    assert (kit.cl_reduction, kit.unsup_scale, kit.dropout_aug, kit.shuffle_positions) == \
        ("sum", "scaled", "exact", "from_zero")
    assert kit.augmentations == (("feature_cutoff", 0.2), ("shuffle", 0.0)) and kit.temp == 0.1
    paper = ConSERT.from_config(build_config("consert-bert", "paper", ["consert_variant=paper",
                                                                        "consert_cl_reduction=sum"]), tokenizer, encoder)
    assert (paper.cl_reduction, paper.unsup_scale, paper.nli_features, paper.dropout_aug, paper.shuffle_positions) == \
        ("sum", "plain", "sbert", "bernoulli", "model")
    sup = build_config("consert-sup-bert", "paper")
    assert (sup.data, sup.batch_size, sup.lr, sup.consert_supervision, sup.consert_aug2, sup.consert_rate2) == \
        ("NLI", 48, 2e-5, "joint", "token_cutoff", 0.1)
    assert ConSERT.from_config(sup, tokenizer, encoder).classifier.in_features == 4 * encoder.config.hidden_size
