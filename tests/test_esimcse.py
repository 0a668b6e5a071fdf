"""ESimCSE on tiny BERTs: the loss with queue negatives, the EMA, the momentum encoder's start, the FIFO queue,
repetition statistics measured over many draws, length buckets, and a resume with a non-empty queue."""

import json
import math
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForMaskedLM, BertModel

from cse_kit.methods import ESimCSE
from cse_kit.methods.esimcse import STOP_WORDS, VARIANTS, ESimCSE, LengthExtender, single_token_ids
from cse_kit.methods.objective import variant_choices
from cse_kit.train import build_config, train
from cse_kit.train.data import Batches, bucketed_order, parse_length_buckets

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "stocks fell sharply on monday",
             "she reads a book in the garden every evening"]

SLOW = pytest.mark.slow


@pytest.fixture()
def tok(minilm):
    return minilm[0]


def _tiny(tokenizer, cls=BertModel, seed=0, **kw):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return cls(config, **kw)


def _batch(tok, sentences=SENTENCES):
    b = tok(sentences, padding=True, return_tensors="pt")
    return {"input_ids": b["input_ids"].unsqueeze(1).repeat(1, 2, 1),
            "attention_mask": b["attention_mask"].unsqueeze(1).repeat(1, 2, 1),
            "example_index": torch.arange(len(sentences))}


def _model(tok, **kw):
    return ESimCSE(_tiny(tok, add_pooling_layer=False), tok, temp=0.05, **kw)


# ---- loss, EMA, momentum encoder, queue -------------------------------------------------------------------------

