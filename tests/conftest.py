import os
from pathlib import Path

import pytest

import cse_kit  # noqa: F401  before any test module imports torch: the kit's OpenMP wait policy must come first

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CSE_KIT_SHARED", REPO.parent / "shared"))
SHARED_DATA = SHARED / "data"
ARCHIVES = {
    "senteval": SHARED_DATA / "senteval" / "senteval_downstream.tar.gz",
    "sts_raw": SHARED_DATA / "sts_raw" / "sts_raw.tar.gz",
    "wiki": SHARED_DATA / "wiki1m_prefix" / "wiki1m_for_simcse.head11913.txt.gz",
}


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


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A data directory with the real shared evaluation data and the Wiki1M sample imported (read-only use)."""
    from cse_kit.data import import_path

    missing = [str(p) for p in ARCHIVES.values() if not p.is_file()]
    if missing:
        pytest.fail(f"the shared data is missing ({missing}); clone the project with ../shared beside it or set "
                    "CSE_KIT_SHARED")
    root = tmp_path_factory.mktemp("data")
    for archive in ARCHIVES.values():
        import_path(archive, root)
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
