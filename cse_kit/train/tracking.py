"""Training curves in the trackers researchers watch, through Accelerate's tracker classes (TensorBoard, W&B, MLflow,
trackio, Aim, Comet, ClearML, DVCLive, SwanLab): what a run writes to its log.jsonl, step for step, as scalars.

Which trackers: the run's `log_with` setting (`cse-kit train --log-with`, `--set log_with=`), else $CSE_KIT_LOG_WITH
(how notebooks, `cse-kit report` and its workers pass it on), else TensorBoard when it is installed; `none` for none.
TensorBoard writes beside the run's log.jsonl, in a folder named after the run, so `tensorboard --logdir
<results>/runs` shows every run of a store. The trackers live on the main process only, and a tracker that fails
(not installed, not logged in, no network) is said in one line and dropped: training never waits for one.

`<run>/trackers.json` keeps what a resumed run (and the evaluations after training) needs to log into the same
tracker run: the trackers, the run's name, W&B's run id, MLflow's run id and store, and the last step sent."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import socket
import uuid
from pathlib import Path

from ..io import write_json_atomic
from .config import NOT_COMPUTING
from .method_settings import former_layout

#: the trackers a run logs to when its log_with is unset (comma-separated names, or `none`)
LOG_WITH_ENV = "CSE_KIT_LOG_WITH"
#: the tracker state a resumed run reads, beside log.jsonl
STATE_FILE = "trackers.json"
#: W&B project, MLflow experiment and the other trackers' project, unless WANDB_PROJECT / MLFLOW_EXPERIMENT_NAME say
PROJECT = "cse-kit"
#: how long W&B's server is given to answer before a logged-in run goes offline
WANDB_CONNECT_SECONDS = 3.0
#: trackers that keep every value sent: a resumed run does not send again the steps they hold
KEEP_EVERY_VALUE = ("wandb", "mlflow")
#: how a step is sent: MLflow in the background (its run's end waits for it), not 10 ms of SQLite per log
LOG_OPTIONS = {"mlflow": {"synchronous": False}}


def tracker_names() -> list[str]:
    """Accelerate's trackers, by the names log_with takes."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    return sorted(LOGGER_TYPE_TO_CLASS)


def chosen_trackers(log_with: str | None) -> list[str]:
    """The trackers to log to: log_with, else $CSE_KIT_LOG_WITH, else TensorBoard where it is installed (where it is
    not, nothing: no one asked for it)."""
    text = log_with if log_with is not None else os.environ.get(LOG_WITH_ENV, "").strip() or None
    if text is None:
        return ["tensorboard"] if _installed("tensorboard") else []
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names in ([], ["none"]):
        return []
    known = tracker_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        source = "log_with" if log_with is not None else f"${LOG_WITH_ENV}"
        raise ValueError(f"unknown tracker(s) {', '.join(unknown)} in {source}={text!r}: give none or a "
                         f"comma-separated list of {', '.join(known)}")
    return list(dict.fromkeys(names))


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def run_name(cfg) -> str:
    """The run as a person names it: its preset, the training settings that differ from the preset's, its seed
    ("diffcse-bert-sts lam=0.01 seed=1"); without a preset, its method and model."""
    from .presets import build_config

    unnamed = (*NOT_COMPUTING, "preset", "profile", "seed")  # what does not train, or is named anyway
    try:
        base = build_config(cfg.preset, cfg.profile or "paper").to_dict() if cfg.preset else {}
    except ValueError:  # a profile that cannot build the preset: every setting is then its own
        base = {}
    # a kit method's settings under the names people know them by (lam=0.01), a researcher's as <method>.<option>
    settings, base = former_layout(cfg.to_dict()), former_layout(base) if base else {}
    differs = [f"{k}={v}" for k, v in settings.items() if k != "method_options"
               and k not in unnamed and (not base or base.get(k) != v) and (base or k in ("method", "model"))]
    base_options = base.get("method_options", {})
    differs += [f"{cfg.method}.{k}={v}" for k, v in settings["method_options"].items() if base_options.get(k) != v]
    return " ".join([cfg.preset or cfg.method, *differs, f"seed={cfg.seed}"])


