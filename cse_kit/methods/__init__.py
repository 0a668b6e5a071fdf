"""Training objectives. Each method is an `Objective` (the one protocol the training loop calls) that owns its
training-only parts (projector, generator, discriminator, heads); `.encoder` is the plain Hugging Face model that gets
exported. Every method, the kit's and a researcher's, is registered by name (`@register("name")`,
cse_kit.methods.registry) and built from the training configuration (`from_config`) (docs/extending.md)."""

from .contrastive import BatchNormProjector, MLPProjector, gather_with_grad, make_projector
from .consert import ConSERT
from .diffaug import DiffAug
from .diffcse import DiffCSE
from .esimcse import ESimCSE
from .masking import mlm_corrupt
from .objective import Objective
from .promptbert import PromptBERT
from .registry import METHODS, PLUGINS_ENV, MethodError, load_plugins, method_class, register, use_plugins
from .scd import SCD
from .simcse import SimCSE

__all__ = ["METHODS", "PLUGINS_ENV", "BatchNormProjector", "DiffAug", "DiffCSE", "ESimCSE", "MLPProjector",
           "MethodError", "Objective", "PromptBERT", "SCD", "SimCSE", "gather_with_grad",
           "load_plugins", "make_projector", "method_class", "mlm_corrupt", "register", "use_plugins"]
