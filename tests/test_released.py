"""The registry of the papers' released checkpoints: the pooler each is evaluated with, and the rows beside the
paper's numbers (offline: shown as not run; the registry logic with a local folder standing in for a Hub id)."""

import pytest

from cse_kit import cli
from cse_kit import experiments as ex
from cse_kit.papers import diffcse, released
from cse_kit.results import Pretrained


def test_every_main_table_checkpoint_is_registered_with_a_pooler():
    for ids in diffcse.RELEASED.values():
        for model_id in ids.values():
            entry = released.lookup(model_id)
            assert entry["pooler"] == "cls_before_pooler" and entry["source"], entry


def test_offline_profiles_show_released_rows_as_not_run_with_the_reason():
    rows = {r.label: r for r in diffcse.table1_rows(["bert"], "cpu")}
    row = rows["DiffCSE-BERT-base (released checkpoint)"]
    with pytest.raises(ex.ProfileUnavailable, match="need the Hub"):
        row.subject("cpu", 42)
    assert rows["DiffCSE-BERT-base"].preset == "diffcse-bert-sts"


def test_on_the_paper_profile_a_released_row_evaluates_the_checkpoint_with_its_pooler():
    rows = {r.label: r for r in diffcse.table2_rows(["roberta"], "paper")}
    subject = rows["DiffCSE-RoBERTa-base (released checkpoint)"].subject("paper", 42)
    assert subject == Pretrained("voidism/diffcse-roberta-base-trans", "cls_before_pooler", "paper")


def test_a_released_row_is_compared_with_the_paper_row_it_stands_for():
    import pandas as pd

    long = pd.DataFrame([{"row": "DiffCSE-BERT-base (released checkpoint)", "seed": 42, "status": "ok", "reason": "",
                          "Avg.": 78.4}])
    [line] = ex.compare(long, 1, ["Avg."]).to_dict("records")
    assert line["paper"] == 78.49 and line["diff"] == pytest.approx(-0.09)


def test_eval_picks_the_registered_pooler_for_a_released_id(tmp_path, monkeypatch, capsys):
    """A local folder stands in for a Hub id (no Hub here): the registry, not --pooler, names the pooler."""
    stand_in = tmp_path / "unsup-simcse-stand-in"
    stand_in.mkdir()
    entry = {"id": str(stand_in), "paper": "simcse", "pooler": "cls_before_pooler", "source": "a test"}
    monkeypatch.setattr(released, "checkpoints", lambda: {entry["id"]: entry})
    assert cli.eval.pooler_of(str(stand_in)) == "cls_before_pooler"
    assert "released checkpoint of simcse" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--pooler is required"):
        cli.eval.pooler_of(str(tmp_path))
