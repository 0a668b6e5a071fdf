"""The same numbers twice, on request (issue 75, item 4): `deterministic=true` turns on torch's deterministic
algorithms for the run and puts the process's settings back after it; an operation torch cannot run
deterministically stops the run in one line naming the method, the operation and the fix; the setting is part of
the run's record. And a local run imports no cluster package (item 7): submitit only where worker jobs are sent."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F

from cse_kit import cli
from cse_kit.methods import METHODS, Objective, register
from cse_kit.methods import registry
from cse_kit.results import ResultStore, identity, record_key, subject_dict
from cse_kit.results.identity import digest_of
from cse_kit.results.parallel import require_submitit
from cse_kit.results.upgrade import rekeyed
from cse_kit.train import build_config, train
from cse_kit.train.determinism import (CUBLAS_ENV, CUBLAS_SETTING, NondeterministicOperation, deterministic_mode,
                                       nondeterministic_error_line, state)

from conftest import cli_env
from test_write_failures import one_error_line

def _put_refusal() -> str:
    """What torch says when put_ (accumulate=False: no deterministic implementation, on a CPU too) runs under
    deterministic algorithms."""
    with deterministic_mode(True):
        try:
            torch.zeros(4).put_(torch.tensor([0, 1]), torch.ones(2))
        except RuntimeError as error:
            return str(error)
    pytest.fail("torch ran put_ under deterministic algorithms")


@pytest.fixture
def own_methods():
    """Methods registered by a test are forgotten after it."""
    before, loaded = dict(METHODS), set(registry._loaded)
    yield
    METHODS.clear()
    METHODS.update(before)
    registry._loaded.clear()
    registry._loaded.update(loaded)


@pytest.fixture
def settings_of_the_process():
    """The process's deterministic settings as the test found them, put back after it whatever it did."""
    before = state()
    yield before
    torch.use_deterministic_algorithms(before["deterministic_algorithms"], warn_only=before["warn_only"])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = (before["cudnn_benchmark"],
                                                                          before["cudnn_deterministic"])
    os.environ.pop(CUBLAS_ENV, None)
    if before[CUBLAS_ENV] is not None:
        os.environ[CUBLAS_ENV] = before[CUBLAS_ENV]


def _curve(run) -> list[dict]:
    """A run's log.jsonl without the dev evaluations' timings (the only figures of the clock in it)."""
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    return [{**r, "dev": {k: v for k, v in r["dev"].items() if k != "seconds"}} if "dev" in r else r for r in log]


def test_two_deterministic_runs_give_the_same_log_and_dev_curve_and_the_process_gets_its_settings_back(
        data_dir, tmp_path, settings_of_the_process):
    torch.backends.cudnn.benchmark = True  # what a notebook set before: the run turns it off, then puts it back
    before = state()
    cfg = build_config("simcse-bert", "smoke", {"max_steps": 6, "eval_steps": 2, "log_steps": 1,
                                                "deterministic": True, "data_dir": str(data_dir)})
    store = ResultStore(tmp_path / "store", data_dir, notify=lambda line: None)
    record = store.get(cfg, ("sts_dev",))
    assert state() == before
    again = train(cfg.replace(output_dir=str(tmp_path / "again")), progress=False)
    assert state() == before

    first = store.run_dir(record["key"])
    assert _curve(first) == _curve(tmp_path / "again")
    assert [r["step"] for r in _curve(first) if "dev" in r] == [2, 4, 6]
    assert record["metrics"]["sts_dev"] and again["best"] == json.loads((first / "summary.json").read_text())["best"]
    # the run's record, summary and environment say it ran so
    assert record["subject"]["deterministic"] is True and record["config"]["deterministic"] is True
    assert again["config"]["deterministic"] is True and again["environment"]["deterministic_algorithms"] is True
    assert json.loads((first / "environment.json").read_text())["deterministic_algorithms"] is True