def folder_name(name: str) -> str:
    """A run name as one folder name (TensorBoard names a run by its folder)."""
    return re.sub(r"[^\w.=+,-]+", "_", name.replace(" ", ","))[:150]


def hyperparameters(cfg, name: str) -> dict:
    """The run's settings as a tracker's hyper-parameters (TensorBoard's HParams, W&B's config, MLflow's params):
    every training setting, the method's paper-or-code variant and the run's name; where things are left out."""
    values = {k: v for k, v in cfg.to_dict().items()
              if k not in ("output_dir", "data_dir", "extra", "log_with", "method_options")}
    extra = {f"extra.{k}": v for k, v in cfg.extra.items() if isinstance(v, (str, int, float, bool))}
    return {**values, **method_options(cfg), **extra, "method_variant": cfg.variant_name(), "run": name}


def method_options(cfg) -> dict:
    """A researcher's method's options as `<method>.<option>` settings (the values a tracker can show)."""
    return {f"{cfg.method}.{k}": v for k, v in cfg.method_options.items() if isinstance(v, (str, int, float, bool))}


def scalars(record: dict) -> dict:
    """A log.jsonl record as tracker scalars: a training step's numbers under train/ (a first stage's under stage1/,
    so that DiffAug's two learning rates and losses keep their own charts), a dev evaluation's under dev/."""
    if "dev" in record:
        return flatten(record["dev"], "dev")
    prefix = "stage1" if record.get("stage") == 1 else "train"
    return {f"{prefix}/{k}": v for k, v in record.items() if k not in ("step", "stage") and _number(v)}


def flatten(values: dict, prefix: str) -> dict:
    """The numbers of nested dicts as {prefix/key/...: number} (lists and text left out)."""
    out = {}
    for k, v in values.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}/{k}"))
        elif _number(v):
            out[f"{prefix}/{k}"] = v
    return out


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class RunTrackers:
    """The trackers of one training run. start() opens them on the main process (resuming: the same tracker run),
    log(record) sends each log.jsonl record, finish() closes them; every failure is said once and drops that
    tracker."""

    def __init__(self, log_with: str | None, say=print):
        self.names = chosen_trackers(log_with)
        self.say = say
        self.active: list = []
        self.run: Path | None = None
        self.state: dict = {}

    def start(self, cfg, run: Path, resumed_at: int | None, main_process: bool) -> None:
        """Open the trackers for `cfg`'s run in folder `run`; resumed_at: the checkpoint's step a resumed run goes
        on from (TensorBoard hides what an earlier session logged after it). A run trained from scratch (None: a
        session killed before its first checkpoint leaves nothing to resume) starts its curves afresh, as its
        log.jsonl: a new state (nothing taken as sent already), so W&B and MLflow open new runs (the killed
        session's stay there as it left them), and TensorBoard's event files of that session are removed."""
        if not main_process or not self.names:
            return
        self.run = run
        self.state = _read_state(run) if resumed_at is not None else {}
        name = self.state.get("name") or run_name(cfg)
        self.state["name"] = name
        self.open(run, name, hyperparameters(cfg, name), cfg, purge_step=0 if resumed_at is None else resumed_at + 1)
        self.state["trackers"] = [t.name for t in self.active]  # what the evaluations after training go to
        self.save_state()

    def open(self, run: Path, name: str, hparams: dict | None, cfg=None, purge_step: int | None = None) -> None:
        """Start each tracker; purge_step: the step from which what earlier sessions of the run logged is dropped
        (0: all of it, a run trained from scratch), None: nothing (the evaluations after training add to the run)."""
        for tracker_name in self.names:
            try:
                tracker = OPENERS.get(tracker_name, _open_other)(self, tracker_name, run, name, hparams, cfg,
                                                                 purge_step)
            except Exception as e:  # any tracker's own error type: never stops training
                self._failed(tracker_name, e, "at its start")
                continue
            self.active.append(tracker)

    def log(self, record: dict) -> None:
        """Send one log.jsonl record (a resumed run skips what W&B and MLflow already hold: they keep every value
        sent, TensorBoard hides what it purged)."""
        if not self.active:
            return
        values, step = scalars(record), record["step"]
        sent = self.state.setdefault("sent", {})
        kind = "dev" if "dev" in record else "train"
        for tracker in list(self.active):
            if tracker.name in KEEP_EVERY_VALUE and step <= sent.get(f"{tracker.name} {kind}", -1):
                continue
            try:
                tracker.log(values, step=step, **LOG_OPTIONS.get(tracker.name, {}))
            except Exception as e:
                self.active.remove(tracker)
                self._failed(tracker.name, e, f"at step {step}")
                continue
            sent[f"{tracker.name} {kind}"] = step
        self.state["step"] = step
        if any(t.name in KEEP_EVERY_VALUE for t in self.active):
            self.save_state()

    def finish(self) -> None:
        for tracker in self.active:
            try:
                tracker.finish()
            except Exception as e:
                self._failed(tracker.name, e, "while closing")
        self.active = []
        if self.run is not None:
            self.save_state()

    def save_state(self) -> None:
        if self.run is not None and self.run.is_dir():
            write_json_atomic(self.run / STATE_FILE, self.state)

    def _failed(self, name: str, error: Exception, when: str) -> None:
        why = f"not installed (pip install {name})" if isinstance(error, ImportError) else \
            f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        self.say(f"cse-kit: {name} is not logging this run ({why}, {when}); training goes on without it")


