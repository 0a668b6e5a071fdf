"""The kit's long steps (fitting an MLM head, tokenizing a corpus) report where the person is, as training does.

On a terminal (`cse-kit ...`, a script): a tqdm bar, as before. In a notebook kernel (papermill, JupyterLab,
`cse-kit report`) a bar would reach only the notebook, one output per redraw (332 outputs of one bar in a saved
notebook): there the step says where it is on the kernel's terminal every STATUS_SECONDS after its first update
(cse_kit.experiments.terminal_progress, as the training steps do), and leaves one final line in the notebook."""

from __future__ import annotations

import sys
import time


def in_kernel() -> bool:
    """Whether this process is a notebook kernel whose stderr is the notebook's stream."""
    return type(sys.stderr).__module__.startswith("ipykernel")


def say(line: str) -> None:
    """A line a person should see before a long step: in a kernel, in the notebook's stream and on its terminal
    (cse_kit.experiments.progress); elsewhere on stderr."""
    if in_kernel():
        from .experiments import progress

        progress(line)
    else:
        print(line, file=sys.stderr, flush=True)


class Steps:
    """Progress over `total` units of one long step: update(n, **postfix) after each, close() at the end."""

    def __init__(self, total: int, desc: str, unit: str = "steps", *, enabled: bool = True):
        from tqdm import tqdm

        from .train.loop import STATUS_SECONDS

        self.total, self.desc, self.unit, self.every = total, desc, unit, STATUS_SECONDS
        self.kernel = enabled and in_kernel()
        self.bar = tqdm(total=total, desc=desc, unit=f" {unit}", disable=not enabled or self.kernel,
                        dynamic_ncols=True)
        self.done, self.started, self.last = 0, time.monotonic(), None

    def update(self, n: int = 1, **postfix) -> None:
        self.done += n
        self.bar.update(n)
        if postfix:
            self.bar.set_postfix(postfix, refresh=False)
        now = time.monotonic()
        if self.kernel and self.done < self.total and (self.last is None or now - self.last >= self.every):
            from .experiments import terminal_progress
            from .train.loop import duration

            self.last = now
            left = (now - self.started) / self.done * (self.total - self.done)
            extra = "".join(f", {k} {v}" for k, v in postfix.items())
            terminal_progress(f"{self.desc}: {self.done}/{self.total} {self.unit}{extra}, about {duration(left)} left")

    def close(self, result: str = "") -> None:
        """End the bar; in a kernel, the step's one line in the notebook (and on its terminal): what was done, in
        how long, and `result`."""
        self.bar.close()
        if self.kernel:
            from .experiments import terminal_progress
            from .train.loop import duration

            line = f"{self.desc}: {self.done} {self.unit} in {duration(time.monotonic() - self.started)}" + \
                (f"; {result}" if result else "")
            terminal_progress(line)
            print(line, file=sys.stderr, flush=True)  # the notebook's stream: kept in the saved notebook and the page
