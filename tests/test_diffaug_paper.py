"""DiffAug's paper module: which run stands behind each row of Tables 1, 2, 5, 7, 8 and Figures 3, 5, the rows
shared across tables (trained once), and the numbers the kit cites instead of training."""

import pytest

from cse_kit.experiments import RELEASED_SUFFIX, ParameterError
from cse_kit.data.published import paper_table
from cse_kit.papers import diffaug
from cse_kit.results import record_key
from cse_kit.train.presets import build_config


def _key(row, profile="smoke", seed=1):
    return record_key(row.subject(profile, seed), "/data")


def _by_label(rows):
    return {row.label: row for row in rows}


def _selected_labels(rows, groups):
    """The labels a table shows once each group's α is chosen."""
    group_of = {c: g for g, candidates in groups.items() for c in candidates}
    return list(dict.fromkeys(group_of.get(r.label, r.label).removesuffix(RELEASED_SUFFIX) for r in rows))


def test_table1_rows_are_the_papers_rows_with_the_released_checkpoints_on_paper_only():
    published = paper_table(1, "diffaug")
    for profile in ("smoke", "paper"):
        rows, groups = diffaug.table1_rows(profile)
        assert set(_selected_labels(rows, groups)) <= set(published.index)
        released = [r for r in rows if r.label.endswith(RELEASED_SUFFIX)]
        assert len(released) == 2
        assert all((r.unavailable is None) == (profile == "paper") for r in released)
    rows, groups = diffaug.table1_rows("smoke")
    assert groups["ConSERT_joint"] == [f"ConSERT_joint (α = {a:g})" for a in diffaug.ALPHA_GRIDS["smoke"]]
    rows = _by_label(rows)
    assert rows["DiffAug (ours) w/ aux loss"].preset == "diffaug-semi-aux-bert"
    assert rows["SimCSE (supervised)"].subject("smoke", 1).keep_projector
    assert rows["ConSERT_joint (α = 1)"].subject("smoke", 1).semi_strategy == "joint"
    assert (rows["PromptBERT"].preset, rows["PromptBERT (supervised)"].preset) == ("promptbert-bert",
                                                                                    "promptbert-sup-bert")
    official = _by_label(diffaug.table1_rows("smoke", "official-code")[0])
    assert official["DiffAug (ours) (supervised)"].subject("smoke", 1).gradient_accumulation == 4
    with pytest.raises(ParameterError, match="BERT only"):
        diffaug.check_recipe("official-code", ["bert", "roberta"])


def test_cited_rows_are_only_the_other_pipelines_rows():
    rows, groups = diffaug.table1_rows("smoke")
    assert set(diffaug.literature(1, _selected_labels(rows, groups)).index) == {"BERT-flow", "SBERT", "SBERT-flow"}


def test_table6_is_three_baselines_by_three_strategies_and_shares_conserts_joint_with_table1():
    rows, groups = diffaug.table6_rows([0.1, 1.0])
    assert _selected_labels(rows, groups) == list(paper_table(6, "diffaug").index)
    by_label = _by_label(rows)
    sup_unsup = by_label["PromptBERT_sup-unsup"].subject("smoke", 1)
    assert (sup_unsup.semi_strategy, sup_unsup.aux_weight, sup_unsup.stage1_steps) == ("sup-unsup", 0, 4)
    table1 = _by_label(diffaug.table1_rows("smoke")[0])
    assert _key(by_label["ConSERT_joint (α = 1)"]) == _key(table1["ConSERT_joint (α = 1)"])
    with pytest.raises(ParameterError, match="positive"):
        diffaug.alpha_grid("smoke", [0.1, -1])


