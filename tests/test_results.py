"""The results store, the paper's numbers as data, the table definitions and the comparison arithmetic."""

import json
import math
import os
import re

import pandas as pd
import pytest

from cse_kit import experiments as ex
from cse_kit import results
from cse_kit.papers import diffcse
from cse_kit.data.published import paper_table, paper_value
from cse_kit.progress import PROGRESS_PREFIX
from cse_kit.results import Pretrained, ResultStore, record_key
from cse_kit.train.presets import PROFILES, build_config

from conftest import REPO, SHARED


def _papers_md_row(table_heading: str, row: str) -> list[float]:
    """A row of a table in papers.md §5.1, read from the markdown itself."""
    text = (SHARED / "spec" / "papers.md").read_text()
    section = text[text.index(table_heading):]
    line = next(ln for ln in section.splitlines() if ln.startswith("|") and row in ln.split("|")[1])
    return [float(c) for c in line.strip().strip("|").split("|")[1:]]


@pytest.mark.parametrize("heading,table,row,ours", [
    ("**Table 1**", 1, "* DiffCSE-BERT-base", "DiffCSE-BERT-base"),
    ("**Table 1**", 1, "* SimCSE-RoBERTa-base (reproduce)", "SimCSE-RoBERTa-base (reproduce)"),
    ("**Table 2**", 2, "* DiffCSE-RoBERTa-base", "DiffCSE-RoBERTa-base"),
    ("**Table 6**", 6, "BERT-mini (L=4, H=256)", "BERT-mini (L=4, H=256)"),
    ("**Table 8**", 8, "STS-B", "STS-B"),
    ("**Table 10**", 10, "DiffCSE-BERT-base", "DiffCSE-BERT-base"),
    ("**Table 11**", 11, "SimCSE-BERT-base", "SimCSE-BERT-base"),
])
def test_paper_values_match_papers_md(heading, table, row, ours):
    assert paper_table(table).loc[ours].tolist() == _papers_md_row(heading, row)


def test_paper_value_names_the_cell_it_cannot_find():
    assert paper_value(8, "STS-B", "0.005") == 84.56
    with pytest.raises(KeyError, match="no cell"):
        paper_value(8, "STS-B", "0.3")


def test_shared_rows_are_one_run():
    """The paper's identities: λ=0 = SimCSE w/ BN; DiffCSE w/ BN = DistilBERT = 30% masking = λ 0.005."""
    def key(row):
        return record_key(row.subject("smoke", 1))

    t5 = {r.label: key(r) for r in diffcse.table5_rows()}
    assert key(diffcse.table8_rows([0.0])[0]) == t5["SimCSE w/ BatchNorm"]
    same = {t5["DiffCSE w/ BatchNorm"], key(diffcse.table8_rows([0.005])[0]), key(diffcse.table7_rows([0.3])[0]),
            key(diffcse.table6_rows(["distilbert"], "smoke")[1])}
    assert len(same) == 1
    assert len(set(t5.values())) == 4
    assert key(diffcse.table8_rows([0.01])[0]) != t5["DiffCSE w/ BatchNorm"]


def test_generators_without_offline_checkpoint_are_not_run_with_a_reason():
    rows = diffcse.table6_rows(["bert-tiny"], "cpu")
    with pytest.raises(Exception, match="no offline checkpoint"):
        rows[1].subject("cpu", 1)
    assert rows[1].label == "BERT-tiny (L=2, H=128)"


@pytest.mark.parametrize("call,message", [
    (lambda: diffcse.check_lams([0.005, -1.0]), "λ must be"),
    (lambda: diffcse.check_mask_ratios([0.3, 1.0]), r"\(0, 1\)"),
    (lambda: diffcse.check_generators(["gpt2"]), "unknown generator"),
    (lambda: ex.resolve_profile("laptop"), "unknown profile"),
    (lambda: ex.sweep([], None, "λ"), "no λ values"),
])
def test_bad_parameters_fail_with_the_fix(call, message):
    with pytest.raises(ex.ParameterError, match=message):
        call()


def test_sweep_single_value_overrides_the_list():
    assert ex.sweep([0.0, 0.1], 0.005, "λ") == [0.005]
    assert ex.sweep([0.0, 0.1], None, "λ") == [0.0, 0.1]


