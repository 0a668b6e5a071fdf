"""The kit on a real one-node SLURM cluster (the `slurm` fixture, tests/slurm_cluster.py): the report's runs as SLURM
jobs, pre-emption and requeue with nothing trained twice, and two processes in one allocation."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import psutil
import pytest

from cse_kit.results import parallel
from cse_kit.results import ResultStore
from cse_kit.train.config import TrainConfig
from cse_kit.train.presets import build_config

import kit_process
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


def test_slurm_without_a_number_of_workers_is_one_job_that_trains_every_pending_run(slurm, data_dir, tmp_path):
    """--cluster slurm without --workers (CSE_KIT_CLUSTER=slurm alone): one SLURM job trains the pending runs, even
    a single one; nothing is trained in the submitting process."""
    store = ResultStore(tmp_path / "results", data_dir)
    subjects = [build_config("simcse-bert", "smoke", {"seed": seed, "max_steps": 2, "eval_steps": 2})
                for seed in (1, 2)]
    for pending in (subjects[:1], subjects):  # one run, then the other one with the first already stored
        assert parallel.compute_all(store, [(s, ("sts_dev",)) for s in pending], workers=1,
                                    cluster="slurm", log=lambda *a: None) == [store.key(pending[-1])]
    logs = sorted(parallel.jobs_dir(store.root).glob("*_log.out"))
    assert len(logs) == 2 and all(p.name.split("_")[0].isdigit() for p in logs)  # one SLURM job each time
    text = "".join(p.read_text() for p in logs)
    assert all(text.count(f"; fresh; output {store.run_dir(store.key(s))}") == 1 for s in subjects)


@pytest.mark.parametrize("workers", [pytest.param([], marks=pytest.mark.slow), ["--workers", "2"]],
                         ids=["no-workers", "2-workers"])
def test_the_report_runs_its_pending_runs_as_slurm_jobs_and_equals_a_local_run(workers, slurm, data_dir, tmp_path):
    """`cse-kit report --cluster slurm` on a cluster without GPUs, with no extra setting; each run trained once by
    a SLURM job (one job without --workers), the same record as the same run computed here; no poll of the
    scheduler on the console."""
    results = tmp_path / "results"
    done = kit_process.run(["report", "--profile", "smoke", "--only",
                            "figure2_cosine", *workers, "--cluster", "slurm", "--data-dir", str(data_dir),
                            "--results-dir", str(results), "--out", str(tmp_path / "page")],
                           capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"}, timeout=600)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console
    assert "accounting storage" not in console and "sacct" not in console
    assert (tmp_path / "page" / "index.html").is_file()
    logs = sorted(parallel.jobs_dir(results).glob("*_log.out"))
    assert len(logs) == (2 if workers else 1) and all(p.name.split("_")[0].isdigit() for p in logs)  # SLURM jobs
    store, reference = ResultStore(results, data_dir), ResultStore(tmp_path / "reference", data_dir)
    trained = [json.loads(p.read_text()) for p in (results / "records").glob("*.json")]
    assert trained and all(r["subject"]["kind"] == "trained" for r in trained)
    text = "".join(p.read_text() for p in logs)
    for record in trained:
        assert text.count(f"; fresh; output {store.run_dir(record['key'])}") == 1  # trained once, by a job
    record = trained[0]  # one run again here: the others are the same code with other settings
    subject = TrainConfig(**record["config"])  # its subject leaves out how often it logged, which its curve shows
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
    errors = "".join(p.read_text() for p in parallel.jobs_dir(store.root).glob("*_log.err"))
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
    train = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--data-dir", str(data_dir), "--no-progress",
             *_two_process_settings()]
    one, two = tmp_path / "one", tmp_path / "two"
    if launcher == "srun":
        command, allocation = ["srun", sys.executable], ["--ntasks=2", "--cpus-per-task=1"]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29519"]
        allocation = ["--ntasks=1", f"--cpus-per-task={min(2, os.cpu_count())}"]  # the node has this machine's CPUs
    script = tmp_path / "two.sh"
    script.write_text("#!/bin/bash\nexec " + " ".join([*command, "-m", "cse_kit.cli", *train, "--output-dir", str(two)])
                      + "\n")
    job = subprocess.Popen(["sbatch", "--wait", *allocation, f"--output={tmp_path / 'two.log'}", str(script)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kit_process.run([*train, "--output-dir", str(one)], env=env, check=True, capture_output=True)
    out, err = job.communicate(timeout=600)
    assert job.returncode == 0, err + (tmp_path / "two.log").read_text()
    summaries = [json.loads((d / "summary.json").read_text()) for d in (one, two)]
    assert summaries[1]["processes"] == 2
    losses = [[json.loads(x)["loss"] for x in (d / "log.jsonl").read_text().splitlines() if '"loss"' in x]
              for d in (one, two)]
    assert len(losses[0]) == 4 and losses[0] == pytest.approx(losses[1], abs=1e-5)


def _curve(run) -> list[dict]:
    """The run's log: each step's loss and learning rate, each evaluation's scores (without its time)."""
    curve = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    for record in curve:
        record.get("dev", {}).pop("seconds", None)
    return curve