def log_evaluations(run: Path, metrics: dict, say=print) -> None:
    """After training, the evaluations a notebook asked for ({name: result}) as test/<name>/... scalars at the run's
    last step, into the same tracker runs; nothing where the run logged to no tracker."""
    state = _read_state(run)
    if not state.get("trackers") or "step" not in state:
        return
    trackers = RunTrackers(",".join(state["trackers"]), say)
    trackers.run, trackers.state = run, state
    trackers.open(run, state["name"], None)
    values = flatten(metrics, "test")
    for tracker in list(trackers.active):
        try:
            tracker.log(values, step=state["step"])
        except Exception as e:
            trackers.active.remove(tracker)
            trackers._failed(tracker.name, e, "logging the evaluations")
    trackers.finish()


def watch_commands(run: Path) -> list[str]:
    """How to watch the run's curves where it logged them (TensorBoard, MLflow; W&B said where at the start)."""
    state = _read_state(run)
    trackers = state.get("trackers", [])
    return [*([f"tensorboard --logdir {run.parent}"] if "tensorboard" in trackers else []),
            *([f"mlflow ui --backend-store-uri {state['mlflow_uri']}"] if "mlflow" in trackers else [])]


def _read_state(run: Path) -> dict:
    try:
        return json.loads((run / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


def _open_tensorboard(trackers: RunTrackers, _, run: Path, name: str, hparams, cfg, purge_step):
    """TensorBoard in <run>/<name as a folder>. A resumed session purges the steps from purge_step on (logged after
    the checkpoint by the session that was stopped); a run trained from scratch (purge_step 0) removes the event
    files an earlier session left there, which TensorBoard would show as a second curve of the run. The
    hyper-parameters go into that run itself (Accelerate's store_init_configuration would write them to a run of
    their own), with the dev metric and the loss as the HParams dashboard's columns."""
    from accelerate.tracking import TensorBoardTracker

    folder = trackers.state.setdefault("tensorboard", folder_name(name))
    if purge_step == 0:
        for events in (run / folder).glob("events.out.tfevents.*"):
            events.unlink()
    tracker = TensorBoardTracker(folder, run, **({"purge_step": purge_step} if purge_step else {}))
    tracker.start()
    if hparams is not None:
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        plain = {k: "None" if v is None else v for k, v in hparams.items()}  # the plugin takes no None
        metrics = {f"dev/{cfg.metric}": 0.0, "train/loss": 0.0}  # only their names are written
        writer = tracker.writer._get_file_writer()
        for summary in hparams_summaries(plain, metrics):
            writer.add_summary(summary)
    return tracker


def _open_wandb(trackers: RunTrackers, _, run: Path, name: str, hparams, cfg, purge_step):
    """W&B under <run>/wandb, one W&B run per training run (its id kept in the state: a resume continues it).
    Without a login or without W&B's server it runs offline (WANDB_MODE=offline) and says where its files are."""
    import wandb
    from accelerate.tracking import WandBTracker

    run_id = trackers.state.setdefault("wandb_id", uuid.uuid4().hex[:16])
    offline = None if os.environ.get("WANDB_MODE") else _wandb_offline_reason()
    # console off: W&B would wrap stdout and stderr, which carry the kit's progress lines
    kwargs = {"name": name, "id": run_id, "resume": "allow", "dir": str(run),
              "settings": wandb.Settings(silent=True, console="off"),
              **({"group": cfg.preset} if cfg is not None and cfg.preset else {}),
              **({"config": hparams} if hparams is not None else {}), **({"mode": "offline"} if offline else {})}
    tracker = WandBTracker(os.environ.get("WANDB_PROJECT", PROJECT), **kwargs)
    tracker.start()
    if offline and hparams is not None:
        files = tracker.run.settings.sync_dir
        trackers.say(f"cse-kit: W&B runs offline ({offline}): its files are in {files}; `wandb sync {files}` "
                     "uploads them")
    return tracker


def _wandb_offline_reason() -> str | None:
    """Why W&B must run offline here (no login, no answer from its server), or None."""
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    if not (os.environ.get("WANDB_API_KEY") or _netrc_key(url)):
        return "not logged in: `wandb login`"
    host = re.sub(r"^https?://", "", url).split("/")[0]
    try:
        socket.create_connection((host.split(":")[0], int(host.split(":")[1]) if ":" in host else 443),
                                 timeout=WANDB_CONNECT_SECONDS).close()
    except OSError as e:
        return f"{host} unreachable: {e.strerror or e}"
    return None


def _netrc_key(url: str) -> str | None:
    """The API key `wandb login` saved for url (wandb's own netrc reader), or None."""
    try:
        from wandb.sdk.lib.wbauth.wbnetrc import read_netrc_auth

        return read_netrc_auth(host=url)
    except Exception:  # an internal module of wandb: another version may lack it, or the netrc be unreadable
        return None


def _open_mlflow(trackers: RunTrackers, _, run: Path, name: str, hparams, cfg, purge_step):
    """MLflow in $MLFLOW_TRACKING_URI, else an SQLite store beside the run folders (<run>/../mlflow.db: one store
    per results store, `mlflow ui --backend-store-uri sqlite:///...` shows it; MLflow 3 keeps its file store in
    maintenance); the run id is kept in the state, so a resume continues it."""
    import mlflow
    from accelerate.tracking import MLflowTracker

    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial MLflow database tables"
    logging.getLogger("alembic").setLevel(logging.WARNING)
    uri = trackers.state.setdefault("mlflow_uri", os.environ.get("MLFLOW_TRACKING_URI")
                                    or f"sqlite:///{(run.parent / 'mlflow.db').resolve()}")
    mlflow.set_tracking_uri(uri)
    tracker = MLflowTracker(os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT), run_id=trackers.state.get("mlflow_run"),
                            run_name=name, tags={"preset": cfg.preset or "", "profile": cfg.profile or ""}
                            if cfg is not None else None)
    tracker.start()
    trackers.state["mlflow_run"] = tracker.active_run.info.run_id
    if hparams is not None and "mlflow_params" not in trackers.state:  # MLflow refuses a parameter logged twice
        tracker.store_init_configuration(hparams)
        trackers.state["mlflow_params"] = True
    return tracker


def _open_other(trackers: RunTrackers, tracker_name: str, run: Path, name: str, hparams, cfg, purge_step):
    """Any other of Accelerate's trackers with its own defaults: the project cse-kit, files under the run folder."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    kind = LOGGER_TYPE_TO_CLASS[tracker_name]
    tracker = kind(PROJECT, logging_dir=str(run)) if kind.requires_logging_directory else kind(PROJECT)
    tracker.start()
    if hparams is not None:
        tracker.store_init_configuration(hparams)
    return tracker


OPENERS = {"tensorboard": _open_tensorboard, "wandb": _open_wandb, "mlflow": _open_mlflow}
