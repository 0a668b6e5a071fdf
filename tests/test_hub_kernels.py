"""Hub kernels (transformers' `kernels` integration) are off for every model the kit loads unless
$CSE_KIT_HUB_KERNELS turns them on: transformers 5.25 turns them on unless told, replacing modules the kit's
references never ran (on a GPU). The setting is recorded in every environment and named by the doctor; and loading
a model offline reaches for no server."""

import json
import subprocess
import sys

import pytest

from cse_kit import doctor
from cse_kit.environment import HUB_KERNELS_ENV, describe, hub_kernels


@pytest.fixture
def kernelized(monkeypatch):
    """The use_kernels value each from_pretrained settles on (transformers 5.0 to 5.25 hand it to set_use_kernels),
    recorded instead of kernelizing."""
    from transformers import PreTrainedModel

    settled = []
    monkeypatch.setattr(PreTrainedModel, "set_use_kernels", lambda model, use, *args, **kwargs: settled.append(use))
    return settled


@pytest.mark.parametrize("setting, used", [(None, False), ("0", False), ("1", True)])
def test_every_model_the_kit_loads_has_hub_kernels_as_set(setting, used, kernelized, monkeypatch, tmp_path):
    """The encoder (training, evaluation, publishing: models.load_model) and the sentence-transformers export."""
    from cse_kit.models import load_model, resolve_reference
    from cse_kit.train.export import export_sentence_transformers

    if setting is None:
        monkeypatch.delenv(HUB_KERNELS_ENV, raising=False)
    else:
        monkeypatch.setenv(HUB_KERNELS_ENV, setting)
    load_model("all-MiniLM-L6-v2")
    export_sentence_transformers(resolve_reference("all-MiniLM-L6-v2"), tmp_path / "st", pooler="avg")
    assert kernelized == [used, used]
    assert describe()["hub_kernels"] is used


def test_a_setting_that_is_no_switch_names_the_values(monkeypatch):
    monkeypatch.setenv(HUB_KERNELS_ENV, "fast")
    with pytest.raises(ValueError, match=r"CSE_KIT_HUB_KERNELS='fast': set it to 1 .* or 0 .*, or unset it"):
        hub_kernels()


def test_the_doctor_names_hub_kernels_as_a_likely_cause():
    """References written before the setting existed (no `hub_kernels`) were computed with them off."""
    loss = next(c for c in doctor.checks() if c.kind == "smoke loss")
    here, there = describe(), {k: v for k, v in describe().items() if k != "hub_kernels"}
    assert doctor.likely_causes({**here, "hub_kernels": False}, there, loss) == []
    assert doctor.likely_causes({**here, "hub_kernels": True}, there, loss) == [
        f"Hub kernels on here (${HUB_KERNELS_ENV}), off in the references"]


NETWORK_REFUSED = """
import json, socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args[1] if len(args) > 1 else args))
    raise OSError("network refused by the test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
from cse_kit.eval import Encoder
from cse_kit.models import load_model
tokenizer, model = load_model("all-MiniLM-L6-v2")
vector = Encoder(model, tokenizer, "avg", progress=False).encode(["A man is playing a guitar."])
print(json.dumps({"attempts": attempts, "size": int(vector.shape[-1])}))
"""


def test_loading_a_local_model_never_reaches_for_the_hub(tmp_path):
    """With every connection refused (and recorded), as a cluster node without internet, and HF_HUB_OFFLINE unset
    (so nothing but the kit's own choices keeps transformers from trying): the packaged all-MiniLM-L6-v2 loads and
    encodes, and no connection is attempted."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", HUB_KERNELS_ENV)}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty cache: nothing to fall back on
    done = subprocess.run([sys.executable, "-c", NETWORK_REFUSED], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"attempts": [], "size": 384}
