"""MTEB through the mteb package (cse_kit.eval.mteb_eval), offline: MTEB tasks defined here over the kit's own local data
(STS-B test pairs, SST-2 sentences) run through mteb's own evaluation; kit models with a template, a prefix or
adapters give through the wrapper the vectors `cse-kit eval` gives; the results store keeps the results and
compare_methods shows them; a task whose data are not cached is refused in one line."""

import json

import mteb
import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict
from mteb.abstasks import AbsTaskClassification
from mteb.abstasks.sts import AbsTaskSTS

from cse_kit import cli
from cse_kit.eval import mteb_eval
from cse_kit.papers import comparison as cmp
from cse_kit.models.adapters import AdaptedEncoder, HoulsbyAdapters
from cse_kit.data import load_classification, load_sts
from cse_kit.eval import Encoder
from cse_kit.eval.sts import correlations, pair_scores, sample_pairs
from cse_kit.eval.transfer import sample_records
from cse_kit.models import build_smoke_model, load_model
from cse_kit.models.prefix import PrefixedEncoder
from cse_kit.eval.prompt import PROMPTBERT_BERT
from cse_kit.results import ResultStore
from cse_kit.train import build_config
from cse_kit.train.export import export_encoder, read_metadata

from conftest import FLOAT32, FLOAT64, agrees, assert_ranks_cannot_swap, rerandomize


def _metadata(name: str, kind: str, main_score: str, splits: list[str]) -> mteb.TaskMetadata:
    return mteb.TaskMetadata(name=name, dataset={"path": f"cse-kit-tests/{name}", "revision": "local"},
                             description=f"{kind} over the kit's local data", type=kind, category="t2t",
                             modalities=["text"], eval_splits=splits, eval_langs=["eng-Latn"], main_score=main_score)


def sts_task(data_dir, sample: int | None = None):
    """STS-B test as an MTEB STS task (gold 0-5, mteb's default range); `sample`: that many of its pairs."""
    pairs = load_sts("STSBenchmark", "test", data_dir)
    pairs = sample_pairs(pairs, sample) if sample else pairs

    class LocalSTSBenchmark(AbsTaskSTS):
        metadata = _metadata("LocalSTSBenchmark", "STS", "cosine_spearman", ["test"])

        def load_data(self, num_proc=None, **kwargs):
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentence1": [p.sent1 for p in pairs], "sentence2": [p.sent2 for p in pairs],
                 "score": [p.score for p in pairs]})})
            self.data_loaded = True

    return LocalSTSBenchmark(), pairs


