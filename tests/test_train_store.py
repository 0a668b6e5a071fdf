"""`cse-kit train` trains into the results store, under the key a notebook asks for the run by: `cse-kit status` lists
it and the notebook reuses it without training; `--output-dir` trains outside the store and says so."""

from __future__ import annotations

from cse_kit import cli


def test_a_run_trained_by_cse_kit_train_is_listed_by_status_and_reused_by_the_notebook(data_dir, tmp_path, capsys,
                                                                                         monkeypatch):
    from cse_kit import experiments as ex
    from cse_kit.papers import diffcse
    from cse_kit.train import loop

    results = tmp_path / "results"
    train = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--data-dir", str(data_dir), "--no-progress",
             "--log-with", "none"]
    assert cli.main([*train, "--results-dir", str(results)]) == 0
    said = capsys.readouterr().out
    [record] = list((results / "records").glob("*.json"))
    key = record.stem
    assert f"record {key}, run folder {results / 'runs' / key}" in said
    assert f"model: {results / 'runs' / key / 'model'}" in said

    assert cli.main(["status", "--results-dir", str(results)]) == 0
    listed = capsys.readouterr().out
    assert f"1 trained run in {results / 'runs'}" in listed
    assert f"  {key}  simcse-bert smoke seed 1: " in listed and "evaluations: none yet" in listed

    def trained_again(cfg, **kw):
        raise AssertionError(f"trained {cfg.output_dir} again")

    monkeypatch.setattr(loop, "train", trained_again)
    # what notebooks/table3_objective.py does on the smoke profile, its SimCSE row alone
    s = ex.setup("smoke", [], str(data_dir), str(results))
    long = ex.run_rows(diffcse.table3_rows([]), s, diffcse.ABLATION_EVALS[s.profile], ex.dev_columns)
    trained = long[long.row == "SimCSE"]
    assert list(trained.key) == [key] and list(trained.status) == ["ok"]
    assert cli.main(["train", *train[1:], "--results-dir", str(results)]) == 0  # finished: reused, as the notebook
    assert "holds this run already" in capsys.readouterr().out

    monkeypatch.undo()
    own = tmp_path / "own"
    assert cli.main([*train, "--results-dir", str(results), "--output-dir", str(own), "--max-steps", "2"]) == 0
    assert f"{own} is a folder of your own, outside the results store" in capsys.readouterr().out
    assert (own / "model").is_dir()
    assert cli.main(["status", "--results-dir", str(results)]) == 0
    assert f"1 trained run in {results / 'runs'}" in capsys.readouterr().out
