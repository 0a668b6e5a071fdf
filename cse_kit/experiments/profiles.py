"""The profiles a notebook runs on: what each one's numbers are (PROFILE_NOTES) and can show (PROFILE_SCOPES,
STARTS_SHOWN), and `auto` resolved to one whose models this machine can have (chosen_profile)."""

from __future__ import annotations

from ..train.presets import PROFILES, hub_models
from .parameters import ParameterError


#: What each profile's numbers are, printed at the top of every notebook and shown in the report.
PROFILE_NOTES = {
    "paper": "the papers' models (BERT/RoBERTa-base) and Wiki1M: comparable to the paper's numbers",
    "cpu": "all-MiniLM-L6-v2 trained briefly on a Wiki1M sample: real runs, NOT comparable to the paper's BERT-base",
    "mini": "Google's masked-LM BERT miniatures (BERT-Mini, 4 x 256, for BERT-base) trained with the papers' recipes on "
            "Wiki1M's first 11,913 sentences: the papers' premise (an MLM-pretrained start) in miniature, NOT comparable "
            "to the paper's BERT-base numbers",
    "mini-rehearsal": "the mini profile's miniatures at the smoke profile's sizes: checks the downloads and every code "
                      "path before a mini report, the numbers mean nothing",
    "smoke": f"tiny random models trained for seconds, transfer tasks on {PROFILES['smoke']['report']['transfer_sample']:,}"
             f" records per split, STS test on {PROFILES['smoke']['report']['sts_sample']} pairs per subset: checks the"
             " pipeline, the numbers mean nothing",
}


#: The profiles whose tables show, beside every trained row, its untrained start: the backbone evaluated as it is,
#: under the pooler the row's runs are evaluated with, and each cell's change from it. Their backbones are not the
#: papers' masked-LM checkpoints (cpu: a model already trained for similarity), so a number alone does not say whether
#: a method added anything; on `paper` the papers' own baselines say it.
STARTS_SHOWN = ("cpu", "mini", "mini-rehearsal", "smoke")

#: what the cpu profile can and cannot show, said once where its numbers are shown (the report's coverage)
CPU_PROFILE_SCOPE = (
    "The cpu profile starts from all-MiniLM-L6-v2, a model already trained for sentence similarity, not the papers' "
    "masked-LM checkpoints: it shows that every method runs and how far each moves that model from its untrained "
    "start under the method's own pooler (each table's 'start' line), not the papers' gains or their ranking; "
    "DiffAug's freshly initialised prefix costs it 17 STS-B dev points that the profile's 16 stage-2 steps do not "
    "win back")

#: where the evidence for CPU_PROFILE_SCOPE is, in the repository
CPU_PROFILE_EVIDENCE = "docs/training.md#what-the-cpu-profile-can-and-cannot-show"

#: profile -> (what it can and cannot show, said once where its numbers are shown; where the evidence is)
PROFILE_SCOPES = {
    "cpu": (CPU_PROFILE_SCOPE, CPU_PROFILE_EVIDENCE),
    "mini": ("The mini profile starts, as the papers do, from masked-LM checkpoints (Google's BERT miniatures): each "
             "table's 'start' line is the untrained miniature, so a row's change from it is what the method adds to "
             "an MLM start; at a tenth of BERT-base's width and on Wiki1M's first 11,913 sentences, its numbers are "
             "not the papers' and its ranking need not be theirs",
             "docs/training.md#the-mini-profile-the-papers-premise-in-miniature"),
}


def resolve_profile(profile: str) -> str:
    """`auto` is `paper` with a CUDA GPU; without one `mini` where its models are cached or the Hub answers, else
    `cpu` (auto_profile says why)."""
    if profile == "auto":
        return auto_profile()[0]
    if profile not in PROFILES:
        raise ParameterError(f"unknown profile {profile!r}; choose auto, {', '.join(PROFILES)}")
    return profile


def chosen_profile(profile: str, say=print) -> str:
    """The profile a command or notebook runs: `auto` resolved, saying which and why; stops, in one line naming them,
    where the profile's models can be had neither from the cache nor from the Hub (require_models)."""
    if profile == "auto":
        profile, why = auto_profile()
        say(why)
    profile = resolve_profile(profile)
    require_models(profile)
    return profile


def auto_profile() -> tuple[str, str]:
    """(the profile `auto` picks, one line saying which and why)."""
    import torch

    if torch.cuda.is_available():
        return "paper", "profile paper (auto: a CUDA GPU; --profile mini, cpu or smoke to choose another)"
    missing, unreachable = models_missing("mini")
    if not missing:
        why = "no CUDA GPU; the mini profile's masked-LM miniatures are in the Hugging Face cache"
    elif not unreachable:
        why = (f"no CUDA GPU; the Hub answers, so the mini profile's {len(missing)} miniature(s) not yet cached "
               "download on first use")
    else:
        return "cpu", (f"profile cpu (auto: no CUDA GPU, and the mini profile's miniatures are neither cached nor "
                       f"downloadable: {unreachable}; --profile mini once they are)")
    return "mini", f"profile mini (auto: {why}; --profile cpu or smoke to choose another)"


def models_missing(profile: str) -> tuple[list[str], str | None]:
    """(the Hub models the profile's runs load that are not in the Hugging Face cache, why the Hub cannot send them
    or None): the mini profile's miniatures, none on any other profile (paper's are checked run by run)."""
    from ..models import hub_unreachable, in_hub_cache, offline_mode

    missing = [ref for ref in hub_models(profile) if not in_hub_cache(ref)]
    if not missing:
        return [], None
    return missing, ("offline mode is on (HF_HUB_OFFLINE=1)" if offline_mode() else hub_unreachable())


def require_models(profile: str) -> None:
    """Stop, in one line naming them, when the profile's models are neither cached nor downloadable."""
    from ..models import ModelNotFoundError

    missing, unreachable = models_missing(profile)
    if missing and unreachable:
        raise ModelNotFoundError(
            f"the {profile} profile needs {', '.join(missing)}, which are not in the Hugging Face cache, and the Hub "
            f"cannot send them ({unreachable}): connect, or `hf download` them on a machine that can and copy its "
            "cache (~/.cache/huggingface/hub), or use --profile cpu")
