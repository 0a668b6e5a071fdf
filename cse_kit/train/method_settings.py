"""A run's method settings, one way for every method: its `Options` dataclass (cse_kit.methods.objective), held
resolved in TrainConfig.method_options and set as `--set <method>.<option>=value`. The kit's own methods' settings
were TrainConfig fields until 2026-11; under those names (FORMER_FIELDS: `lam`, `scd_dropout_low`,
`consert_aug1`...) they are still accepted wherever people write them (presets, notebooks' parameters, `--set
lam=...`, saved run configs and resumes) and read (`cfg.lam`), and a run's identity still lays them out so
(former_layout): moving a setting into its method's Options changes no record key."""

from __future__ import annotations

import dataclasses

from ..methods.contrastive import PROJECTORS
from ..methods.objective import resolve_options
from ..methods.registry import METHODS, is_kit_method, method_class
from ..methods.semi import STRATEGIES

#: The kit's methods' settings that were TrainConfig fields (key scheme 2's layout, which identities keep).
FORMER_FIELDS = (
    "generator", "mask_ratio", "lam", "variant", "generator_output", "generator_dropout", "rtd_reduction", "condition",
    "edited_padding", "edit_views", "masking", "task", "edit", "target", "contrastive",
    "dup_rate", "dup_level", "length_extension", "momentum", "queue_size", "esimcse_variant", "dup_sampling",
    "momentum_init",
    "scd_dropout_low", "scd_dropout_high", "scd_terms", "scd_self_contrast_weight", "scd_decorrelation_weight",
    "scd_lambda", "scd_temp", "scd_reduction", "scd_projector", "scd_variant",
    "prefix_len", "denoise", "diffaug_variant", "denoise_offset", "stage1_clip", "augmentation_module", "module_rank",
    "prefix_mode",
    "template2", "mlm_transform", "promptbert_variant", "denoise_positions", "promptbert_test", "promptbert_dev",
    "consert_supervision", "consert_aug1", "consert_rate1", "consert_aug2", "consert_rate2", "consert_cl_rate",
    "consert_noise_norm", "consert_test_pooler", "consert_variant", "consert_cl_reduction", "consert_unsup_scale",
    "consert_nli_features", "consert_dropout_aug", "consert_shuffle_positions", "consert_test_truncation",
    "consert_dev_pooler",
)


def former_names(cls: type) -> dict[str, str]:
    """{former TrainConfig field: option} of a kit method: its declared renames, and the options that kept their
    field's name. A researcher's method never had fields: none."""
    if cls.Options is None or not is_kit_method(cls):
        return {}
    options = {f.name for f in dataclasses.fields(cls.Options)}
    kept = {name: name for name in options if name in FORMER_FIELDS and name not in cls.former_names.values()}
    return {**kept, **cls.former_names}


def _owners() -> dict[str, list[tuple[type, str]]]:
    """former field -> [(kit method class, its option)]."""
    out = {}
    for cls in dict.fromkeys(METHODS.values()):
        for former, option in former_names(cls).items():
            out.setdefault(former, []).append((cls, option))
    return out


def former_defaults() -> dict[str, object]:
    """Each former field's default (every method that owns one declares the same)."""
    return {former: _option_default(*owners[0]) for former, owners in _owners().items()}


def _option_default(cls: type, option: str):
    field = cls.Options.__dataclass_fields__[option]
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


def split_settings(values: dict, own_fields, saved: bool = False) -> dict:
    """Constructor values with every former field's value moved into method_options under its option's name (the
    run's method's). Another method's former field is dropped where it holds its default, and refused otherwise;
    in a saved configuration (`saved`: a record's, a checkpoint's, from before the move) it is dropped whatever it
    holds, since every method's were saved, a profile's generator among them."""
    method = values.get("method", "simcse")
    former = {k: v for k, v in values.items() if k not in own_fields}
    if not former:
        return values
    names = former_names(method_class(method))
    options, defaults = {}, former_defaults()
    for name, value in former.items():
        if name in names:
            options[names[name]] = value
        elif name not in defaults:
            raise TypeError(f"unknown setting {name!r}: write a TrainConfig field, or <method>.<option> for an option "
                            f"of the run's method ({method})")
        elif value != defaults[name] and not saved:
            raise ValueError(f"{name} is a setting of method {_owner_words(name)}, not of this run's method {method}: "
                             f"add --set method=..., or leave it unset")
    own = {k: v for k, v in values.items() if k in own_fields}
    return {**own, "method_options": {**values.get("method_options", {}), **options}}


