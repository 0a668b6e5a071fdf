import os
import signal
from pathlib import Path

import numpy as np
import pytest

import cse_kit  # noqa: F401  before any test module imports torch: the kit's OpenMP wait policy must come first

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# pytest-xdist's workers (-n auto: one per core) share the cores out, as cse_kit.results.parallel's local workers do:
# with every worker on every core, an element-wise kernel waits for the scheduler to run its last thread (issue 45)
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CSE_KIT_SHARED", REPO.parent / "shared"))
SHARED_DATA = SHARED / "data"
ARCHIVES = {
    "senteval": SHARED_DATA / "senteval" / "senteval_downstream.tar.gz",
    "sts_raw": SHARED_DATA / "sts_raw" / "sts_raw.tar.gz",
    "wiki": SHARED_DATA / "wiki1m_prefix" / "wiki1m_for_simcse.head11913.txt.gz",
}


KERNEL_SERVERS = pytest.StashKey[str]()


#: The test files that take longest, slowest first (the sum of their tests' durations, `--durations=0`, measured on
#: the 2-core AVX2-only EPYC, idle, at a78aa81; docs/install.md). pytest-xdist's loadfile distribution hands each
#: worker the next file in collection order (`--no-loadscope-reorder` in pyproject.toml keeps it, instead of its own
#: order by the number of tests), so the long files start first and the short ones fill in at the end, where a long
#: one would leave the other worker idle: in that run's durations, this order ends the two workers' sums at 827 s
#: each, the order before at 792 s and 861 s. Other files follow in their usual order.
SLOWEST_FILES = ("test_notebooks.py", "test_slurm.py", "test_extending.py", "test_tune_stops.py", "test_train.py",
                 "test_eval_real.py", "test_mini_profile.py", "test_tracking.py", "test_tune_faults.py",
                 "test_parallel.py", "test_bench.py", "test_publish.py", "test_results.py", "test_diffaug.py",
                 "test_step.py", "test_grad_cache.py", "test_esimcse.py", "test_mteb.py", "test_tune.py",
                 "test_diffaug_modules.py", "test_identity.py", "test_progress.py", "test_equal_budget.py",
                 "test_determinism.py", "test_readme.py", "test_stale.py", "test_models.py", "test_hub_kernels.py",
                 "test_doctor.py", "test_eval_units.py")


def pytest_configure(config):
    """In pytest's first process (before xdist's workers start, so that they and every process they start inherit it):
    a `python3` kernelspec first on JUPYTER_PATH, whose kernels are forked from servers that imported the kit once
    (tests/forked_python.py)."""
    if hasattr(config, "workerinput"):
        return
    import json
    import tempfile

    from ipykernel.kernelspec import get_kernel_dict

    import forked_python

    servers = tempfile.mkdtemp(prefix=forked_python.PREFIX)
    spec = Path(servers) / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(forked_python.kernel_spec(servers, get_kernel_dict())))
    config.stash[KERNEL_SERVERS] = servers
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [servers, os.environ.get("JUPYTER_PATH")]))


