"""Run identity in one place (issue 68): which settings compute a number (every one but NOT_COMPUTING), the files a
key hashes named in the record, the configuration digest behind "the same configuration under other seeds", and a
store keyed the old way re-keyed in place without retraining anything."""

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import typing

import pytest

import cse_kit.train.loop as loop
from conftest import REPO
from cse_kit.data.loaders import md5_file
from cse_kit.results import Pretrained, ResultStore, content_digest, identity, record_key
from cse_kit.results import code_version, data_fingerprint, evaluation_protocol
from cse_kit.results.upgrade import STORE_FILE, equivalent_codes
from cse_kit.train.config import NOT_COMPUTING, TrainConfig
from cse_kit.train.precision import resolve_precision
from cse_kit.train.presets import build_config


def _other_value(cfg: TrainConfig, name: str, kind, tmp_path):
    """A value of field `name` unlike cfg's, of the field's type (a file for the fields that name one)."""
    value = getattr(cfg, name)
    if name in ("dev_data", "nli_data"):
        path = tmp_path / f"{name}.csv"
        path.write_text("sentence1,sentence2,score\na,b,1\n")
        return str(path)
    if name == "data":
        return "Wiki1M" if value != "Wiki1M" else "Wiki1M-sample"
    if name == "method":
        return "diffcse"
    if name == "mixed_precision":
        here = resolve_precision(value)
        return next((p for p in ("no", "bf16", "fp16", "auto") if resolve_precision(p) != here), None)
    base = next((t for t in (bool, int, float, str, dict) if kind is t or t in typing.get_args(kind)), None)
    if base is bool:
        return not value
    if base in (int, float):
        return (value or 0) * 2 + 3
    if base is str:
        return f"{value or ''}-other"
    return {"label": "other"}


def test_every_setting_but_those_that_compute_nothing_changes_the_key(data_dir, tmp_path):
    cfg = build_config("simcse-bert", "smoke", {})
    key = record_key(cfg, data_dir)
    kinds = typing.get_type_hints(TrainConfig)
    leaves, changes = [], []
    for field in dataclasses.fields(TrainConfig):
        other = _other_value(cfg, field.name, kinds[field.name], tmp_path)
        if other is None:  # mixed_precision on a machine where every setting resolves alike
            continue
        changed = dataclasses.replace(cfg)
        object.__setattr__(changed, field.name, other)  # the key is asked of any value, valid for training or not
        (changes if record_key(changed, data_dir) != key else leaves).append(field.name)
    assert sorted(leaves) == sorted(NOT_COMPUTING)
    assert {"log_steps", "save_steps", "checkpoint_minutes", "keep_checkpoint", "extra"} <= set(leaves)
    assert {"seed", "lr", "stage1_snapshot_steps", "dev_data", "nli_data", "preset", "profile"} <= set(changes)


def test_a_record_names_every_file_its_key_hashes(data_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"a sentence of my own, number {i}.\n" for i in range(64)))
    cfg = build_config("simcse-bert", "smoke", {"data": str(corpus), "max_steps": 2})
    record = ResultStore(tmp_path / "store", data_dir).get(cfg, ("sts_dev",))
    files = {f["role"]: f for f in record["files"]}
    assert files["data"] == {"role": "data", "path": str(corpus), "md5": md5_file(corpus)}
    reference = files["registered data's reference checksums"]
    assert reference["sha256"] == data_fingerprint(str(data_dir)) == record["data_checksums"]
    assert hashlib.sha256(open(reference["path"], "rb").read()).hexdigest()[:16] == reference["sha256"]


def test_the_configuration_digest_is_the_key_without_the_seed(data_dir):
    one, two = (build_config("simcse-bert", "smoke", {"seed": s}) for s in (1, 2))
    assert record_key(one, data_dir) != record_key(two, data_dir)
    from cse_kit.results import configuration_digest

    assert configuration_digest(identity(one, data_dir)) == configuration_digest(identity(two, data_dir))
    lr = one.replace(lr=one.lr * 2)
    assert configuration_digest(identity(lr, data_dir)) != configuration_digest(identity(one, data_dir))