def takes(method: str, name: str, own_fields) -> bool:
    """Whether a run of `method` takes setting `name` (a TrainConfig field, or a former field of its own)."""
    return name in own_fields or name in former_names(method_class(method))


def _owner_words(former: str) -> str:
    return " and ".join(f"{cls.method} ({cls.method}.{option})" for cls, option in _owners()[former])


def option_key(method: str, key: str) -> str | None:
    """The option of `method` that `--set key=...` names: a former field or the option's own name; None if none."""
    cls = method_class(method)
    names = former_names(cls)
    if key in names:
        return names[key]
    options = {f.name for f in dataclasses.fields(cls.Options)} if cls.Options is not None else set()
    return key if key in options else None


def former_of(method: str) -> dict[str, str]:
    """{option: the former field presets and notebooks name it by} of a kit method's options."""
    return {option: former for former, option in former_names(method_class(method)).items()}


def options_words(method: str) -> str:
    """The options of `method` as --set names them, for an error's words."""
    options = method_class(method).Options
    return ", ".join(f"{method}.{f.name}" for f in dataclasses.fields(options)) if options else "none"


def former_value(cfg, name: str):
    """cfg.<former field>: the run's method's option, or the field's default for another method's."""
    names = former_names(method_class(cfg.method))
    if name in names:
        return cfg.method_options[names[name]]
    defaults = former_defaults()
    if name in defaults:
        return defaults[name]
    raise AttributeError(f"TrainConfig has no setting {name!r}")


def check_method(cfg) -> None:
    """Resolve cfg.method_options over its method's defaults, then the method's checks and those of the stages and
    strategies every method shares."""
    cls = method_class(cfg.method)
    cfg.method_options = resolve_options(cls, cfg.method_options)
    if cfg.projector not in PROJECTORS:  # the pooler is checked with the shared settings (TrainConfig.validate)
        raise ValueError(f"unknown projector {cfg.projector!r}; choose one of: {', '.join(PROJECTORS)}")
    _check_stages(cfg, cls)
    cls.check_run(cfg)


def _check_stages(cfg, cls: type) -> None:
    """A method's own two stages, or one of the semi-supervised strategies around any method (cse_kit.methods.semi)."""
    strategy = cfg.semi_strategy
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown semi_strategy {strategy!r}; choose one of: {', '.join(STRATEGIES)}")
    if strategy == "none":
        if not cls.two_stages and (cfg.stage1_steps or cfg.aux_weight):
            raise ValueError(f"stage1_steps and aux_weight train a two-stage method's stages or a semi-supervised "
                             f"strategy; for {cfg.method} set semi_strategy=joint|sup-unsup|sup-joint, or leave them 0")
        return
    if cls.two_stages:
        raise ValueError(f"{cfg.method} has two stages of its own (stage1_steps, aux_weight): leave "
                         "semi_strategy=none")
    if not cfg.nli_data:
        raise ValueError(f"semi_strategy {strategy} trains on NLI triplets: set nli_data (NLI, or SNLI-triplets "
                         "offline)")
    if (strategy == "joint") != (cfg.stage1_steps == 0):
        raise ValueError(f"semi_strategy {strategy} " + ("has no supervised stage: set stage1_steps=0"
                         if strategy == "joint" else "starts with a supervised stage: set stage1_steps > 0"))
    if (strategy == "sup-unsup") != (cfg.aux_weight == 0):
        raise ValueError(f"semi_strategy {strategy} " + ("has no joint loss: set aux_weight=0" if strategy == "sup-unsup"
                         else "adds aux_weight · L_ce (Eq. 13): set aux_weight > 0"))


def variant_name(cfg) -> str:
    return method_class(cfg.method).variant_of(cfg)


def variant_field(method: str) -> str | None:
    """The setting that chooses a kit method's paper-vs-code variant, as presets and records name it (its former
    field: `variant`, `scd_variant`...; SimCSE's `simcse_variant`); None for a method without variants."""
    return former_of(method).get("variant") or ("simcse_variant" if method == "simcse" else None)


def former_layout(settings: dict) -> dict:
    """A configuration's settings (TrainConfig.to_dict(), or one saved before the move) under the names people know
    (run names, cards, the resume check): every former field at the run's value or its default, a kit method's
    method_options empty."""
    cls = method_class(settings["method"])
    options = dict(settings.get("method_options") or {})
    flat = {k: v for k, v in settings.items() if k != "method_options"}
    if is_kit_method(cls):
        flat.update({former: options.pop(option) for former, option in former_names(cls).items() if option in options})
    for former, default in former_defaults().items():
        flat.setdefault(former, default)
    return {**flat, "method_options": options}