def sst2_task(data_dir):
    """200 SST-2 train and 100 test sentences as an MTEB classification task (mteb's logistic regression over
    subsampled training sets, its own seeds)."""
    splits = {split: sample_records(load_classification("SST2", split, data_dir), size)
              for split, size in (("train", 200), ("test", 100))}

    class LocalSST2(AbsTaskClassification):
        metadata = _metadata("LocalSST2", "Classification", "accuracy", ["test"])

        def load_data(self, num_proc=None, **kwargs):
            self.dataset = DatasetDict({split: Dataset.from_dict({"text": [r.text for r in records],
                                                                  "label": [r.label for r in records]})
                                        for split, records in splits.items()})
            self.data_loaded = True

    return LocalSST2()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Tiny random kit exports as training writes them: PromptBERT (denoised template), DiffAug with its prefix,
    DiffAug with adapters (both at the template's [MASK])."""
    import copy

    root = tmp_path_factory.mktemp("exports")
    tokenizer, smoke = build_smoke_model("smoke-bert")
    rerandomize(smoke, 7, 0.2)
    out = {}
    for kind in ("promptbert", "diffaug-prefix", "diffaug-adapters"):
        bert = copy.deepcopy(smoke)
        if kind == "diffaug-prefix":
            table = torch.randn(4, 2 * bert.config.num_hidden_layers * bert.config.hidden_size,
                                generator=torch.Generator().manual_seed(1))
            model = PrefixedEncoder(bert, table)
        elif kind == "diffaug-adapters":
            adapters = HoulsbyAdapters(bert, rank=4, init_std=0.2)
            model = AdaptedEncoder(bert, adapters)
        else:
            model = bert
        pooler = "prompt_mask_denoised" if kind == "promptbert" else "prompt_mask"
        out[kind] = export_encoder(model, tokenizer, root / kind, {"method": kind.split("-")[0], "pooler": pooler,
                                                                   "template": PROMPTBERT_BERT})
    return out


def test_an_mteb_sts_task_scores_the_kits_spearman_of_cosine_on_the_same_pairs(data_dir, minilm):
    """The same vectors (the kit's encoder on the same sentence lists), cosines computed apart: mteb's in float32,
    the kit's in float64. On 100 pairs whose MiniLM cosines lie at least 5e-4 apart no rounding reorders them, so
    the two Spearman correlations are one statistic of the same ranks (on all 1,379 pairs some cosines tie)."""
    task, pairs = sts_task(data_dir, sample=100)
    encoder = Encoder(minilm[1], minilm[0], "avg", progress=False)
    result = mteb_eval.evaluate_task(mteb_eval.KitEncoder(encoder, "minilm"), task)
    sims, gold = pair_scores(encoder, pairs)
    assert_ranks_cannot_swap(sims, FLOAT32)
    assert (result["main_score_name"], result["revision"]) == ("cosine_spearman", "local")
    assert 100 * result["main_score"] == agrees(correlations(sims, gold)["spearman"], FLOAT64)
    assert result["splits"] == {"test": {"default": result["main_score"]}}
    assert result["mteb_version"] == mteb.__version__ and json.dumps(result)  # the full result is JSON


def test_an_mteb_classification_task_is_reproducible_run_to_run(data_dir, minilm):
    encoder = Encoder(minilm[1], minilm[0], "avg", progress=False)
    first, second = (mteb_eval.evaluate_task(mteb_eval.KitEncoder(encoder, "minilm"), sst2_task(data_dir))
                     for _ in range(2))
    assert first["main_score_name"] == "accuracy" and 0.6 < first["main_score"] < 1  # well above chance (0.5)
    assert first["result"]["scores"] == second["result"]["scores"]


@pytest.mark.parametrize("kind", ["promptbert", "diffaug-prefix", "diffaug-adapters"])
def test_kit_models_give_through_the_wrapper_the_vectors_and_sts_score_of_cse_kit_eval(
        kind, exported, data_dir, tmp_path, monkeypatch, capsys):
    from mteb._create_dataloaders import create_dataloader

    model_dir = exported[kind]
    task, pairs = sts_task(data_dir)
    sentences = [p.sent1 for p in pairs[:300]]
    # cse-kit eval's encoder: the model as load_model puts it back together, the pooler and template of cse_kit.json
    tokenizer, model = load_model(str(model_dir))
    meta = read_metadata(model_dir)
    reference = Encoder(model, tokenizer, meta["pooler"], template=meta["template"], progress=False)
    assert isinstance(model, {"promptbert": type(model), "diffaug-prefix": PrefixedEncoder,
                              "diffaug-adapters": AdaptedEncoder}[kind])
    tokenizer, model = load_model(str(model_dir))
    wrapper = mteb_eval.KitEncoder(Encoder(model, tokenizer, meta["pooler"], template=meta["template"],
                                           progress=False), str(model_dir))
    loader = create_dataloader(Dataset.from_dict({"text": sentences}), task_metadata=task.metadata, batch_size=32)
    got = wrapper.encode(loader, task_metadata=task.metadata, hf_split="test", hf_subset="default")
    np.testing.assert_allclose(got, reference.encode(sentences), atol=1e-6, rtol=0)

    # end to end: `cse-kit eval --benchmark mteb` on the STS-B test pairs scores what `cse-kit eval` scores
    monkeypatch.setattr(mteb_eval, "resolve_tasks", lambda spec: [sts_task(data_dir)[0]])
    senteval, mteb_out = tmp_path / "senteval.json", tmp_path / "mteb.json"
    assert cli.main(["eval", "--model", str(model_dir), "--tasks", "STSBenchmark", "--data-dir", str(data_dir),
                     "--batch-size", "64", "--output", str(senteval)]) == 0
    assert cli.main(["eval", "--model", str(model_dir), "--benchmark", "mteb", "--tasks", "LocalSTSBenchmark",
                     "--results-dir", str(tmp_path / "results"), "--output", str(mteb_out)]) == 0
    spearman = json.loads(senteval.read_text())["sts"]["STSBenchmark"]["test"]["spearman"]
    # the two runs batch different sentence sets (vectors equal to 1e-6, above), so a near-tie among the tiny random
    # model's cosines may swap: 1e-3 points, where another pooler or template moves the score by whole points
    assert 100 * json.loads(mteb_out.read_text())["tasks"]["LocalSTSBenchmark"]["main_score"] == pytest.approx(
        spearman, abs=1e-3)


def test_mteb_results_go_into_the_runs_record_and_compare_methods_shows_them(data_dir, tmp_path, monkeypatch,
                                                                             capsys):
    store = ResultStore(tmp_path, data_dir)
    record = store.get(build_config("simcse-bert", "smoke", {"seed": 1}), ("sts_pairs",))
    model_dir = tmp_path / "runs" / record["key"] / "model"
    assert store.run_of_model(model_dir) == record["key"] and store.run_of_model(data_dir) is None
    gold = cmp.gold(data_dir)
    without = cmp.with_mteb_average(cmp.summary(__import__("pandas").DataFrame(
        [{"row": "SimCSE (paper recipe)", "seed": 1, "status": "ok", **cmp.columns(gold, None)(record)}])))
    assert not [c for c in without if "MTEB" in c]  # nothing when no run has MTEB results

    monkeypatch.setattr(mteb_eval, "resolve_tasks", lambda spec: [sts_task(data_dir)[0], sst2_task(data_dir)])
    argv = ["eval", "--model", str(model_dir), "--benchmark", "mteb", "--tasks", "LocalSTSBenchmark,LocalSST2",
            "--results-dir", str(tmp_path), "--output", str(tmp_path / "full.json")]
    assert cli.main(argv) == 0
    shown = capsys.readouterr().out
    assert f"MTEB {mteb.__version__}" in shown and "LocalSST2" in shown and f"record {record['key']}" in shown
    stored = json.loads(store.record_path(record["key"]).read_text())["metrics"]["mteb"]
    assert set(stored) == {"LocalSTSBenchmark", "LocalSST2"}
    assert {(r["mteb_version"], r["revision"]) for r in stored.values()} == {(mteb.__version__, "local")}
    assert stored["LocalSST2"]["splits"]["test"]["default"] == stored["LocalSST2"]["main_score"]
    full = json.loads((tmp_path / "full.json").read_text())["tasks"]
    assert full["LocalSST2"]["result"]["scores"]["test"][0]["accuracy"] == stored["LocalSST2"]["main_score"]

    assert cli.main(argv) == 0  # a second time: reused from the store
    assert "reused from the results store: LocalSTSBenchmark, LocalSST2" in capsys.readouterr().out

    record = json.loads(store.record_path(record["key"]).read_text())
    long = cmp.with_mteb_average(__import__("pandas").DataFrame(
        [{"row": cmp.label("SimCSE", "paper recipe"), "seed": 1, "status": "ok",
          **cmp.columns(gold, None)(record)}]))
    assert long.loc[0, "MTEB LocalSST2"] == 100 * stored["LocalSST2"]["main_score"]
    assert long.loc[0, "Avg. MTEB"] == pytest.approx(50 * sum(r["main_score"] for r in stored.values()))
    assert "Avg. MTEB mean" in cmp.summary(long)
    table = cmp.mteb_table(long)
    assert list(table.columns) == ["recipe", "method", "MTEB LocalSTSBenchmark", "MTEB LocalSST2", "Avg. MTEB",
                                   "seeds"]


def test_a_task_whose_data_are_not_cached_is_refused_offline_in_one_line(exported, tmp_path, monkeypatch, capsys):
    import datasets
    import huggingface_hub

    # an empty cache, whatever this machine has cached
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = cli.main(["eval", "--model", str(exported["promptbert"]), "--benchmark", "mteb", "--tasks",
                     "STSBenchmark", "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("cse-kit: error: MTEB task STSBenchmark: its data (Hub dataset mteb/stsbenchmark-sts")
    assert "not cached here" in err and "HF_HUB_OFFLINE=1" in err


def test_task_names_benchmarks_and_the_default_resolve_and_a_typo_is_refused():
    default = mteb_eval.resolve_tasks("default")
    assert [t.metadata.name for t in default] == list(mteb_eval.CPU_TASKS)
    full = mteb_eval.resolve_tasks(f"STS12,{mteb_eval.FULL_ENGLISH}")
    assert len(full) == 41 and sum(t.metadata.name == "STS12" for t in full) == 1
    english = {t.metadata.name: t.hf_subsets for t in full}
    assert {t.metadata.name: t.hf_subsets for t in default} == {n: english[n] for n in mteb_eval.CPU_TASKS}
    assert english["STS17"] == ["en-en"]
    with pytest.raises(ValueError, match="'STS-12' is neither an MTEB task nor an MTEB benchmark"):
        mteb_eval.resolve_tasks("STS-12")


def test_texts_longer_than_the_model_takes_are_cut_inside_the_template(exported):
    tokenizer, model = load_model(str(exported["diffaug-prefix"]))
    encoder = Encoder(model, tokenizer, "prompt_mask", template=PROMPTBERT_BERT, progress=False)
    wrapper = mteb_eval.KitEncoder(encoder, "prefixed")
    assert wrapper.budget == 512 - 4 - len(encoder.template)  # positions less the prefix and the template
    shorter = Encoder(model, tokenizer, "prompt_mask", template=PROMPTBERT_BERT, max_length=64, progress=False)
    assert mteb_eval.KitEncoder(shorter, "prefixed").budget == 64 - len(encoder.template)  # --max-length
    long_text = "unbelievably " * 600
    cut = mteb_eval.fit_texts(tokenizer, [long_text, "short"], wrapper.budget)
    assert cut[1] == "short" and long_text.startswith(cut[0])
    assert wrapper.budget - 4 <= len(tokenizer(cut[0], add_special_tokens=False)["input_ids"]) <= wrapper.budget
    assert np.isfinite(encoder.encode(cut)).all()  # the [MASK] is kept and the positions fit
