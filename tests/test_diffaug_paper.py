"""DiffAug's paper module: which run stands behind each row of Tables 1, 2, 5, 7, 8 and Figures 3, 5, the rows
shared across tables (trained once), and the numbers the kit cites instead of training."""

import pytest

from cse_kit.experiments import RELEASED_SUFFIX, ParameterError
from cse_kit.paper import paper_table
from cse_kit.papers import diffaug
from cse_kit.results import record_key
from cse_kit.train.presets import build_config


def _key(row, profile="smoke", seed=1):
    return record_key(row.subject(profile, seed), "/data")


def _by_label(rows):
    return {row.label: row for row in rows}


def test_table1_rows_are_the_papers_rows_with_the_released_checkpoints_on_paper_only():
    published = paper_table(1, "diffaug")
    for profile in ("smoke", "paper"):
        rows = diffaug.table1_rows(profile)
        assert all(r.label.removesuffix(RELEASED_SUFFIX) in published.index for r in rows)
        released = [r for r in rows if r.label.endswith(RELEASED_SUFFIX)]
        assert len(released) == 2
        assert all((r.unavailable is None) == (profile == "paper") for r in released)
    rows = _by_label(diffaug.table1_rows("smoke"))
    assert rows["DiffAug (ours) w/ aux loss"].preset == "diffaug-semi-aux-bert"
    assert rows["SimCSE (supervised)"].subject("smoke", 1).keep_projector
    official = _by_label(diffaug.table1_rows("smoke", "official-code"))
    assert official["DiffAug (ours) (supervised)"].subject("smoke", 1).gradient_accumulation == 4
    with pytest.raises(ParameterError, match="BERT only"):
        diffaug.check_recipe("official-code", ["bert", "roberta"])


def test_cited_rows_are_the_ones_the_kit_does_not_train():
    cited = set(diffaug.literature(1).index)
    trained = {r.label.removesuffix(RELEASED_SUFFIX) for r in diffaug.table1_rows("smoke")}
    assert cited == set(paper_table(1, "diffaug").index) - trained
    assert {"PromptBERT", "ConSERT", "SBERT", "ConSERT_joint"} <= cited
    assert set(diffaug.literature(2).index) == {"SimCSE_joint", "PromptBERT_joint", "PromptBERT"}
    assert set(diffaug.literature(7).index) == {"SimCSE_joint", "PromptRoBERTa_joint", "PromptRoBERTa"}


def test_label_fraction_rows_draw_subsets_and_share_the_full_runs_with_table1():
    low = diffaug.fraction_rows("bert", 0.01, 5, "paper")
    assert len(low) == 15 and set(r.label for r in low) <= set(paper_table(2, "diffaug").index)
    for label in ("DiffAug (ours)", "SimCSE", "DiffAug (ours) (supervised)"):
        mine = [r for r in low if r.label == label]
        assert sorted(r.overrides["nli_subset"] for r in mine) == list(range(5))
        assert len({_key(r, "paper") for r in mine}) == 5  # five different runs, each over the seeds
        assert all(r.subject("paper", 42).nli_fraction == 0.01 for r in mine)
    full = _by_label(diffaug.fraction_rows("bert", 1.0, 5, "paper"))
    table1 = _by_label(diffaug.table1_rows("paper"))
    assert _key(full["DiffAug (ours)"], "paper") == _key(table1["DiffAug (ours) w/ aux loss"], "paper")
    assert _key(full["SimCSE"], "paper") == _key(table1["SimCSE (supervised)"], "paper")
    assert _key(full["DiffAug (ours) (supervised)"], "paper") == _key(table1["DiffAug (ours) (supervised)"], "paper")
    roberta = diffaug.fraction_rows("roberta", 0.1, 1, "smoke")
    assert {r.preset for r in roberta} == {"diffaug-semi-aux-roberta", "simcse-sup-roberta", "diffaug-sup-roberta"}
    assert set(r.label for r in roberta) <= set(paper_table(7, "diffaug").index)


def test_on_cpu_the_one_percent_subset_holds_a_batch(data_dir):
    """1% of the cpu profile's SNLI triplets (about 59) trains with batches of 32: none of the three rows fails."""
    from cse_kit.train.data import load_examples, subsample_examples

    size = len(subsample_examples(load_examples("SNLI-triplets", data_dir), 0.01, 0))
    for row in diffaug.fraction_rows("bert", 0.01, 1, "cpu"):
        cfg = row.subject("cpu", 42)
        assert cfg.nli_fraction == 0.01
        if cfg.data == "SNLI-triplets":
            assert cfg.batch_size <= size, row
        if cfg.method == "diffaug":
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
    aux = _by_label(diffaug.table1_rows("smoke"))["DiffAug (ours) w/ aux loss"]
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
