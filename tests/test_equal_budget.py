"""notebooks/equal_budget.ipynb and cse_kit.papers.equal_budget (issue 69 item 3): every method searched with the same
number of trials, no test set read during a search, then the chosen configuration and the paper recipe tested over
seeds with the head-to-head's paired tests; the notebook's tables in the report and as LaTeX."""

import math

import pytest

import cse_kit.eval.dev as dev
import cse_kit.eval.sts as sts
from cse_kit import cli, report
from cse_kit import experiments as ex
from cse_kit.tune import Study, TuneError, check, chosen_on_test, parse_space
from cse_kit.methods import use_plugins
from cse_kit.papers import comparison as cmp
from cse_kit.papers import equal_budget as eb

from conftest import REPO, run_notebook
from test_latex import latex_to_text, parse_pipe_table, parse_tabular


def test_every_methods_default_space_is_lr_temperature_and_its_knob_and_its_runs_accept_every_bound(tmp_path):
    """The default spaces reach around each recipe on the profile, and tuning.check (the refusal before any trial)
    finds every bound accepted by the method's run: a method of one's own included, its first float option its knob."""
    use_plugins(cmp.EXAMPLE_PLUGIN)
    spaces = {m: eb.default_space(m, "smoke") for m in [*cmp.METHODS, "margin-simcse"]}
    names = {m: [d.name for d in parse_space(text)] for m, text in spaces.items()}
    assert names["DiffCSE"] == ["lr", "temp", "diffcse.lambda_weight"]
    assert names["SCD"] == ["lr", "scd.temp", "scd.decorrelation_weight"]  # SCD's L_S divides by its own temperature
    assert names["ESimCSE"][2] == "esimcse.dup_rate" and names["SimCSE"] == ["lr", "temp"]
    assert spaces["margin-simcse"].endswith("margin-simcse.margin=log(0.025,0.4)")
    lr = eb.recipe_config("DiffCSE", "smoke").lr
    assert parse_space(spaces["DiffCSE"])[0].low == pytest.approx(lr / 3, rel=1e-2)
    for method, text in spaces.items():
        preset, settings = cmp.method_row(method)
        check(Study(preset, "smoke", parse_space(text), 1, [f"{k}={v}" for k, v in settings.items()], 1,
                    str(tmp_path / "results"), None))


def test_the_best_so_far_curve_keeps_its_best_through_failed_and_pruned_trials():
    trials = [{"number": 2, "state": "fail", "value": None}, {"number": 0, "state": "complete", "value": 40.0},
              {"number": 1, "state": "complete", "value": 39.0}, {"number": 3, "state": "pruned", "value": 45.0},
              {"number": 4, "state": "complete", "value": 41.5}]
    assert eb.best_so_far(trials) == [40.0, 40.0, 40.0, 40.0, 41.5]
    assert math.isnan(eb.best_so_far([{"number": 0, "state": "fail", "value": None}])[0])


def test_bad_input_is_refused_before_any_trial(tmp_path, data_dir):
    s = ex.setup("smoke", [1, 2], str(data_dir), str(tmp_path / "results"))
    with pytest.raises(ex.ParameterError, match="space names methods that are not searched: \\['SCD'\\]"):
        eb.studies(s, ["SimCSE"], 2, {"SCD": "lr=log(1e-5,1e-4)"})
    with pytest.raises(ex.ParameterError, match="trials must be at least 1"):
        eb.studies(s, ["SimCSE"], 0, {})
    with pytest.raises(TuneError, match="bad space dimension"):
        eb.studies(s, ["SimCSE"], 2, {"SimCSE": "lr=1e-4"})
    with pytest.raises(ex.ParameterError, match="two seeds or more"):
        eb.equal_budget(ex.setup("smoke", [1], str(data_dir), str(tmp_path / "results")), ["SimCSE"], 2, {})


