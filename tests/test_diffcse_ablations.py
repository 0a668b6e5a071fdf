"""DiffCSE's objective ablations (Tables 3, 4, 15) and the official code's quirks, on tiny BERTs with dropout off:
edit labels on hand-made sentences, each loss against a direct computation, gradients into the encoder through h."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM, BertModel, RobertaConfig, RobertaForMaskedLM, RobertaModel

from cse_kit.data import load_sentence_pairs
from cse_kit.data.fetch import split_sentences
from cse_kit.methods import DiffCSE, make_projector
from cse_kit.methods.diffcse import COPY_WEIGHT, corrective_lm_loss, mlm_corrupt
from cse_kit.methods.edits import delete_tokens, insert_masks
from cse_kit.train.data import Batches

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "stocks fell sharply on monday",
             "she reads a book in the garden every evening"]
CLS, SEP, MASK = 101, 102, 103


def _tiny(tokenizer, cls=BertModel, seed=0, **kw):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return cls(config, **kw)


def _model(tok, **options):
    return DiffCSE(_tiny(tok, add_pooling_layer=False), _tiny(tok, BertForMaskedLM, seed=1), tok, mask_ratio=0.3,
                   lam=0.005, projector="mlp", **options)


def _views(tokenizer, sentences):
    b = tokenizer(sentences, padding=True, return_tensors="pt")
    return {k: v.unsqueeze(1).expand(-1, 2, -1).contiguous() for k, v in b.items() if k != "token_type_ids"}


@pytest.fixture()
def tok(minilm):
    return minilm[0]


# --- the edits (Table 4) ------------------------------------------------------------------------------------------

def test_insertion_labels_mark_the_inserted_masks_and_keep_the_sentence_in_order():
    ids = [CLS, 11, 12, 13, 14, 15, 16, SEP]
    for seed in range(20):
        edited, inserted = insert_masks(ids, 0.34, MASK, torch.Generator().manual_seed(seed))
        assert len(edited) == len(inserted) == len(ids) + 2  # round(0.34 * 6) = 2 inserted
        assert edited[0] == CLS and edited[-1] == SEP and not inserted[0] and not inserted[-1]
        assert [t for t, new in zip(edited, inserted) if new] == [MASK, MASK]
        assert [t for t, new in zip(edited, inserted) if not new] == ids  # the originals, in order
    assert insert_masks([CLS, 11, SEP], 0.15, MASK)[1] in ([False, True, False, False], [False, False, True, False])


def test_deletion_labels_say_whether_the_token_right_before_was_deleted():
    ids = [CLS, 11, 12, 13, 14, SEP]
    expected = {  # the deleted token -> (what is left, labels): the token after the gap is labelled
        11: ([CLS, 12, 13, 14, SEP], [False, True, False, False, False]),
        12: ([CLS, 11, 13, 14, SEP], [False, False, True, False, False]),
        13: ([CLS, 11, 12, 14, SEP], [False, False, False, True, False]),
        14: ([CLS, 11, 12, 13, SEP], [False, False, False, False, True]),
    }
    seen = set()
    for seed in range(40):
        kept, labels = delete_tokens(ids, 0.25, torch.Generator().manual_seed(seed))
        [gone] = set(ids) - set(kept)
        assert (kept, labels) == expected[gone]
        seen.add(gone)
    assert seen == set(expected)  # every position can be deleted, never [CLS] or [SEP]
    for seed in range(40):  # two deletions in a row: only the token after the gap is labelled
        kept, labels = delete_tokens(ids, 0.5, torch.Generator().manual_seed(seed))
        if kept == [CLS, 11, 14, SEP]:
            assert labels == [False, False, True, False]
            break
    else:
        pytest.fail("no seed deleted 12 and 13 together")


def test_model_edits_fill_insertions_with_the_generator_and_pad_the_rows(tok):
    model = _model(tok, edit="insert")
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    torch.manual_seed(5)
    edited, labels, mask = model.edit(b["input_ids"], b["attention_mask"])
    torch.manual_seed(5)
    rows = [insert_masks(r[m == 1].tolist(), 0.3, tok.mask_token_id) for r, m in zip(b["input_ids"], b["attention_mask"])]
    for i, (row, flags) in enumerate(rows):
        n = len(row)
        assert mask[i].sum() == n and labels[i, :n].tolist() == flags and not labels[i, n:].any()
        originals = [t for t, new in zip(row, flags) if not new]
        assert edited[i, :n][~torch.tensor(flags)].tolist() == originals
        with torch.no_grad():
            full = model.generator(input_ids=torch.tensor([row])).logits.argmax(-1)[0]
        assert torch.equal(edited[i, :n][torch.tensor(flags)], full[torch.tensor(flags)])  # the generator's argmax
        assert (edited[i, n:] == 0).all()  # the official padding id 0

    model.edit_kind = "delete"
    edited, labels, mask = model.edit(b["input_ids"], b["attention_mask"])
    lengths = b["attention_mask"].sum(1)
    assert torch.equal(mask.sum(1), lengths - torch.tensor([max(1, round(0.3 * (n - 2))) for n in lengths.tolist()]))
    assert (labels.sum(1) >= 1).all() and not labels[mask == 0].any()

    model.edit_kind = "all"
    edited, labels, mask = model.edit(b["input_ids"], b["attention_mask"])
    assert edited.shape == labels.shape == mask.shape and (edited[:, 0] == CLS).all()


def test_all_gives_each_row_the_edit_drawn_for_it_on_the_host(tok):
    """`all`: each row's edit (replace, insert, delete) drawn on the host with its layout (DiffCSE.host_inputs), the
    device filling in the replaced rows and the inserted [MASK]s; each row is what its own edit makes of it."""
    model = _model(tok, edit="all")
    b = tok(SENTENCES * 4, padding=True, return_tensors="pt")
    ids, mask = b["input_ids"], b["attention_mask"]
    torch.manual_seed(3)
    drawn = model.draw_edits(ids, mask)
    edited, labels, edited_mask = model.edit(ids, mask, drawn=drawn)
    assert set(drawn["kinds"].tolist()) == {0, 1, 2}  # 16 rows: every edit taken
    for i, kind in enumerate(drawn["kinds"].tolist()):
        n, length = int(edited_mask[i].sum()), int(mask[i].sum())
        count = max(1, round(0.3 * (length - 2)))
        assert n == {0: length, 1: length + count, 2: length - count}[kind]
        assert not labels[i, n:].any() and (edited[i, n:] == 0).all() and edited[i, 0] == CLS
        if kind == 0:  # replaced: labelled where the generator's token differs
            assert torch.equal(labels[i, :n], edited[i, :n] != ids[i, :n])
        if kind == 1:  # inserted: the originals in order between the generator's tokens
            assert int(labels[i].sum()) == count and edited[i, :n][~labels[i, :n]].tolist() == ids[i, :length].tolist()
            assert (edited[i, :n][labels[i, :n]] != MASK).all()


# --- the losses against direct computations -----------------------------------------------------------------------

def _direct_rtd(model, h, edited, labels, mask, reduction):
    logits = model.rtd_head(model._discriminate(h, edited, mask))
    log_p = logits.log_softmax(-1).gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    return -log_p.mean() if reduction == "mean" else -(log_p * mask).sum()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("edit", ["replace", "insert", "delete"])
def test_rtd_loss_is_the_cross_entropy_of_its_reduction(tok, edit, reduction):
    model = _model(tok, edit=edit, rtd_reduction=reduction)
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    edited, labels, mask = model.edit(b["input_ids"], b["attention_mask"])
    h = torch.randn(len(SENTENCES), 32)
    loss, _ = model.rtd_loss(h, edited, labels, mask)
    # official: mean over every position, padding included (label "original"); paper: sum over real tokens
    assert float(loss) == pytest.approx(float(_direct_rtd(model, h, edited, labels, mask, reduction)), rel=1e-5)


def test_conditional_mlm_loss_recovers_the_masked_tokens(tok):
    model = _model(tok, task="cmlm")
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    h = torch.randn(len(SENTENCES), 32)
    torch.manual_seed(2)
    loss, _ = model.cmlm_loss(h, b["input_ids"], b["attention_mask"])
    torch.manual_seed(2)
    corrupted, selected = mlm_corrupt(b["input_ids"], torch.isin(b["input_ids"], model.special_ids), 0.3,
                                      tok.mask_token_id, tok.vocab_size)
    hidden = model._discriminate(h, corrupted, b["attention_mask"])
    head = model.lm_head
    logits = head.transform(hidden) @ model.discriminator.embeddings.word_embeddings.weight.T + head.bias
    direct = -logits.log_softmax(-1)[selected].gather(-1, b["input_ids"][selected].unsqueeze(-1)).mean()
    assert selected.any() and float(loss) == pytest.approx(float(direct), rel=1e-5)


def test_corrective_lm_is_cocolm_copy_mechanism():
    """COCO-LM §3.2 per token: p_CLM = 1(x'' = x) sg(p_copy) + sg(1 - p_copy) p_LM(x);
    L_copy = BCE(p_copy, 1(x'' = x))."""
    torch.manual_seed(0)
    vocab, copy_logit = torch.randn(6, 10, requires_grad=True), torch.randn(6, requires_grad=True)
    original = torch.tensor([1, 2, 3, 4, 5, 6])
    edited = torch.tensor([1, 9, 3, 0, 5, 6])
    lm, copy_loss = corrective_lm_loss(vocab, copy_logit, original, edited)
    for i in range(6):
        p_copy = torch.sigmoid(copy_logit[i]).item()
        p_lm = vocab[i].softmax(-1)[original[i]].item()
        same = float(original[i] == edited[i])
        assert lm[i].item() == pytest.approx(-math.log(same * p_copy + (1 - p_copy) * p_lm), rel=1e-5)
        assert copy_loss[i].item() == pytest.approx(-math.log(p_copy if same else 1 - p_copy), rel=1e-5)
    lm.sum().backward()
    assert copy_logit.grad is None and vocab.grad.abs().sum() > 0  # sg: L_LM trains p_LM, never p_copy
    assert COPY_WEIGHT == 50.0  # λ_copy, microsoft/COCO-LM fairseq/fairseq/models/cocolm/model.py:644


def _cocolm_by_hand(model, h, ids, mask, seed):
    """COCO-LM's L_CLM restated on the model's own discriminator states, in probabilities (float64):
    p_LM(x | h_i) = softmax(E h_i + b) (no transform: the official CLMHead), p_copy(1 | h_i) = sigmoid(w h_i + b_w),
    L_LM = Σ_{i∈M} -log(c_i sg(p_copy) + sg(1 - p_copy) p_LM(x_i)), L_copy = Σ_{i real} BCE(p_copy, c_i),
    L_CLM = L_LM + λ_copy L_copy, c_i = 1(x''_i = x_i), M = the positions the MLM corruption masked."""
    torch.manual_seed(seed)
    edited, _, _ = model.edit(ids, mask, "replace")  # x'' (the same draws as the loss's)
    torch.manual_seed(seed)
    _, selected = mlm_corrupt(ids, torch.isin(ids, model.special_ids), 0.3, model.mask_id, model.vocab_size)
    masked = selected & (mask == 1)
    hidden = model._discriminate(h, edited, mask).double()
    E = model.discriminator.embeddings.word_embeddings.weight.double()
    p_lm = (hidden @ E.T + model.lm_head.bias.double()).softmax(-1)
    p_copy = torch.sigmoid(hidden @ model.lm_head.copy.weight.double().T + model.lm_head.copy.bias.double())[..., 0]
    sg = p_copy.detach()
    c = (edited == ids).double()
    p_orig = p_lm.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    lm = -torch.log(c * sg + (1 - sg) * p_orig)[masked].sum()
    copy_term = -(c * torch.log(p_copy) + (1 - c) * torch.log(1 - p_copy))[mask == 1].sum()
    return lm, copy_term, masked, c


def _half_replacing_generator(model, ids, mask):
    """The generator's argmax made to keep every other real token and replace the rest, so that x'' has kept and
    replaced tokens both inside and outside the masked positions."""
    where = mask == 1
    where[:, 0] = False
    choice = ids[where].clone()
    choice[::2] = 2000 + torch.arange(len(choice[::2]))
    model._generator_choices = lambda hidden: choice


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_corrective_loss_of_the_model_is_cocolm_l_clm(tok, reduction):
    model = _model(tok, task="corrective", rtd_reduction=reduction)
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    ids, mask = b["input_ids"], b["attention_mask"]
    _half_replacing_generator(model, ids, mask)
    h = torch.randn(len(SENTENCES), 32)
    torch.manual_seed(4)
    loss, accuracy = model.corrective_loss(h, ids, mask)
    lm, copy_term, masked, c = _cocolm_by_hand(model, h, ids, mask, 4)
    real = mask == 1
    # the case this checks: L_LM covers only M, a strict subset of the real tokens, and x'' has both kept and
    # replaced tokens inside and outside M
    assert masked.any() and (real & ~masked).any()
    assert (c[masked] == 1).any() and (c[masked] == 0).any() and (c[real & ~masked] == 0).any()
    expected = lm + COPY_WEIGHT * copy_term
    if reduction == "mean":
        expected = expected / real.sum()
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    assert 0 <= float(accuracy) <= 1
    # the conditional MLM keeps BERT's transform; the corrective LM's vocabulary head is the tied embeddings + bias
    assert isinstance(model.lm_head.transform, torch.nn.Identity)
    assert not isinstance(_model(tok, task="cmlm").lm_head.transform, torch.nn.Identity)


def test_corrective_copy_head_is_trained_by_the_copy_loss_alone(tok):
    """The stop-gradient: the copy head's gradient from L_CLM equals λ_copy times that of L_copy; L_LM adds none."""
    model = _model(tok, task="corrective", rtd_reduction="sum")
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    _half_replacing_generator(model, b["input_ids"], b["attention_mask"])
    h = torch.randn(len(SENTENCES), 32)
    torch.manual_seed(5)
    loss, _ = model.corrective_loss(h, b["input_ids"], b["attention_mask"])
    head = model.lm_head.copy
    got = torch.autograd.grad(loss, [head.weight, head.bias])
    lm, copy_term, _, _ = _cocolm_by_hand(model, h, b["input_ids"], b["attention_mask"], 5)
    want = torch.autograd.grad(COPY_WEIGHT * copy_term, [head.weight, head.bias])
    assert torch.autograd.grad(lm, [head.weight, head.bias], allow_unused=True) == (None, None)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-4, atol=1e-6)


