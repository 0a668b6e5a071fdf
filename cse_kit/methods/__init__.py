"""Training objectives. Each method is an nn.Module that owns its training-only parts (projector, generator,
discriminator, heads); `.encoder` is the plain Hugging Face model that gets exported."""

from .contrastive import BatchNormProjector, MLPProjector, gather_with_grad, info_nce, make_projector
from .consert import ConSERT
from .diffaug import DiffAug
from .diffcse import DiffCSE
from .esimcse import ESimCSE
from .masking import mlm_corrupt
from .promptbert import PromptBERT
from .scd import SCD
from .simcse import SimCSE

METHODS = {"simcse": SimCSE, "diffcse": DiffCSE, "esimcse": ESimCSE, "scd": SCD, "diffaug": DiffAug,
           "promptbert": PromptBERT, "consert": ConSERT}

__all__ = ["METHODS", "BatchNormProjector", "DiffAug", "DiffCSE", "ESimCSE", "MLPProjector", "PromptBERT", "SCD", "SimCSE", "gather_with_grad",
           "info_nce", "make_projector", "mlm_corrupt"]