def test_deterministic_is_part_of_a_runs_identity_and_an_older_record_reads_as_false(data_dir):
    cfg = build_config("simcse-bert", "smoke", {"seed": 5})
    assert subject_dict(cfg)["deterministic"] is False
    assert subject_dict(cfg.replace(deterministic=True))["deterministic"] is True
    assert record_key(cfg, data_dir) != record_key(cfg.replace(deterministic=True), data_dir)

    # a record written before the setting existed: its subject and config without it, keyed so, by a code the whole
    # doctor found to give the same numbers (code_lineage.json): re-keyed as deterministic=false, nothing retrained
    what = identity(cfg, data_dir)
    old_subject = {k: v for k, v in what["subject"].items() if k != "deterministic"}
    old_what = {**what, "subject": old_subject, "code": "0ld-code"}
    old_key = digest_of(old_what)
    record = {"key": old_key, "key_scheme": 3, "subject": old_subject, "code_version": "0ld-code",
              "data_checksums": what["data"], "profile": "smoke", "metrics": {},
              "config": {k: v for k, v in cfg.to_dict().items() if k != "deterministic"},
              "model_dir": f"/store/runs/{old_key}/model"}
    new = rekeyed(record, str(data_dir), carried={"0ld-code"})
    assert new["subject"]["deterministic"] is False and new["config"]["deterministic"] is False
    assert new["key"] == record_key(cfg, data_dir)


def test_deterministic_mode_puts_back_what_the_process_had_and_changes_nothing_when_off(settings_of_the_process):
    torch.use_deterministic_algorithms(True, warn_only=True)  # the process's own choice
    os.environ[CUBLAS_ENV] = ":16:8"  # the other deterministic setting: kept
    torch.backends.cudnn.benchmark = True
    before = state()
    with deterministic_mode(False):
        assert state() == before
    with pytest.raises(KeyError), deterministic_mode(True):
        assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ[CUBLAS_ENV] == ":16:8" and torch.backends.cudnn.deterministic
        assert not torch.backends.cudnn.benchmark
        raise KeyError("a run that fails")
    assert state() == before

    torch.use_deterministic_algorithms(False)
    os.environ.pop(CUBLAS_ENV)
    with deterministic_mode(True):
        assert os.environ[CUBLAS_ENV] == CUBLAS_SETTING
    assert CUBLAS_ENV not in os.environ and not torch.are_deterministic_algorithms_enabled()


def test_torchs_refusal_is_read_for_the_operations_name():
    assert nondeterministic_error_line("mine", _put_refusal()).startswith(
        "method mine calls put_, which torch has no deterministic implementation of, and this run sets "
        "deterministic=true: set deterministic=false")
    # torch's words on CUDA where the variable is missing (at::Context::alertCuBLASConfigNotDeterministic)
    cublas = ("Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` or "
              "`at::Context::setDeterministicAlgorithms(true)`, but this operation is not deterministic because it "
              "uses CuBLAS and you have CUDA >= 10.2. To enable deterministic behavior in this case, you must set an "
              "environment variable before running your PyTorch application: CUBLAS_WORKSPACE_CONFIG=:4096:8 or "
              "CUBLAS_WORKSPACE_CONFIG=:16:8.")
    assert f"set it before starting Python (`{CUBLAS_ENV}={CUBLAS_SETTING} cse-kit train ...`)" in \
        nondeterministic_error_line("mine", cublas)
    assert nondeterministic_error_line("mine", "CUDA out of memory") is None