def test_label_fraction_rows_draw_subsets_and_share_the_full_runs_with_tables_1_and_6():
    alpha = {"SimCSE_joint": 0.1, "PromptBERT_joint": 1.0}
    low = diffaug.fraction_rows("bert", 0.01, 5, "paper", joint_alpha=alpha)
    assert len(low) == 30 and set(r.label for r in low) == set(paper_table(2, "diffaug").index)
    for label in ("DiffAug (ours)", "SimCSE", "PromptBERT_joint", "DiffAug (ours) (supervised)"):
        mine = [r for r in low if r.label == label]
        assert sorted(r.overrides["nli_subset"] for r in mine) == list(range(5))
        assert len({_key(r, "paper") for r in mine}) == 5  # five different runs, each over the seeds
        assert all(r.subject("paper", 42).nli_fraction == 0.01 for r in mine)
    full = _by_label(diffaug.fraction_rows("bert", 1.0, 5, "paper", joint_alpha=alpha))
    table1 = _by_label(diffaug.table1_rows("paper")[0])
    table6 = _by_label(diffaug.table6_rows([0.1, 1.0])[0])
    assert _key(full["DiffAug (ours)"], "paper") == _key(table1["DiffAug (ours) w/ aux loss"], "paper")
    assert _key(full["SimCSE"], "paper") == _key(table1["SimCSE (supervised)"], "paper")
    assert _key(full["DiffAug (ours) (supervised)"], "paper") == _key(table1["DiffAug (ours) (supervised)"], "paper")
    assert _key(full["PromptBERT_joint"], "paper") == _key(table6["PromptBERT_joint (α = 1)"], "paper")
    assert "SimCSE_joint" not in _by_label(diffaug.fraction_rows("bert", 1.0, 1, "paper"))  # no α chosen yet
    roberta = diffaug.fraction_rows("roberta", 0.1, 1, "smoke", joint_alpha={"PromptRoBERTa_joint": 0.1})
    assert {r.preset for r in roberta} == {"promptroberta-roberta", "diffaug-semi-aux-roberta", "simcse-sup-roberta",
                                           "promptroberta-sup-roberta", "diffaug-sup-roberta"}
    assert set(r.label for r in roberta) <= set(paper_table(7, "diffaug").index)
    assert [r.preset for r in diffaug.unsupervised_rows("roberta")] == ["simcse-roberta", "promptroberta-roberta"]


def test_on_cpu_the_one_percent_subset_holds_a_batch(data_dir):
    """1% of the cpu profile's SNLI triplets (about 59) trains with batches of 32: none of the three rows fails."""
    from cse_kit.train.data import load_examples, subsample_examples

    size = len(subsample_examples(load_examples("SNLI-triplets", data_dir), 0.01, 0))
    for row in diffaug.fraction_rows("bert", 0.01, 1, "cpu", joint_alpha={"SimCSE_joint": 0.1}):
        cfg = row.subject("cpu", 42)
        assert cfg.nli_fraction == 0.01
        if cfg.data == "SNLI-triplets":
            assert cfg.batch_size <= size, row
        if cfg.method == "diffaug" or cfg.semi_strategy != "none":
            assert cfg.nli_batch_size <= size, row


def test_table5_is_the_papers_table_and_the_official_scripts_differ_where_they_do():
    published = paper_table(5, "diffaug")
    for label, values in diffaug.table5_rows("paper").items():
        assert values == {c: pytest.approx(float(published.loc[label, c])) for c in published.columns}, label
    official = diffaug.table5_rows("official-code")
    assert official["Semi-supervised w/o aux"]["stage 1 training steps"] == 1500  # the script's, not the paper's 2000
    assert official["Supervised (w/o aux)"] == diffaug.table5_rows("paper")["Supervised (w/o aux)"]


def test_table8_rows_are_the_papers_columns_and_its_one_per_thousand_is_table1s_aux_run():
    rows = _by_label(diffaug.table8_rows(diffaug.AUX_WEIGHTS))
    assert list(rows) == list(paper_table(8, "diffaug").columns)
    assert rows["no aux loss"].preset == "diffaug-semi-bert" and not rows["no aux loss"].subject("smoke", 1).aux_weight
    assert rows["0.01"].subject("smoke", 1).aux_weight == 0.01
    aux = _by_label(diffaug.table1_rows("smoke")[0])["DiffAug (ours) w/ aux loss"]
    assert _key(rows["0.001"]) == _key(aux)
    with pytest.raises(ParameterError, match="positive"):
        diffaug.check_aux_weights([None, -1e-3])


def test_figure5_rows_snapshot_stage1_and_its_longest_run_is_figure3s():
    grid = diffaug.stage1_grid("paper", [])
    assert grid == [500, 1000, 1500, 2000, 2500, 3000, 4000]
    every = diffaug.snapshot_every(grid)
    rows = diffaug.figure5_rows(grid, every)
    assert [r.subject("paper", 42).stage1_steps for r in rows] == grid
    assert all(r.subject("paper", 42).stage1_snapshot_steps == 200 for r in rows)
    assert _key(rows[-1], "paper") == _key(diffaug.figure5_rows([max(grid)], every)[0], "paper")
    with pytest.raises(ParameterError, match="positive integers"):
        diffaug.stage1_grid("smoke", [0, 2])


def test_stage1_loss_is_the_mean_of_the_last_tenth_of_stage1():
    curve = [{"step": s, "stage": 1, "loss": float(s)} for s in range(1, 21)] + [{"step": 21, "stage": 2, "loss": 0.0}]
    assert diffaug.stage1_loss({"train_curve": curve}) == pytest.approx((19 + 20) / 2)