def test_compare_mean_std_and_difference():
    long = pd.DataFrame([
        {"row": "0.005", "seed": 1, "status": "ok", "reason": "", "STS-B": 80.0},
        {"row": "0.005", "seed": 2, "status": "ok", "reason": "", "STS-B": 82.0},
        {"row": "0.1", "seed": 1, "status": "not run", "reason": "why"}])
    out = ex.compare(long, 8, ["STS-B"], ex.sweep_cell("STS-B")).set_index("row")
    assert out.loc["0.005", "paper"] == 84.56
    assert out.loc["0.005", "mean"] == 81.0
    assert out.loc["0.005", "std"] == pytest.approx(math.sqrt(2))
    assert out.loc["0.005", "diff"] == pytest.approx(-3.56)
    assert out.loc["0.1", "n"] == 0 and out.loc["0.1", "reason"] == "why" and math.isnan(out.loc["0.1", "mean"])
    shown = ex.show(out.reset_index(), "Table 8")._repr_html_()
    assert "84.56</span><br><b>81.00 ± 1.41</b><br><span class='delta' style='color:#cf222e'>-3.56" in shown


def test_parameter_count_formula_equals_a_real_diffcse(data_dir):
    from cse_kit.methods import DiffCSE
    from cse_kit.models import load_model
    from transformers import AutoModelForMaskedLM

    tokenizer, encoder = load_model("smoke-bert")
    _, generator = load_model("smoke-bert-mlm", model_class=AutoModelForMaskedLM)
    real = DiffCSE(encoder, generator, tokenizer, mask_ratio=0.3, lam=0.005, projector="batchnorm")
    trainable = sum(p.numel() for p in real.parameters() if p.requires_grad)
    counts = diffcse.count_parameters(encoder)
    assert counts["DiffCSE (train)"] == trainable
    assert counts["DiffCSE (test)"] == sum(p.numel() for p in encoder.parameters())


def test_paper_profile_counts_are_the_papers_table_14():
    counts = diffcse.parameter_table("paper")
    for method, per in counts.items():
        for backbone, n in per.items():
            assert round(n / 1e6) == pytest.approx(paper_value(14, method, backbone), abs=2)


def test_store_reuses_records_and_adds_evaluations(data_dir, tmp_path, counted):
    store = ResultStore(tmp_path, data_dir)
    subject = Pretrained("smoke-bert", "avg", "smoke")
    first = store.get(subject, ("sts_dev",))
    assert counted == ["sts_dev"] and 0 < abs(first["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"]) < 100
    again = ResultStore(tmp_path, data_dir).get(subject, ("sts_dev",))
    assert counted == ["sts_dev"] and again["metrics"] == json.loads(json.dumps(first["metrics"]))
    store.get(subject, ("sts_dev", "geometry"))
    assert counted == ["sts_dev", "geometry"]
    record = json.loads(store.record_path(first["key"]).read_text())
    assert {"sts_dev", "geometry"} <= set(record["metrics"]) and record["code_version"] and record["data_checksums"]
    ResultStore(tmp_path, data_dir, force=True).get(subject, ("sts_dev",))
    assert counted[-1] == "sts_dev" and len(counted) == 3


def test_a_record_that_is_not_json_is_refused_until_moved_away_then_recomputed(data_dir, tmp_path, counted):
    """The store's writes are atomic, so a record cut short was damaged or replaced after it was written: it is
    refused in one line naming it and the fix, and left where it is, never read or replaced."""
    store = ResultStore(tmp_path, data_dir)
    subject = Pretrained("smoke-bert", "avg", "smoke")
    key = store.get(subject, ("sts_dev",))["key"]
    path = store.record_path(key)
    path.write_text('{"key": "' + key + '", "metr')
    for ask in (lambda: store.get(subject, ("sts_dev",)), store.check_readable):
        with pytest.raises(results.UnreadableRecord, match=f"result record {path} is not JSON") as refused:
            ask()
        assert "\n" not in str(refused.value) and f"move it out of {path.parent} or delete it" in str(refused.value)
    assert counted == ["sts_dev"] and path.read_text().endswith('"metr') and not store.has(subject, ("sts_dev",))
    path.rename(tmp_path / "looked-at.json")
    assert store.get(subject, ("sts_dev",))["metrics"]["sts_dev"] and counted == ["sts_dev", "sts_dev"]


