"""Training: configuration, presets and profiles, data, the Accelerate loop, export."""

from .config import TrainConfig
from .export import export_encoder, export_sentence_transformers, read_metadata
from .loop import NonFiniteLoss, train
from .setup import build_objective
from .presets import GENERATORS, PRESETS, PROFILES, ProfileUnavailable, build_config

__all__ = ["GENERATORS", "PRESETS", "PROFILES", "NonFiniteLoss", "ProfileUnavailable", "TrainConfig",
           "build_config", "build_objective", "export_encoder", "export_sentence_transformers", "read_metadata",
           "train"]
