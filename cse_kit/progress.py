"""The kit's long steps (fitting an MLM head, tokenizing a corpus) report where the person is, as training does.

On a terminal (`cse-kit ...`, a script): a tqdm bar, as before. In a notebook kernel (papermill, JupyterLab,
`cse-kit report`) a bar would reach only the notebook, one output per redraw (332 outputs of one bar in a saved
notebook): there the step says where it is on the kernel's terminal every STATUS_SECONDS after its first update
(terminal_progress, as the training steps do), and leaves one final line in the notebook."""

from __future__ import annotations

import os
import sys
import time

#: seconds between two of a run's status lines (its step and the time left), the first after its first step
STATUS_SECONDS = 30.0


def duration(seconds: float) -> str:
    """A time as a person reads it: 40 s, 12 min, 3 h 05 min."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


#: how a progress line starts: the report forwards these lines to its console and leaves them out of its page
PROGRESS_PREFIX = "[cse-kit] "
#: "0" keeps a kernel's progress lines off its process's stderr: set by `cse-kit report`, which reads them from the
#: notebook's stream and prints them under the notebook's name
TERMINAL_PROGRESS_ENV = "CSE_KIT_TERMINAL_PROGRESS"


def progress(message: str, notebook: bool = True) -> None:
    """One line on stderr while a notebook trains for minutes or hours. In a kernel it goes to the notebook's stderr
    stream (what JupyterLab shows under the cell and `cse-kit report` forwards to its console) and to the kernel
    process's own stderr: the terminal that runs `papermill` (which shows the notebook's stream only with
    --log-output) or `jupyter lab`. notebook=False: the terminal only (see terminal_progress)."""
    line = PROGRESS_PREFIX + message + "\n"
    kernel = in_kernel()
    if notebook or not kernel:
        sys.stderr.write(line)
        sys.stderr.flush()
    terminal = _kernel_terminal() if kernel else None
    if terminal is not None:  # on a terminal, first clear what papermill's cell bar left on the line
        os.write(terminal, (("\r\x1b[K" if os.isatty(terminal) else "") + line).encode())


def terminal_progress(message: str) -> None:
    """A run's step, time left and evaluation, every half minute: on the terminal only, so that a notebook's output
    keeps one line per run."""
    progress(message, notebook=False)


def _kernel_terminal() -> int | None:
    """The kernel process's own stderr (a file descriptor), sys.stderr being an IPython kernel's stream to the
    notebook; None where that stream already echoes there, or where TERMINAL_PROGRESS_ENV is "0"."""
    if os.environ.get(TERMINAL_PROGRESS_ENV) == "0":
        return None
    if getattr(sys.stderr, "echo", None) is not None:  # the kernel was started with quiet=False
        return None
    try:
        return sys.stderr.fileno()  # ipykernel turned fd 2 into a pipe to the notebook; this is the original's copy
    except OSError:  # it left fd 2 alone (its capture is off, e.g. under pytest): fd 2 is the terminal
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else None


def in_kernel() -> bool:
    """Whether this process is a notebook kernel whose stderr is the notebook's stream."""
    return type(sys.stderr).__module__.startswith("ipykernel")


def say(line: str) -> None:
    """A line a person should see before a long step: in a kernel, in the notebook's stream and on its terminal
    (progress); elsewhere on stderr."""
    if in_kernel():
        progress(line)
    else:
        print(line, file=sys.stderr, flush=True)


class Steps:
    """Progress over `total` units of one long step: update(n, **postfix) after each, close() at the end."""

    def __init__(self, total: int, desc: str, unit: str = "steps", *, enabled: bool = True):
        from tqdm import tqdm

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
            self.last = now
            left = (now - self.started) / self.done * (self.total - self.done)
            extra = "".join(f", {k} {v}" for k, v in postfix.items())
            terminal_progress(f"{self.desc}: {self.done}/{self.total} {self.unit}{extra}, about {duration(left)} left")

    def close(self, result: str = "") -> None:
        """End the bar; in a kernel, the step's one line in the notebook (and on its terminal): what was done, in
        how long, and `result`."""
        self.bar.close()
        if self.kernel:
            line = f"{self.desc}: {self.done} {self.unit} in {duration(time.monotonic() - self.started)}" + \
                (f"; {result}" if result else "")
            terminal_progress(line)
            print(line, file=sys.stderr, flush=True)  # the notebook's stream: kept in the saved notebook and the page