def _infonce(a, b, temp, extra=None):
    sims = F.cosine_similarity(a[:, None], b[None], dim=-1) / temp
    if extra is not None:
        sims = torch.cat([sims, F.cosine_similarity(a[:, None], extra[None], dim=-1) / temp], 1)
    return F.cross_entropy(sims, torch.arange(len(a)))


@pytest.mark.parametrize("role", ["positive", "negative"])
@pytest.mark.parametrize("edit", ["replace", "insert", "delete"])
def test_table15_edited_sentence_as_extra_positive_or_negative(tok, role, edit):
    model = _model(tok, task=role, edit=edit).train()
    assert model.discriminator is None
    batch = _views(tok, SENTENCES)
    torch.manual_seed(6)
    loss = model(batch)["loss"]
    torch.manual_seed(6)
    edited, _, mask = model.edit(batch["input_ids"][:, 0], batch["attention_mask"][:, 0])
    with torch.no_grad():
        def z(ids, m):
            return model.projector(model.encoder(input_ids=ids, attention_mask=m).last_hidden_state[:, 0])
        z1 = z(batch["input_ids"][:, 0], batch["attention_mask"][:, 0])
        z2 = z(batch["input_ids"][:, 1], batch["attention_mask"][:, 1])
        z3 = z(edited.masked_fill(mask == 0, tok.pad_token_id), mask)
    direct = (_infonce(z1, z2, 0.05, z3) if role == "negative"
              else (_infonce(z1, z2, 0.05) + _infonce(z1, z3, 0.05)) / 2)
    assert float(loss) == pytest.approx(float(direct), rel=1e-4)


