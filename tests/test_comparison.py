"""The head-to-head of every method (cse_kit.papers.comparison): its rows share the papers' runs, and its statistics are
right on constructed data where the answer is known: identical methods never differ significantly, a shifted one
is detected, by the paired test over seeds and by the paired bootstrap over STS pairs."""

import numpy as np
import pandas as pd
import pytest

from cse_kit.papers import comparison as cmp
from cse_kit import experiments as ex
from cse_kit.experiments import ParameterError
from cse_kit.results import record_key


def _key(row, profile="smoke", seed=1):
    return record_key(row.subject(profile, seed), "/data")


def test_paper_recipe_rows_are_the_papers_runs_and_the_shared_recipe_differs_only_in_the_recipe():
    rows = {r.label: r for r in cmp.rows("cpu")}
    assert len(rows) == 2 * len(cmp.METHODS)
    from cse_kit.papers import diffaug

    table1 = {r.label: r for r in diffaug.table1_rows("cpu")[0]}
    assert _key(rows["PromptBERT (paper recipe)"], "cpu") == _key(table1["PromptBERT"], "cpu")
    shared = {m: rows[cmp.label(m, "shared recipe")].subject("cpu", 42) for m in cmp.METHODS}
    assert {(c.batch_size, c.lr, c.max_seq_length, c.metric) for c in shared.values()} == {(32, 3e-5, 32,
                                                                                           "stsb_spearman")}
    assert {c.method for c in shared.values()} == {"simcse", "consert", "promptbert", "diffcse", "scd", "esimcse",
                                                   "diffaug"}
    assert cmp.published("SimCSE") == 76.25 and cmp.published("DiffAug") == 80.13
    with pytest.raises(ParameterError, match="methods are"):
        cmp.check_methods(["SimCSE", "BERT-flow"], ["paper recipe"])


def test_identical_methods_do_not_differ_and_a_shifted_one_is_detected_over_seeds():
    rng = np.random.default_rng(0)
    base = {seed: 76 + rng.normal(0, 0.5) for seed in range(5)}
    assert cmp.paired_seed_test(base, dict(base)) == (0.0, 1.0)
    shifted = {seed: v + 1.0 + rng.normal(0, 0.05) for seed, v in base.items()}
    diff, p = cmp.paired_seed_test(shifted, base)
    assert diff == pytest.approx(1.0, abs=0.1) and p < 0.001
    noisy = {seed: v + rng.normal(0, 0.5) for seed, v in base.items()}  # same mean, seed noise only
    assert cmp.paired_seed_test(noisy, base)[1] > 0.05
    assert np.isnan(cmp.paired_seed_test({1: 70.0}, {1: 71.0})[1])  # one seed: no test


def _sims(gold, noise, rng):
    return {t: list(g + rng.normal(0, noise, len(g))) for t, g in gold.items()}


def test_the_paired_bootstrap_finds_no_difference_between_identical_models_and_finds_a_better_one():
    rng = np.random.default_rng(1)
    gold = {t: rng.uniform(0, 5, 300) for t in cmp.STS_TASKS}
    same = {s: _sims(gold, 2.0, rng) for s in (1, 2)}
    diff, low, high, p = cmp.paired_bootstrap(same, same, gold, samples=200)
    assert (diff, low, high, p) == (0.0, 0.0, 0.0, 1.0)
    better = {s: _sims(gold, 1.0, rng) for s in (1, 2)}  # less noise: a higher correlation on every task
    diff, low, high, p = cmp.paired_bootstrap(better, same, gold, samples=200)
    assert diff > 5 and 0 < low < diff < high and p < 0.01


def test_the_matrix_stars_only_what_its_test_found_and_the_claims_are_put_in_words():
    tests = {("DiffCSE", "SimCSE"): (1.5, 0.01), ("SimCSE", "DiffCSE"): (-1.5, 0.01),
             ("SCD", "SimCSE"): (0.2, 0.6), ("SimCSE", "SCD"): (-0.2, 0.6),
             ("DiffCSE", "SCD"): (1.3, 0.02), ("SCD", "DiffCSE"): (-1.3, 0.02),
             ("ESimCSE", "SimCSE"): (-0.03, 0.65), ("SimCSE", "ESimCSE"): (0.03, 0.65),
             ("PromptBERT", "SimCSE"): (-25.3, 0.0001), ("SimCSE", "PromptBERT"): (25.3, 0.0001)}
    matrix = cmp.significance_matrix(tests)
    assert matrix.loc["DiffCSE", "SimCSE"] == "+1.50*" and matrix.loc["SCD", "SimCSE"] == "+0.20"
    assert matrix.loc["SimCSE", "SimCSE"] == ""
    words = cmp.claims_in_words(tests)
    assert words[0].startswith("DiffCSE > SimCSE (DiffCSE Table 1): holds")
    assert "within seed variance" in words[1]
    claims = {w.split(" (")[0]: w for w in words}
    assert "opposite direction, -0.03, within seed variance (p = 0.65)" in claims["ESimCSE > SimCSE"]  # no reversal
    assert "reversed: -25.30, beyond seed variance" in claims["PromptBERT > SimCSE"]


def test_the_pareto_front_keeps_the_methods_nothing_beats_on_cost_and_score():
    points = {"A": (1.0, 76.0), "B": (2.0, 78.0), "C": (3.0, 77.0), "D": (1.5, 75.0)}
    assert cmp.pareto_front(points) == ["A", "B"]


