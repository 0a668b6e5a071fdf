"""The kit on a real one-node SLURM cluster (the `slurm` fixture, tests/slurm_cluster.py): the report's runs as SLURM
jobs, pre-emption and requeue with nothing trained twice, and two processes in one allocation."""

import json
import os
import subprocess
import sys
import threading

import pytest

from cse_kit.results import parallel
from cse_kit.results import ResultStore
from cse_kit.train.config import TrainConfig
from cse_kit.train.presets import build_config

from test_parallel import assert_trained_once_and_resumed, interrupt_mid_training
from test_train import _two_process_settings


def test_jobs_ask_for_a_gpu_only_where_the_profile_trains_on_one():
    def tasks(profile):
        return [(build_config("simcse-bert", profile, {"seed": 1}), ("sts_dev",))]

    assert parallel.job_resources(tasks("paper")) == {"gpus_per_node": 1}
    assert parallel.job_resources(tasks("smoke")) == {"cpus_per_task": 1}
    assert set(parallel.job_resources(tasks("cpu"))) == {"cpus_per_task"}


def test_the_tasks_of_an_srun_step_become_one_process_group_and_nothing_else_does():
    from cse_kit.train.launch import join_srun_step

    step = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "1", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
            "SLURM_JOB_ID": "7"}
    env = dict(step)
    join_srun_step(env)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")} == \
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "20007"}
    for unchanged in ({**step, "SLURM_STEP_NUM_TASKS": "1"}, {**step, "RANK": "0"},  # one task; torchrun's
                      {"SLURM_NTASKS": "2", "SLURM_PROCID": "0"}):  # the batch script of a 2-task job (no step)
        env = dict(unchanged)
        join_srun_step(env)
        assert env == unchanged


def test_the_report_runs_its_pending_runs_as_slurm_jobs_and_equals_a_local_run(slurm, data_dir, tmp_path):
    """`cse-kit report --cluster slurm` on a cluster without GPUs, with no extra setting; each run trained once by
    a SLURM job, the same record as the same run computed here; no poll of the scheduler on the console."""
    results = tmp_path / "results"
    done = subprocess.run([sys.executable, "-m", "cse_kit.cli", "report", "--profile", "smoke", "--only",
                           "figure2_cosine", "--workers", "2", "--cluster", "slurm", "--data-dir", str(data_dir),
                           "--results-dir", str(results), "--out", str(tmp_path / "page")],
                          capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"}, timeout=600)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console
    assert "accounting storage" not in console and "sacct" not in console
    assert (tmp_path / "page" / "index.html").is_file()
    logs = sorted((results / "jobs").glob("*_log.out"))
    assert len(logs) == 2 and all(p.name.split("_")[0].isdigit() for p in logs)  # two SLURM jobs
    store, reference = ResultStore(results, data_dir), ResultStore(tmp_path / "reference", data_dir)
    trained = [json.loads(p.read_text()) for p in (results / "records").glob("*.json")]
    assert trained and all(r["subject"]["kind"] == "trained" for r in trained)
    text = "".join(p.read_text() for p in logs)
    for record in trained:
        assert text.count(f"; fresh; output {store.run_dir(record['key'])}") == 1  # trained once, by a job
    record = trained[0]  # one run again here: the others are the same code with other settings
    subject = TrainConfig(**{k: v for k, v in record["subject"].items() if k != "kind"})
    reference.get(subject, tuple(record["metrics"]))
    expected = json.loads(reference.record_path(record["key"]).read_text())  # as written: tuples are lists
    assert record["metrics"] == expected["metrics"] and record["train_curve"] == expected["train_curve"]


def test_requeue_and_usr2_on_slurm_resume_each_run_from_its_checkpoint_bit_exactly(slurm, data_dir, tmp_path):
    """`scontrol requeue` (SLURM's SIGTERM) to one worker job and `scancel --signal=USR2` (submitit's signal before
    the time limit) to the other, each mid-training: both runs save a checkpoint, their jobs are requeued and resume
    there; every run starts fresh once, and both end bit-identical to uninterrupted runs."""
    from test_parallel import _preemptible_runs

    store = ResultStore(tmp_path / "results", data_dir)
    subjects = _preemptible_runs([1, 2])
    computed = []
    thread = threading.Thread(target=lambda: computed.extend(parallel.compute_all(
        store, [(s, ("sts_dev",)) for s in subjects], workers=2, cluster="slurm", log=lambda *a: None)))
    thread.start()
    interrupt_mid_training(store, [(subjects[0], lambda job: slurm.client(["scontrol", "requeue", job])),
                                   (subjects[1], lambda job: slurm.client(["scancel", "--signal=USR2", job]))])
    thread.join(timeout=600)
    assert sorted(computed) == sorted(store.key(s) for s in subjects)
    errors = "".join(p.read_text() for p in (store.root / "jobs").glob("*_log.err"))
    assert "SIGTERM: " in errors and "SIGUSR2: " in errors
    reference = ResultStore(tmp_path / "reference", data_dir)
    for subject in subjects:
        assert_trained_once_and_resumed(store, subjects, subject, reference)


# torchrun under sbatch needed no change (the same launcher as tests/test_train.py): the srun case is the new one
@pytest.mark.parametrize("launcher", ["srun", pytest.param("torchrun", marks=pytest.mark.slow)])
def test_two_cpu_processes_in_one_slurm_allocation_train_what_one_process_trains(launcher, slurm, data_dir,
                                                                                  tmp_path):
    """`srun` (2 tasks) or torchrun (1 task, 2 CPUs) under sbatch: one gloo group of 2, the same losses as one
    process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    train = ["-m", "cse_kit.cli", "train", "--preset", "simcse-bert", "--profile", "smoke", "--data-dir",
             str(data_dir), "--no-progress", *_two_process_settings()]
    one, two = tmp_path / "one", tmp_path / "two"
    if launcher == "srun":
        command, allocation = ["srun", sys.executable], ["--ntasks=2", "--cpus-per-task=1"]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29519"]
        allocation = ["--ntasks=1", f"--cpus-per-task={min(2, os.cpu_count())}"]  # the node has this machine's CPUs
    script = tmp_path / "two.sh"
    script.write_text("#!/bin/bash\nexec " + " ".join([*command, *train, "--output-dir", str(two)]) + "\n")
    job = subprocess.Popen(["sbatch", "--wait", *allocation, f"--output={tmp_path / 'two.log'}", str(script)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    subprocess.run([sys.executable, *train, "--output-dir", str(one)], env=env, check=True, capture_output=True)
    out, err = job.communicate(timeout=600)
    assert job.returncode == 0, err + (tmp_path / "two.log").read_text()
    summaries = [json.loads((d / "summary.json").read_text()) for d in (one, two)]
    assert summaries[1]["processes"] == 2
    losses = [[json.loads(x)["loss"] for x in (d / "log.jsonl").read_text().splitlines() if '"loss"' in x]
              for d in (one, two)]
    assert len(losses[0]) == 4 and losses[0] == pytest.approx(losses[1], abs=1e-5)
