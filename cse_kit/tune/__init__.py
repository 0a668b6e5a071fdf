"""Equal tuning budget: a method's settings searched with Optuna (seeded TPE), every trial a run of the results store,
its objective the run's own checkpoint-selection dev score (`metric`, STS-B dev by default), so a study reads no test
set. Only the chosen configuration is then tested, over seeds (chosen_on_test).

A study is named by what it searches (preset, profile, base settings, space, seed, metric) and stored in Optuna's
storage: by default a SQLite file beside the results store, a URL for a lab's database (postgresql://...), or
`journal:PATH`, Optuna's journal file for a shared file system. It is one preset, profile, objective and base settings
(its identity, stored with it); each trial records the space it was drawn from. `trials` is the study's total: a
rerun that finds them finished samples nothing, and a trained trial is a store record, so it never trains twice.
Workers (local processes, or SLURM jobs sent as the report's are) share one study: they ask for trials under a lock
beside the store, so the study holds exactly `trials` trials that count (complete, running or waiting). The k-th
configuration is drawn by a sampler seeded by the study's seed and k, not by how many trials were tried, so a study
interrupted and resumed draws what an uninterrupted one draws.

A worker holds a trial lock (beside the store's) from asking for a trial to telling its outcome; the kernel releases
it when the worker dies, so the next worker to ask finds a killed worker's trial at once, marks it failed and queues
its configuration again (retry.queue_again): it is run again, its run read from the store or resumed from its
checkpoint, never lost or counted twice; a configuration whose worker dies more than RETRIES times is given up, and
said so. The lock decides liveness: a trial whose lock is held is never failed by the heartbeat (a stopped or slow
worker); a worker sharing the storage but not the store is judged by its heartbeat (the journal file has none:
`--fail-running`). A worker that finds the total held waits for the trials live workers run, so a study it reports
is finished.

A study that cannot succeed stops (StudyStopped, one line): a fault of the machine (a full disk, a read-only store,
missing data) or of the space (a bound Optuna cannot sample) stops it at once, its trial's configuration queued first
for the rerun; a trial's own failure (a diverged run) is recorded and the study goes on, but `failures` in a row stop
the worker, and never more trials fail than the total. A signal (Ctrl-C, SIGTERM) hands the running trial back the
same way. Faults of the storage itself (a dropped connection, a restarting server, a damaged file, a full disk) are
`storage`'s. `prune` names Optuna's pruner: it hears the dev score of each evaluation a trial's run makes while it
trains (eval_steps) and may stop the run there; the trial is then PRUNED, its run left unfinished (its checkpoint of
that step, no record), never a finished run. `dashboard` serves optuna-dashboard on the study's storage while it runs
(docs/tuning.md).

The package: `space` the --space and --prune language, `study` a study (identity, checks, its Optuna study, what it
found), `trials` a worker's trials, `retry` a configuration queued again, `workers` local processes and SLURM jobs,
`storage` Optuna's storage made patient, `dashboard` optuna-dashboard, `errors` the ways a study stops. A command
opens the storage once (check) and passes it down. Optuna is imported where it is used, so that `cse-kit --help` does
not load it."""

from .dashboard import dashboard
from .errors import SpaceRefused, StudyStopped, TuneError
from .retry import RETRIES
from .space import PRUNERS, SPACE_SYNTAX, Dimension, parse_space, pruner
from .study import (FAILURES_IN_A_ROW, HEARTBEAT, PATIENCE, Study, best, check, chosen, chosen_on_test, load, sampler,
                    study_lines, summary, tested_line, trial_table)
from .trials import fail_running, next_trial, run_and_tell, still_running, what_is_kept, work
from .workers import run, sent_to_jobs

__all__ = ["dashboard", "SpaceRefused", "StudyStopped", "TuneError", "RETRIES", "PRUNERS", "SPACE_SYNTAX",
           "Dimension", "parse_space", "pruner", "FAILURES_IN_A_ROW", "HEARTBEAT", "PATIENCE", "Study", "best", "check",
           "chosen", "chosen_on_test", "load", "sampler", "study_lines", "summary", "tested_line", "trial_table",
           "fail_running", "next_trial", "run_and_tell", "still_running", "what_is_kept", "work", "run",
           "sent_to_jobs"]