def test_summary_gives_the_interval_over_seeds_and_the_cost_table_the_ratios_to_simcse():
    long = pd.DataFrame([{"row": cmp.label(m, "paper recipe"), "seed": s, "status": "ok", "reason": "",
                          "Avg. STS": v + s, "Avg. transfer": 80.0, "s/step": t, "sentences/s": 64 / t,
                          "peak memory (GB)": mem, "projected hours": t * 10}
                         for m, v, t, mem in (("SimCSE", 70.0, 1.0, 2.0), ("DiffCSE", 72.0, 2.0, 3.0))
                         for s in (0, 1, 2)])
    scores = cmp.summary(long).set_index("method")
    assert scores.loc["SimCSE", "Avg. STS mean"] == 71.0 and scores.loc["SimCSE", "Avg. STS std"] == 1.0
    assert scores.loc["SimCSE", "Avg. STS 95% interval"] == "[68.52, 73.48]"  # 71 ± t(0.975, 2) / sqrt(3)
    assert scores.loc["DiffCSE", "paper Avg. STS"] == 78.49 and scores.loc["DiffCSE", "seeds"] == 3
    costs = cmp.cost_table(long).set_index("method")
    assert costs.loc["DiffCSE", "time ratio to SimCSE"] == 2.0 and costs.loc["DiffCSE", "memory ratio to SimCSE"] == 1.5
    assert cmp.cost_points(cmp.summary(long), cmp.cost_table(long), "paper recipe") == {"SimCSE": (10.0, 71.0),
                                                                                        "DiffCSE": (20.0, 73.0)}
    without_transfer = cmp.summary(long.assign(**{"Avg. transfer": np.nan}))
    assert "Avg. transfer mean" in scores and "Avg. transfer mean" not in without_transfer


def test_transfer_is_the_papers_test_on_paper_and_asked_for_elsewhere():
    assert cmp.transfer_evaluation("paper") == "transfer_test" and cmp.transfer_evaluation("cpu") is None
    assert cmp.transfer_evaluation("cpu", "fasttest") == "transfer_fasttest"
    assert cmp.evaluations(None) == ("sts_pairs",)
    assert cmp.evaluations("transfer_fasttest") == ("sts_pairs", "transfer_fasttest")
    assert "transfer parameter asks for one" in cmp.profile_note("cpu", None).replace("`", "")
    with pytest.raises(ParameterError, match=r"transfer is auto or one of \['test', 'fasttest', 'none'\]"):
        cmp.transfer_evaluation("cpu", "full")


def test_the_bootstraps_sort_free_ranks_and_row_wise_spearman_are_scipys_with_ties():
    from scipy.stats import rankdata, spearmanr

    rng = np.random.default_rng(2)
    gold = rng.integers(0, 6, 200).astype(float)  # STS gold scores tie often
    sims = np.round(gold + rng.normal(0, 2, 200), 1)
    index = rng.integers(0, 200, (5, 200))
    assert (cmp.resampled_ranks(sims, index) == rankdata(sims[index], axis=1)).all()  # exact, ties averaged
    rows = cmp._pearson_rows(cmp.resampled_ranks(sims, index), cmp.resampled_ranks(gold, index))
    assert rows == pytest.approx([100 * spearmanr(sims[i], gold[i])[0] for i in index], abs=1e-9)


def test_status_lists_the_head_to_head_apart_from_the_papers_42_artefacts():
    from cse_kit import report

    lines = report.coverage({})
    apart = [line for line in lines if line.get("apart")]
    assert [line["notebook"] for line in apart] == [cmp.NOTEBOOK, "equal_budget"]
    assert {line["status"] for line in apart} == {"not built"}
    assert sum(c["artefacts"] for c in report.tallies(lines).values()) == 42
    table = {"profile": "cpu", "seeds": [42, 43, 44], "comparison": []}
    [line] = [line for line in report.coverage({cmp.NOTEBOOK: table}) if line["notebook"] == cmp.NOTEBOOK]
    assert line["status"] == "built (cpu)" and line["seeds"] == "[42, 43, 44]"
    text = report.coverage_text(report.coverage({cmp.NOTEBOOK: table}), "cpu")
    tally = next(line for line in text.splitlines() if "42 data-bearing" in line)
    assert tally.endswith(f"apart from them: {cmp.TITLE}, Every method tuned with the same budget")
    # then, on cpu, what the profile can and cannot show, with its evidence (issue 56)
    assert text.rstrip().endswith(f"({ex.CPU_PROFILE_EVIDENCE}).")
    # a report of every notebook: the head-to-head gets its own section after the papers' (a build of all 38
    # notebooks once failed here, looking it up among the papers' notebooks)
    names = ["figure2_cosine", cmp.NOTEBOOK]
    sections = {report.section_of(n): [f"<h3 id='{n}'>{n}</h3>"] for n in names}
    page = report.sections_html(names, sections, ["diffcse", "scd"])
    assert page.index("id='paper-diffcse'") < page.index("href='#figure2_cosine'") < page.index("id='paper-scd'")
    assert page.index("id='paper-scd'") < page.index("id='paper-comparison'") < page.index(f"id='{cmp.NOTEBOOK}'")
    assert f"href='#{cmp.NOTEBOOK}'" not in page  # in no paper's table of contents


def test_the_notebooks_bootstrap_matrix_is_paired_bootstrap_for_every_pair():
    rng = np.random.default_rng(3)
    gold = {t: rng.uniform(0, 5, 120) for t in cmp.STS_TASKS}
    sims = {m: {s: _sims(gold, noise, rng) for s in (1, 2)} for m, noise in (("A", 1.0), ("B", 2.0), ("C", 2.0))}
    tests = cmp.bootstrap_tests(sims, gold, samples=100)
    for x, y in (("A", "B"), ("B", "C"), ("C", "A")):
        diff, _, _, p = cmp.paired_bootstrap(sims[x], sims[y], gold, samples=100)
        assert tests[(x, y)] == pytest.approx((diff, p)) and tests[(y, x)][0] == pytest.approx(-diff)