def test_without_contrastive_loss_the_objective_is_lambda_times_the_task(tok):
    model = _model(tok, contrastive=False).train()
    out = model(_views(tok, SENTENCES))
    assert "contrastive" not in out and float(out["loss"]) == pytest.approx(0.005 * float(out["rtd"]), rel=1e-6)


# --- gradients reach the encoder through h ------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{"task": "rtd", "edit": "insert"}, {"task": "rtd", "edit": "delete"},
                                     {"task": "rtd", "edit": "all"}, {"task": "cmlm"}, {"task": "corrective"}],
                         ids=lambda o: "-".join(o.values()))
def test_task_gradient_reaches_the_encoder_only_through_h(tok, options):
    model = _model(tok, contrastive=False, **options).train()
    batch = _views(tok, SENTENCES)
    for detach in (True, False):
        model.zero_grad()
        pooled, projected = model.encode_views(batch)
        torch.manual_seed(7)
        out = model._conditional_task(batch, pooled, projected.detach() if detach else projected)
        out["task_loss"].backward()
        grad = model.encoder.embeddings.word_embeddings.weight.grad
        assert (grad is not None and grad.abs().sum() > 0) == (not detach)
        assert model.discriminator.embeddings.word_embeddings.weight.grad.abs().sum() > 0


