"""A notebook's first call: setup() resolves the profile and the seeds, opens the results store and returns the
Setup every later call takes (its profile, seeds, store and workers)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from ..progress import progress, terminal_progress
from ..results import ResultStore, parallel
from ..train.presets import PROFILES
from .parameters import check
from .profiles import PROFILE_NOTES, chosen_profile


def _quiet() -> None:
    """Checkpoint load reports and save and download progress bars of every run would drown the notebook's own
    output. Through the variables transformers and the Hub read when first imported, unless they already are (a cell
    run again, a first cell that imported them): a notebook whose runs are all finished never imports transformers,
    3 to 5 CPU-seconds of every such kernel of a report."""
    import logging

    if "transformers" in sys.modules:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    else:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "huggingface_hub" not in sys.modules:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    elif "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ:  # the user's own setting stands, as with setdefault
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    logging.getLogger("accelerate").setLevel(logging.ERROR)


#: said with every table and setup line of a store that evaluates under AMP ($CSE_KIT_EVAL_AMP=1, cse-kit report --amp)
AMP_NOTE = ("evaluated under AMP autocast (bf16 on a CPU with a bf16 unit; $CSE_KIT_EVAL_AMP=1), not the papers' fp32 "
            "protocol: each record says the precision it ran in")


@dataclass
class Setup:
    profile: str
    seeds: list[int]
    store: ResultStore
    workers: int = 1  # parallel workers for a table's pending runs (CSE_KIT_WORKERS; cse_kit.results.parallel)
    cluster: str = "local"
    #: key -> why, for the records this setup showed that other library versions computed (stale_note)
    stale: dict = field(default_factory=dict)

    def describe(self) -> str:
        workers = f"; {self.workers} workers ({self.cluster})" if parallel.uses_workers(self.workers, self.cluster) \
            else ""
        amp = f"; {AMP_NOTE}" if self.store.amp else ""
        return f"profile: {self.profile} ({PROFILE_NOTES[self.profile]}); seeds: {self.seeds}{workers}{amp}"


def setup(profile: str = "auto", seeds: list | None = None, data_dir: str = "", results_dir: str = "",
          force: bool = False, default_seeds: dict | None = None) -> Setup:
    """The first cell's call: resolves the profile and the seeds (when empty, `default_seeds[profile]` or the
    profile's report seeds) and opens the results store. Prints the profile, which every number is recorded with."""
    _quiet()
    profile = chosen_profile(profile)
    seeds = list(seeds) if seeds else list((default_seeds or {}).get(profile, PROFILES[profile]["report"]["seeds"]))
    check(all(isinstance(s, int) for s in seeds), f"seeds must be integers, got {seeds}")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    check(not repeated, f"seeds {seeds} repeat {repeated}: each seed is one run, a repeat would count it twice in "
                        "the mean and std; give distinct seeds")
    workers, cluster = parallel.settings()
    check(not (force and parallel.uses_workers(workers, cluster)),
          f"force=True recomputes every run in this kernel, one at a time, never in workers, yet "
          f"{parallel.WORKERS_ENV}/{parallel.CLUSTER_ENV} ask for workers: unset them to recompute here, or delete "
          "the records to recompute (<results_dir>/records/<key>.json) and run without force to have workers "
          "compute them")
    store = ResultStore(results_dir or None, data_dir or None, force=force, notify=progress, status=terminal_progress,
                        cuda=parallel.jobs_get_gpus(profile, cluster))
    out = Setup(profile, seeds, store, workers, cluster)
    print(out.describe())
    return out
