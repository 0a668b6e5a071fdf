"""`cse-kit tune`: a preset's settings searched with Optuna (cse_kit.tune), then the chosen configuration tested."""

from __future__ import annotations

import contextlib
import signal
import time

from ..experiments import chosen_profile
from ..train import PRESETS
from ..train.presets import PROFILES
from ..tune import (SPACE_SYNTAX, Study, chosen_on_test, check, dashboard, fail_running, load, parse_space, run,
                    study_lines, tested_line)
from .common import (check_at_least_one, command, data_dir_arg, resumable, results_dir_arg, signals_restored,
                     terminating)


def add_tune(sub) -> None:
    p = command(sub, "tune", cmd_tune,
                 epilog='e.g. cse-kit tune --preset diffcse-bert-sts --profile smoke --trials 8 --space '
                        '"lr=log(1e-5,1e-4); temp=(0.02,0.1); diffcse.lambda_weight=log(1e-3,1e-1)"')
    p.add_argument("--preset", required=True, choices=list(PRESETS))
    p.add_argument("--profile", default="auto", choices=["auto", *PROFILES])
    p.add_argument("--space", required=True, help=f"the settings searched: {SPACE_SYNTAX}")
    p.add_argument("--trials", type=int, required=True, help="the study's total number of trials (a rerun finishes "
                                                            "what is missing; one that finds them all trains nothing)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a setting every trial takes (repeatable)")
    p.add_argument("--seed", type=int, default=1, help="the trials' training seed and the sampler's (default 1)")
    p.add_argument("--workers", type=int, default=1, help="workers on the one study: local processes, or SLURM jobs "
                                                          "with --cluster slurm (default 1)")
    p.add_argument("--cluster", default="local", choices=["local", "slurm"],
                   help="slurm: the workers are SLURM jobs ($CSE_KIT_EXECUTOR_PARAMS, e.g. '{\"slurm_partition\": "
                        "\"gpu\"}'); give a storage every node reaches (--storage postgresql://... or journal:PATH "
                        "on a shared file system)")
    p.add_argument("--storage", help="Optuna storage: a database URL (postgresql://user:pass@host/db), "
                                     "journal:PATH (a journal file on a shared file system); default: "
                                     "studies.sqlite3 beside the results store")
    p.add_argument("--study", help="the study's name (default: from what it searches)")
    p.add_argument("--fail-running", action="store_true",
                   help="first mark the study's running trials failed and run them again, but those a live worker "
                        "holds: a killed worker's trial that no trial lock judges where the storage has no heartbeat "
                        "(journal:PATH); only while none of its workers runs")
    p.add_argument("--dashboard", metavar="[HOST:]PORT",
                   help="serve optuna-dashboard on the study's storage at http://127.0.0.1:PORT while it runs, and "
                        "after, until Ctrl-C (a finished study: only the dashboard)")
    p.add_argument("--prune", nargs="?", const="median", metavar="PRUNER",
                   help="stop a trial's run at a dev evaluation where Optuna's pruner says it will not win (the "
                        "trial is recorded pruned, its run unfinished): median (the default), percentile, hyperband, "
                        "successive-halving or threshold, with its Optuna class's arguments if any: "
                        "'median(n_startup_trials=5, n_warmup_steps=100)'. Runs are evaluated every eval_steps")
    p.add_argument("--heartbeat", type=int, default=30, metavar="SECONDS",
                   help="how often a running trial says it is alive (default 30); one silent for 4 times as long is "
                        "taken for a killed worker's and run again. A worker sharing the results store is judged at "
                        "once by its trial lock (locks/trial-STUDY-N.lock), whatever the heartbeat")
    p.add_argument("--storage-patience", type=float, default=60, metavar="SECONDS",
                   help="how long a trial's bookkeeping waits for a storage that stopped answering (a dropped "
                        "connection, a restarting server), trying again, before the command stops in one line saying "
                        "what was kept (default 60)")
    p.add_argument("--failures-in-a-row", type=int, default=3, metavar="K",
                   help="stop a worker after K of its trials fail in a row on their own (a diverged run, an error of "
                        "the run; default 3). A full disk, a read-only store or a space Optuna cannot sample stops the "
                        "study at once, and never more trials fail than the total")
    p.add_argument("--test-seeds", metavar="S[,S]", help="after the study, train the chosen configuration with these "
                                                         "seeds (by the study's workers) and test it (STS test); the "
                                                         "study itself reads no test set")
    results_dir_arg(p)
    data_dir_arg(p)


def cmd_tune(args) -> int:
    check_at_least_one(trials=args.trials, workers=args.workers)
    seeds = _test_seeds(args.test_seeds)
    study = Study(args.preset, chosen_profile(args.profile), parse_space(args.space), args.trials, args.set or [],
                  args.seed, args.results_dir, args.data_dir, args.storage, args.study,
                  (args.heartbeat, 4 * args.heartbeat), args.prune, args.storage_patience, args.failures_in_a_row)
    opened = check(study)  # before the dashboard listens: bad input is one line; the storage opened once
    # SIGTERM stops the study as Ctrl-C does: its trial handed back, one line
    with terminating(), resumable(lambda: CONTINUES):
        optuna_study = load(study, opened)
        if args.fail_running:
            print(f"{fail_running(study, optuna_study)} running trials marked failed, to run again")
        with dashboard(study, args.dashboard, opened) if args.dashboard else contextlib.nullcontext() as url:
            if url:
                print(f"dashboard: {url}", flush=True)
            trials = run(study, args.workers, args.cluster, optuna_study=optuna_study)
            print("\n".join(study_lines(study, trials, args.storage is not None)))
            if seeds:
                records = chosen_on_test(study, seeds, workers=args.workers, cluster=args.cluster, trials=trials)
                print(tested_line(records, seeds), flush=True)
            if url:
                return _serve_until_stopped(url)
    return 0


#: what running `cse-kit tune` again does after a stop
CONTINUES = ("continue the study: its finished trials are kept, and a trial stopped midway runs first, its run resumed "
             "from its checkpoint")


def _test_seeds(text: str | None) -> list[int]:
    try:
        return [int(s) for s in text.split(",")] if text else []
    except ValueError:
        raise ValueError(f"--test-seeds takes whole numbers separated by commas (1,2,3), got {text!r}") from None


def _serve_until_stopped(url: str) -> int:
    """The dashboard stays after the study, for a look at it, until Ctrl-C or SIGTERM: both end the command well."""
    print(f"the study is done; the dashboard stays at {url} until Ctrl-C", flush=True)
    # Ctrl-C ends it even where this process was started with SIGINT ignored (a job started with & by a script)
    with signals_restored(signal.SIGINT), terminating():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