# --- next sentence, paper-text, official padding, projector init --------------------------------------------------

def test_next_sentence_rows_are_conditioned_on_the_sentence_h(tok):
    batch = _views(tok, SENTENCES)
    following = tok(SENTENCES[1:] + SENTENCES[:1], padding=True, return_tensors="pt")
    batch.update(next_input_ids=following["input_ids"], next_attention_mask=following["attention_mask"])
    h = torch.randn(len(SENTENCES) * 2, 32)
    model = _model(tok, target="same+next")
    (same_ids, _, same_h), (next_ids, next_mask, next_h) = model._task_rows(batch, h)
    assert torch.equal(same_ids, batch["input_ids"].flatten(0, 1)) and torch.equal(same_h, h)
    assert torch.equal(next_ids, following["input_ids"].repeat_interleave(2, 0)) and torch.equal(next_h, h)
    model.target = "next"
    [(ids, _, row_h)] = model._task_rows(batch, h)
    assert torch.equal(ids, next_ids) and torch.equal(row_h, h)
    del batch["next_input_ids"]
    with pytest.raises(ValueError, match="ordered corpus"):
        model._task_rows(batch, h)


def test_paper_text_edits_one_copy_per_sentence_with_pure_masking(tok):
    model = _model(tok, edit_views="first", masking="mask")
    batch = _views(tok, SENTENCES)
    h = torch.randn(len(SENTENCES) * 2, 32)
    [(ids, _, row_h)] = model._task_rows(batch, h)
    assert len(ids) == len(SENTENCES) and torch.equal(row_h, h.view(4, 2, 32)[:, 0])
    ids = torch.randint(1000, 30000, (100, 40))
    out, selected = mlm_corrupt(ids, torch.zeros_like(ids, dtype=torch.bool), 0.3, MASK, 30522, bert=False)
    assert selected.any() and (out[selected] == MASK).all() and torch.equal(out[~selected], ids[~selected])