def test_an_operation_without_a_deterministic_implementation_stops_the_run_in_one_line(
        data_dir, tmp_path, capsys, own_methods, settings_of_the_process):
    @register("put-weights")
    class PutWeights(Objective):
        """SimCSE's InfoNCE, each row weighted 1 through put_ (accumulate=False: torch has no deterministic
        implementation of it, on a CPU too)."""

        def loss(self, z):
            a, b = F.normalize(z[:, 0], dim=-1), F.normalize(z[:, 1], dim=-1)
            weights = torch.zeros(len(a)).put_(torch.arange(len(a)), torch.ones(len(a)))
            losses = F.cross_entropy(a @ b.T / self.temp, torch.arange(len(a)), reduction="none")
            return (losses * weights).mean()

    before = state()
    argv = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--max-steps", "2", "--data-dir", str(data_dir),
            "--no-progress", "--log-with", "none", "--set", "method=put-weights"]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "plain")]) == 0  # trains where determinism is not asked
    capsys.readouterr()
    assert cli.main([*argv, "--output-dir", str(tmp_path / "same"), "--set", "deterministic=true"]) == 2
    assert one_error_line(capsys) == (
        "cse-kit: error: method put-weights calls put_, which torch has no deterministic implementation of, and this "
        "run sets deterministic=true: set deterministic=false (--set deterministic=false; the run's numbers then may "
        "differ in their last digits run to run), or compute that step in the method with operations torch runs "
        "deterministically (torch.use_deterministic_algorithms' documentation lists them)")
    assert state() == before

    with pytest.raises(NondeterministicOperation, match="^method put-weights calls put_") as raised:
        train(build_config("simcse-bert", "smoke", {"max_steps": 2, "data_dir": str(data_dir), "deterministic": True,
                                                    "method": "put-weights", "output_dir": str(tmp_path / "api")}),
              progress=False)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value.__cause__, RuntimeError)
    assert state() == before


# --- issue 75, item 7: a local run imports no cluster package -----------------------------------------------------
CLUSTER_PACKAGES = ("submitit", "optuna", "psycopg", "psycopg2", "sqlalchemy")

_TRAIN_WITHOUT_SUBMITIT = textwrap.dedent("""
    import json, sys
    sys.modules["submitit"] = None  # as on a GPU node without it: importing it raises ImportError
    from cse_kit.cli import main
    code = main(sys.argv[1:])
    print(json.dumps({"code": code, "loaded": [m for m in %r if sys.modules.get(m) is not None]}))
""" % (CLUSTER_PACKAGES,))


def test_a_local_train_imports_no_cluster_package(data_dir, tmp_path):
    done = subprocess.run([sys.executable, "-c", _TRAIN_WITHOUT_SUBMITIT, "train", "--preset", "simcse-bert",
                           "--profile", "smoke", "--max-steps", "2", "--data-dir", str(data_dir), "--output-dir",
                           str(tmp_path / "run"), "--no-progress", "--log-with", "none"],
                          env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"code": 0, "loaded": []}
    assert (tmp_path / "run" / "summary.json").is_file()


def test_workers_without_submitit_are_refused_in_one_line_naming_the_install(data_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(ImportError, match="run `pip install submitit`"):
        require_submitit()
    assert cli.main(["report", "--cluster", "slurm", "--results-dir", str(tmp_path / "store"), "--data-dir",
                     str(data_dir), "--out", str(tmp_path / "report")]) == 2
    line = one_error_line(capsys)
    assert line.startswith("cse-kit: error: worker jobs (--workers N, --cluster slurm) are sent through submitit, "
                           "which this environment lacks") and "run `pip install submitit`" in line
    assert not (tmp_path / "report").exists()


def test_a_process_that_used_the_gpu_before_is_told_to_set_the_variable_before_python(monkeypatch,
                                                                                      settings_of_the_process):
    """cuBLAS sizes its workspace when the process first multiplies on the GPU: after that, setting the variable may
    come too late, which is said with the fix (the GPU's state stood in for: no GPU in the tests)."""
    from cse_kit.train import determinism

    os.environ.pop(CUBLAS_ENV, None)
    monkeypatch.setattr(determinism, "_cublas_sized_here", False)
    monkeypatch.setattr(determinism, "gpu_used", lambda: True)
    with pytest.warns(UserWarning, match=f"set the variable before starting Python \\(`{CUBLAS_ENV}=:4096:8 cse-kit"):
        with deterministic_mode(True):
            pass
    os.environ[CUBLAS_ENV] = ":4096:8"  # set before Python started: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with deterministic_mode(True):
            pass