def test_a_search_reads_no_test_set_and_both_recipes_are_tested_over_the_seeds(tmp_path, data_dir, monkeypatch):
    """The library end to end on smoke with one method: during the search only dev splits are read; after it the
    chosen configuration (tuning.chosen_on_test's runs) and the paper recipe are tested on both seeds."""
    reads, searching = [], [False]
    real_read, real_search = sts.load_sts, eb.search

    def watched(task, split=None, data_dir=None):
        reads.append((searching[0], split))
        return real_read(task, split, data_dir)

    def search(found, workers=1):
        searching[0] = True
        try:
            return real_search(found, workers)
        finally:
            searching[0] = False

    for module in (sts, dev):
        monkeypatch.setattr(module, "load_sts", watched)
    monkeypatch.setattr(eb, "search", search)
    s = ex.setup("smoke", [1, 2], str(data_dir), str(tmp_path / "results"))
    e = eb.equal_budget(s, ["SimCSE"], 2, {}, bootstrap_samples=50)
    assert {split for during, split in reads if during} == {"dev"}  # the search selects on STS-B dev only
    assert any(split != "dev" for during, split in reads if not during)

    [study] = e.studies.values()
    assert [t["state"] for t in e.trials["SimCSE"]] == ["complete"] * 2
    tested = [r["key"] for r in chosen_on_test(study, [1, 2], cmp.evaluations(None))]
    assert sorted(e.h.long[e.h.long.row == "SimCSE (equal budget)"].key) == sorted(tested)
    assert tested[0] in {t["key"] for t in e.trials["SimCSE"]}  # the first seed's run is the winning trial

    [line] = e.against_paper.to_dict("records")
    assert line["method"] == "SimCSE" and " ± " in line["paper recipe"] and " ± " in line["equal budget"]
    assert 0 <= line["paired t-test p"] <= 1 and 0 <= line["bootstrap p"] <= 1
    settings = e.settings.set_index("setting")
    assert list(settings.index) == ["lr", "temp"] and settings.loc["lr", "paper recipe"] == "0.0001"
    [cost] = e.cost.to_dict("records")
    assert cost["trials"] == cost["complete"] == 2 and cost["dev metric"] == "stsb_spearman"
    assert cost["test runs"] == 3 and cost["study training s"] > 0  # two paper-recipe seeds, the chosen one's seed 2
    assert set(eb.tables(e)) >= {"chosen settings", "equal budget vs paper recipe", "search cost",
                                 "equal budget: paired t-test over seeds"}


@pytest.mark.slow  # three methods' studies and tests on smoke under papermill: about 1.5 min on 2 cores
def test_the_notebook_runs_on_smoke_with_a_plugin_method_and_its_tables_go_to_the_report_and_latex(tmp_path,
                                                                                                   data_dir):
    results = tmp_path / "results"
    nb = run_notebook(REPO / "notebooks" / "equal_budget.ipynb", tmp_path / "equal_budget.out.ipynb",
                      {"data_dir": str(data_dir), "results_dir": str(results), "profile": "smoke",
                       "methods": ["SimCSE", "DiffCSE"], "plugin": cmp.EXAMPLE_PLUGIN, "trials": 3,
                       "bootstrap_samples": 50})
    table = report.table_of(nb)
    assert table["name"] == "equal_budget" and table["seeds"] == [1, 2] and len(table["figures"]) == 2
    tables = table["extra"]["tables"]
    methods = ["SimCSE", "DiffCSE", "margin-simcse"]
    assert [r["method"] for r in tables["equal budget vs paper recipe"]] == methods
    chosen = {(r["method"], r["setting"]) for r in tables["chosen settings"]}
    assert ("DiffCSE", "diffcse.lambda_weight") in chosen and ("margin-simcse", "margin-simcse.margin") in chosen
    assert [(r["method"], r["trials"]) for r in tables["search cost"]] == [(m, 3) for m in methods]
    matrix = tables["equal budget: paired t-test over seeds"]
    assert {r["row − column"] for r in matrix} == set(methods)
    assert any(n.startswith("equal budget: DiffCSE > SimCSE (DiffCSE Table 1): ") for n in table["notes"])

    # in the report: its notebook, its section, its line of the coverage matrix
    assert "equal_budget" in report.select() and report.section_of("equal_budget") == "comparison"
    page = report.table_html(table, "equal_budget")
    assert "chosen settings" in page and "margin-simcse" in page
    [line] = [line for line in report.coverage({"equal_budget": table}) if line["notebook"] == "equal_budget"]
    assert line["status"] == "built (smoke)"

    # as LaTeX and Markdown from the saved table, as `cse-kit report --latex` writes every table of the report
    out = tmp_path / "paper"
    assert cli.main(["report", "--latex", str(out), "--markdown", str(out), "--results-dir", str(results)]) == 0
    tex = (out / "equal_budget-equal-budget-vs-paper-recipe.tex").read_text()
    rows = [[latex_to_text(c) for c in row] for row in parse_tabular(tex)]
    assert rows == parse_pipe_table((out / "equal_budget-equal-budget-vs-paper-recipe.md").read_text())
    assert rows[0][:4] == ["method", "paper recipe", "equal budget", "Δ"]
    shown = {r["method"]: r for r in tables["equal budget vs paper recipe"]}
    for row in rows[1:]:
        assert row[1] == shown[row[0]]["paper recipe"] and row[2] == shown[row[0]]["equal budget"]
    assert (out / "equal_budget-search-cost.tex").is_file() and (out / "equal_budget-chosen-settings.tex").is_file()