def test_fraction_labels_are_the_papers_columns():
    assert [diffaug.fraction_label(f) for f in diffaug.FRACTIONS] == ["1%", "10%", "100%"]
    assert set(diffaug.fraction_label(f) for f in diffaug.FRACTIONS) <= set(paper_table(2, "diffaug").columns)
    with pytest.raises(ParameterError, match=r"\(0, 1\]"):
        diffaug.check_fractions([0.01, 1.5])
    assert diffaug.label_subsets("paper", None) == 5 and diffaug.label_subsets("cpu", None) == 1


def test_simcse_supervised_preset_is_the_official_sup_script():
    cfg = build_config("simcse-sup-bert", "paper")
    assert (cfg.data, cfg.batch_size, cfg.lr, cfg.epochs, cfg.keep_projector) == ("NLI", 512, 5e-5, 3, True)


def test_best_on_dev_keeps_the_candidate_with_the_best_mean_dev_score_in_the_groups_place():
    import pandas as pd

    from cse_kit.experiments import best_on_dev

    lines = [("A", 1, 80.0, 70.0), ("g (α = 0.1)", 1, 70.0, 60.0), ("g (α = 0.1)", 2, 90.0, 61.0),
             ("g (α = 1)", 1, 81.0, 50.0), ("g (α = 1)", 2, 81.0, 51.0), ("B", 1, 1.0, 2.0)]
    long = pd.DataFrame([{"row": r, "seed": s, "status": "ok", "reason": "", "dev": d, "Avg.": t}
                         for r, s, d, t in lines])
    selected, chosen = best_on_dev(long, {"g": ["g (α = 0.1)", "g (α = 1)"]}, "dev")
    assert chosen == {"g": "g (α = 1)"}  # mean 81 beats mean 80, though one seed of α = 0.1 reached 90
    assert list(dict.fromkeys(selected.row)) == ["A", "g", "B"]
    assert list(selected[selected.row == "g"]["Avg."]) == [50.0, 51.0]
    assert diffaug.alpha_of(chosen) == {"g": 1.0}
    failed = long.assign(status="not run", dev=float("nan"))
    assert best_on_dev(failed, {"g": ["g (α = 0.1)", "g (α = 1)"]}, "dev")[1] == {"g": None}


def test_the_printed_averages_that_are_not_the_mean_of_their_cells_are_named_with_both_values():
    from cse_kit.data.published import average_mismatches

    lines = average_mismatches(6, "diffaug")
    assert lines == ["DiffAug Table 6, PromptBERT_joint: the paper prints Avg. 79.81; its cells average to 79.57",
                     "DiffAug Table 6, PromptBERT_sup-unsup: the paper prints Avg. 78.15; its cells average to 79.70"]


def test_table4_projects_the_timed_window_to_the_papers_run_and_compares_ratios_to_simcse():
    import pandas as pd

    rows = _by_label(diffaug.cost_rows("cpu"))
    assert {r: rows[r].subject("cpu", 1).batch_size for r in rows} == {r: 128 for r in diffaug.COST_RUNS}
    assert rows["DiffAug (ours)"].subject("cpu", 1).stage1_steps == 6  # capped to the window
    assert diffaug.projected_steps("simcse-sup-bert", "paper") == 3 * (275_601 // 128)
    assert diffaug.projected_steps("diffaug-sup-bert", "paper") == 3 * (275_601 // 128) + 1250
    long = pd.DataFrame([{"row": r, "seed": 1, "status": "ok", "reason": "", "Training time": t,
                          "GPU memory usage": m} for r, t, m in (("SimCSE", 10.0, 2.0), ("PromptBERT", 12.0, 2.5),
                                                                ("DiffAug (ours)", 15.0, 3.0))])
    table = diffaug.cost_comparison(long).set_index(["row", "column"])
    assert table.loc[("DiffAug (ours)", "time ratio to SimCSE"), "mean"] == pytest.approx(1.5)
    assert table.loc[("DiffAug (ours)", "time ratio to SimCSE"), "paper"] == pytest.approx(65 / 36)
    assert table.loc[("PromptBERT", "memory ratio to SimCSE"), "paper"] == pytest.approx(1.3)
    assert table.loc[("SimCSE", "Training time"), "paper"] == 36


def test_figure4s_prefix_length_8_is_table8s_run_without_aux_loss():
    rows = _by_label(diffaug.figure4_rows([2, 8]))
    no_aux = _by_label(diffaug.table8_rows([None]))["no aux loss"]
    assert _key(rows["8"]) == _key(no_aux) and _key(rows["2"]) != _key(no_aux)
    with pytest.raises(ParameterError, match="positive integers"):
        diffaug.prefix_grid("smoke", [0])