def test_loss_is_infonce_over_the_batch_and_the_queue(tok):
    model = _model(tok, queue_size=6, dup_sampling="official").train()
    queue = torch.randn(5, 32)
    model.enqueue(queue)
    batch = _batch(tok)
    ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
    pos_ids, pos_mask = model.positive(ids, mask, batch["example_index"])  # fixed per sentence: the forward's too
    assert (pos_mask.sum(1) >= mask.sum(1)).all() and (pos_mask.sum() > mask.sum())
    with torch.no_grad():
        h1 = model.projector(model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
        h2 = model.projector(model.encoder(input_ids=pos_ids, attention_mask=pos_mask).last_hidden_state[:, 0])
    total = 0.0
    for i in range(len(ids)):
        sims = [float(torch.cosine_similarity(h1[i], h2[j], dim=0)) / 0.05 for j in range(len(ids))]
        sims += [float(torch.cosine_similarity(h1[i], q, dim=0)) / 0.05 for q in queue]
        total += -sims[i] + math.log(sum(math.exp(s) for s in sims))
    out = model(batch)
    assert float(out["loss"].detach()) == pytest.approx(total / len(ids), rel=1e-4)
    assert int(model.queue_filled) == 6  # 5 + 4 new, the oldest 3 dropped


def test_first_step_has_no_queue_negatives(tok):
    with_queue, without = _model(tok, queue_size=8, length_extension="none"), _model(tok, queue_size=0,
                                                                                      length_extension="none")
    batch = _batch(tok)
    assert float(with_queue(batch)["loss"].detach()) == pytest.approx(float(without(batch)["loss"].detach()), rel=1e-6)
    assert int(with_queue.queue_filled) == 4 and not hasattr(without, "momentum_encoder")


def test_momentum_encoder_starts_as_the_encoder_and_random_under_official_code(tok):
    paper = _model(tok)
    for (name, p), q in zip(paper.encoder.named_parameters(), paper.momentum_encoder.parameters()):
        assert torch.equal(p, q), name
    assert all(not q.requires_grad for q in paper.momentum_encoder.parameters())
    official = _model(tok, momentum_init="random")
    weights = dict(official.momentum_encoder.named_parameters())
    online = dict(official.encoder.named_parameters())
    matrix = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(weights[matrix], online[matrix])
    std = official.encoder.config.initializer_range  # BERT's init: N(0, 0.02), LayerNorm ones
    assert float(weights[matrix].std()) == pytest.approx(std, rel=0.1)
    assert torch.equal(weights["embeddings.LayerNorm.weight"], torch.ones(32))
    again = _model(tok, momentum_init="random")  # seeded: the same random start every time
    assert torch.equal(again.momentum_encoder.get_parameter(matrix), weights[matrix])


def test_ema_is_one_update_before_the_optimizer_step(tok):
    model = _model(tok, momentum=0.9, length_extension="none").train()
    with torch.no_grad():
        for p in model.momentum_encoder.parameters():
            p.add_(torch.randn_like(p))
    before = [p.clone() for p in model.momentum_encoder.parameters()]
    online = [p.clone() for p in model.encoder.parameters()]
    model(_batch(tok))  # the forward updates the momentum encoder from the pre-step weights
    for b, o, m in zip(before, online, model.momentum_encoder.parameters()):
        assert torch.allclose(m, 0.9 * b + 0.1 * o, atol=1e-6)
    assert not model.momentum_encoder.training  # dropout off, even with the objective in train mode


def test_queue_holds_the_momentum_encoders_projected_original_sentences(tok):
    model = _model(tok, queue_size=10, momentum=0.0).train()  # m = 0: after the update it equals the encoder
    batch = _batch(tok)
    model(batch)
    ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
    with torch.no_grad():
        expected = model.projector(model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
    assert torch.allclose(model.queue[:4], expected, atol=1e-5)


def test_queue_is_fifo_of_fixed_size(tok):
    model = _model(tok, queue_size=5)
    rows = torch.arange(8 * 32, dtype=torch.float).view(8, 32)
    model.enqueue(rows[:2])
    assert int(model.queue_filled) == 2 and torch.equal(model.queue[:2], rows[:2])
    model.enqueue(rows[2:4])
    model.enqueue(rows[4:7])
    assert int(model.queue_filled) == 5 and torch.equal(model.queue, rows[2:7])  # oldest first
    model.enqueue(rows[7:8])
    assert torch.equal(model.queue, rows[3:8])
    assert {"queue", "queue_filled"} <= set(model.state_dict())  # persistent: checkpoints keep them


# ---- repetition ---------------------------------------------------------------------------------------------------

def _row(n, first=1000):
    """[CLS] t_1 ... t_n [SEP] with distinct, non-special, non-continuation token ids."""
    return [101, *range(first, first + n), 102]


def _draws(extender, ids, times):
    batch = torch.tensor([ids] * times)
    out, mask, _ = extender(batch, torch.ones_like(batch), torch.arange(times))
    return [row[:int(m.sum())].tolist() for row, m in zip(out, mask)]


def _duplicated_positions(orig, new):
    """Positions of orig duplicated in place in new (asserts new is orig with some tokens doubled)."""
    dup, j = [], 0
    for i, t in enumerate(orig):
        assert new[j] == t
        j += 1
        if j < len(new) and new[j] == t and (i + 1 >= len(orig) or orig[i + 1] != t):
            dup.append(i)
            j += 1
    assert j == len(new)
    return dup


def test_subword_repetition_statistics_match_the_paper(tok):
    n, times = 20, 6000
    ids = _row(n)
    torch.manual_seed(0)
    draws = _draws(LengthExtender(tok, dup_rate=0.32), ids, times)
    top = max(2, math.floor(0.32 * n))  # 6
    lengths = Counter(len(d) - len(ids) for d in draws)
    assert set(lengths) == set(range(top + 1))
    for k in range(top + 1):  # uniform on {0..6}: 1/7 each, 4 standard errors
        assert abs(lengths[k] / times - 1 / (top + 1)) < 4 * math.sqrt((1 / 7) * (6 / 7) / times)
    positions = Counter()
    for d in draws:
        dup = _duplicated_positions(ids, d)
        assert len(dup) == len(d) - len(ids)
        assert d[0] == 101 and d[-1] == 102 and d.count(101) == 1 and d.count(102) == 1  # specials untouched
        positions.update(dup)
    assert set(positions) == set(range(1, n + 1))
    expected = times * (top / 2) / n  # E[dup_len] / n per position
    assert all(abs(c - expected) < 5 * math.sqrt(expected) for c in positions.values())


def test_short_sentences_still_get_up_to_two_repeats_and_never_more_than_their_tokens(tok):
    torch.manual_seed(0)
    extender = LengthExtender(tok, dup_rate=0.32)
    assert Counter(len(d) - 4 for d in _draws(extender, _row(2), 900)).keys() == {0, 1, 2}  # max(2, 0) = 2
    assert Counter(len(d) - 3 for d in _draws(extender, _row(1), 300)).keys() == {0, 1}  # at most N = 1


def test_official_repetition_is_fixed_per_sentence_with_the_official_formula(tok):
    n, times = 30, 3000
    ids = _row(n)  # len = 32 with [CLS]/[SEP]: dup_len in [0, min(10, int(0.32 * 32)) - 1] = [0, 9]
    extender = LengthExtender(tok, dup_rate=0.32, sampling="official", seed=42)
    draws = _draws(extender, ids, times)
    assert draws == _draws(extender, ids, times)  # the same sentence gets the same repetition every time
    assert len({tuple(d) for d in draws}) > times // 2  # ... and other sentences other ones
    lengths = Counter(len(d) - len(ids) for d in draws)
    assert set(lengths) == set(range(10))
    assert all(abs(c / times - 0.1) < 4 * math.sqrt(0.09 / times) for c in lengths.values())
    positions = Counter(p for d in draws for p in _duplicated_positions(ids, d))
    assert set(positions) == set(range(1, n + 1))  # positions 1..len-2, never [CLS] or [SEP]
    assert _draws(LengthExtender(tok, dup_rate=0.32, sampling="official", seed=43), ids, 50) != draws[:50]


def test_word_repetition_keeps_the_pieces_of_a_word_together(tok):
    sentence = "microbiology researchers unexpectedly discovered extraordinary phenomena"
    ids = tok(sentence)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    words, current = [], []
    for i, t in enumerate(pieces[1:-1], start=1):
        if not t.startswith("##") and current:
            words.append(current)
            current = []
        current.append(i)
    words.append(current)
    assert any(len(w) > 1 for w in words)
    torch.manual_seed(0)
    draws = _draws(LengthExtender(tok, dup_rate=0.32, level="word"), ids, 2000)
    repeated = Counter()
    for d in draws:
        j, rep = 1, []
        for w, span in enumerate(words):
            block = [ids[i] for i in span]
            assert d[j:j + len(block)] == block
            j += len(block)
            if d[j:j + len(block)] == block:
                rep.append(w)
                j += len(block)
        assert d[j:] == [ids[-1]] and d[0] == ids[0]
        assert len(rep) <= max(2, math.floor(0.32 * len(words)))
        repeated.update(rep)
    assert set(repeated) == set(range(len(words)))  # every word, whatever its number of pieces


UNK_SENTENCES = ["☃ is a snowman", "the ☃ melted in the sun today", "she drew a small ☃"]  # ☃: [UNK] first, inside, last


def _unk_rate(pieces, sampling, level, rate=0.32):
    """P([UNK] is repeated in one draw) under the rule, analytically. Sub-words: the official train.py:516-518,
    add_len = randrange(min(10, int(rate * L))) positions from random.sample(range(1, L-1), add_len), L counting
    [CLS]/[SEP]; the paper, dup_len ~ U{0..max(2, int(rate * N))} (capped at N) uniform over the N = L - 2 sub-words.
    Words (## pieces join the word before): the paper over the W words; the official train.py:461-476,
    randrange(min(10, W, max(2, int(rate * W)))) words from range(0, W-1), never the last word."""
    inner = pieces[1:-1]
    if level == "subword":
        units, at = len(inner), inner.index("[UNK]")
    else:
        starts = [i for i, t in enumerate(inner) if not t.startswith("##")]
        units, at = len(starts), starts.index(inner.index("[UNK]"))
    if sampling == "paper":
        top = min(units, max(2, math.floor(rate * units)))
        return top / 2 / units
    if level == "subword":
        return (min(10, math.floor(rate * len(pieces))) - 1) / 2 / units
    top = min(10, units, max(2, math.floor(rate * units))) - 1
    return top / 2 / (units - 1) if at < units - 1 else 0.0


@pytest.mark.parametrize("sampling,level", [("paper", "subword"), ("official", "subword"), ("paper", "word"),
                                            ("official", "word")])
def test_unk_is_repeated_like_any_sub_word_and_cls_sep_padding_never(tok, sampling, level):
    """Only [CLS], the final [SEP] and padding are out of the official range(1, input_len-1); [UNK] is a
    sub-word (and a word) like the rest, at the start, inside and at the end of a sentence."""
    times = 2000
    sentences = UNK_SENTENCES + ["a longer sentence that pads the three others in this batch"]
    batch = tok(sentences, padding=True, return_tensors="pt")
    assert (batch["attention_mask"][:3] == 0).any()  # the [UNK] sentences are padded
    ids, mask = batch["input_ids"].repeat(times, 1), batch["attention_mask"].repeat(times, 1)
    torch.manual_seed(0)
    extender = LengthExtender(tok, dup_rate=0.32, level=level, sampling=sampling, seed=42)
    out, out_mask, _ = extender(ids, mask, torch.arange(len(ids)))
    repeated = Counter()
    for r in range(len(ids)):
        n, row = int(mask[r].sum()), out[r, :int(out_mask[r].sum())].tolist()
        assert row[0] == tok.cls_token_id and row.count(tok.cls_token_id) == 1  # [CLS] never repeated
        assert row[-1] == tok.sep_token_id and row.count(tok.sep_token_id) == 1  # nor the final [SEP]
        assert tok.pad_token_id not in row and (out[r, len(row):] == tok.pad_token_id).all()  # nor padding
        repeated[r % len(sentences)] += row.count(tok.unk_token_id) - ids[r, :n].tolist().count(tok.unk_token_id)
    for k, sentence in enumerate(UNK_SENTENCES):
        p = _unk_rate(tok.convert_ids_to_tokens(tok(sentence)["input_ids"]), sampling, level)
        assert abs(repeated[k] - times * p) <= 5 * math.sqrt(times * p * (1 - p)) + 1e-9, (sentence, repeated[k])
    if sampling == "official" and level == "word":
        assert repeated[2] == 0  # [UNK] is the last word: never, as the official word path
    else:
        assert all(repeated[k] > 0 for k in range(3))


def test_insertions_of_table_5(tok):
    ids = _row(12)
    torch.manual_seed(0)
    stop_ids = set(single_token_ids(tok, STOP_WORDS))
    assert tok.convert_tokens_to_ids("the") in stop_ids and len(stop_ids) > 100
    for extension, allowed in (("stopword", stop_ids), ("mask", {tok.mask_token_id})):
        for d in _draws(LengthExtender(tok, dup_rate=0.32, extension=extension), ids, 200):
            added = [t for t in d if t not in ids]
            assert len(added) == len(d) - len(ids) and set(added) <= allowed
            assert [t for t in d if t in ids] == ids  # inserted after tokens, none removed


def test_masked_prediction_fills_inserted_masks_with_the_mlm_top1(tok):
    generator = _tiny(tok, BertForMaskedLM, seed=3).eval()
    model = _model(tok, length_extension="masked_prediction", generator=generator, dup_sampling="official")
    batch = _batch(tok)
    ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
    masked, masked_mask, inserted = model.extender(ids, mask, batch["example_index"])
    assert inserted.any() and (masked[inserted] == tok.mask_token_id).all()
    with torch.no_grad():
        top1 = generator(input_ids=masked, attention_mask=masked_mask).logits.argmax(-1)
    filled, _ = model.positive(ids, mask, batch["example_index"])
    assert torch.equal(filled[inserted], top1[inserted]) and torch.equal(filled[~inserted], masked[~inserted])


def test_truncation_keeps_the_final_special_token(tok):
    ids = _row(30)
    torch.manual_seed(0)
    for d in _draws(LengthExtender(tok, dup_rate=1.0, max_length=34), ids, 100):
        assert len(d) <= 34 and d[-1] == 102


# ---- length buckets -----------------------------------------------------------------------------------------------

def test_length_buckets_batch_sentences_of_one_bucket_and_leave_the_default_order_alone():
    from datasets import Dataset

    assert parse_length_buckets("5") == [5] and parse_length_buckets("3-8") == [3, 4, 5, 6, 7]
    with pytest.raises(ValueError, match="a-b"):
        parse_length_buckets("8-3")
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 12, (1000,))
    ids = Dataset.from_dict({"ids0": [[101] + [1000] * int(n) + [102] for n in lengths]})
    plain = Batches(ids, 16, 7, 0)
    assert torch.equal(plain.order(0), torch.randperm(1000, generator=torch.Generator().manual_seed(7)))
    for spec, bounds in (("5", [5]), ("3-8", [3, 4, 5, 6, 7])):
        batches = Batches(ids, 16, 7, 0, length_buckets=spec)
        bucket = torch.bucketize(lengths, torch.tensor(bounds))
        expected_steps = sum(int((bucket == b).sum()) // 16 for b in range(len(bounds) + 1))
        assert batches.steps_per_epoch == expected_steps
        seen = set()
        for step in range(batches.steps_per_epoch):
            index = batches(step)["example_index"]
            assert len(set(bucket[index].tolist())) == 1
            seen.update(index.tolist())
        assert len(seen) == 16 * expected_steps  # no example twice in an epoch
        first = [bucket[batches(s)["example_index"][0]].item() for s in range(batches.steps_per_epoch)]
        assert first != sorted(first)  # buckets interleaved, not one after another
    assert len(bucketed_order(lengths, [5], 2000, g)) == 0


# ---- presets, training, resume ------------------------------------------------------------------------------------

def _queue(cfg) -> int:
    return ESimCSE.options_of(cfg).queue_length(cfg.batch_size)


def test_presets_carry_the_papers_hyperparameters():
    cfg = build_config("esimcse-bert", "paper")
    assert (cfg.method, cfg.lr, cfg.batch_size, cfg.dup_rate, _queue(cfg), cfg.momentum, cfg.epochs,
            cfg.eval_steps, cfg.pooler, cfg.dropout, cfg.temp) == \
        ("esimcse", 3e-5, 64, 0.32, 160, 0.995, 1, 125, "cls_before_pooler", 0.1, 0.05)
    cfg = build_config("esimcse-roberta-large", "paper")
    assert (cfg.model, cfg.lr, cfg.dup_rate, _queue(cfg), cfg.dropout) == \
        ("roberta-large", 1e-5, 0.28, 128, 0.15)
    # BERT-large's dropout is a variant: the paper's 0.15 (§4.2), the official run.sh's 0.1; --set wins over both
    assert [build_config("esimcse-bert-large", "paper", v).dropout for v in
            ([], ["esimcse_variant=official-code"], ["esimcse_variant=official-code", "dropout=0.12"])] == [0.15, 0.1, 0.12]
    assert _queue(build_config("esimcse-bert", "paper", ["queue_size=none", "batch_size=32"])) == 80
    assert variant_choices(ESimCSE.options_of(build_config("esimcse-bert", "paper", ["esimcse_variant=official-code"])),
                           VARIANTS) == \
        {"dup_sampling": "official", "momentum_init": "random"}
    with pytest.raises(ValueError, match="dup_rate"):
        build_config("esimcse-bert", "paper", ["dup_rate=1.5"])
    with pytest.raises(ValueError, match="length_extension"):
        build_config("esimcse-bert", "paper", ["length_extension=shuffle"])
    with pytest.raises(ValueError, match="BERT-large"):
        build_config("esimcse-bert-large", "cpu")


@pytest.mark.slow  # about a minute: three short smoke runs, each with an STS-B dev evaluation
def test_resume_with_a_non_empty_queue_equals_an_uninterrupted_run(data_dir, tmp_path, monkeypatch):
    def cfg(name):
        return build_config("esimcse-bert", "smoke", {"output_dir": str(tmp_path / name), "data_dir": str(data_dir),
                                                      "max_examples": 96, "save_steps": 2, "eval_steps": 100,
                                                      "log_steps": 1, "queue_size": 40})

    whole = train(cfg("whole"), progress=False)
    forward, calls = ESimCSE.forward, []

    def crash_at_step_5(self, batch):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return forward(self, batch)

    monkeypatch.setattr(ESimCSE, "forward", crash_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        train(cfg("cut"), progress=False)
    saved = load_file(str(tmp_path / "cut" / "checkpoint" / "model.safetensors"))
    assert int(saved["queue_filled"]) == 40 and saved["queue"].abs().sum() > 0  # 4 steps of 16: full
    monkeypatch.setattr(ESimCSE, "forward", forward)
    cut = train(cfg("cut"), progress=False)
    assert (whole["best"], whole["steps"]) == (cut["best"], cut["steps"])
    logs = [[json.loads(x) for x in (tmp_path / d / "log.jsonl").read_text().splitlines() if '"loss"' in x]
            for d in ("whole", "cut")]
    assert len(logs[0]) == 6 and logs[0] == logs[1]
    a, b = (load_file(str(tmp_path / d / "model" / "model.safetensors")) for d in ("whole", "cut"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not any("momentum" in k or "queue" in k for k in a)  # only the encoder is exported


# ---- notebooks ----------------------------------------------------------------------------------------------------

def _notebook(name, tmp_path, data_dir, **params):
    from conftest import REPO, run_notebook

    return run_notebook(REPO / "notebooks" / f"{name}.ipynb", tmp_path / f"{name}.out.ipynb",
                        {"data_dir": str(data_dir), "profile": "smoke", "results_dir": str(tmp_path / "results"),
                         **params})


# each case starts a kernel (~9 s): a few in the default run (the parameter parsing shared by every notebook,
# one check per paper), the rest with -m slow
@pytest.mark.parametrize("name,params,message", [
    ("esimcse_table9_dup_rate", {"dup_rate": 1.5}, "dup_rate must be"),
    pytest.param("esimcse_table10_queue", {"queue_factor": -1}, "multiples of the batch size", marks=SLOW),
    pytest.param("esimcse_table6_bucketing", {"bucket": "8-3"}, "bucket settings", marks=SLOW),
    pytest.param("esimcse_table5_extension", {"extension": "+Shuffling"}, "length-extension methods", marks=SLOW),
    pytest.param("esimcse_table3_sts", {"backbone": "gpt2"}, "unknown backbone", marks=SLOW),
    pytest.param("esimcse_table1_7_length_bias", {"length_unit": "chars"}, "length_unit must be one of words, tokens", marks=SLOW),
    pytest.param("esimcse_table1_7_length_bias", {"threshold": -1}, "threshold must be an integer >= 0", marks=SLOW),
    pytest.param("esimcse_table8_new_bias", {"overlap_low": 0.3, "overlap_high": 0.2}, "need 0 < overlap_low <= overlap_high", marks=SLOW),
    ("esimcse_table2_examples", {"dup_rate": 0.3}, r"unknown notebook parameter\(s\) \['dup_rate'\]"),
])
def test_bad_notebook_parameters_fail_in_the_first_cell(name, params, message, tmp_path, data_dir):
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match=message):
        _notebook(name, tmp_path, data_dir, **params)
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # a smoke training and its untrained start, with their STS-B dev evaluations
def test_table9_single_dup_rate_shows_the_papers_value(tmp_path, data_dir):
    from cse_kit import report
    from cse_kit.train.presets import PROFILES

    nb = _notebook("esimcse_table9_dup_rate", tmp_path, data_dir, dup_rate=0.32)
    [row] = report.table_of(nb)["comparison"]
    seeds = PROFILES["smoke"]["report"]["seeds"]  # one since the smoke profile's report seeds became one
    assert row["row"] == "0.32" and row["paper"] == 84.85 and row["n"] == len(seeds)
    shown = "".join(o.get("data", {}).get("text/html", "") for c in nb.cells for o in c.get("outputs", []))
    assert "84.85" in shown


def test_table_rows_share_runs_and_follow_the_paper():
    from cse_kit.papers import esimcse
    from cse_kit.data.published import paper_table

    t9 = {r.label: r for r in esimcse.table9_rows(esimcse.DUP_RATES)}
    assert list(t9) == list(paper_table(9, "esimcse").columns)
    t10 = {r.label: r for r in esimcse.table10_rows(esimcse.QUEUE_FACTORS, "paper")}
    assert list(t10) == list(paper_table(10, "esimcse").index)
    same = [build_config(r.preset, "paper", r.overrides) for r in (t9["0.32"], t10["2.5 × batch_size"])]
    assert same[0] == same[1] == build_config("esimcse-bert", "paper")  # one run behind both (and Table 4's ESimCSE)
    t6 = esimcse.table6_rows(esimcse.BUCKETS)
    assert [r.label for r in t6] == list(paper_table(6, "esimcse").columns)
    assert _queue(build_config(t6[0].preset, "paper", t6[0].overrides)) == 0
    t5 = esimcse.table5_rows(list(esimcse.EXTENSIONS))
    assert [r.label for r in t5] == list(paper_table(5, "esimcse").index)
    assert build_config(t5[-1].preset, "paper", t5[-1].overrides) == same[0]
    t3 = esimcse.table3_rows(list(esimcse.BACKBONE_LABELS), "cpu")
    assert {r.label.removesuffix(" (released checkpoint)") for r in t3} == set(paper_table(3, "esimcse").index)
    assert [r.preset for r in t3 if r.preset] == [f"esimcse-{b}" for b in esimcse.BACKBONE_LABELS]


# ---- Tables 1, 2, 7, 8: measurements on a model -------------------------------------------------------------------

class _Constant:
    """An encoder whose every sentence has the same embedding: every cosine is 1."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, sentences):
        import numpy as np

        return np.tile([[3.0, 4.0]], (len(sentences), 1))


def test_length_bias_splits_pairs_by_length_difference_and_averages_cos_minus_gold(tok, data_dir):
    import numpy as np

    from cse_kit.data import load_sts
    from cse_kit.papers.esimcse import length_bias

    encoder = _Constant(tok)
    bias = length_bias(encoder, data_dir)  # cos = 1: |cos - gold/5| = 1 - gold/5 on every pair
    pairs = load_sts("STSBenchmark", "test", data_dir)
    far = np.array([abs(len(p.sent1.split()) - len(p.sent2.split())) > 3 for p in pairs])
    miss = np.array([100 * (1 - p.score / 5) for p in pairs])
    assert 0 < far.sum() < len(pairs)
    assert bias[">"]["STS-B"] == pytest.approx(miss[far].mean()) and bias["≤"]["STS-B"] == pytest.approx(miss[~far].mean())
    for side in bias.values():
        assert list(side) == ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
        assert side["Avg."] == pytest.approx(np.mean([v for k, v in side.items() if k != "Avg."]))
    assert length_bias(encoder, data_dir, absolute=False) == bias  # cos >= gold everywhere: the signs agree
    everything = length_bias(encoder, data_dir, threshold=1000)
    assert math.isnan(everything[">"]["STS-B"]) and everything["≤"]["STS-B"] == pytest.approx(miss.mean())
    sick = np.array([p.score for p in load_sts("SICKRelatedness", "test", data_dir)])
    minmax = length_bias(encoder, data_dir, threshold=1000, gold="minmax")["≤"]
    assert minmax["SICK-R"] == pytest.approx(100 * (1 - (sick - 1) / 4).mean())
    assert minmax["STS-B"] == everything["≤"]["STS-B"]  # only SICK-R (1-5) is rescaled
    tokens = length_bias(encoder, data_dir, unit="tokens")
    assert tokens[">"]["STS-B"] != bias[">"]["STS-B"]  # sub-words split the pairs differently


def _long(rows):
    import pandas as pd

    return pd.DataFrame([{"row": r, "seed": s, "status": "ok", "reason": "", "Avg.": v} for r, s, v in rows])


def test_table1_and_the_gaps_are_read_off_table7():
    from cse_kit.papers.esimcse import length_gaps, table1_from_table7

    long = _long([("SimCSE (LD > 3)", 1, 10.0), ("SimCSE (LD ≤ 3)", 1, 13.0), ("SimCSE (LD > 3)", 2, 12.0),
                  ("SimCSE (LD ≤ 3)", 2, 13.0), ("ESimCSE (LD > 3)", 1, 20.0), ("ESimCSE (LD ≤ 3)", 1, 20.5),
                  ("ESimCSE (LD > 3)", 2, 20.0), ("ESimCSE (LD ≤ 3)", 2, 20.5)])
    table1 = table1_from_table7(long, 3)
    assert list(table1.row) == ["> 3", "≤ 3", "> 3", "≤ 3"] and list(table1["Avg. Similarity Diff"]) == [10, 13, 12, 13]
    gaps = length_gaps(long, 3).set_index("model")
    assert gaps.loc["SimCSE", "ours"] == 2.0 and gaps.loc["SimCSE", "ours per seed"] == "3.00, 1.00"
    assert (gaps.loc["SimCSE", "paper"], gaps.loc["ESimCSE", "paper"]) == (1.84, 0.71)  # ESimCSE Table 7
    assert gaps.loc["ESimCSE", "ours"] == 0.5
    other = long.assign(row=long.row.str.replace(" 3)", " 5)"))
    assert math.isnan(length_gaps(other, 5).set_index("model").loc["SimCSE", "paper"])  # the paper used 3 only


def test_table2_holds_the_papers_five_edits_as_plain_text():
    import pandas as pd

    from cse_kit.papers.esimcse import example_label, table2_comparison, table2_sentences

    examples = table2_sentences()
    original = examples[0][1]
    assert [e[2] for e in examples] == [1.0, 0.69, 0.32, 0.99, 0.98]
    assert "**" not in "".join(e[1] for e in examples) and "~~" not in "".join(e[1] for e in examples)
    assert examples[2][1] == original.replace("this apple", "this")  # the deletion removes the struck word
    assert examples[3][1].split() == original.replace("like", "like like").replace("so", "so so").replace(
        "and", "and and").split()
    labels = [example_label(m, x) for m, x, _ in examples]
    long = pd.DataFrame([{"row": "SimCSE", "seed": s, "status": "ok", "reason": "",
                          **{label: 0.5 + 0.1 * s for label in labels}} for s in (1, 2)]
                        + [{"row": "SimCSE (released checkpoint)", "seed": 1, "status": "not run",
                            "reason": "needs the Hub"}])
    comparison = table2_comparison(long).set_index(["row", "column"])
    cell = comparison.loc[(labels[1], "SimCSE")]
    assert (cell["paper"], cell["n"]) == (0.69, 2) and cell["mean"] == pytest.approx(0.65)
    assert cell["std"] == pytest.approx(0.1 / math.sqrt(2)) and cell["diff"] == pytest.approx(0.65 - 0.69)
    missing = comparison.loc[(labels[1], "SimCSE (released checkpoint)")]
    assert missing["n"] == 0 and missing["reason"] == "needs the Hub"


def test_new_bias_candidates_overlap_as_asked_and_repeat_exactly_the_overlapping_words():
    import random

    from cse_kit.papers.esimcse import new_bias_triples, overlap, repeat_overlapping, words

    q = "I like this apple because it looks very fresh"
    s1 = "This is a very tall tree and it looks like a giant."  # the paper's example
    assert overlap(q, s1) == pytest.approx(5 / 12)  # this, very, it, looks, like of 12 words
    assert repeat_overlapping(s1, q) == "This This is a very very tall tree and it it looks looks like like a giant."
    assert repeat_overlapping("fresh, so fresh!", q) == "fresh fresh, so fresh fresh!"
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(40)]
    corpus = [" ".join(rng.choices(vocab, k=rng.randint(6, 14))) for _ in range(400)]
    triples = new_bias_triples(corpus, queries=30, low=0.13, high=0.17, seed=3, pool=400)
    assert len(triples) == 30 and len({t[0] for t in triples}) == 30
    assert triples == new_bias_triples(corpus, queries=30, low=0.13, high=0.17, seed=3, pool=400)
    for q, s1, s2 in triples:
        assert q != s1 and 0.13 <= overlap(q, s1) <= 0.17
        shared = set(words(q))
        assert words(s2) == [x for w in words(s1) for x in ([w, w] if w in shared else [w])]
    disjoint = [f"a{i} b{i} c{i}" for i in range(50)]
    assert new_bias_triples(disjoint, queries=5) == []  # no query has a candidate: each is skipped


def test_analysed_models_are_ours_and_the_released_ones_on_the_paper_profile():
    from cse_kit.papers.esimcse import model_rows

    rows = model_rows("cpu")
    assert [r.label for r in rows] == ["SimCSE", "SimCSE (released checkpoint)", "ESimCSE",
                                       "ESimCSE (released checkpoint)"]
    assert [r.preset for r in rows] == ["simcse-bert", None, "esimcse-bert", None]
    assert all("Hub" in r.unavailable for r in rows[1::2])
    assert [r.model for r in model_rows("paper")[1::2]] == ["princeton-nlp/unsup-simcse-bert-base-uncased",
                                                           "ffgcc/esimcse-bert-base-uncased"]


@pytest.mark.slow  # two smoke trainings, and both models encode the seven STS test sets (about 30 s)
def test_length_bias_notebook_on_smoke_compares_tables_1_and_7_with_the_paper(tmp_path, data_dir):
    from cse_kit import report

    nb = _notebook("esimcse_table1_7_length_bias", tmp_path, data_dir, seeds=[1])
    table = report.table_of(nb)
    cells = {(c["row"], c["column"]): c for c in table["comparison"]}
    assert cells[("1: > 3", "Avg. Similarity Diff")]["paper"] == 16.34 and cells[("1: > 3", "Avg. Similarity Diff")]["n"] == 1
    assert cells[("7: ESimCSE (LD ≤ 3)", "Avg.")]["paper"] == 22.38 and cells[("7: ESimCSE (LD ≤ 3)", "Avg.")]["n"] == 1
    assert cells[("7: SimCSE (LD > 3) (released checkpoint)", "STS12")]["n"] == 0  # needs the Hub
    assert [g["model"] for g in table["extra"]["tables"]["Avg.(LD ≤ t) − Avg.(LD > t)"]] == ["SimCSE", "ESimCSE"]
    assert "threshold 3" in table["notes"][0]


def test_examples_notebook_on_smoke_scores_the_five_edits_with_each_model(tmp_path, data_dir):
    from cse_kit import report

    nb = _notebook("esimcse_table2_examples", tmp_path, data_dir, seeds=[1])
    lines = report.table_of(nb)["comparison"]
    assert {c["column"] for c in lines} == {"SimCSE", "SimCSE (released checkpoint)", "ESimCSE",
                                            "ESimCSE (released checkpoint)"}
    assert [c["paper"] for c in lines if c["column"] == "ESimCSE"] == [1.0, 0.69, 0.32, 0.99, 0.98]
    ours = [c for c in lines if c["n"] == 1]
    assert len(ours) == 10 and all(-1 <= c["mean"] <= 1 + 1e-6 for c in ours)
    assert all(c["mean"] == pytest.approx(1) for c in ours if c["row"].startswith("original sentence"))
    assert all("need the Hub" in c["reason"] for c in lines if c["n"] == 0)


@pytest.mark.slow  # two smoke trainings and 100 queries encoded by each model
def test_new_bias_notebook_on_smoke_shows_the_papers_numbers_and_the_gains(tmp_path, data_dir):
    from cse_kit import report

    nb = _notebook("esimcse_table8_new_bias", tmp_path, data_dir, seeds=[1], queries=20)
    table = report.table_of(nb)
    cells = {(c["row"], c["column"]): c for c in table["comparison"]}
    assert (cells[("SimCSE", "Sim⟨q,s1⟩")]["paper"], cells[("ESimCSE", "Sim⟨q,s2⟩")]["paper"]) == (26.39, 36.87)
    assert cells[("ESimCSE", "Sim⟨q,s2⟩")]["n"] == 1 and cells[("ESimCSE (released checkpoint)", "Sim⟨q,s2⟩")]["n"] == 0
    gains = {g["model"]: g for g in table["extra"]["tables"]["Sim⟨q,s2⟩ − Sim⟨q,s1⟩"]}
    assert (gains["SimCSE"]["paper"], gains["ESimCSE"]["paper"]) == (0.68, 0.05)
    ours = cells[("SimCSE", "Sim⟨q,s2⟩")]["mean"] - cells[("SimCSE", "Sim⟨q,s1⟩")]["mean"]
    assert gains["SimCSE"]["ours"] == pytest.approx(ours, abs=0.006)
    assert "20 queries from Wiki1M-sample" in table["notes"][0]
