"""`cse-kit report --plan`: the report's bill before it is spent (cse_kit/report/plan.py, step_times.py)."""

import ast
import json
import re

import pytest

from cse_kit.report import NOTEBOOK_DIR, select
from cse_kit.report.plan import NEEDS, bill, longest_first, plan, text
from cse_kit.report.step_times import SHIPPED_FILE, Figures, NoStepTimes, figures_for, sentences
from cse_kit.train.presets import PROFILES, build_config

import kit_process

H200 = json.loads(SHIPPED_FILE.read_text())["devices"]["NVIDIA H200"]["paper"]
WIKI1M_LINES = 1_000_001  # the registry's count (cse_kit/data/registry.py)


def _default(name: str, parameter: str):
    """A notebook parameter's default, read from its jupytext twin (not through the plan's own reader)."""
    source = (NOTEBOOK_DIR / f"{name}.py").read_text()
    return ast.literal_eval(re.search(rf"^{parameter}: \w+ = (.*?)  #", source, re.M).group(1))


def _paper_run_seconds(ms: float, steps: int, eval_steps: int = 125) -> float:
    """A paper run as the shipped figures price it, worked out here: steps x step time, a dev evaluation every
    eval_steps steps (and at the last), a checkpoint every 20 minutes."""
    train = steps * ms / 1000
    evals = -(-steps // eval_steps) * H200["dev_eval_s"]
    return train + evals + int((train + evals) // 1200) * H200["checkpoint_s"]


def test_every_notebook_the_report_runs_is_planned():
    assert set(select()) == set(NEEDS)


def test_the_shipped_step_times_name_their_presets_sentences_and_provenance():
    for method, figure in H200["methods"].items():
        cfg = build_config(figure["preset"], "paper")
        assert cfg.method == method
        assert sentences(cfg) == figure["sentences"]
        if "stage1_ms" in figure:
            assert sentences(cfg, 1) == figure["stage1_sentences"]
    assert H200["command"] and H200["measured"] and H200["source"]


def test_paper_plan_counts_table8s_lambda_grid_times_the_seeds_and_prices_it_from_the_recorded_step_times(tmp_path):
    lams, seeds = _default("table8_lambda", "lams"), PROFILES["paper"]["report"]["seeds"]
    assert len(lams) == 8 and len(seeds) == 3
    p = plan("paper", ["table5_batchnorm", "table8_lambda"], tmp_path / "results")
    b = bill(p, figures_for("paper", tmp_path / "results"))
    table8 = b["notebooks"][1]
    # λ = 0 is Table 5's SimCSE w/ BatchNorm and λ = 0.005 its DiffCSE w/ BatchNorm: trained there, once
    shared = [lam for lam in lams if lam in (0, 0.005)]
    assert table8["runs"] == len(lams) * len(seeds)
    assert table8["earlier"] == len(shared) * len(seeds)
    assert table8["to_train"] == (len(lams) - len(shared)) * len(seeds) == 18
    steps = 2 * (WIKI1M_LINES // 64)  # diffcse-bert-sts: 2 epochs of Wiki1M at batch 64, the last batch dropped
    assert table8["steps"] == 18 * steps
    expected = 18 * _paper_run_seconds(H200["methods"]["diffcse"]["ms"], steps) / 3600
    assert table8["train_hours"] == pytest.approx(expected)
    assert 19 < expected < 21
    # one worker: the wall time is the sum; each run's evaluation on STS-B dev at the dev evaluation's figure
    assert table8["wall_hours"] == pytest.approx(table8["train_hours"] + table8["evaluation_hours"])
    assert table8["evaluations"] == {"sts_dev": 18}


def test_the_paper_plan_of_the_whole_report_has_its_totals_and_its_text(tmp_path):
    p = plan("paper", select(), tmp_path / "results", workers=8, cluster="slurm")
    b = bill(p, figures_for("paper", tmp_path / "results"))
    t = b["total"]
    assert t["to_train"] == t["distinct_runs"] == t["runs"] - t["earlier"]
    assert t["stored"] == 0 and t["steps"] > 10_000_000
    assert t["all_at_once_wall_hours"] <= t["wall_hours"] < t["train_hours"]
    assert t["wall_hours"] >= (t["train_hours"] + t["evaluation_hours"]) / 8
    words = text(b, "cse-kit report --profile paper --plan --workers 8 --cluster slurm")
    assert "wall h on 8 GPUs (SLURM jobs)" in words and "NVIDIA H200" in words
    assert "transfer_test" in words and "not timed on NVIDIA H200" in words


def test_a_method_of_ones_own_is_charged_at_simcses_step_and_said_to_be_an_estimate(tmp_path):
    from cse_kit.methods import registry

    registry.import_plugin(str(NOTEBOOK_DIR.parent / "examples" / "margin_simcse.py"))  # as $CSE_KIT_PLUGINS does
    results = tmp_path / "results"
    figures = figures_for("paper", results)
    b = bill(plan("paper", ["equal_budget"], results), figures)
    own = build_config("simcse-bert", "paper", {"method": "margin-simcse"})
    simcse = build_config("simcse-bert", "paper")
    (own_seconds, why), (simcse_seconds, _) = figures.step_seconds(own, 2), figures.step_seconds(simcse, 2)
    assert own_seconds == simcse_seconds
    assert "margin-simcse, a method of your own, charged at SimCSE's step (not timed on NVIDIA H200" in why
    assert any("margin-simcse" in w for w in b["notebooks"][0]["estimated"])


def test_the_plan_trains_evaluates_and_executes_nothing(tmp_path, monkeypatch, capsys):
    import papermill

    import cse_kit.report.notebooks
    import cse_kit.train
    import cse_kit.train.loop
    from cse_kit import cli
    from cse_kit.results import ResultStore

    def refuse(*args, **kwargs):
        raise AssertionError("the plan trained, evaluated or executed something")

    for owner, name in ((cse_kit.train.loop, "train"), (cse_kit.train, "train"), (ResultStore, "get"),
                        (ResultStore, "_train"), (ResultStore, "_evaluate"), (papermill, "execute_notebook"),
                        (cse_kit.report.notebooks, "execute")):
        monkeypatch.setattr(owner, name, refuse)
    results = tmp_path / "results"
    assert cli.main(["report", "--profile", "paper", "--plan", "--results-dir", str(results), "--only",
                     "table1_sts", "table8_lambda", "equal_budget"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^table8_lambda\s+24\s+3\s+0\s+21\s", out, re.M)  # λ = 0.005: table1_sts's DiffCSE
    assert not (results / "records").exists()
    assert cli.main(["report", "--profile", "paper", "--plan", "--json", "--results-dir", str(results), "--only",
                     "table8_lambda"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["total"]["to_train"] == 24 and len(found["runs"]) == 24


def _stored(store, cfg, metrics):
    """A finished run's record for cfg in store, as the store checks it (no model: nothing to load here)."""
    key = store.key(cfg)
    what = store.identity(cfg)
    store._write({"key": key, "subject": what["subject"], "metrics": metrics, "timings": {}, "model_dir": "model",
                  "pooler": cfg.pooler, "config": cfg.to_dict(), "train": {}, "dev_curve": [], "train_curve": []})
    return key


def test_runs_the_results_store_holds_are_left_out_of_the_bill(tmp_path):
    from cse_kit.results import ResultStore

    results = tmp_path / "results"
    figures = figures_for("paper", results)
    before = bill(plan("paper", ["table8_lambda"], results), figures)["notebooks"][0]
    store = ResultStore(results)
    lam = _default("table8_lambda", "lams")[1]
    cfg = build_config("diffcse-bert-sts", "paper", {"lam": lam, "seed": PROFILES["paper"]["report"]["seeds"][0]})
    _stored(store, cfg, {"sts_dev": {"STSBenchmark": {"dev": {"spearman": 80.0}}}})
    after = bill(plan("paper", ["table8_lambda"], results), figures)["notebooks"][0]
    assert (after["stored"], after["to_train"]) == (before["stored"] + 1, before["to_train"] - 1)
    one_run = _paper_run_seconds(H200["methods"]["diffcse"]["ms"], 2 * (WIKI1M_LINES // 64)) / 3600
    assert after["train_hours"] == pytest.approx(before["train_hours"] - one_run)
    assert after["evaluations"]["sts_dev"] == before["evaluations"]["sts_dev"] - 1
    # trained but not yet evaluated as the notebook asks: its training costs nothing, its evaluation is still due
    cfg = cfg.replace(seed=PROFILES["paper"]["report"]["seeds"][1])
    _stored(store, cfg, {})
    again = bill(plan("paper", ["table8_lambda"], results), figures)["notebooks"][0]
    assert again["to_train"] == after["to_train"] - 1
    assert again["evaluations"]["sts_dev"] == after["evaluations"]["sts_dev"]


def test_wall_time_schedules_the_longest_runs_first_onto_the_workers(tmp_path):
    assert longest_first([5, 4, 3, 3, 3], 2) == 10  # LPT: 5+3+... on one, 4+3+3 on the other; the best is 9
    assert longest_first([5, 4, 3, 3, 3], 1) == 18
    assert longest_first([3, 1], 8) == 3 and longest_first([], 4) == 0
    results = tmp_path / "results"
    one = bill(plan("paper", ["table8_lambda"], results), figures_for("paper", results))["notebooks"][0]
    eight = bill(plan("paper", ["table8_lambda"], results, workers=8), figures_for("paper", results))["notebooks"][0]
    # 21 DiffCSE runs and 3 shorter SimCSE ones (λ = 0) on 8 GPUs: 3 DiffCSE runs on the busiest (the notebook's one
    # call sends them together), each with its STS-B dev evaluation
    diffcse = _paper_run_seconds(H200["methods"]["diffcse"]["ms"], 2 * (WIKI1M_LINES // 64)) + H200["dev_eval_s"]
    assert eight["wall_hours"] == pytest.approx(3 * diffcse / 3600)
    assert one["wall_hours"] == pytest.approx(one["train_hours"] + one["evaluation_hours"])


def _smoke_figures() -> Figures:
    methods = {m: {"ms": 100.0, "sentences": 32, "dev_eval_s": 1.0} for m in
               ("simcse", "diffcse", "scd", "esimcse", "promptbert", "consert")}
    methods["diffaug"] = {"ms": 100.0, "sentences": 32, "stage1_ms": 50.0, "stage1_sentences": 48}
    return Figures("a test CPU", "smoke", "test", {"methods": methods, "checkpoint_s": 0.5, "dev_eval_s": 1.0,
                                                   "evaluations_s": {"sts_test": 2.0}})


def test_the_smoke_plan_counts_the_smoke_seed_and_the_untrained_start(tmp_path):
    lams = _default("table8_lambda", "lams")
    b = bill(plan("smoke", ["table8_lambda"], tmp_path / "results"), _smoke_figures())
    line = b["notebooks"][0]
    assert PROFILES["smoke"]["report"]["seeds"] == [1]
    assert line["runs"] == line["to_train"] == len(lams)
    smoke = PROFILES["smoke"]["settings"]  # its sizes replace the presets' (DiffCSE's 2 epochs too)
    assert line["steps"] == len(lams) * smoke["epochs"] * (smoke["max_examples"] // smoke["batch_size"])
    assert line["evaluations"] == {"sts_dev": len(lams) + 1}  # and the start: smoke-bert as it is
    runs = b["runs"]
    assert sum(r["preset"] is None for r in runs) == 1


def test_a_missing_figure_is_one_line_naming_the_command_that_measures_it(tmp_path, capsys):
    from cse_kit import cli

    assert cli.main(["report", "--profile", "smoke", "--plan", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cse-kit report --profile smoke --plan --measure" in err
    figures = _smoke_figures()
    figures.entry["methods"].pop("esimcse")
    with pytest.raises(NoStepTimes, match="no step time of method 'esimcse'.*--plan --measure"):
        bill(plan("smoke", ["esimcse_table9_dup_rate"], tmp_path / "results"), figures)
    with pytest.raises(NoStepTimes, match="'Tesla X'.*recorded for it: NVIDIA H200"):
        figures_for("paper", tmp_path, device="Tesla X")


def test_measure_times_this_machines_steps_into_the_results_store_and_later_plans_read_them(tmp_path, data_dir):
    from cse_kit.report.step_times import device_name, measure, user_file

    results = tmp_path / "results"
    cfg = build_config("simcse-bert", "smoke", {"seed": 1})
    measured = measure("smoke", {"simcse": (cfg, False)}, ["sts_dev"], data_dir, results, log=lambda line: None)
    figure = measured.entry["methods"]["simcse"]
    assert figure["ms"] > 0 and figure["sentences"] == sentences(cfg) and figure["dev_eval_s"] > 0
    assert measured.entry["evaluations_s"]["sts_dev"] > 0
    assert measured.entry["command"] == "cse-kit report --profile smoke --plan --measure"
    recorded = json.loads(user_file(results).read_text())["devices"]
    assert list(recorded) == [device_name()] and "smoke" in recorded[device_name()]
    again = figures_for("smoke", results)
    assert again.entry == measured.entry and again.source.startswith("measured")
    assert not (results / "records").exists()  # the timing runs trained in a temporary folder


@pytest.mark.slow
def test_the_smoke_plan_is_what_a_smoke_report_trains_and_evaluates(tmp_path, data_dir):
    """Two notebooks of a smoke report executed for real: the runs and evaluations the store then holds are the ones
    the plan listed (compared by what the runs are, not by keys, which also hash the code), and a second plan finds
    nothing left to do."""
    from cse_kit.results import ResultStore

    results, names = tmp_path / "results", ["table5_batchnorm", "table8_lambda", "diffaug_table8_aux_weight"]
    planned = plan("smoke", names, results, data_dir)
    store = ResultStore(results, data_dir)

    def identity(subject):
        return json.dumps(store.identity(subject)["subject"], sort_keys=True)

    expected = {identity(r.subject): set(r.evals) for r in planned.runs.values()}
    done = kit_process.run(["report", "--profile", "smoke", "--results-dir",
                            str(results), "--data-dir", str(data_dir), "--out", str(tmp_path / "out"), "--only",
                            *names], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    found = {json.dumps(r["subject"], sort_keys=True): set(r["metrics"]) for r in store.records()}
    assert found == expected
    again = bill(plan("smoke", names, results, data_dir), _smoke_figures())["total"]
    assert (again["to_train"], again["evaluations"]) == (0, {})
