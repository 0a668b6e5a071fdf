"""Evaluation building blocks on hand-made data with known answers."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from cse_kit.eval import Encoder, aggregate, alignment, cosine_rows, uniformity
from cse_kit.eval.classifier import CONFIGS, Fit, fit_many, initial_weights


def test_all_mean_wmean_differ_and_follow_their_definitions():
    gold = np.array([0, 1, 2, 3, 4, 5, 0, 1, 2, 3.0])
    sims = np.array([.1, .2, .3, .4, .6, .5, .9, .8, .7, .6])
    subsets = ["a"] * 6 + ["b"] * 4
    r = aggregate(sims, gold, subsets)
    a = 100 * spearmanr(sims[:6], gold[:6])[0]
    b = 100 * spearmanr(sims[6:], gold[6:])[0]
    assert r["subsets"]["a"]["spearman"] == pytest.approx(a) and r["subsets"]["b"]["spearman"] == pytest.approx(-100)
    assert r["mean"]["spearman"] == pytest.approx((a + b) / 2)
    assert r["wmean"]["spearman"] == pytest.approx((6 * a + 4 * b) / 10)
    assert r["all"]["spearman"] == pytest.approx(100 * spearmanr(sims, gold)[0])
    assert len({round(r[k]["spearman"], 6) for k in ("all", "mean", "wmean")}) == 3
    assert r["n"] == 10


def test_cosine_maps_zero_vectors_to_zero():
    a = np.array([[1.0, 0], [0, 0], [1, 1]])
    b = np.array([[1.0, 0], [1, 0], [-1, -1]])
    assert cosine_rows(a, b).tolist() == pytest.approx([1.0, 0.0, -1.0])


def _reference_outputs(model, tokenizer, sentences):
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    return out, batch["attention_mask"].unsqueeze(-1).float()


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "avg", "avg_top2", "avg_first_last", "avg_emb_last"])
def test_each_pooler_on_a_tiny_model(tiny_bert, pooler):
    tokenizer, model = tiny_bert
    sentences = ["a man is playing a guitar .", "two dogs run", "hello"]
    out, m = _reference_outputs(model, tokenizer, sentences)
    hs = out.hidden_states
    avg = lambda h: (h * m).sum(1) / m.sum(1)  # noqa: E731
    expected = {"cls": out.pooler_output, "cls_before_pooler": out.last_hidden_state[:, 0],
                "avg": avg(hs[-1]), "avg_top2": avg((hs[-2] + hs[-1]) / 2),
                "avg_first_last": avg((hs[1] + hs[-1]) / 2), "avg_emb_last": avg((hs[0] + hs[-1]) / 2)}[pooler]
    got = Encoder(model, tokenizer, pooler, batch_size=2, progress=False).encode(sentences)
    assert np.allclose(got, expected.numpy(), atol=1e-5)  # batches of 2 sorted by length: padding does not matter
    others = [p for p in ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_emb_last") if p != pooler]
    for other in others:
        assert not np.allclose(got, Encoder(model, tokenizer, other, progress=False).encode(sentences), atol=1e-4)


def test_encoder_encodes_each_distinct_sentence_once(tiny_bert):
    tokenizer, model = tiny_bert
    calls = []
    hook = model.register_forward_hook(lambda m, i, o: calls.append(1))
    enc = Encoder(model, tokenizer, "avg", batch_size=64, progress=False)
    first = enc.encode(["b", "a", "b", "c"])
    again = enc.encode(["c", "a"])
    hook.remove()
    assert len(calls) == 1 and np.array_equal(again, first[[3, 1]]) and np.array_equal(first[0], first[2])


def test_token_budget_batches_cover_every_sentence_once_longest_first_within_budget():
    from cse_kit.eval.encode import length_batches

    lengths = np.random.default_rng(0).integers(3, 90, size=1000)
    for batches in (length_batches(lengths, 128, None), length_batches(lengths, 128, 2048)):
        flat = np.concatenate(batches)
        assert sorted(flat) == list(range(1000)) and all(np.diff(lengths[flat]) <= 0)
    fixed, budget = length_batches(lengths, 128, None), length_batches(lengths, 128, 2048)
    assert {len(b) for b in fixed[:-1]} == {128}
    assert all(len(b) * lengths[b].max() <= 2048 for b in budget)
    assert len(budget[-1]) > len(budget[0])  # short sentences: many rows; long ones: few
    assert length_batches(np.array([5000, 3]), 128, 2048)[0].tolist() == [0]  # longer than the budget: alone


def test_padding_matches_the_tokenizers_and_a_token_budget_keeps_the_embeddings(tiny_bert):
    from cse_kit.eval.encode import pad_ids

    tokenizer, model = tiny_bert
    sentences = ["a man is playing a guitar .", "two dogs run", "hello", "a b c d e f g h i j k l"] * 5
    ids = tokenizer(sentences)["input_ids"]
    padded, mask = pad_ids(ids, tokenizer.pad_token_id)
    ref = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
    assert torch.equal(padded, ref["input_ids"]) and torch.equal(mask, ref["attention_mask"])
    fixed = Encoder(model, tokenizer, "avg", batch_size=3, progress=False).encode(sentences)
    budget = Encoder(model, tokenizer, "avg", max_tokens=40, progress=False).encode(sentences)
    assert np.allclose(fixed, budget, atol=1e-5)


def test_cls_pooler_without_a_pooler_layer_says_what_to_use(minilm):
    from transformers import BertModel

    model = BertModel(minilm[1].config, add_pooling_layer=False)
    with pytest.raises(ValueError, match="use 'cls_before_pooler'"):
        Encoder(model, minilm[0], "cls", progress=False).encode(["x"])
    with pytest.raises(ValueError, match="unknown pooler 'mean'"):
        Encoder(model, minilm[0], "mean")


def test_alignment_and_uniformity_known_values():
    e = np.eye(4)
    assert alignment(e, e) == 0.0
    assert alignment(e, np.roll(e, 1, axis=0)) == pytest.approx(2.0)  # orthogonal unit vectors: ||x - y||^2 = 2
    # 4 orthonormal vectors: every pair at squared distance 2 -> log exp(-4) = -4
    assert uniformity(e) == pytest.approx(-4.0)
    # antipodal pair: squared distance 4 -> -8; scale does not matter (normalised)
    assert uniformity(np.array([[3.0, 0], [-1.0, 0]])) == pytest.approx(-8.0)


def test_retrieval_recall_on_a_constructed_set(monkeypatch):
    from cse_kit.data import StsPair
    from cse_kit.eval import geometry

    # 4 pairs, two with gold 5. Slots: q0 q1 x z | t0 t1 y w.
    vecs = {"q0": [1, 0, 0], "t0": [.99, .1, 0], "q1": [0, 1, 0], "t1": [0, .5, .5], "x": [0, .9, .2],
            "y": [0, .9, .3], "z": [0, 0, -1], "w": [-1, 0, 0]}
    pairs = [StsPair("q0", "t0", 5.0, "test"), StsPair("q1", "t1", 5.0, "test"), StsPair("x", "y", 1.0, "test"),
             StsPair("z", "w", 2.0, "test")]
    monkeypatch.setattr(geometry, "load_sts", lambda *a, **k: pairs)

    class Fixed:
        def encode(self, sentences):
            return np.array([vecs[s] for s in sentences], dtype=float)

    r = geometry.retrieval_recall(Fixed(), ks=(1, 2, 3))
    assert (r["n_pairs"], r["n_queries"], r["pool"]) == (2, 4, 8)
    # q0 -> t0 and t0 -> q0 are nearest (rank 0); for q1 -> t1 and t1 -> q1, x and y are nearer (rank 2)
    assert (r["recall@1"], r["recall@2"], r["recall@3"]) == pytest.approx((50.0, 50.0, 100.0))


def _sentevals_own_fit(X, y, train, valid, l2, cfg, seed, nclasses, valid_split=None):
    """SentEval's PyTorchClassifier.fit for one model, with torch.optim and the global RNGs, as it is written."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Linear(X.shape[1], nclasses)
    if valid_split is not None:  # SentEval's prepare_split: the first draw of the seeded global RandomState
        perm = np.random.permutation(len(train))
        cut = int(valid_split * len(train))
        train, valid = train[perm[cut:]], train[perm[:cut]]
    opt_cls = torch.optim.Adam if cfg.optim == "adam" else torch.optim.RMSprop
    opt = opt_cls(model.parameters(), weight_decay=l2)
    loss_fn = torch.nn.CrossEntropyLoss()
    Xt, yt, Xv, yv = X[train], y[train], X[valid], y[valid]
    best, strikes, nepoch, stop = -1, 0, 0, False
    while not stop and nepoch <= cfg.max_epoch:
        for _ in range(cfg.epoch_size):
            perm = np.random.permutation(len(Xt))
            for i in range(0, len(Xt), cfg.batch_size):
                idx = torch.from_numpy(perm[i:i + cfg.batch_size])
                loss = loss_fn(model(Xt[idx]), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += cfg.epoch_size
        with torch.no_grad():
            acc = (model(Xv).argmax(1) == yv).double().mean().item()
        if acc > best:
            best = acc
        else:
            if strikes >= cfg.tenacity:
                stop = True
            strikes += 1
    return best, nepoch


@pytest.mark.parametrize("mode,odd_one", [("test", False), ("fasttest", False), ("fasttest", True)])
def test_batched_classifier_matches_sentevals_sequential_training(mode, odd_one):
    """Fold grids and validation-split refits batched together; `odd_one` makes the row groups unequal, which
    takes the one-fit-per-group path."""
    rng = np.random.RandomState(0)
    n, d = 600, 16
    X = torch.from_numpy(rng.randn(n, d).astype(np.float32))
    y = torch.from_numpy((X[:, 0] + 0.8 * rng.randn(n).astype(np.float32) > 0).long().numpy())
    cfg = CONFIGS[mode]
    folds = [(np.arange(0, 480), np.arange(480, 600)), (np.arange(120, 600), np.arange(0, 120)),
             (np.arange(0, 479), np.arange(479, 600))]  # one fold one row shorter: its own permutation stream
    fits = [Fit(tr, l2, valid=va) for l2 in (1e-5, 1e-2) for tr, va in folds]
    fits += [Fit(np.arange(n), l2, valid_split=0.05) for l2 in (1e-5, 1e-2)]
    fits += [Fit(np.arange(300), 1e-3, valid=np.arange(300, 400))] if odd_one else []
    _, _, acc = fit_many(X, y, fits, 2, cfg, 1111)
    for f, a in zip(fits, acc):
        ref, _ = _sentevals_own_fit(X, y, f.train, f.valid, f.l2, cfg, 1111, 2, f.valid_split)
        nvalid = len(f.valid) if f.valid is not None else int(0.05 * n)
        assert a == pytest.approx(ref, abs=1.5 / nvalid)  # at most one validation example apart


def test_groups_whose_fits_all_stopped_are_no_longer_computed(monkeypatch):
    """The lock-step loop computes only the row groups with a fit still training (a third of the work on real
    tasks was stopped groups), and every fit still ends as SentEval's own sequential training leaves it."""
    rng = np.random.RandomState(2)
    n, d = 500, 8
    X = torch.from_numpy(rng.randn(n, d).astype(np.float32))
    y = torch.from_numpy((X[:, 0] + 1.5 * rng.randn(n).astype(np.float32) > 0).long().numpy())
    cfg = CONFIGS["test"]
    folds = [(np.delete(np.arange(n), np.arange(k, n, 5)), np.arange(k, n, 5)) for k in range(5)]
    fits = [Fit(tr, l2, valid=va) for tr, va in folds for l2 in (1e-5, 1e-2)]
    groups_computed = []
    einsum = torch.einsum

    def counting(equation, *operands):
        if equation == "gbd,grcd->grbc":
            groups_computed.append(operands[0].shape[0])
        return einsum(equation, *operands)

    monkeypatch.setattr(torch, "einsum", counting)
    _, _, acc = fit_many(X, y, fits, 2, cfg, 1111)
    assert max(groups_computed) == len(folds) and min(groups_computed) < len(folds)
    for f, a in zip(fits, acc):
        ref, _ = _sentevals_own_fit(X, y, f.train, f.valid, f.l2, cfg, 1111, 2)
        assert a == pytest.approx(ref, abs=1.5 / len(f.valid))


def test_initial_weights_equal_a_seeded_nn_linear():
    w, b = initial_weights(384, 6, 1111)
    with torch.random.fork_rng():
        torch.manual_seed(1111)
        lin = torch.nn.Linear(384, 6)
    assert torch.equal(w, lin.weight.data) and torch.equal(b, lin.bias.data)
    assert math.isclose(float(w.abs().max()), 1 / math.sqrt(384), rel_tol=0.01)


def test_batched_classifier_with_shared_training_rows_matches_sequential_training():
    """SST2's pattern: the same train/valid rows, one slice per L2 value (one row group)."""
    rng = np.random.RandomState(1)
    X = torch.from_numpy(rng.randn(500, 12).astype(np.float32))
    y = torch.from_numpy(rng.randint(0, 3, 500))
    train, valid = np.arange(400), np.arange(400, 500)
    fits = [Fit(train, l2, valid=valid) for l2 in (1e-5, 1e-4, 1e-3, 1e-2)]
    _, _, acc = fit_many(X, y, fits, 3, CONFIGS["fasttest"], 1111)
    for f, a in zip(fits, acc):
        ref, _ = _sentevals_own_fit(X, y, train, valid, f.l2, CONFIGS["fasttest"], 1111, 3)
        assert a == pytest.approx(ref, abs=1.5 / len(valid))


def test_the_progress_bar_counts_the_padded_tokens_each_batch_costs(tiny_bert, monkeypatch):
    """Its unit is the work (batch rows x their padded width), so the rate, and the ETA, stays steady although the
    longest sentences are encoded first."""
    import tqdm

    seen = {}

    class Bar:
        def __init__(self, total, unit, **_):
            seen.update(total=total, unit=unit, done=0)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            seen["done"] += n

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    tokenizer, model = tiny_bert
    sentences = ["a", "a somewhat longer sentence with more words in it", "two words", "the cat sat on the mat"]
    encoder = Encoder(model, tokenizer, "avg", batch_size=2, progress=True)
    encoder.encode(sentences)
    widths = sorted((len(tokenizer(s)["input_ids"]) for s in sentences), reverse=True)  # longest first, pairs
    assert seen["unit"] == "tok" and seen["total"] == seen["done"] == 2 * widths[0] + 2 * widths[2]


def test_token_ids_are_the_tokenizers_and_each_text_is_tokenized_once(tiny_bert):
    from cse_kit.eval.encode import token_ids

    tokenizer, _ = tiny_bert
    calls = []

    class Counting:  # the tokenizer, counting the texts it is asked for
        backend_tokenizer, special_tokens_map = tokenizer.backend_tokenizer, tokenizer.special_tokens_map

        def __len__(self):
            return len(tokenizer)

        def __call__(self, texts, **kw):
            calls.append(list(texts))
            return tokenizer(texts, **kw)

    counting = Counting()
    texts = ["a cat sat on the mat .", "a dog", "a cat sat on the mat ."]
    assert [list(x) for x in token_ids(counting, texts)] == tokenizer(texts)["input_ids"]
    assert [list(x) for x in token_ids(counting, ["a dog", "two birds"])] == tokenizer(["a dog", "two birds"])["input_ids"]
    assert calls == [["a cat sat on the mat .", "a dog"], ["two birds"]]  # known texts are not tokenized again
    capped = token_ids(counting, texts, max_length=4)
    assert [len(x) for x in capped] == [4, 4, 4] and calls[-1] == ["a cat sat on the mat .", "a dog"]


def test_copies_of_one_tokenizer_share_its_token_ids_and_another_vocabulary_does_not(tiny_bert, tmp_path):
    """Every trained model is saved with its own copy of the tokenizer: the copies are one tokenizer to the cache."""
    from transformers import AutoTokenizer

    from cse_kit.eval.encode import _tokenizer_key

    tokenizer, _ = tiny_bert
    copies = []
    for name in ("run-a", "run-b"):
        tokenizer.save_pretrained(tmp_path / name)
        copies.append(AutoTokenizer.from_pretrained(tmp_path / name))
    assert copies[0].name_or_path != copies[1].name_or_path
    assert _tokenizer_key(copies[0], None) == _tokenizer_key(copies[1], None) == _tokenizer_key(tokenizer, None)
    copies[1].add_tokens(["zyxwvut"])  # another vocabulary: other ids
    assert _tokenizer_key(copies[1], None) != _tokenizer_key(copies[0], None)
    assert _tokenizer_key(copies[0], 8) != _tokenizer_key(copies[0], None)