def _is_task(process, run, rank: str) -> bool:
    """Whether process is task `rank` of the srun step training into run."""
    try:
        return str(run) in process.cmdline() and process.environ().get("SLURM_PROCID") == rank
    except psutil.Error:
        return False


def _logged_steps(run) -> list[int]:
    log = run / "log.jsonl"
    lines = log.read_text().splitlines() if log.is_file() else []
    return [json.loads(line)["step"] for line in lines if '"loss"' in line]


@pytest.mark.slow
def test_srun_two_processes_preempted_by_requeue_and_by_usr2_resume_and_end_bit_identical(slurm, data_dir,
                                                                                          tmp_path):
    """`srun --ntasks 2` training, one job: `scontrol requeue` mid-training (SIGTERM to every task), then
    `scancel --signal=USR2` after it resumed; each time both processes save the checkpoint of the same step and the
    job is requeued (by SLURM, then by its first process). Then a plain SIGTERM to the second process alone: both
    stop after the same step and the job ends (SLURM did not ask), and the same script submitted again resumes
    there. Every step is trained once, and the run ends bit-identical to an uninterrupted 2-process run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    train = ["-m", "cse_kit.cli", "train", "--preset", "simcse-bert", "--profile", "smoke", "--data-dir",
             str(data_dir), "--no-progress", "--set", "max_examples=2048", "--set", "log_steps=1"]
    stopped, uninterrupted, output = tmp_path / "stopped", tmp_path / "uninterrupted", tmp_path / "job.log"
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\nexec srun {sys.executable} {' '.join(train)} --output-dir {stopped}\n")
    submitted = subprocess.run(["sbatch", "--parsable", "--ntasks=2", "--cpus-per-task=1", "--requeue",
                                "--open-mode=append", f"--output={output}", str(script)],
                               env=env, capture_output=True, text=True, check=True)
    job = submitted.stdout.strip().split(";")[0]
    reference = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                  "--master_port", "29523", *train, "--output-dir", str(uninterrupted)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_for(condition, what, timeout=300):
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"{what} never happened: {output.read_text()}"
            time.sleep(0.05)

    wait_for(lambda: max(_logged_steps(stopped), default=0) >= 4, "step 4")
    slurm.client(["scontrol", "requeue", job])
    wait_for(lambda: "resuming at step" in output.read_text(), "the resume after the requeue")
    first = int(re.search(r"resuming at step (\d+)", output.read_text())[1])
    wait_for(lambda: max(_logged_steps(stopped), default=0) >= first + 2, f"step {first + 2}")
    signalled = slurm.client(["scancel", "--signal=USR2", job])
    wait_for(lambda: output.read_text().count("resuming at step") == 2, "the resume after SIGUSR2")
    second = int(re.findall(r"resuming at step (\d+)", output.read_text())[1])
    wait_for(lambda: max(_logged_steps(stopped), default=0) >= second + 2, f"step {second + 2}")
    [rank_1] = [p for p in psutil.process_iter() if _is_task(p, stopped, "1")]
    rank_1.terminate()
    wait_for(lambda: job not in slurm.jobs(), "the job's end", timeout=600)
    stopped_text = output.read_text()
    subprocess.run(["sbatch", "--wait", "--ntasks=2", "--cpus-per-task=1", "--open-mode=append",
                    f"--output={output}", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert reference.wait(timeout=600) == 0, reference.stdout.read()
    text = output.read_text()
    stops = [int(s) for s in re.findall(r"stopped after step (\d+) of", text)]
    resumes = [int(s) for s in re.findall(r"resuming at step (\d+)", text)]
    assert "cse-kit: SIGUSR2: " in text and f"requeued job {job}" in text, (signalled, text)
    assert stopped_text.count("cse-kit: SIGTERM: ") == 2, stopped_text  # scontrol requeue's, then the plain one
    assert len(stops) == 3 and resumes == stops and 4 <= stops[0] < stops[1] < stops[2], text  # each step once
    assert text.count("; fresh; output") == 1, text
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["processes"] == 2 and _logged_steps(stopped) == list(range(1, summary["steps"] + 1))
    assert _curve(stopped) == _curve(uninterrupted)
    weights = "model/model.safetensors"
    assert (stopped / weights).read_bytes() == (uninterrupted / weights).read_bytes()