def test_official_padding_id_zero_is_roberta_s_start_token_and_changes_the_rtd_loss(tok):
    """The official `e_inputs = g_pred * attention_mask` writes id 0 at padding: RoBERTa's <s>, not its pad (1),
    so RoBERTa's position ids and the mean RTD loss (which covers padding) change."""
    roberta_tok = SimpleNamespace(mask_token_id=50264, cls_token_id=0, pad_token_id=1, all_special_ids=[0, 1, 2, 3, 50264])
    config = dict(vocab_size=50265, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=1)
    torch.manual_seed(0)
    encoder, generator = RobertaModel(RobertaConfig(**config), add_pooling_layer=False), RobertaForMaskedLM(RobertaConfig(**config))
    ids = torch.tensor([[0, 713, 16, 10, 1296, 2], [0, 713, 2, 1, 1, 1]])
    mask = (ids != 1).long()
    h = torch.randn(2, 32)
    losses = {}
    for padding in ("zero", "pad"):
        torch.manual_seed(1)  # the same RTD head and the same edits for both
        model = DiffCSE(encoder, generator, roberta_tok, edited_padding=padding, projector="mlp")
        edited, labels, edited_mask = model.edit(ids, mask)
        assert (edited[1, 3:] == (0 if padding == "zero" else 1)).all()
        losses[padding] = float(model.rtd_loss(h, edited, labels, edited_mask)[0])
    assert losses["zero"] != pytest.approx(losses["pad"], rel=1e-4)