# --- a store keyed the old way (key scheme 1, until this change) --------------------------------------------------
def _scheme1_key(subject, data_dir=None, amp=False, cuda=None) -> str:
    """The key as the previous release computed it (cse_kit/results/__init__.py at 99f6141): every setting but
    output_dir, data_dir and log_with."""
    what = identity(subject, data_dir, amp, cuda)
    if isinstance(subject, TrainConfig):
        settings = {k: v for k, v in subject.to_dict().items() if k not in ("output_dir", "data_dir", "log_with")}
        what["subject"] = {"kind": "trained", **settings,
                           "mixed_precision": resolve_precision(subject.mixed_precision, cuda)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


def _as_scheme1(store: ResultStore, subjects) -> list[str]:
    """Rewrite the store's records as the previous release wrote them: under scheme-1 keys and run folders, without
    the fields this release adds, and without the store file."""
    keys = []
    for subject in subjects:
        new_key, old_key = store.key(subject), _scheme1_key(subject, store.data_dir)
        record = json.loads(store.record_path(new_key).read_text())
        for added in ("key_scheme", "configuration", "files"):
            record.pop(added)
        record["key"] = old_key
        if isinstance(subject, TrainConfig):
            record["subject"] = {"kind": "trained", **{k: v for k, v in subject.to_dict().items() if k not in (
                "output_dir", "data_dir", "log_with")}, "mixed_precision": record["subject"]["mixed_precision"]}
            record["model_dir"] = str(store.run_dir(old_key) / "model")
            record["config"]["output_dir"] = str(store.run_dir(old_key))
            store.run_dir(new_key).replace(store.run_dir(old_key))
        record["digest"] = content_digest(record)
        store.record_path(new_key).unlink()
        store.record_path(old_key).write_text(json.dumps(record))
        keys.append(old_key)
    (store.root / STORE_FILE).unlink()
    return keys


def test_a_store_keyed_the_old_way_is_rekeyed_once_and_nothing_is_retrained(data_dir, tmp_path, monkeypatch):
    trained = [build_config("simcse-bert", "smoke", {"seed": s, "log_steps": 5}) for s in (1, 2)]
    pretrained = Pretrained("smoke-bert", "avg", "smoke")
    built = ResultStore(tmp_path, data_dir, notify=lambda line: None)
    subjects = [*trained, pretrained]
    before = [built.get(subject, ("sts_dev",)) for subject in subjects]
    old_keys = _as_scheme1(built, subjects)
    assert [k == built.key(s) for k, s in zip(old_keys, subjects)] == [False, False, True]  # a trained run's moves

    trainings = []
    monkeypatch.setattr(loop, "train", lambda *a, **k: trainings.append(a) or pytest.fail("retrained a run"))
    said = []
    store = ResultStore(tmp_path, data_dir, notify=said.append)
    asked = [t.replace(log_steps=50) for t in trained] + [pretrained]  # logging more often computes the same run
    after = [store.get(subject, ("sts_dev", "sts_test")) for subject in asked]
    assert trainings == []
    assert [line for line in said if "re-keyed" in line] == [
        f"results store {tmp_path}: 3 record(s) upgraded to key scheme 3, 2 of them re-keyed; nothing retrained"]
    for subject, first, old, new in zip(subjects, before, old_keys, after):
        assert new["metrics"]["sts_dev"] == first["metrics"]["sts_dev"] and new["key"] == store.key(subject)
        assert old == new["key"] or not (store.record_path(old).exists() or store.run_dir(old).exists())
        assert new["configuration"] and new["files"]
    assert after[0]["configuration"] == after[1]["configuration"] != after[2]["configuration"]
    assert store.same_configuration(after[0]) == [store.read(after[0]["key"]), store.read(after[1]["key"])]
    assert json.loads((tmp_path / STORE_FILE).read_text()) == {"key_scheme": 3, "code": code_version()}

    again = []
    ResultStore(tmp_path, data_dir, notify=again.append).get(asked[0], ("sts_dev",))
    assert again == []  # once


def test_an_upgrade_stopped_midway_finishes_on_the_next_run(data_dir, tmp_path, monkeypatch):
    """kill -9 between moving a run folder and writing its record: the next run finishes the move."""
    subject = build_config("simcse-bert", "smoke", {"seed": 4})
    built = ResultStore(tmp_path, data_dir, notify=lambda line: None)
    metrics = built.get(subject, ("sts_dev",))["metrics"]
    [old] = _as_scheme1(built, [subject])
    built.run_dir(old).replace(built.run_dir(built.key(subject)))  # the first step of the move, then the stop
    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("retrained a run"))
    record = ResultStore(tmp_path, data_dir, notify=lambda line: None).get(subject, ("sts_dev",))
    assert record["metrics"] == metrics and (built.run_dir(record["key"]) / "model").is_dir()


