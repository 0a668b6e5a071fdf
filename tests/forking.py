"""What a child forked from a server that has already imported the kit shares with the tests' two such servers,
for `cse-kit` commands (tests/kit_process.py) and Jupyter kernels and other programs (tests/forked_python.py):
which environment variables may differ from the server's, and how the child takes over its caller's streams, folder
and environment, runs and ends. The standard library only: a kernel's launch imports this."""

import atexit
import os
import signal
import sys
import threading
import traceback

#: environment variables a child's may have other than the server's: read when they are used, not when a module is
#: imported. The kit's and pytest's; jupyter_client's, jupyter_server's and the debugger's for a kernel
#: (JPY_PARENT_PID, read by ipykernel as it starts); those the tests' process gets from what it runs (torch's
#: compiler cache folder, set by the first compile; the suite's SLURM cluster; W&B's service and MLflow's store, which
#: the tracking tests' runs leave behind, read by libraries the servers do not import); and those the kit and
#: libraries set for themselves, which a child doing the same sets as well (the kit's DISABLE_SAFETENSORS_CONVERSION
#: when it loads a model from the Hub, read by transformers as it loads; scikit-learn's and joblib's for Intel's
#: OpenMP and polars' for its allocator, set when they are imported)
RUNTIME_VARIABLES = ("CSE_KIT_", "PYTEST_", "JPY_", "KERNEL_", "PYDEVD_", "TORCHINDUCTOR_CACHE_DIR", "SLURM_CONF",
                     "WANDB_", "MLFLOW_", "DISABLE_SAFETENSORS_CONVERSION", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK",
                     "_RJEM_MALLOC_CONF")
#: what a shell sets for every program it starts, and PATH, read as a program is looked up, and PS1, the prompt a
#: virtual environment's activate exports and a shell that is not interactive unsets (docs/extending.md's commands,
#: run by `bash -c`): a child's may differ too
SHELL_VARIABLES = frozenset({"PATH", "PWD", "OLDPWD", "SHLVL", "_", "PS1"})


def compared(name: str) -> bool:
    """Whether a variable must be the server's for a child to be forked (read as a module is imported)."""
    return not name.startswith(RUNTIME_VARIABLES) and name not in SHELL_VARIABLES


#: what a smoke run's training and evaluation import, the kit first (its OpenMP settings precede torch's import): both
#: servers import them once, so that no forked child pays for them (3.3 of the 5.7 CPU-seconds a report's kernel
#: took to train and evaluate a smoke run, AVX2 EPYC)
TRAINING_IMPORTS = ("cse_kit", "torch", "transformers.models.bert.modeling_bert", "accelerate", "datasets",
                    "scipy.stats", "torch.utils.tensorboard", "cse_kit.train.loop")


def take_over(streams, cwd: str, env: dict) -> None:
    """Give a forked child the standard streams (a file descriptor each, None keeps the server's), the folder and the
    environment of the process it stands for."""
    for target, fd in enumerate(streams):
        if fd is not None:
            os.dup2(fd, target)
            os.close(fd)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115  the process's own, for its life
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)


def run_as_python(main) -> None:
    """Run `main()` as the interpreter runs a program, then end the child (exit_as_python): its return value or
    SystemExit's code is the exit status; an uncaught exception is printed and exits 1 (Ctrl-C: by SIGINT)."""
    code, interrupted = 1, False
    try:
        code = main()
    except SystemExit as exit_:
        code = exit_.code
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:  # noqa: BLE001  Python prints it and exits 1
        traceback.print_exc()
    exit_as_python(code, interrupted)


def exit_as_python(code, interrupted: bool):
    """End a forked child as the interpreter ends: threads joined, `atexit` run, streams flushed, then the exit status
    (SIGINT after an uncaught Ctrl-C; a message for a non-integer code)."""
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if interrupted:  # an uncaught Ctrl-C: Python exits by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    os._exit(code)
