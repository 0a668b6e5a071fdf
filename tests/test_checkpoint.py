"""A run folder is data, never code: a checkpoint is read without pickle, every file is checked against the digest
the checkpoint recorded, and a resume restores all it saved (bit-identical) or refuses in one line naming the file."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import kit_process
from conftest import plant
from cse_kit.train import build_config, train
from cse_kit.train.loop import RunStateError, TrainingStopped
from cse_kit.train.preemption import stop_after_this_step
from cse_kit.train.optim import OPTIMIZERS

SETTINGS = {"max_steps": 4, "eval_steps": 4, "log_steps": 1, "save_steps": 100}
FILES = ["trainer_state.json", "model.safetensors", "optimizer.safetensors", "random_states_0.json"]


def _config(data_dir, run):
    return build_config("simcse-bert", "smoke", {"output_dir": str(run), "data_dir": str(data_dir), **SETTINGS})


@pytest.fixture(scope="module")
def runs(data_dir, tmp_path_factory):
    """An uninterrupted 4-step run, and the same run stopped after step 1 with its checkpoint (to resume in copies)."""
    root = tmp_path_factory.mktemp("runs")
    train(_config(data_dir, root / "whole"), progress=False)
    stop_after_this_step(signal.SIGTERM)
    with pytest.raises(TrainingStopped):
        train(_config(data_dir, root / "stopped"), progress=False)
    return root


def _copy(runs, data_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs / "stopped", run)
    return _config(data_dir, run), run


def _ends_like_the_whole_run(runs, run) -> None:
    whole, resumed = (load_file(str(d / "model" / "model.safetensors")) for d in (runs / "whole", run))
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    logs = [[{k: v for k, v in json.loads(x).items() if k != "dev"} for x in (d / "log.jsonl").read_text().splitlines()]
            for d in (runs / "whole", run)]
    assert logs[0] == logs[1]


def test_the_checkpoint_holds_no_pickle_and_resumes_bit_identical(runs, data_dir, tmp_path):
    cfg, run = _copy(runs, data_dir, tmp_path)
    checkpoint = run / "checkpoint"
    assert sorted(p.name for p in checkpoint.iterdir()) == sorted(FILES)
    assert json.loads((checkpoint / "trainer_state.json").read_text())["step"] == 1
    marker = tmp_path / "created"
    plant(checkpoint / "custom_checkpoint_0.pkl", marker)  # where Accelerate's save_state put the schedulers
    train(cfg, progress=False)
    assert not marker.exists()
    _ends_like_the_whole_run(runs, run)


def _damage(path: Path, how: str) -> None:
    body = path.read_bytes()
    if how == "truncated":
        path.write_bytes(body[:len(body) // 2])
    elif how == "one byte changed":
        middle = len(body) // 2
        path.write_bytes(body[:middle] + bytes([body[middle] ^ 0x01]) + body[middle + 1:])
    else:
        path.unlink()


@pytest.mark.parametrize("how", ["truncated", "one byte changed", "missing"])
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_checkpoint_file_is_refused_in_one_line_naming_it_and_the_fix(runs, data_dir, tmp_path, name, how):
    cfg, run = _copy(runs, data_dir, tmp_path)
    if name == "trainer_state.json" and how == "missing":
        train(cfg, progress=False)  # no trainer state: no checkpoint at all, the run trains again from step 0
        _ends_like_the_whole_run(runs, run)
        return
    _damage(run / "checkpoint" / name, how)
    with pytest.raises(RunStateError) as refused:
        train(cfg, progress=False)
    message = str(refused.value)
    assert "\n" not in message and str(run / "checkpoint" / name) in message
    assert f"remove {run / 'checkpoint'} to train this run again from step 0" in message
    assert not (run / "summary.json").exists()


def test_a_checkpoint_of_another_number_of_processes_is_refused(runs, data_dir, tmp_path):
    cfg, run = _copy(runs, data_dir, tmp_path)
    state = run / "checkpoint" / "trainer_state.json"
    saved = json.loads(state.read_text())
    saved["checkpoint"]["processes"] = 2
    from cse_kit.train.checkpoint import _sealed

    saved["sha256"] = _sealed({k: v for k, v in saved.items() if k != "sha256"})
    state.write_text(json.dumps(saved))
    with pytest.raises(RunStateError, match=r"a run of 2 processes and this one has 1: .* resume with 2 processes"):
        train(cfg, progress=False)


#: the loop's state in trainer_state.json, in its order (cse_kit.train.loop.LoopState): what every saved run holds
STATE_KEYS = ["step", "best", "best_step", "seconds", "resumed_with_changes", "evaluations_since_best", "stopped_early",
              "checkpoint", "sha256"]


def _reseal(state: Path, change) -> None:
    """trainer_state.json changed by change(saved) and sealed again, as another version would have written it."""
    from cse_kit.train.checkpoint import _sealed

    saved = json.loads(state.read_text())
    change(saved)
    saved["sha256"] = _sealed({k: v for k, v in saved.items() if k != "sha256"})
    state.write_text(json.dumps(saved))


def test_a_checkpoint_saved_before_the_early_stop_keys_resumes_bit_identical(runs, data_dir, tmp_path):
    """The loop's state keeps the file's keys in their order; a checkpoint written before evaluations_since_best and
    stopped_early were added resumes at their values at step 0, and one with a key this version does not know is
    refused naming it."""
    cfg, run = _copy(runs, data_dir, tmp_path)
    state = run / "checkpoint" / "trainer_state.json"
    assert list(json.loads(state.read_text())) == STATE_KEYS
    shutil.copytree(run, tmp_path / "unknown")
    _reseal(state, lambda saved: [saved.pop(k) for k in ("evaluations_since_best", "stopped_early")])
    train(cfg, progress=False)
    _ends_like_the_whole_run(runs, run)
    unknown = tmp_path / "unknown"
    _reseal(unknown / "checkpoint" / "trainer_state.json", lambda saved: saved.update(patience_left=3))
    with pytest.raises(RunStateError, match="keys this version does not know \\(patience_left: written by a newer"):
        train(_config(data_dir, unknown), progress=False)


def _cli(args, data_dir, run):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    sets = [x for k, v in SETTINGS.items() for x in ("--set", f"{k}={v}")]
    return kit_process.run([*args, "--data-dir", str(data_dir),
                            "--output-dir", str(run), "--no-progress", *sets], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("name", FILES)
def test_a_pickle_planted_in_place_of_a_checkpoint_file_never_runs(runs, data_dir, tmp_path, name):
    _, run = _copy(runs, data_dir, tmp_path)
    marker = tmp_path / "created"
    plant(run / "checkpoint" / name, marker)
    done = _cli(["train", "--preset", "simcse-bert", "--profile", "smoke"], data_dir, run)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and str(run / "checkpoint" / name) in done.stderr, done.stderr
    assert not marker.exists()


def test_a_checkpoint_of_an_earlier_version_is_refused_without_reading_its_pickles(runs, data_dir, tmp_path):
    """What cse-kit wrote up to commit c4c4f67: Accelerate's save_state (the schedulers registered for checkpointing, read back
    with weights_only=False) and its trainer_state.json."""
    from accelerate import Accelerator

    _, run = _copy(runs, data_dir, tmp_path)
    checkpoint = run / "checkpoint"
    step = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
    shutil.rmtree(checkpoint)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0))
    accelerator.save_state(str(checkpoint))
    assert {"custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin"} <= {p.name for p in checkpoint.iterdir()}
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": step, "best": None, "best_step": None}))
    marker = tmp_path / "created"
    plant(checkpoint / "custom_checkpoint_0.pkl", marker)
    done = _cli(["train", "--preset", "simcse-bert", "--profile", "smoke"], data_dir, run)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"{checkpoint} is in the checkpoint format of earlier cse-kit versions" in done.stderr
    assert "Finish the run with the cse-kit that started it (e.g. `git checkout c4c4f67`)" in done.stderr
    assert f"remove {checkpoint} to train this run again from step 0" in done.stderr
    assert not marker.exists()


def _two_processes(data_dir, run, port):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    settings = {"max_examples": 384, "max_steps": 24, "eval_steps": 24, "log_steps": 1, "save_steps": 2}
    sets = [x for k, v in settings.items() for x in ("--set", f"{k}={v}")]
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                             str(port), "-m", "cse_kit.cli", "train", "--preset", "simcse-bert", "--profile", "smoke",
                             "--data-dir", str(data_dir), "--output-dir", str(run), "--no-progress", *sets],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_two_process_run_killed_after_a_checkpoint_resumes_every_ranks_random_states(data_dir, tmp_path):
    """Dropout on: each rank draws its own masks from its own seed, so a rank whose random states were not restored
    would train other steps than the uninterrupted run."""
    import time

    import psutil

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert _two_processes(data_dir, whole, 29531).wait() == 0
    proc = _two_processes(data_dir, cut, 29532)
    state = cut / "checkpoint" / "trainer_state.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if state.is_file() and json.loads(state.read_text())["step"] >= 4:
            break
        time.sleep(0.02)
    workers = psutil.Process(proc.pid).children()  # torchrun starts each in a session of its own
    for process in (*workers, psutil.Process(proc.pid)):  # a node lost: every process at once
        process.send_signal(signal.SIGKILL)
    psutil.wait_procs(workers, timeout=60)
    proc.wait()
    assert not (cut / "summary.json").exists(), "the run finished before it could be killed"
    assert {"random_states_0.json", "random_states_1.json"} <= {p.name for p in (cut / "checkpoint").iterdir()}
    resumed = _two_processes(data_dir, cut, 29533)
    _, err = resumed.communicate()
    assert resumed.returncode == 0, err
    a, b = (load_file(str(d / "model" / "model.safetensors")) for d in (whole, cut))
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = [[json.loads(x).get("loss") for x in (d / "log.jsonl").read_text().splitlines()] for d in (whole, cut)]
    assert losses[0] == losses[1] and len(losses[0]) == 25  # 24 steps and the dev evaluation


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_every_optimizers_state_comes_back_exactly(tmp_path, optimizer):
    """The legacy optimizers count their steps in ints (JSON in the file's metadata), torch's in tensors; Adam's
    betas are a tuple again after JSON."""
    from cse_kit.io import write_json_atomic
    from cse_kit.train.checkpoint import STATE, read_checkpoint, trainer_state, write_process_files
    from cse_kit.train.optim import build_optimizer

    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
        opt = build_optimizer(list(model.named_parameters()), optimizer, 1e-2, 0.01)
        return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (s + 1))

    def step(model, opt, scheduler):
        model(torch.randn(8, 4)).pow(2).sum().backward()
        opt.step(), scheduler.step(), opt.zero_grad()

    model, opt, scheduler = build()
    for _ in range(3):
        step(model, opt, scheduler)
    write_process_files(tmp_path, 0, model, [opt], main=True)
    write_json_atomic(tmp_path / STATE, trainer_state(tmp_path, {"step": 3}, [scheduler], None, 1))
    rng = torch.get_rng_state()
    step(model, opt, scheduler)  # the run goes on; the copy resumes from the checkpoint
    again, opt_again, scheduler_again = build()
    torch.manual_seed(1)  # restored from the checkpoint
    assert read_checkpoint(tmp_path, 0, 1, again, [opt_again], [scheduler_again], None, "fix") == {"step": 3}
    assert torch.equal(torch.get_rng_state(), rng)
    assert {k: type(v) for k, v in opt_again.param_groups[0].items()} == \
        {k: type(v) for k, v in opt.param_groups[0].items()}
    step(again, opt_again, scheduler_again)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert scheduler.state_dict() == scheduler_again.state_dict()
