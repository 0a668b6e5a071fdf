"""An exported model, a results-store record and a model folder with its own code are data: a pickle planted in
place of any of their files never runs (refused in one line naming the file, exit 2), and a
model's Python code runs only when the user sets CSE_KIT_TRUST_REMOTE_CODE=1."""

import json
import os
import shutil

import pytest

import kit_process
from conftest import plant
from cse_kit.models import TRUST_REMOTE_CODE, load_model, resolve_reference
from cse_kit.results import Pretrained, ResultStore
from cse_kit.train import build_config, train


@pytest.fixture(scope="module")
def exported(data_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("export") / "run"
    train(build_config("simcse-bert", "smoke", {"output_dir": str(run), "data_dir": str(data_dir), "max_steps": 1,
                                                "eval_steps": 1}), progress=False)
    return run / "model"


def _eval(model, data_dir, **env):
    return kit_process.run(["eval", "--model", str(model), "--tasks",
                            "STSBenchmark", "--mode", "dev", "--pooler", "avg", "--data-dir", str(data_dir)],
                           env={**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", **env},
                           capture_output=True, text=True)


@pytest.mark.parametrize("name", ["config.json", "cse_kit.json", "model.safetensors", "tokenizer.json",
                                  "tokenizer_config.json", "pytorch_model.bin"])
def test_a_pickle_planted_in_an_export_never_runs(exported, data_dir, tmp_path, name):
    """pytorch_model.bin: pickled weights in place of the safetensors ones, as a downloaded checkpoint may hold."""
    model = tmp_path / "model"
    shutil.copytree(exported, model)
    if name == "pytorch_model.bin":
        (model / "model.safetensors").unlink()
    marker = tmp_path / "created"
    plant(model / name, marker)
    done = _eval(model, data_dir)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert (name in done.stderr if name == "pytorch_model.bin" else f"{model / name} is damaged" in done.stderr)
    assert not marker.exists()


def test_a_pickle_planted_as_a_results_record_never_runs_and_is_refused(data_dir, tmp_path, monkeypatch):
    """In the store (the API a notebook calls) and before `cse-kit report` executes any notebook: one line naming
    the record, exit 2, the record left in place."""
    from cse_kit import results

    monkeypatch.setitem(results.EVALUATIONS, "sts_dev", lambda encoder, data_dir, profile: {"spearman": 40.72})
    monkeypatch.setattr(ResultStore, "encoder", lambda self, record: None)
    store = ResultStore(tmp_path / "store", data_dir)
    subject = Pretrained("smoke-bert", "avg", "smoke")
    path = store.record_path(store.get(subject, ("sts_dev",))["key"])
    marker = tmp_path / "created"
    plant(path, marker)
    planted = path.read_bytes()
    with pytest.raises(results.UnreadableRecord, match=f"result record {path} is not JSON"):
        store.get(subject, ("sts_dev",))
    done = kit_process.run(["report", "--profile", "smoke", "--only",
                            "figure2_cosine", "--results-dir", str(store.root), "--data-dir", str(data_dir), "--out",
                            str(tmp_path / "page")], capture_output=True, text=True)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"result record {path} is not JSON" in done.stderr and "delete it" in done.stderr
    assert not marker.exists() and path.read_bytes() == planted and not (tmp_path / "page").exists()


def test_a_model_with_its_own_code_loads_only_when_the_user_trusts_it(data_dir, tmp_path, monkeypatch):
    """A folder whose config maps AutoModel to its own modeling file (as a Hub repository with custom code)."""
    model = tmp_path / "custom"
    shutil.copytree(resolve_reference("all-MiniLM-L6-v2"), model)
    marker = tmp_path / "created"
    config = json.loads((model / "config.json").read_text())
    config.update(model_type="custom_bert", auto_map={"AutoConfig": "modeling_custom.CustomConfig",
                                                      "AutoModel": "modeling_custom.CustomModel"})
    (model / "config.json").write_text(json.dumps(config))
    (model / "modeling_custom.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import BertConfig, BertModel\n\n"
        "class CustomConfig(BertConfig):\n    model_type = 'custom_bert'\n\n"
        "class CustomModel(BertModel):\n    config_class = CustomConfig\n")
    done = _eval(model, data_dir)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "ships its own Python code (its config's auto_map)" in done.stderr and f"{TRUST_REMOTE_CODE}=1" in done.stderr
    assert not marker.exists()
    monkeypatch.setenv(TRUST_REMOTE_CODE, "1")
    _, encoder = load_model(str(model))
    assert type(encoder).__name__ == "CustomModel" and marker.exists()
