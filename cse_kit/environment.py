"""What a result was computed with: recorded beside every number."""

from __future__ import annotations

import platform

import numpy as np
import torch

from . import __version__


def describe(device: str | torch.device | None = None) -> dict:
    import scipy
    import transformers

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    env = {"cse_kit": __version__, "python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
           "device": str(device), "torch_threads": torch.get_num_threads(), "platform": platform.platform()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env
