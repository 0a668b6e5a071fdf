"""End to end on the real shared data with all-MiniLM-L6-v2, against numbers measured with the original protocol.

Reference values: SimCSE's SentEval fork + its evaluation.py batcher (avg pooler), run outside this project on the
same files and model (docs/evaluation.md says how)."""

import json

import pytest

from cse_kit.cli import main
from cse_kit.eval import DevEvaluator, Encoder, evaluate, load_task
from cse_kit.eval.transfer import evaluate_transfer_task

ORIGINAL_STSB_DEV_AVG = 86.7170  # original SentEval, STS-B dev Spearman x100, all-MiniLM-L6-v2, avg pooler
ORIGINAL_CR_FASTTEST = (82.98, 82.07)  # original SentEval fasttest devacc/acc on the same CR embeddings


def test_cli_stsb_dev_matches_the_original_protocol(data_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["eval", "--model", "all-MiniLM-L6-v2", "--pooler", "avg", "--tasks", "STSBenchmark", "--mode", "dev",
               "--data-dir", str(data_dir), "--output", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "STSBenchmark" in printed and "pooler avg" in printed
    r = json.loads(out.read_text())
    assert (r["model"], r["pooler"], r["mode"]) == ("all-MiniLM-L6-v2", "avg", "dev")
    assert r["sts"]["STSBenchmark"]["dev"]["n"] == 1500 and "test" not in r["sts"]["STSBenchmark"]
    assert r["sts"]["STSBenchmark"]["dev"]["spearman"] == pytest.approx(ORIGINAL_STSB_DEV_AVG, abs=0.01)
    assert r["environment"]["device"] == "cpu" and r["timings"]["distinct_sentences"] > 2500


def test_dev_evaluator_gives_the_same_number_and_restores_train_mode(data_dir, minilm):
    tokenizer, model = minilm
    model.train()
    dev = DevEvaluator(tokenizer, "avg", data_dir)
    r = dev(model)
    assert model.training
    assert r["stsb_spearman"] == pytest.approx(ORIGINAL_STSB_DEV_AVG, abs=0.01)
    model.eval()


def test_transfer_cr_fasttest_equals_the_original(data_dir, minilm):
    enc = Encoder(minilm[1], minilm[0], "avg", progress=False)
    r = evaluate_transfer_task(enc, load_task("CR", data_dir), "fasttest")
    assert (r["devacc"], r["acc"]) == ORIGINAL_CR_FASTTEST
    assert (r["ndev"], r["ntest"]) == (3775, 3775)


def test_bad_arguments_fail_before_any_work(capsys):
    assert main(["eval", "--model", "all-MiniLM-L6-v2", "--pooler", "avg", "--tasks", "STS17"]) == 2
    assert "unknown task(s) STS17" in capsys.readouterr().err
    assert main(["eval", "--model", "all-MiniLM-L6-v2", "--pooler", "avg", "--tasks", "sts,nonsense"]) == 2
    assert "unknown task(s) nonsense;" in capsys.readouterr().err
    assert main(["eval", "--model", "runs/nothing/model", "--tasks", "sts"]) == 2
    assert "model path runs/nothing/model does not exist" in capsys.readouterr().err


def test_task_sets_combine_with_task_names():
    from cse_kit.eval import parse_tasks

    assert parse_tasks("sts,MR") == (*parse_tasks("sts"), "MR")


@pytest.mark.slow
def test_all_tasks_fasttest(data_dir, minilm):
    enc = Encoder(minilm[1], minilm[0], "avg", progress=False)
    r = evaluate(enc, "all", "fasttest", data_dir)
    assert set(r["sts"]) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"}
    assert set(r["transfer"]) == {"MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "avg"}
    assert 70 < r["sts"]["avg"] < 90 and 75 < r["transfer"]["avg"] < 95


def test_a_transfer_sample_keeps_each_class_its_share_in_file_order(data_dir):
    from cse_kit.data import load_classification
    from cse_kit.eval.transfer import SAMPLE_MIN_PER_CLASS, sample_records

    trec = load_classification("TREC", "train", data_dir)
    sample = sample_records(trec, 1000)
    again = sample_records(trec, 1000)
    assert sample == again and abs(len(sample) - 1000) <= 6  # one rounding per class
    position = {id(r): i for i, r in enumerate(trec)}
    assert [position[id(r)] for r in sample] == sorted(position[id(r)] for r in sample)  # file order
    for label in {r.label for r in trec}:
        share = sum(r.label == label for r in trec) / len(trec)
        got = sum(r.label == label for r in sample)
        assert got >= SAMPLE_MIN_PER_CLASS and got == pytest.approx(max(SAMPLE_MIN_PER_CLASS, 1000 * share), abs=1)
    assert sample_records(trec[:50], 1000) == trec[:50]  # a split within the size stays whole


def test_an_sts_sample_keeps_every_subset_in_file_order(data_dir):
    from cse_kit.eval.sts import sts_pairs

    whole, sample = sts_pairs("STS16", "test", data_dir)["test"], sts_pairs("STS16", "test", data_dir, 100)["test"]
    assert sample == sts_pairs("STS16", "test", data_dir, 100)["test"]  # a fixed seed
    position = {id(p): i for i, p in enumerate(whole)}
    assert [position[id(p)] for p in sample] == sorted(position[id(p)] for p in sample)  # file order
    subsets = {p.subset for p in whole}
    assert len(subsets) == 5 and all(sum(p.subset == s for p in sample) == 100 for s in subsets)
    sick = sts_pairs("SICKRelatedness", "test", data_dir, 1000)
    assert [len(sick[split]) for split in ("dev", "test")] == [500, 1000]  # dev has 500: kept whole


def test_the_smoke_profile_evaluates_sts_test_on_its_sample_and_says_so(data_dir, tmp_path):
    from cse_kit.results import Pretrained, ResultStore

    sts = ResultStore(tmp_path, data_dir).get(Pretrained("smoke-bert", "avg", "smoke"), ("sts_test",))["metrics"]
    sts = sts["sts_test"]
    assert sts["sample_per_subset"] == 100 and sts["STS12"]["n"] == 500 and sts["STSBenchmark"]["test"]["n"] == 100
    assert all(s["n"] == 100 for s in sts["STS14"]["subsets"].values()) and -100 < sts["avg"] < 100


def test_the_smoke_profile_evaluates_transfer_on_its_sample_and_says_so(data_dir, tmp_path):
    from cse_kit.results import Pretrained, ResultStore

    record = ResultStore(tmp_path, data_dir).get(Pretrained("smoke-bert", "avg", "smoke"), ("transfer_fasttest",))
    transfer = record["metrics"]["transfer_fasttest"]
    assert transfer["sample_per_split"] == 1000 and transfer["mode"] == "fasttest"
    assert transfer["MR"]["ntest"] == 1000 and transfer["SST2"]["ndev"] == 872  # SST2 dev has 872: kept whole
    assert transfer["MRPC"]["ntest"] == 1000 and transfer["TREC"]["ntest"] == 500
    assert 0 < transfer["avg"] < 100
