"""Records computed under other library versions (issue 59): named in every record, marked wherever shown, listed
by `cse-kit status --stale`, recomputed by `cse-kit report --recompute-stale`; the others reused. A record being
recomputed is set aside with its model, listed and restorable, until its replacement holds numbers (issue 68)."""

import json

import pytest

from cse_kit import cli
from cse_kit.environment import NUMBER_LIBRARIES, describe, describe_versions, major_minor, stale_versions
from cse_kit.experiments import Row, Setup, run_rows, save_table
from cse_kit.report import table_html
from cse_kit.results import Pretrained, ResultStore, content_digest

OLD_TRANSFORMERS = "4.57.1"


def _rewrite_environment(store: ResultStore, key: str, **versions) -> None:
    """What a record made under other versions holds: its environment says them (its digest kept valid)."""
    path = store.record_path(key)
    record = json.loads(path.read_text())
    record["environment"].update(versions)
    record["digest"] = content_digest(record)
    path.write_text(json.dumps(record))


def test_every_record_names_the_versions_and_the_hardware_that_decide_its_numbers():
    env = describe("cpu")
    for name in ("torch", "transformers", "tokenizers", "accelerate", "numpy", "scipy", "scikit-learn"):
        assert env[name] and name in NUMBER_LIBRARIES
    assert "cpu_model" in env and "cpu_bf16" in env  # the unit: AMX-BF16, AVX512-BF16 or None (fp32 only)
    assert major_minor("2.13.0+cpu") == "2.13" and major_minor("4.57.1") == "4.57"
    here = describe_versions()
    assert stale_versions({**here, "transformers": OLD_TRANSFORMERS}) == [
        f"computed with transformers 4.57; this environment has {major_minor(here['transformers'])}"]
    patch = here["numpy"].rsplit(".", 1)[0] + ".999"  # another patch release decides nothing
    assert stale_versions({**here, "numpy": patch}) == [] and stale_versions({"python": "3.9"}) == []


