"""What the objectives compute, on tiny BERTs with dropout off."""

import math

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

from cse_kit.methods import BatchNormProjector, DiffCSE, SimCSE, mlm_corrupt

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "stocks fell sharply on monday",
             "she reads a book in the garden every evening"]


def _tiny(tokenizer, cls=BertModel, seed=0, **kw):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return cls(config, **kw)


def _views(tokenizer, sentences, views=2):
    b = tokenizer(sentences, padding=True, return_tensors="pt")
    return {k: v.unsqueeze(1).expand(-1, views, -1).contiguous() for k, v in b.items()}


@pytest.fixture()
def tok(minilm):
    return minilm[0]


def test_simcse_loss_is_the_infonce_formula(tok):
    model = SimCSE(_tiny(tok, add_pooling_layer=False), temp=0.05)
    batch = _views(tok, SENTENCES)
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    b2 = tok(SENTENCES[::-1], padding=True, return_tensors="pt")  # a second view that differs
    batch = {k: torch.stack([b[k], b2[k].flip(0)], 1) for k in b}
    loss = model(batch)["loss"]
    h1 = model.projector(model.encoder(**b).last_hidden_state[:, 0])
    h2 = model.projector(model.encoder(**{k: v.flip(0) for k, v in b2.items()}).last_hidden_state[:, 0])
    total = 0.0
    for i in range(len(SENTENCES)):
        sims = [float(torch.cosine_similarity(h1[i], h2[j], dim=0).detach()) / 0.05 for j in range(len(SENTENCES))]
        total += -sims[i] + math.log(sum(math.exp(s) for s in sims))
    assert float(loss) == pytest.approx(total / len(SENTENCES), rel=1e-4)


def test_supervised_simcse_adds_hard_negatives_to_the_denominator(tok):
    model = SimCSE(_tiny(tok, add_pooling_layer=False), temp=0.05)
    a, p, n = SENTENCES, SENTENCES[1:] + SENTENCES[:1], SENTENCES[2:] + SENTENCES[:2]
    enc = [tok(x, padding="max_length", max_length=16, return_tensors="pt") for x in (a, p, n)]
    batch = {k: torch.stack([e[k] for e in enc], 1) for k in enc[0]}
    with torch.no_grad():
        z = [model.projector(model.encoder(**e).last_hidden_state[:, 0]) for e in enc]
    total = 0.0
    for i in range(len(a)):
        pos = [float(torch.cosine_similarity(z[0][i], z[1][j], dim=0)) / 0.05 for j in range(len(a))]
        neg = [float(torch.cosine_similarity(z[0][i], z[2][j], dim=0)) / 0.05 for j in range(len(a))]
        total += -pos[i] + math.log(sum(math.exp(s) for s in pos + neg))
    assert float(model(batch)["loss"]) == pytest.approx(total / len(a), rel=1e-4)