@pytest.mark.parametrize("kind", ["mlp", "batchnorm"])
def test_projectors_start_as_the_official_init_weights(kind):
    torch.manual_seed(0)
    linears = [m for m in make_projector(kind, 256).modules() if isinstance(m, torch.nn.Linear)]
    for layer in linears:
        assert layer.weight.std().item() == pytest.approx(0.02, rel=0.05) and abs(layer.weight.mean().item()) < 2e-3
        assert layer.bias is None or not layer.bias.any()
    x = torch.randn(3, 256)
    assert torch.equal(make_projector("none", 256)(x), x)


# --- the ordered corpus -------------------------------------------------------------------------------------------

def test_sentence_pairs_are_consecutive_within_a_document(tmp_path):
    assert split_sentences("The GNU GPL is a free licence.  It\nguarantees your freedom. See\n\nSection 2.") == \
        ["The GNU GPL is a free licence.", "It guarantees your freedom."]
    corpus = tmp_path / "ordered.txt"
    corpus.write_text("One two three four.\nFive six seven eight.\nNine ten eleven twelve.\n\nA b c d.\nE f g h.\n")
    assert load_sentence_pairs("Licenses-ordered", path=corpus) == [
        ("One two three four.", "Five six seven eight."), ("Five six seven eight.", "Nine ten eleven twelve."),
        ("A b c d.", "E f g h.")]  # no pair across the blank line between documents


def test_licenses_corpus_is_placed_offline_and_batches_carry_the_next_sentence(tok, tmp_path, monkeypatch):
    monkeypatch.setenv("CSE_KIT_OFFLINE", "1")
    pairs = load_sentence_pairs("Licenses-ordered", tmp_path)  # copied from /usr/share/common-licenses
    assert len(pairs) == 1276 and pairs[0][0].split()[0] == "Apache"
    from datasets import Dataset

    dataset = [{"ids0": tok(a)["input_ids"], "ids1": tok(b)["input_ids"]} for a, b in pairs[:8]]
    batch = Batches(Dataset.from_list(dataset), 4, 0, tok.pad_token_id, next_sentence=True)(0)
    for i in range(4):
        row = batch["input_ids"][i, 0][batch["attention_mask"][i, 0] == 1].tolist()
        j = [d["ids0"] for d in dataset].index(row)
        assert torch.equal(batch["input_ids"][i, 0], batch["input_ids"][i, 1])  # the sentence's two views
        assert batch["next_input_ids"][i][batch["next_attention_mask"][i] == 1].tolist() == dataset[j]["ids1"]