def test_trained_runs_are_reused_not_retrained(data_dir, tmp_path, monkeypatch, capsys):
    """A notebook's store (its progress line as notify) takes a run's training header too: on stdout it was the
    notebook's output, and the report's page showed it above the table (12 lines above DiffAug Table 6)."""
    cfg = build_config("simcse-bert", "smoke", {"seed": 3})
    said = []
    store = ResultStore(tmp_path, data_dir, notify=said.append)
    record = store.get(cfg, ("sts_dev",))
    assert record["train"]["steps"] > 0 and record["dev_curve"] and record["seed"] == 3
    assert [line.split(":")[0] for line in said] == ["simcse (simcse-bert, smoke profile)", "padding"], said
    assert "simcse-bert" not in capsys.readouterr().out
    assert record["config"]["output_dir"] == str(tmp_path / "runs" / record["key"])

    import cse_kit.train.loop as loop

    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("retrained a finished run"))
    assert ResultStore(tmp_path, data_dir).get(cfg, ("sts_dev",))["key"] == record["key"]
    assert record_key(cfg) != record_key(cfg.replace(lr=2e-4))
    assert record_key(cfg) == record_key(cfg.replace(output_dir="elsewhere"))  # locations are not results
    assert re.fullmatch(r"[0-9a-f]{20}", record["key"])


def test_a_moved_store_with_a_set_aside_record_keeps_working(data_dir, tmp_path):
    """A store copied elsewhere (another checkout, another machine) answers from its runs; when a record is set aside
    and recomputed there, the finished run is found, not refused for its old paths, and nothing is retrained."""
    import shutil

    cfg = build_config("simcse-bert", "smoke", {"seed": 5})
    record = ResultStore(tmp_path / "a", data_dir).get(cfg, ("sts_dev",))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    moved = ResultStore(tmp_path / "b", data_dir)
    path = moved.record_path(record["key"])
    path.write_text(path.read_text().replace('"steps"', '"stepz"'))  # edited: set aside, recomputed
    with pytest.warns(UserWarning, match="corrupt"):
        again = moved.get(cfg, ("sts_dev", "sts_test"))
    assert again["train"]["steps"] == record["train"]["steps"] and again["dev_curve"] == record["dev_curve"]
    assert again["metrics"]["sts_dev"] == record["metrics"]["sts_dev"]  # the same model, read from where it is now
    assert again["model_dir"] == str(tmp_path / "b" / "runs" / record["key"] / "model")


@pytest.fixture
def fake_sts_dev(monkeypatch):
    """sts_dev as a cheap stand-in (the store's logic is under test, not the evaluation); counts its calls."""
    calls = []

    def evaluation(encoder, data_dir, profile):
        calls.append("sts_dev")
        return {"STSBenchmark": {"dev": {"spearman": 40.72}}}

    monkeypatch.setitem(results.EVALUATIONS, "sts_dev", evaluation)
    monkeypatch.setattr(ResultStore, "encoder", lambda self, record: None)
    return calls


@pytest.mark.parametrize("damage", ["edited", "empty list", "stub", "wrong types"])
def test_edited_or_misshapen_records_are_set_aside_and_recomputed(data_dir, tmp_path, fake_sts_dev, damage):
    counted = fake_sts_dev
    store = ResultStore(tmp_path, data_dir)
    subject = Pretrained("smoke-bert", "avg", "smoke")
    first = store.get(subject, ("sts_dev",))
    key, path = first["key"], store.record_path(first["key"])
    record = json.loads(path.read_text())
    if damage == "edited":  # a dev Spearman raised by 10 by hand, the digest left as it was
        record["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"] += 10
    else:
        record = {"empty list": [], "stub": {"key": key, "metrics": {}},
                  "wrong types": {**record, "timings": None}}[damage]
    path.write_text(json.dumps(record))
    with pytest.warns(UserWarning, match="corrupt"):
        again = store.get(subject, ("sts_dev",))
    assert counted == ["sts_dev", "sts_dev"] and again["metrics"] == first["metrics"]
    assert len(list((tmp_path / "records").glob(f"{key}.corrupt-*"))) == 1
    results.check_record(json.loads(path.read_text()), key)  # the recomputed record is sound


def _get_in_process(args):
    """One of several processes asking the store for the same record (forked: the test's patches hold)."""
    results_dir, data_dir, out = args
    record = ResultStore(results_dir, data_dir).get(Pretrained("smoke-bert", "avg", "smoke"), ("sts_dev",))
    return record["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"]