def test_evaluation_protocol_and_sampled_keys_are_kept(data_dir):
    """A sampled (smoke) record never shares a key with a whole-set one, as before the identity moved."""
    assert evaluation_protocol("smoke") and not evaluation_protocol("cpu")
    assert record_key(Pretrained("smoke-bert", "avg", "smoke"), data_dir) != \
        record_key(Pretrained("smoke-bert", "avg", "cpu"), data_dir)


#: the last commit before a method's settings moved from TrainConfig into its Options (issue 67)
BEFORE_OPTIONS = "6298ae4"
#: what that release trained: a SimCSE run (its key held the profile's DiffCSE generator and SCD projector) and a
#: DiffCSE run with λ set as the field it was
OLD_RUNS = (("simcse-bert", {"seed": 1}), ("diffcse-bert-sts", {"seed": 1, "lam": 0.01}))
_BUILD_OLD = """
import json, sys
from cse_kit.results import ResultStore, code_version
from cse_kit.train.presets import build_config
store = ResultStore(sys.argv[1], sys.argv[2], notify=lambda line: None)
runs = [store.get(build_config(p, "smoke", o), ("sts_dev",)) for p, o in json.loads(sys.argv[3])]
print(json.dumps({"code": code_version(), "sts_dev": [r["metrics"]["sts_dev"] for r in runs]}))
"""


def _shallow() -> bool:
    out = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() == "true"


@pytest.mark.skipif(_shallow(), reason="a shallow clone lacks the release before the move (git fetch --unshallow)")
def test_a_store_the_release_before_options_built_is_found_and_nothing_is_retrained(data_dir, tmp_path, monkeypatch):
    """The previous release's own code trains a smoke store; this code opens it: every record is found under its
    new key (the code change carried by code_lineage.json, which the whole doctor wrote) and nothing trains."""
    old = tmp_path / "release"
    old.mkdir()
    archive = subprocess.run(["git", "archive", BEFORE_OPTIONS, "cse_kit"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    env = {**os.environ, "PYTHONPATH": str(old)}
    built = subprocess.run([sys.executable, "-c", _BUILD_OLD, str(tmp_path / "store"), str(data_dir),
                            json.dumps(OLD_RUNS)], env=env, capture_output=True, text=True, cwd=old)
    assert built.returncode == 0, built.stderr[-2000:]
    before = json.loads(built.stdout.splitlines()[-1])
    assert before["code"] in equivalent_codes(code_version()), (
        f"the release before the move computed with code {before['code']}, which code_lineage.json does not lead to "
        f"this code ({code_version()}): run the whole `cse-kit doctor --write-references`")

    monkeypatch.setattr(loop, "train", lambda *a, **k: pytest.fail("retrained a run"))
    said = []
    store = ResultStore(tmp_path / "store", data_dir, notify=said.append)
    after = [store.get(build_config(p, "smoke", o), ("sts_dev",)) for p, o in OLD_RUNS]
    assert [r["metrics"]["sts_dev"] for r in after] == before["sts_dev"]
    assert [r["code_lineage"] for r in after] == [[before["code"]]] * 2
    assert after[1]["config"]["method_options"]["lambda_weight"] == 0.01
    assert len([line for line in said if "upgraded to key scheme" in line]) == 1


def test_a_lineage_entry_carries_every_record_but_the_runs_it_names_as_moved(tmp_path, monkeypatch):
    """A chain of code_lineage.json entries: a record of the oldest code is carried unless an entry on its way names
    its run in `except` (DiffCSE's host-drawn insertion moved its numbers, which no doctor check covers)."""
    from cse_kit.results import upgrade

    lineage = tmp_path / "code_lineage.json"
    lineage.write_text(json.dumps([
        {"from": "a", "to": "b", "evidence": "doctor"},
        {"from": "b", "to": "c", "evidence": "doctor",
         "except": [{"method": ["diffcse"], "method_options.edit": ["insert", "delete", "all"]}]}]))
    monkeypatch.setattr(upgrade, "LINEAGE_FILE", lineage)
    carried = upgrade.carried_codes("c")
    assert set(carried) == {"a", "b"} and upgrade.equivalent_codes("c") == {"a", "b"}

    def record(edit):
        return {"config": {"method": "diffcse", "method_options": {"edit": edit}}}

    assert [upgrade.excepted(record(edit), carried["a"]) for edit in ("replace", "insert", "all")] == [
        False, True, True]
    assert not upgrade.excepted({"config": {"method": "simcse", "method_options": {}}}, carried["a"])
    assert upgrade.carried_codes("b") == {"a": []}  # before the change: nothing excepted
