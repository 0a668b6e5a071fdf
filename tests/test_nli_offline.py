"""Offline NLI triplets ("SNLI-triplets", from SNLI dev/test) and the label-fraction subsets of DiffAug."""

import pytest

from cse_kit import data
from cse_kit.train.data import is_nli, load_examples, subsample_examples, tokenize

#: triplets from the SentEval copy of SNLI (../shared/data/senteval): 2,943 from dev + 2,921 from test
SNLI_TRIPLETS = 5864


def raw_snli(data_dir, split):
    """(premise, hypothesis, label) straight from SNLI's s1/s2/labels files, whitespace-normalized."""
    folder = data_dir / "downstream" / "SNLI"
    s1, s2, labels = ((folder / f"{f}.{split}").read_text(encoding="utf-8").splitlines()
                      for f in ("s1", "s2", "labels"))
    return [(" ".join(a.split()), " ".join(b.split()), lab) for a, b, lab in zip(s1, s2, labels, strict=True)]


@pytest.fixture(scope="module")
def triplets(data_dir):
    return data.load_snli_triplets(data_dir)


def test_count_and_labels_against_the_label_files(data_dir, triplets):
    assert len(triplets) == SNLI_TRIPLETS
    assert all(isinstance(t, data.NliTriplet) for t in triplets)
    rows = {split: raw_snli(data_dir, split) for split in ("dev", "test")}
    labelled = {row for split_rows in rows.values() for row in split_rows}
    for t in triplets:
        assert (t.anchor, t.positive, "entailment") in labelled, t
        assert (t.anchor, t.negative, "contradiction") in labelled, t
    # the documented rule, dev then test: per premise (first appearance), its first entailment and contradiction
    expected = []
    for split in ("dev", "test"):
        first: dict[str, dict[str, str]] = {}
        for premise, hypothesis, label in rows[split]:
            first.setdefault(premise, {}).setdefault(label, hypothesis)
        expected += [(p, h["entailment"], h["contradiction"]) for p, h in first.items()
                     if "entailment" in h and "contradiction" in h]
    assert [(t.anchor, t.positive, t.negative) for t in triplets] == expected


def test_deterministic_and_a_training_source(data_dir, triplets):
    assert data.load_snli_triplets(data_dir) == triplets
    examples = load_examples("SNLI-triplets", data_dir)
    assert examples == [(t.anchor, t.positive, t.negative) for t in triplets]
    assert is_nli("SNLI-triplets") and all(len(ex) == 3 for ex in examples)
    assert load_examples("SNLI-triplets", data_dir, max_examples=10) == examples[:10]


def test_tokenized_into_three_columns(data_dir, tmp_path):
    from transformers import AutoTokenizer

    from cse_kit.models import resolve_reference

    tokenizer = AutoTokenizer.from_pretrained(resolve_reference("all-MiniLM-L6-v2"), local_files_only=True)
    examples = subsample_examples(load_examples("SNLI-triplets", data_dir), 0.01, 0)
    dataset = tokenize(examples, tokenizer, 32, tmp_path)
    assert sorted(dataset.column_names) == ["ids0", "ids1", "ids2"] and len(dataset) == 59


def test_subsample_size_order_and_seeds(data_dir):
    examples = load_examples("SNLI-triplets", data_dir)
    assert subsample_examples(examples, 1.0, 3) is examples
    for fraction, size in ((0.01, 59), (0.1, 586)):
        subsets = [subsample_examples(examples, fraction, seed) for seed in range(5)]
        assert all(len(s) == size for s in subsets)
        assert subsets[0] == subsample_examples(examples, fraction, 0)  # the same seed, the same subset
        assert len({tuple(s) for s in subsets}) == 5  # five seeds, five different subsets
        index = {ex: i for i, ex in enumerate(examples)}
        for s in subsets:
            positions = [index[ex] for ex in s]
            assert positions == sorted(positions) and len(set(positions)) == size  # order kept, no repeats
    assert len(subsample_examples(examples[:10], 0.01, 0)) == 1  # at least one example


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5, float("nan")])
def test_subsample_refuses_a_bad_fraction(fraction):
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        subsample_examples([("a",), ("b",)], fraction, 0)


def test_missing_snli_names_the_import(tmp_path, monkeypatch):
    monkeypatch.setenv("CSE_KIT_OFFLINE", "1")
    with pytest.raises(data.MissingDatasetError, match=r"dataset SNLI is missing from .*Fix: `cse-kit data import "
                       r"\.\./shared/data/senteval/senteval_downstream\.tar\.gz --data-dir ") as err:
        load_examples("SNLI-triplets", tmp_path)
    assert err.value.dataset == "SNLI" and "cse-kit data download SNLI" in str(err.value)