def test_several_processes_share_one_computation(data_dir, tmp_path, monkeypatch):
    import multiprocessing
    import time

    log = tmp_path / "computed.log"

    def slow_evaluation(encoder, data_dir_, profile):  # long enough that all processes ask while the first computes
        with log.open("a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(2)
        return {"STSBenchmark": {"dev": {"spearman": 12.5}}}

    monkeypatch.setitem(results.EVALUATIONS, "sts_dev", slow_evaluation)
    monkeypatch.setattr(ResultStore, "encoder", lambda self, record: None)
    with multiprocessing.get_context("fork").Pool(4) as pool:
        got = pool.map(_get_in_process, [(tmp_path, data_dir, None)] * 4)
    assert got == [12.5] * 4
    assert len(log.read_text().splitlines()) == 1  # computed once, the others waited and reused it
    assert len(list((tmp_path / "records").iterdir())) == 1


def test_the_lock_is_released_when_its_holder_is_killed(data_dir, tmp_path):
    import signal
    import subprocess
    import sys

    from filelock import Timeout

    store = ResultStore(tmp_path, data_dir)
    key = store.key(Pretrained("smoke-bert", "avg", "smoke"))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from cse_kit.results import ResultStore; "
        f"ResultStore({str(tmp_path)!r}, {str(data_dir)!r}).lock({key!r}).acquire(); print('held', flush=True); "
        "time.sleep(60)")], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(Timeout):
        store.lock(key).acquire(timeout=0.2)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with store.lock(key):  # a crash leaves no lock behind
        with store.lock(key):  # and a holder may re-enter it (a runner holding it may call get)
            pass


def test_a_notebook_says_on_its_progress_stream_that_it_waits_for_another_process(data_dir, tmp_path, capfd):
    """Under `cse-kit report --jobs`, a notebook that needs a run another notebook is training waits for it; the
    wait is a progress line (shown on the console as it starts), not a warning at the notebook's end."""
    import subprocess
    import sys

    s = ex.setup("smoke", [], str(data_dir), str(tmp_path))
    subject = Pretrained("smoke-bert", "avg", "smoke")
    key = s.store.key(subject)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from cse_kit.results import ResultStore; "
        f"ResultStore({str(tmp_path)!r}, {str(data_dir)!r}).lock({key!r}).acquire(); print('held', flush=True); "
        "time.sleep(3)")], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        capfd.readouterr()
        record = s.store.get(subject, ("sts_dev",))  # waits for the holder to exit, then computes
    finally:
        holder.kill()
    assert "sts_dev" in record["metrics"]
    err = capfd.readouterr().err
    assert f"{PROGRESS_PREFIX}waiting for run {key}: another process is computing it" in err
    assert "Warning" not in err


def test_results_from_unverified_data_never_land_under_the_clean_key(data_dir, tmp_path, monkeypatch):
    subject = Pretrained("smoke-bert", "avg", "smoke")
    clean = record_key(subject, data_dir)
    monkeypatch.setenv("CSE_KIT_ALLOW_UNVERIFIED_DATA", "1")
    results.data_fingerprint.cache_clear()
    try:
        assert record_key(subject, data_dir) != clean
    finally:
        monkeypatch.delenv("CSE_KIT_ALLOW_UNVERIFIED_DATA")
        results.data_fingerprint.cache_clear()
    assert record_key(subject, data_dir) == clean


def test_written_folders_and_files_follow_the_umask(tmp_path):
    """An exported model (atomic_dir) and an atomic file are readable as the user's umask allows, not 0700/0600."""
    import os
    import stat

    from cse_kit.io import atomic_dir, write_json_atomic

    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "model") as tmp:
            (tmp / "sub").mkdir()
            fd = os.open(tmp / "sub" / "weights.bin", os.O_CREAT | os.O_WRONLY, 0o600)  # as a library might
            os.close(fd)
        write_json_atomic(tmp_path / "record.json", {})
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert (mode(tmp_path / "model"), mode(tmp_path / "model" / "sub")) == (0o755, 0o755)
    assert (mode(tmp_path / "model" / "sub" / "weights.bin"), mode(tmp_path / "record.json")) == (0o644, 0o644)