def pytest_unconfigure(config):
    """The kernel servers stopped, their folder removed."""
    servers = config.stash.get(KERNEL_SERVERS, None)
    if servers:
        import shutil

        import forked_python

        forked_python.stop_servers(servers)
        shutil.rmtree(servers, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """The files of SLOWEST_FILES first, in that order; each file's tests keep their order (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def jobs_dir_of_the_test(tmp_path, monkeypatch):
    """The worker jobs' files of every test in its own folder, not in the user's cache (cse_kit.results.parallel)."""
    from cse_kit.results.parallel import JOBS_DIR_ENV

    monkeypatch.setenv(JOBS_DIR_ENV, str(tmp_path / "jobs"))


class CreatesAFile:
    """Unpickled with pickle's full power (torch.load(weights_only=False), pickle.load), it creates `path`."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def plant(path: Path, marker: Path) -> None:
    """A torch.save pickle that creates `marker` when loaded, in place of `path`; proven live first."""
    import torch

    payload = path.with_name("payload.pt")  # torch.load reads a *.safetensors name as safetensors
    torch.save(CreatesAFile(marker), payload)
    torch.load(payload, weights_only=False).close()
    assert marker.is_file(), "the planted pickle does not create its file"
    marker.unlink()
    os.replace(payload, path)


#: The kernel packs its messages with jupyter_client's json packer (orjson, its default where installed, writes NaN as
#: null silently), so a display message holding NaN or infinity shows its warning on the cell's stderr.
STRICT_KERNEL = ["--Session.packer=json"]


def run_notebook(notebook: Path, out: Path, parameters: dict):
    """Execute a notebook with papermill (in its own folder, progress bar off) and read it back; fails when one of its
    display messages was not strict JSON ("Message serialization failed ... Out of range float values")."""
    import nbformat
    import papermill

    papermill.execute_notebook(str(notebook), str(out), kernel_name="python3", cwd=str(notebook.parent),
                               progress_bar=False, parameters=parameters, extra_arguments=STRICT_KERNEL)
    nb = nbformat.read(out, as_version=4)
    stderr = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stderr")
    assert "Message serialization failed" not in stderr, stderr
    return nb


# Figures computed in floating point. A sum's rounding depends on its order, and the order on the kernel the CPU
# picks (AVX2, AVX-512, AMX), the thread count and the batch's shape. A test that compares two computations of one
# figure either runs the same arithmetic on both sides (the same code on the same inputs in one process: the same
# bits, SAME_ARITHMETIC), or allows one of the tolerances below, which say what they cover.

#: the same kernels on the same inputs: equal to the last bit, on any CPU
SAME_ARITHMETIC = 0.0
#: relative: float32 along different paths (other summation orders, float32 against float64): float32 rounds at
#: 6e-8 and a sum of n terms drifts by about sqrt(n) roundings (n in the worst case), so 1e-5 covers the sums of
#: thousands of terms in the kit's tiny and small models
FLOAT32 = 1e-5
#: relative: float64 along different paths (the same statistic of the same numbers through other code): float64
#: rounds at 1e-16
FLOAT64 = 1e-12
#: relative: a figure computed under bfloat16 autocast (AMX CPUs, GPUs) against float32: bfloat16 keeps 8 bits of
#: mantissa (rounds at 4e-3), and a layer's output sums many rounded products
BFLOAT16 = 2e-2


def agrees(expected, tolerance: float):
    """pytest.approx of `expected` within `tolerance` (one of the above), relative to each value."""
    return pytest.approx(expected, rel=tolerance, abs=0.0)


def assert_ranks_cannot_swap(scores, tolerance: float) -> None:
    """A rank statistic (Spearman) of two computations of `scores`, each within `tolerance` (relative) of them, is
    the same number (to FLOAT64) when both rank them alike, which rounding cannot change if no two scores lie within
    twice that of each other: asserted, so that a test comparing them holds on any CPU (a tiny random model's
    cosines nearly tie, and there the CPU's summation order decided the ranks)."""
    ordered = np.sort(np.asarray(scores, dtype=np.float64))
    closest = float(np.diff(ordered).min())
    needed = 2 * tolerance * float(np.abs(ordered).max())
    assert closest > needed, f"two scores lie {closest:.3g} apart, rounding ({needed:.3g}) could swap their ranks"


def cli_env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


def kill_9_before_checkpoint(args: list[str], step: int) -> None:
    """Run `cse-kit *args` (a training run saving a checkpoint at `step`) and kill -9 it as that checkpoint is about
    to replace the one before (kit_process.kill_before_checkpoint)."""
    import kit_process  # here, not at the top: kit_process imports this module

    done = kit_process.run(args, env=cli_env(), capture_output=True, text=True, timeout=600,
                           kill_before_checkpoint=step)
    assert done.returncode == -signal.SIGKILL, f"not killed before checkpoint {step}: {done.stderr[-3000:]}"


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A data directory with the real shared evaluation data and the Wiki1M sample imported (read-only use)."""
    from cse_kit.data import import_path

    missing = [str(p) for p in ARCHIVES.values() if not p.is_file()]
    if missing:
        pytest.fail(f"the shared data is missing ({missing}); clone the project with ../shared beside it or set "
                    "CSE_KIT_SHARED")
    # imported once per session, not once per pytest-xdist worker (each worker is a session of its own; they share
    # the parent of their base temporary folders): the first worker imports while the others wait for it (~9 s)
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    root = shared / "data-shared"
    with FileLock(str(shared / "data-shared.lock")):
        if not (shared / "data-shared.done").is_file():
            root.mkdir(exist_ok=True)
            for archive in ARCHIVES.values():
                import_path(archive, root)
            (shared / "data-shared.done").touch()
    return root


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM cluster (tests/slurm_cluster.py) for the whole session, stopped at its end."""
    import slurm_cluster

    why = slurm_cluster.missing()
    if why:
        pytest.skip(why)
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster, monkeypatch):
    """The cluster, with this test's SLURM clients (sbatch, squeue, submitit) pointed at it."""
    for name, value in slurm_cluster.env.items():
        monkeypatch.setenv(name, value)
    return slurm_cluster


@pytest.fixture(scope="session")
def postgresql():
    """A PostgreSQL server (tests/postgres_server.py) for the whole session, stopped at its end; a test makes its own
    database with `postgresql.database(name, user, password)`."""
    import postgres_server

    why = postgres_server.missing()
    if why:
        pytest.skip(why)
    server = postgres_server.Server()
    try:
        try:
            server.start()
        except RuntimeError as error:  # installed but cannot run here (no shared memory, a sandbox)
            pytest.skip(f"PostgreSQL did not start: {str(error).splitlines()[0]}")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def minilm():
    """(tokenizer, model) of the offline all-MiniLM-L6-v2."""
    from cse_kit.models import load_model

    return load_model("all-MiniLM-L6-v2", offline=True)


@pytest.fixture(scope="session")
def tiny_bert(minilm):
    """A tiny random BERT (with its NSP pooler) sharing MiniLM's bert-base-uncased tokenizer."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=minilm[0].vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    return minilm[0], BertModel(config).eval()


def rerandomize(module, seed, std):
    """Weights large enough that attention is sharp and every input the official restatements compare (prefixes,
    positions, templates, cut rows and columns) moves the result: LayerNorm scales near 1, small biases, the rest
    N(0, std), drawn from a generator seeded with `seed` (the float64 tests of the official code)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(std * noise)


@pytest.fixture
def counted(monkeypatch):
    """Counts how often each evaluation of the results store really runs."""
    from cse_kit import results

    calls = []
    for name, fn in list(results.EVALUATIONS.items()):
        monkeypatch.setitem(results.EVALUATIONS, name,
                            lambda enc, d, p, _fn=fn, _name=name: (calls.append(_name), _fn(enc, d, p))[1])
    return calls