def test_supervised_simcse_adds_the_hard_negative_weight_to_each_rows_own_contradiction(tok):
    """hard_negative_weight w goes to cos(z1_i, z3_i) / temp, row i's own contradiction, and to no other logit (the
    official SimCSE's `weights`); loss(z) is the whole objective, and an unsupervised pair takes no weight."""
    weight, temp = 0.7, 0.05
    model = SimCSE(_tiny(tok, add_pooling_layer=False), temp=temp, hard_negative_weight=weight)
    z = torch.randn(5, 3, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    total = 0.0
    for i in range(len(z)):
        pos = [float(torch.cosine_similarity(z[i, 0], z[j, 1], dim=0)) / temp for j in range(len(z))]
        neg = [float(torch.cosine_similarity(z[i, 0], z[j, 2], dim=0)) / temp + weight * (i == j)
               for j in range(len(z))]
        total += -pos[i] + math.log(sum(math.exp(s) for s in pos + neg))
    out = model.loss(z)
    assert float(out["loss"]) == pytest.approx(total / len(z), rel=1e-6)  # the kit takes the cross-entropy in fp32
    assert float(out["contrastive"]) == float(out["loss"])
    unweighted = SimCSE(model.encoder, temp=temp).loss(z[:, :2])["loss"]
    assert float(model.loss(z[:, :2])["loss"]) == float(unweighted)


def test_batchnorm_projector_is_the_papers_layer_list():
    layers = list(BatchNormProjector(768))
    assert [type(m).__name__ for m in layers] == ["Linear", "GlobalBatchNorm1d", "ReLU", "Linear", "GlobalBatchNorm1d"]
    assert isinstance(layers[1], torch.nn.BatchNorm1d)  # with one process, BatchNorm1d itself
    official = list(BatchNormProjector(768, per_process=True))  # several GPUs: each its own rows' statistics
    assert [type(m) for m in official[1::3]] == [torch.nn.BatchNorm1d, torch.nn.BatchNorm1d]
    assert (layers[0].in_features, layers[0].out_features, layers[0].bias) == (768, 1536, None)
    assert (layers[3].in_features, layers[3].out_features, layers[3].bias) == (1536, 768, None)
    assert layers[1].num_features == 1536 and layers[1].affine
    assert layers[4].num_features == 768 and not layers[4].affine


def test_mlm_corruption_rates_and_special_tokens(tok):
    ids = torch.randint(1000, 30000, (200, 64))
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    torch.manual_seed(0)
    out, selected = mlm_corrupt(ids, special, 0.3, tok.mask_token_id, tok.vocab_size)
    assert not selected[special].any()
    rate = selected.float().sum() / (~special).sum()
    assert 0.28 < float(rate) < 0.32
    masked = (out == tok.mask_token_id) & selected
    assert 0.77 < float(masked.sum() / selected.sum()) < 0.83
    assert torch.equal(out[~selected], ids[~selected])


@pytest.fixture()
def diffcse(tok):
    encoder = _tiny(tok, add_pooling_layer=False, seed=0)
    generator = _tiny(tok, BertForMaskedLM, seed=1)
    return DiffCSE(encoder, generator, tok, mask_ratio=0.3, lam=0.005, projector="batchnorm")


def _edit_beside_full_logits(model, tok, b):
    """model.edit's (edited, labels), and from the same corruption (same seed) the argmax of the generator's full
    logits and the selected positions, computed directly."""
    torch.manual_seed(3)
    edited, labels, _ = model.edit(b["input_ids"], b["attention_mask"])
    torch.manual_seed(3)
    special = torch.isin(b["input_ids"], model.special_ids)
    corrupted, selected = mlm_corrupt(b["input_ids"], special, model.mask_ratio, tok.mask_token_id, model.vocab_size)
    with torch.no_grad():
        argmax = model.generator(input_ids=corrupted, attention_mask=b["attention_mask"]).logits.argmax(-1)
    return edited, labels, argmax, selected


def test_rtd_labels_are_generator_token_differs_from_original(tok, diffcse):
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    edited, labels, argmax, _ = _edit_beside_full_logits(diffcse, tok, b)
    real = b["attention_mask"] == 1
    assert torch.equal(edited[:, 1:][real[:, 1:]], argmax[:, 1:][real[:, 1:]])  # argmax at every real position
    assert (edited[:, 0] == tok.cls_token_id).all()
    assert torch.equal(labels, (edited != b["input_ids"]) & real)
    assert labels.any() and not labels[~real].any()


def test_generator_choices_skip_the_full_logits_for_distilbert_and_sampling(tok):
    """The vocabulary projection runs on the needed rows only (through a pre-hook); a DistilBERT generator (another
    head layout) gives its full-logits argmax, and sampling changes only the corrupted tokens."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    torch.manual_seed(1)
    generator = DistilBertForMaskedLM(DistilBertConfig(vocab_size=tok.vocab_size, dim=32, n_layers=2, n_heads=2,
                                                       hidden_dim=64, dropout=0.0, attention_dropout=0.0))
    model = DiffCSE(_tiny(tok, add_pooling_layer=False), generator, tok, mask_ratio=0.3, lam=0.005)
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    real = b["attention_mask"] == 1
    edited, _, argmax, selected = _edit_beside_full_logits(model, tok, b)
    assert torch.equal(edited[:, 1:][real[:, 1:]], argmax[:, 1:][real[:, 1:]])

    model.generator_output = "sample"
    torch.manual_seed(3)
    sampled, labels, _ = model.edit(b["input_ids"], b["attention_mask"])
    assert torch.equal(sampled[~selected], b["input_ids"][~selected])
    assert labels.any() and not labels[~selected].any()


def test_discriminator_sees_h_at_position_zero_and_rtd_gradient_reaches_the_encoder(tok, diffcse):
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    edited, labels, _ = diffcse.edit(b["input_ids"], b["attention_mask"])
    seen = {}

    def capture(module, args, kwargs):  # the discriminator's first transformer layer input
        seen["x"] = (args[0] if args else kwargs["hidden_states"]).detach()

    handle = diffcse.discriminator.encoder.register_forward_pre_hook(capture, with_kwargs=True)
    h = torch.randn(len(SENTENCES), 32)
    loss1, _ = diffcse.rtd_loss(h, edited, labels, b["attention_mask"])
    handle.remove()
    assert torch.allclose(seen["x"][:, 0], h)
    loss2, _ = diffcse.rtd_loss(h + 1.0, edited, labels, b["attention_mask"])
    assert float(loss1) != float(loss2)

    diffcse.train()
    batch = _views(tok, SENTENCES)
    _, projected = diffcse.encode_views(batch)
    ids, mask = batch["input_ids"].flatten(0, 1), batch["attention_mask"].flatten(0, 1)
    edited, labels, _ = diffcse.edit(ids, mask)
    for detach, expect_grad in ((True, False), (False, True)):
        diffcse.zero_grad()
        _, projected = diffcse.encode_views(batch)
        h = projected.detach() if detach else projected
        rtd, _ = diffcse.rtd_loss(h, edited, labels, mask)
        rtd.backward()
        grad = diffcse.encoder.embeddings.word_embeddings.weight.grad
        assert (grad is not None and grad.abs().sum() > 0) == expect_grad


def test_generator_never_changes_and_loss_combines_with_lambda(tok, diffcse):
    before = {k: v.clone() for k, v in diffcse.generator.state_dict().items()}
    opt = torch.optim.AdamW([p for p in diffcse.parameters() if p.requires_grad], lr=1e-3)
    diffcse.train()
    for _ in range(3):
        out = diffcse(_views(tok, SENTENCES))
        out["loss"].backward()
        opt.step()
        opt.zero_grad()
    assert all(torch.equal(before[k], v) for k, v in diffcse.generator.state_dict().items())
    assert all(p.grad is None for p in diffcse.generator.parameters())
    assert float(out["loss"]) == pytest.approx(float(out["contrastive"] + 0.005 * out["rtd"]), rel=1e-5)


def test_bad_diffcse_settings_fail_clearly(tok):
    encoder, generator = _tiny(tok, add_pooling_layer=False), _tiny(tok, BertForMaskedLM)
    with pytest.raises(ValueError, match="mask_ratio"):
        DiffCSE(encoder, generator, tok, mask_ratio=1.2)
    with pytest.raises(ValueError, match="lambda"):
        DiffCSE(encoder, generator, tok, lam=-1)
    with pytest.raises(ValueError, match="generator_output"):
        DiffCSE(encoder, generator, tok, generator_output="beam")
    big = BertForMaskedLM(BertConfig(vocab_size=50265, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64))
    with pytest.raises(ValueError, match="DistilRoBERTa"):
        DiffCSE(encoder, big, tok)