def test_a_notebook_whose_runs_are_finished_never_imports_transformers(data_dir, tmp_path):
    """A report's kernel that only reads finished records (most of a smoke report's later notebooks) skips the 3-5
    CPU-seconds of importing transformers; its logging is still quieted when a run does import it."""
    import subprocess
    import sys

    results = tmp_path / "results"
    code = f"""
import sys
from cse_kit import experiments as ex
from cse_kit.train.presets import build_config
s = ex.setup("smoke", [1], {str(data_dir)!r}, {str(results)!r})
cfg = build_config("simcse-bert", "smoke", {{"max_steps": 2, "eval_steps": 2}})
record = s.store.get(cfg, ("sts_dev",))
ex.save_table(s, "probe", "probe")
print("transformers" in sys.modules)
if "transformers" in sys.modules:
    import transformers
    print(transformers.logging.get_verbosity() == transformers.logging.ERROR)
"""
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("TRANSFORMERS_VERBOSITY", None)
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert first.stdout.split()[-2:] == ["True", "True"], first.stdout  # it trained: imported, and quiet
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert again.stdout.split()[-1] == "False", again.stdout


def test_setup_quiets_the_hubs_progress_bars_when_the_hub_is_imported_already(data_dir, tmp_path, monkeypatch):
    """A kernel whose first cell imported the Hub before the kit's setup: the variable would come too late, so setup
    turns the Hub's bars off itself; a user's HF_HUB_DISABLE_PROGRESS_BARS=0 stands, with no warning."""
    import sys
    import warnings

    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars

    from cse_kit import experiments as ex

    hub = sys.modules[are_progress_bars_disabled.__module__]
    monkeypatch.delitem(sys.modules, "transformers", raising=False)  # transformers' own call turns the Hub's off too
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    try:
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
        monkeypatch.setattr(hub, "HF_HUB_DISABLE_PROGRESS_BARS", False)  # what the Hub read as it was imported
        enable_progress_bars()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ex.setup("smoke", [1], str(data_dir), str(tmp_path / "results"))
        assert not are_progress_bars_disabled()
        monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
        monkeypatch.setattr(hub, "HF_HUB_DISABLE_PROGRESS_BARS", None)
        ex.setup("smoke", [1], str(data_dir), str(tmp_path / "results"))
        assert are_progress_bars_disabled()
    finally:
        monkeypatch.setattr(hub, "HF_HUB_DISABLE_PROGRESS_BARS", None)
        enable_progress_bars()


def test_a_record_made_before_the_sts_test_was_sampled_is_recomputed_never_shown(data_dir, tmp_path, monkeypatch,
                                                                                 counted):
    """A smoke store of the release before samples: its records' keys held no sample size, their STS test numbers
    are of the whole sets. Under the sampled protocol the same subject gets another key and is recomputed."""
    subject, store = Pretrained("smoke-bert", "avg", "smoke"), ResultStore(tmp_path, data_dir)
    sampled = dict(PROFILES["smoke"]["report"])
    for kind in results.SAMPLES:  # that release: no sample sizes, whole sets
        monkeypatch.delitem(PROFILES["smoke"]["report"], kind)
    old = store.get(subject, ("sts_test",))
    assert "sample_per_subset" not in old["metrics"]["sts_test"]
    for kind in results.SAMPLES:
        monkeypatch.setitem(PROFILES["smoke"]["report"], kind, sampled[kind])
    new = store.get(subject, ("sts_test",))
    # whole sets: the head-to-head's per-pair cosines come with the first, from its encodings
    assert counted == ["sts_test", "sts_pairs", "sts_test"] and new["key"] != old["key"]
    assert new["metrics"]["sts_test"]["sample_per_subset"] == sampled["sts_sample"]
    assert new["metrics"]["sts_test"] != old["metrics"]["sts_test"]
    assert store.record_path(old["key"]).is_file()  # left where it was, under a key no lookup reaches
    assert store.has(subject, ("sts_test",)) and store.key(subject) == new["key"]