def test_a_stale_record_is_marked_listed_and_recomputed_and_the_others_reused(data_dir, tmp_path, capsys, counted):
    store = ResultStore(tmp_path, data_dir)
    rows = [Row("avg", model="smoke-bert", pooler="avg"), Row("cls", model="smoke-bert", pooler="cls_before_pooler")]
    setup = Setup("smoke", [42], store)
    long = run_rows(rows, setup, ("sts_dev",), lambda r: {"dev": r["metrics"]["sts_dev"]["STSBenchmark"]["dev"]
                                                                ["spearman"]})
    assert counted == ["sts_dev", "sts_dev"] and store.stale() == {} and not setup.stale
    old, fresh = long.key
    _rewrite_environment(store, old, transformers=OLD_TRANSFORMERS)
    why = f"computed with transformers 4.57; this environment has {major_minor(describe_versions()['transformers'])}"
    assert store.stale() == {old: [why]}
    capsys.readouterr()

    # the notebook: a line under the table's cell, and the note the report shows beside the table
    setup = Setup("smoke", [42], store)
    again = run_rows(rows, setup, ("sts_dev",), lambda r: {"dev": 0})
    assert counted == ["sts_dev", "sts_dev"] and list(again.key) == [old, fresh]  # shown, not recomputed
    printed = capsys.readouterr().out
    assert f"stale: 1 run of this table was {why}" in printed and "--recompute-stale" in printed
    save_table(setup, "stale_table", "A table")
    table = json.loads((store.root / "tables" / "stale_table.json").read_text())
    assert any(why in note for note in table["notes"])
    assert why in table_html(table, "t")  # the report's section of that table

    # cse-kit status --stale
    assert cli.main(["status", "--stale", "--results-dir", str(store.root)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == f"{old}  smoke-bert (smoke profile): {why}"
    assert fresh not in "\n".join(listed) and "1 stale record(s)" in listed[-1]

    # --recompute-stale: the stale record is set aside (listed) and computed again under this environment, the other
    # one reused; the set-aside copy goes once the replacement holds numbers
    assert store.set_aside_stale() == [old] and list(store.set_aside()) == [old]
    assert cli.main(["status", "--stale", "--results-dir", str(store.root)]) == 0
    listed = capsys.readouterr().out
    assert f"{old}  set aside" in listed and f"cse-kit status --restore {old}" in listed
    recomputed = run_rows(rows, Setup("smoke", [42], store), ("sts_dev",), lambda r: {"dev": 0})
    assert counted == ["sts_dev", "sts_dev", "sts_dev"] and list(recomputed.key) == [old, fresh]
    assert store.stale() == {} and store.set_aside() == {}
    assert cli.main(["status", "--stale", "--results-dir", str(store.root)]) == 0
    assert capsys.readouterr().out.startswith("no stale record")


def test_report_recompute_stale_sets_the_stale_records_aside_and_executes_the_notebooks_again(
        data_dir, tmp_path, monkeypatch, capsys):
    from cse_kit.cli import report as report_command

    store = ResultStore(tmp_path / "results", data_dir)
    stale = store.get(Pretrained("smoke-bert", "avg", "smoke"), ("sts_dev",))["key"]
    kept = store.get(Pretrained("smoke-bert", "cls_before_pooler", "smoke"), ("sts_dev",))["key"]
    _rewrite_environment(store, stale, tokenizers="0.1.0")
    built = []

    def build(profile, results_dir, data_dir, out, force, *args, **kwargs):
        built.append(force)
        (tmp_path / "out").mkdir(exist_ok=True)
        (tmp_path / "out" / "report.json").write_text(json.dumps({"runs": []}))
        return tmp_path / "out" / "index.html"

    monkeypatch.setattr(report_command, "build", build)  # where `cse-kit report` looks it up
    assert cli.main(["report", "--profile", "smoke", "--results-dir", str(store.root), "--data-dir", str(data_dir),
                     "--recompute-stale"]) == 0
    assert built == [True]  # the notebooks execute again; their finished runs are reused
    assert f"recomputing 1 stale record(s) (other library versions): {stale}" in capsys.readouterr().out
    assert store.read(stale) is None and store.read(kept) is not None and list(store.set_aside()) == [stale]


def test_a_stale_run_is_evaluated_again_without_training_where_asked(data_dir, tmp_path, monkeypatch):
    import cse_kit.train.loop as loop
    from cse_kit.train.presets import build_config

    store = ResultStore(tmp_path, data_dir, notify=lambda line: None)
    cfg = build_config("simcse-bert", "smoke", {"seed": 7})
    first = store.get(cfg, ("sts_dev",))
    _rewrite_environment(store, first["key"], transformers=OLD_TRANSFORMERS)
    assert store.set_aside_stale(reevaluate_only=True) == [first["key"]]
    assert store.set_aside()[first["key"]]["reevaluate_only"] is True
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("retrained a run asked to be evaluated again"))
    again = store.get(cfg, ("sts_dev",))
    assert again["metrics"]["sts_dev"] == first["metrics"]["sts_dev"]  # the same model, evaluated again
    assert again["training_environment"]["transformers"] == OLD_TRANSFORMERS and store.stale() == {}
    assert store.set_aside() == {}


def test_a_recompute_killed_mid_notebook_loses_no_record(data_dir, tmp_path):
    """kill -9 of `cse-kit report --recompute-stale` while its notebook runs: every stale record and its model are
    still readable, listed by `cse-kit status --stale`, and back in place with `cse-kit status --restore all`."""
    import os
    import signal
    import subprocess
    import time

    import kit_process
    from conftest import cli_env
    from cse_kit.train.presets import build_config

    store = ResultStore(tmp_path / "results", data_dir, notify=lambda line: None)
    subjects = [build_config("simcse-bert", "smoke", {"seed": 8}), Pretrained("smoke-bert", "avg", "smoke")]
    before = [store.get(subject, ("sts_dev",)) for subject in subjects]
    for record in before:
        _rewrite_environment(store, record["key"], transformers=OLD_TRANSFORMERS)
    before = [store.read(record["key"]) for record in before]
    report = kit_process.popen(
        ["report", "--profile", "smoke", "--only", "table8_lambda", "--results-dir", str(store.root), "--data-dir",
         str(data_dir), "--out", str(tmp_path / "out"), "--recompute-stale"], env=cli_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    running = tmp_path / "out" / "executed"
    deadline = time.monotonic() + 120
    while not list(running.glob("*.running.ipynb")) and report.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # its kernel at work
    assert report.poll() is None, "the report ended before it could be killed mid-notebook"
    os.killpg(report.pid, signal.SIGKILL)
    report.wait()

    aside = store.set_aside()
    assert sorted(aside) == sorted(r["key"] for r in before)
    assert all(store.read(r["key"]) is None or not store.read(r["key"])["metrics"] for r in before)
    assert cli.main(["status", "--restore", "all", "--results-dir", str(store.root)]) == 0
    assert [store.read(record["key"]) for record in before] == before
    assert (store.run_dir(before[0]["key"]) / "model").is_dir() and store.set_aside() == {}
    assert sorted(store.stale()) == sorted(r["key"] for r in before)  # as they were: stale, and listed so
