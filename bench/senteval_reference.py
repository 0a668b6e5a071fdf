"""Load an unmodified checkout of SentEval (facebookresearch/SentEval or SimCSE's fork, fetched by you, never part of
this project) so it runs on a CPU with current Python/NumPy, for side-by-side checks.

Only the environment is adapted, never the protocol: `inspect.getargspec` (gone in Python 3.11) is aliased, and
the classifier's hard-coded `.cuda()` / `torch.device('cuda')` are pointed at the CPU when no GPU is present.
"""

import inspect
import sys
import types

import torch


def load_original_senteval(path: str):
    if not hasattr(inspect, "getargspec"):
        inspect.getargspec = inspect.getfullargspec
    sys.path.insert(0, path)
    import senteval
    import senteval.engine  # noqa: F401
    from senteval.tools import classifier

    if not torch.cuda.is_available():
        cpu = torch.device("cpu")
        proxy = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
        proxy.device = lambda *a, **k: cpu
        proxy.cuda = types.SimpleNamespace(FloatTensor=torch.Tensor, manual_seed=torch.manual_seed)
        classifier.torch = proxy
        torch.nn.Module.cuda = lambda self, *a, **k: self
        torch.Tensor.cuda = lambda self, *a, **k: self
    return senteval