def test_the_sts_test_sets_are_encoded_once_for_the_notebook_and_the_head_to_head(data_dir, tmp_path, monkeypatch):
    """A notebook's STS test numbers and the head-to-head's per-pair cosines read the same test pairs: the STS test
    evaluation stores both from one encoding (on a profile that evaluates the sets whole), the head-to-head then
    encodes nothing; the numbers are those of each evaluation computed on its own, and each task's Spearman
    recomputed from the stored cosines is the record's, to 1e-12."""
    from cse_kit.eval.encode import Encoder
    from cse_kit.papers.comparison import gold, task_spearman

    encoded = []
    encode_new = Encoder._encode_new
    monkeypatch.setattr(Encoder, "_encode_new", lambda self, sentences: (encoded.append(len(sentences)),
                                                                         encode_new(self, sentences))[1])
    subject = Pretrained("smoke-bert", "avg")  # no profile: whole sets, as the cpu and paper profiles
    store = ResultStore(tmp_path / "once", data_dir)
    notebook = store.get(subject, ("sts_test",))
    assert "sts_pairs" in notebook["metrics"]
    sentences = sum(encoded)
    head_to_head = store.get(subject, ("sts_pairs",))
    assert sum(encoded) == sentences  # nothing encoded again
    apart = {name: ResultStore(tmp_path / name, data_dir).get(subject, (name,))["metrics"][name]
             for name in ("sts_test", "sts_pairs")}
    assert head_to_head["metrics"]["sts_test"] == apart["sts_test"]
    # the cosines to float32's rounding: a sentence's vector moves in its last bits with the batch it is padded in,
    # and the pairs alone are batched otherwise than with STS-B's and SICK-R's dev sentences
    for task, cosines in apart["sts_pairs"].items():
        assert head_to_head["metrics"]["sts_pairs"][task] == pytest.approx(cosines, rel=1e-6, abs=1e-7)
    recomputed = task_spearman(head_to_head["metrics"]["sts_pairs"], gold(data_dir))
    for task, value in recomputed.items():
        result = head_to_head["metrics"]["sts_test"][task]
        assert value == pytest.approx(result["all"]["spearman"] if "all" in result else result["test"]["spearman"],
                                      abs=1e-12)
    assert "sts_test" not in ResultStore(tmp_path / "pairs", data_dir).get(subject, ("sts_pairs",))["metrics"]
    sampled = ResultStore(tmp_path / "smoke", data_dir).get(Pretrained("smoke-bert", "avg", "smoke"), ("sts_test",))
    assert "sts_pairs" not in sampled["metrics"]  # smoke samples its STS test: the whole sets are not encoded for it


@pytest.mark.parametrize("preset, tested_with", [("consert-bert", "avg_top2"), ("simcse-sup-bert", "cls")])
def test_a_run_is_evaluated_with_the_pooler_its_model_is_read_with_and_an_older_record_is_evaluated_again(
        preset, tested_with, data_dir, tmp_path, counted, monkeypatch):
    """ConSERT trains on `avg` and is tested on the last two layers' mean; supervised SimCSE is tested with its MLP
    as the model's pooler (`cls`): the store evaluates the vector the exported model states, as `cse-kit eval` does.
    A record evaluated with the training pooler (as the store did before) keeps its training and is evaluated again."""
    from cse_kit.eval import Encoder
    from cse_kit.eval.sts import correlations, pair_scores
    from cse_kit.data import load_sts
    from cse_kit.models import load_model

    store = ResultStore(tmp_path, data_dir)
    trained = []
    train = ResultStore._train
    monkeypatch.setattr(ResultStore, "_train", lambda self, key, cfg, on_dev=None: (trained.append(key),
                                                                                    train(self, key, cfg, on_dev))[1])
    cfg = build_config(preset, "smoke", {"seed": 1})
    record = store.get(cfg, ("sts_dev",))
    assert record["pooler"] == tested_with != cfg.pooler
    tokenizer, model = load_model(str(store.run_dir(record["key"]) / "model"))  # as `cse-kit eval` loads it
    pairs = load_sts("STSBenchmark", "dev", data_dir)
    def spearman(pooler):
        return correlations(*pair_scores(Encoder(model, tokenizer, pooler, progress=False), pairs))["spearman"]

    # to 1e-3: where the CPU's fp32 kernels depend on a batch's shape (Intel AMX), the store's and this encoding's
    # batches round differently and the ranks of near-ties flip (2.5e-4 seen); the training pooler is 10x further
    expected, got = spearman(tested_with), record["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"]
    assert got == pytest.approx(expected, abs=1e-3) and abs(got - spearman(cfg.pooler)) > 1e-2

    path = store.record_path(record["key"])
    old = {**json.loads(path.read_text()), "pooler": cfg.pooler}  # as the store wrote it before
    old["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"] = 12.34
    path.write_text(json.dumps({**old, "digest": results.content_digest(old)}))
    assert not store.has(cfg, ("sts_dev",))
    with pytest.warns(UserWarning, match=f"evaluated with pooler {cfg.pooler}, its model is read with {tested_with}"):
        again = store.get(cfg, ("sts_dev",))
    assert again["pooler"] == tested_with and trained == [record["key"]]  # trained once
    assert again["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"] == pytest.approx(expected, abs=1e-3)
    assert counted == ["sts_dev", "sts_dev"]
