"""One training configuration: every knob of SimCSE, DiffCSE, SCD and ESimCSE, with the official code's defaults
(SCD: the paper's BERT recipe, its official recipes are presets; ESimCSE: the paper's method, its official code a
variant)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..eval.encode import POOLERS
from .optim import OPTIMIZERS, default_weight_decay

METRICS = ("stsb_spearman", "sickr_spearman", "avg_sts", "transfer_devacc", "dev_data_spearman")
MIXED_PRECISION = ("auto", "no", "fp16", "bf16")
#: torch.compile's modes a run may ask for beside true (its default mode); reduce-overhead and max-autotune capture
#: the step in CUDA graphs
COMPILE_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: the modes that capture the step in CUDA graphs
CAPTURED = ("reduce-overhead", "max-autotune")
#: how a training batch is padded (cse_kit.train.step)
PADDINGS = ("auto", "longest", "fixed", "buckets")
#: The smallest temperature of SimCSE's temperature ablation (Gao et al. 2021, appendix: 0.001 to 1). Below it the
#: logits cos/temp span more than 2/temp = 2000, so exp() of every negative but the hardest underflows even in fp32
#: (e^-2000 = 0), the gradient reaches one negative per row, and the loss grows as 1/temp.
MIN_TEMP = 1e-3
SIMCSE_VARIANTS = ("paper", "official-code")
#: the variants that train as the official code did (its optimizer, its run's process count)
OFFICIAL_VARIANTS = ("official-code", "released-checkpoints")
#: the optimizer each method's official code stepped with (cse_kit.train.optim): the Hugging Face Trainer's
#: (SimCSE simcse/trainers.py:76, 313 on transformers 4.2.1; DiffCSE diffcse/trainers.py:76, 355 on its vendored
#: 4.2.1; SCD scd/trainers.py:89, 342 on 4.10; ESimCSE esimcse/trainers.py:76, 314 on 4.2.1; Prompt-BERT
#: prompt_bert/trainers.py:76, 314 on 4.2.1), DiffAug's own build of the same AdamW (diffaug/trainers.py:79, 240-276
#: on 4.15, both of its optimizers), and ConSERT's SentenceTransformer.fit (main.py:291)
OFFICIAL_OPTIMIZERS = {"simcse": "hf-trainer", "diffcse": "hf-trainer", "scd": "hf-trainer", "esimcse": "hf-trainer",
                       "promptbert": "hf-trainer", "diffaug": "diffaug-trainer", "consert": "sentence-transformers"}
#: method -> (the mixed precision of its official scripts, where they ask for it). Every one trains in fp16 with
#: dynamic loss scaling on CUDA: the Hugging Face Trainer's --fp16 (torch.cuda.amp autocast and GradScaler), and
#: ConSERT's apex O1 (--use_apex_amp --apex_amp_opt_level O1 in every English script: fp16 casts of the same kind and
#: the same dynamic loss scale). Under an official variant a run takes it unless its profile or caller sets
#: mixed_precision (cse_kit.train.presets); a CPU trains such a run in fp32 (cse_kit.train.presets.precision_words)
OFFICIAL_PRECISION = {
    "simcse": ("fp16", "princeton-nlp/SimCSE run_unsup_example.sh:25, run_sup_example.sh:35 --fp16"),
    "diffcse": ("fp16", "voidism/DiffCSE run_diffcse.sh:30 --fp16"),
    "scd": ("fp16", "SAP-samples/acl2022-self-contrastive-decorrelation README.md:110 --fp16"),
    "esimcse": ("fp16", "caskcsg/sentemb ESimCSE/run.sh:52 --fp16"),
    "promptbert": ("fp16", "kongds/Prompt-BERT run.sh:166 --fp16"),
    "diffaug": ("fp16", "TianduoWang/DiffAug run_semi_sup_bert.sh:29, run_sup_bert.sh:27 --fp16"),
    "consert": ("fp16", "yym6472/ConSERT scripts/*.sh:1 --use_apex_amp --apex_amp_opt_level O1"),
}
#: the methods whose official loss is gathered across processes with the gradient through each process's own rows
#: (SimCSE models.py:171-189, Prompt-BERT and DiffAug the same): what official_processes scales
SHARED_LOSS_METHODS = ("simcse", "promptbert", "diffaug")
#: Settings that say where a run's files go or how often it logs and saves, never what it computes: a run's identity
#: leaves them out (cse_kit.results.identity: its record key, "the same configuration under other seeds"), a resumed
#: run may differ from its checkpoint in them, and a run's name does not name them. stage1_snapshot_steps is not one:
#: DiffAug Figure 3 reads the snapshots it saves.
NOT_COMPUTING = ("output_dir", "data_dir", "log_with", "log_steps", "save_steps", "checkpoint_minutes", "keep_checkpoint",
                 "extra")


@dataclass
class TrainConfig:
    method: str = "simcse"  # a registered method (cse_kit.methods.METHODS; a researcher's own: docs/extending.md)
    # the method's own settings (its Options dataclass: DiffCSE's λ, SCD's dropout rates, a researcher's own...),
    # every one resolved over its defaults; set with --set <method>.<option>=value (the kit's methods' former field
    # names work too: cse_kit.train.method_settings)
    method_options: dict = field(default_factory=dict)
    model: str = "bert-base-uncased"  # short name, Hub id or folder
    data: str = "Wiki1M"  # a registered corpus, or a file: one sentence per line, or an NLI triplet CSV
    max_examples: int | None = None  # train on the first N examples only (profiles size runs with it)
    output_dir: str = "runs/run"
    seed: int = 42  # HF Trainer's default, which SimCSE and DiffCSE used
    epochs: int = 1
    max_steps: int | None = None  # stop earlier than `epochs`; the schedule decays over the steps actually run
    batch_size: int = 64  # global: split over processes, negatives gathered back (so 1 or N processes agree)
    lr: float = 3e-5
    weight_decay: float | None = None  # None: the optimizer's own default (cse_kit.train.optim.OPTIMIZERS)
    # torch-adamw (the kit's) | hf-trainer | sentence-transformers (the official code's legacy transformers AdamW,
    # cse_kit.train.optim); None: the one of the method's variant, the official code's under official-code
    optimizer: str | None = None
    # the process count of the official run whose update this run reproduces (recorded by the official-code
    # presets): its gathered contrastive loss gives each process only its own rows' share of the gradient and DDP
    # averages, so the step sees 1/official_processes of that loss's gradient, on any number of processes here.
    # 1: the global batch's gradient (the kit's protocol, every paper variant)
    official_processes: int = 1
    max_grad_norm: float = 1.0  # HF Trainer's default clipping, on in every official run
    warmup_steps: int = 0
    max_seq_length: int = 32
    temp: float = 0.05
    dropout: float | None = None  # the encoder's hidden and attention dropout; None keeps the checkpoint's (0.1)
    pooler: str = "cls_before_pooler"  # what the projector reads in training, and the exported model's pooler
    projector: str = "mlp"  # mlp (SimCSE: Linear + tanh) | batchnorm (DiffCSE; statistics of the global batch)
    # | batchnorm-per-process (each process's own rows: the official code on several GPUs)
    # | none (official: any pooler but cls)
    hard_negative_weight: float = 0.0
    # supervised SimCSE keeps its MLP at test time (official --pooler_type cls without --mlp_only_train): it is
    # exported as the model's pooler layer and the model evaluated with pooler "cls"
    keep_projector: bool = False
    simcse_variant: str = "paper"  # paper (the kit's protocol) | official-code (the optimizer and process count
    # of the official scripts, princeton-nlp/SimCSE)
    # auto: bf16 (else fp16) on CUDA, bf16 on a CPU with a native bf16 multiply, fp32 elsewhere
    # (cse_kit.train.precision); the official variants' presets set their scripts' fp16 (OFFICIAL_PRECISION),
    # which a CPU runs in fp32
    mixed_precision: str = "auto"
    eval_steps: int = 125
    # also evaluate at each epoch's end, eval_steps counted from each epoch's start (SentenceTransformer.fit's
    # schedule: yym6472/ConSERT sentence_transformers/SentenceTransformer.py:612-640)
    eval_epoch_end: bool = False
    # > 0: stop after this many dev evaluations in a row without a new best (fit's early_stop_patience, ibid.)
    early_stopping_patience: int = 0
    metric: str = "stsb_spearman"  # dev metric that picks the best checkpoint
    # a dev set of one's own for model selection: an STS-style CSV (sentence1, sentence2, score); its Spearman,
    # `dev_data_spearman`, picks the best checkpoint (the metric, where it is left at stsb_spearman); in the key by
    # its checksum
    dev_data: str | None = None
    save_steps: int | None = None  # resumable checkpoint every N steps; default: every checkpoint_minutes
    checkpoint_minutes: float = 20.0  # a killed run loses at most this much training (and at most 2% goes to saving)
    keep_checkpoint: bool = False  # keep a finished run's resumable checkpoint (the best model is always kept)
    # torch.compile the step's modules (cse_kit.train.step: the encoder, and a method's own where it names them):
    # false | true (torch.compile's default mode) | reduce-overhead (CUDA graphs: a step in a handful of launches)
    # | max-autotune | max-autotune-no-cudagraphs. Captured modes want one shape: pad_to=fixed
    compile: bool | str = False
    # how each training batch is padded (cse_kit.train.step.PADDINGS): longest (to its longest row) | fixed (every
    # batch to the training data's longest row: one shape, what a compiled, captured step needs) | buckets (to the
    # next of a few lengths: a handful of shapes) | auto (fixed on CUDA, longest elsewhere). Masked positions add
    # nothing, but dropout draws its masks over the padded shape, so other padding is another draw of the same run
    pad_to: str = "auto"
    # torch's deterministic algorithms, a fixed cuBLAS workspace and no cuDNN benchmarking, so that the same seed
    # gives the same numbers twice on one GPU (cse_kit.train.determinism; on a GPU still to be measured with
    # bench/gpu_check.sh --device cuda); a CPU run is deterministic either way
    deterministic: bool = False
    log_steps: int = 10
    # the trackers that show the training curves (cse_kit.train.tracking): none, or a comma-separated list of
    # Accelerate's (tensorboard, wandb, mlflow, ...); None: $CSE_KIT_LOG_WITH, else TensorBoard where it is installed
    log_with: str | None = None
    data_dir: str | None = None
    # what a batch holds beside the method's own: ESimCSE Table 6's length buckets, "b" (two buckets, length <= b and
    # > b) | "3-8" (<=3, 4, ..., >=8), for any method
    length_buckets: str | None = None
    # prompt-based representation (PromptBERT's and DiffAug's template; poolers prompt_mask*): the sentence's
    # sub-words, truncated to max_seq_length, are wrapped in it before training
    template: str | None = None
    # a first stage (a two-stage method's, DiffAug, or a semi-supervised strategy's) and NLI triplets beside the
    # main data. stage1_steps: its steps (0: none); stage1_lr: its learning rate (DiffAug's official
    # --sup_learning_rate)
    stage1_steps: int = 0
    stage1_lr: float = 1e-3
    # k > 0: the stage-1 state (prefix table, classifier) saved every k stage-1 steps and at the last one, under
    # <run>/stage1/ (DiffAug Figure 3: cse_kit.eval.prefix_dynamics); 0: none
    stage1_snapshot_steps: int = 0
    aux_weight: float = 0.0  # α of the auxiliary NLI cross-entropy in the main stage (0: none)
    nli_data: str | None = None  # NLI triplets for stage 1 and the auxiliary loss (NLI; SNLI-triplets offline)
    nli_batch_size: int = 128  # global NLI triplets per stage-1 step and per auxiliary batch
    nli_fraction: float = 1.0  # train on this fraction of the NLI triplets (DiffAug Tables 2, 7: 0.01, 0.1)
    nli_subset: int = 0  # seed of the fraction's random subset (the paper draws five)
    gradient_accumulation: int = 1  # main-stage batches per optimizer step, each its own loss (DiffAug's sup script)
    # N > 0: the main stage's step computed N rows at a time with gradient caching (cse_kit.methods.grad_cache):
    # the whole batch's loss and gradients (its negatives) in the memory of N rows; 0: off. Dropout draws its masks
    # per chunk, so a cached run is the same objective, not the same numbers: it is part of the run's key
    grad_cache: int = 0
    # DiffAug Table 6's semi-supervised strategies around any method with a training sentence vector
    # (cse_kit.methods.semi): none | joint (L_cl + aux_weight · L_ce on nli_data) | sup-unsup (L_ce for
    # stage1_steps at stage1_lr, then L_cl) | sup-joint (L_ce, then the joint loss)
    semi_strategy: str = "none"
    # provenance
    preset: str | None = None
    profile: str | None = None
    extra: dict = field(default_factory=dict)  # free-form labels recorded with the run (not used in training)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """The shared settings' checks, then the method's options resolved and checked (method_settings)."""
        def need(ok, message):
            if not ok:
                raise ValueError(message)

        from .method_settings import check_method

        need(self.pooler in POOLERS, f"unknown pooler {self.pooler!r}; choose one of: {', '.join(POOLERS)}")
        need(self.metric in METRICS, f"unknown metric {self.metric!r}; choose one of: {', '.join(METRICS)}")
        self._check_dev_data(need)
        need(self.mixed_precision in MIXED_PRECISION,
             f"mixed_precision must be one of {', '.join(MIXED_PRECISION)}, got {self.mixed_precision!r}")
        need(isinstance(self.compile, bool) or self.compile in COMPILE_MODES, f"compile takes true, false or one of "
             f"{', '.join(COMPILE_MODES)}, got {self.compile!r}")
        need(self.pad_to in PADDINGS, f"pad_to must be one of {', '.join(PADDINGS)}, got {self.pad_to!r}")
        need(self.compile not in CAPTURED or self.pad_to != "longest", f"compile={self.compile} captures a CUDA graph "
             "for each batch shape, and pad_to=longest gives each batch its own: set pad_to=fixed (or buckets, or auto)")
        need(self.batch_size >= 2, f"batch_size must be >= 2 (in-batch negatives), got {self.batch_size}")
        need(self.lr > 0, "lr must be positive")
        need(self.optimizer is None or self.optimizer in OPTIMIZERS, f"unknown optimizer {self.optimizer!r}; choose "
             f"one of: {', '.join(OPTIMIZERS)}")
        need(self.weight_decay is None or self.weight_decay >= 0, f"weight_decay must be >= 0 (or unset: the "
             f"optimizer's default), got {self.weight_decay}")
        need(self.official_processes >= 1, f"official_processes must be >= 1, got {self.official_processes}")
        need(self.official_processes == 1 or self.method in SHARED_LOSS_METHODS, f"official_processes scales the "
             f"gathered contrastive loss of {', '.join(SHARED_LOSS_METHODS)}; {self.method}'s official runs are on "
             "one process: set official_processes=1")
        need(self.simcse_variant in SIMCSE_VARIANTS, f"unknown simcse_variant {self.simcse_variant!r}; choose one "
             f"of: {', '.join(SIMCSE_VARIANTS)}")
        need(self.temp >= MIN_TEMP, f"temp must be >= {MIN_TEMP} (the papers use 0.05), got {self.temp}: the loss "
             f"grows as 1/temp and the softmax over cos/temp turns one-hot, so training stops moving")
        need(self.dropout is None or 0 <= self.dropout < 1, f"dropout must be in [0, 1), got {self.dropout}")
        need(self.epochs >= 1 and (self.max_steps is None or self.max_steps >= 1), "epochs and max_steps must be >= 1")
        need(self.eval_steps >= 1, "eval_steps must be >= 1")
        need(self.early_stopping_patience >= 0, f"early_stopping_patience must be >= 0 (0: none), got "
             f"{self.early_stopping_patience}")
        for name in ("max_seq_length", "log_steps", "max_examples", "save_steps"):  # sizes: None means "not set"
            value = getattr(self, name)
            need(value is None or value >= 1, f"{name} must be >= 1, got {value}: --set {name}=<a positive integer>")
        need(self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}")
        need(self.checkpoint_minutes > 0, "checkpoint_minutes must be > 0 (or set save_steps)")
        need(not self.keep_projector or (self.projector == "mlp" and self.pooler == "cls_before_pooler"),
             "keep_projector exports SimCSE's MLP (Linear + tanh on [CLS]) as the model's pooler: it needs "
             "projector='mlp' and pooler='cls_before_pooler' in training")
        self._check_stage_settings(need)
        check_method(self)

    def _check_dev_data(self, need) -> None:
        from ..eval.user_tasks import load_user_pairs

        if self.dev_data is None:
            need(self.metric != "dev_data_spearman", "metric dev_data_spearman reads a dev set of your own: set "
                 "dev_data=pairs.csv (sentence1, sentence2, score)")
            return
        load_user_pairs(self.dev_data)  # a bad file: one line naming it, its row and the fix
        if self.metric == "stsb_spearman":
            self.metric = "dev_data_spearman"

    def _check_stage_settings(self, need) -> None:
        from .data import parse_length_buckets

        parse_length_buckets(self.length_buckets)
        need(not self.pooler.startswith("prompt_mask") or self.template, f"pooler {self.pooler} needs a template "
             "(e.g. template='This sentence of \"*sent0*\" means*mask*.')")
        need(self.stage1_steps >= 0, f"stage1_steps must be >= 0, got {self.stage1_steps}")
        need(self.stage1_snapshot_steps >= 0, f"stage1_snapshot_steps must be >= 0 (0: no snapshots), got "
             f"{self.stage1_snapshot_steps}")
        need(not self.stage1_snapshot_steps or self.stage1_steps, "stage1_snapshot_steps saves snapshots of stage "
             "1: set stage1_steps > 0 (a two-stage method, DiffAug), or stage1_snapshot_steps=0")
        need(self.stage1_lr > 0 and self.aux_weight >= 0, "stage1_lr must be positive and aux_weight >= 0")
        need(self.nli_batch_size >= 2, f"nli_batch_size must be >= 2, got {self.nli_batch_size}")
        need(0 < self.nli_fraction <= 1, f"nli_fraction must be in (0, 1], got {self.nli_fraction}")
        need(self.gradient_accumulation >= 1, f"gradient_accumulation must be >= 1, got {self.gradient_accumulation}")
        need(self.grad_cache >= 0, f"grad_cache must be >= 0 (rows per chunk; 0: off), got {self.grad_cache}")

    def variant_name(self) -> str:
        """The method's paper-vs-code variant (Objective.variant_of); a researcher's method has none: "paper", the
        kit's protocol."""
        from .method_settings import variant_name

        return variant_name(self)

    def official_code(self) -> bool:
        """Whether the run trains as the method's official code did."""
        return self.variant_name() in OFFICIAL_VARIANTS

    def optimizer_name(self) -> str:
        """The optimizer the run steps with: an explicit setting, else the official code's under its variant, else
        torch's AdamW (the kit's protocol)."""
        if self.optimizer is not None:
            return self.optimizer
        return OFFICIAL_OPTIMIZERS[self.method] if self.official_code() else "torch-adamw"

    def weight_decay_value(self) -> float:
        """The weight decay: an explicit setting, else the optimizer's default."""
        return default_weight_decay(self.optimizer_name()) if self.weight_decay is None else self.weight_decay

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_saved(cls, settings: dict) -> "TrainConfig":
        """The configuration a run saved (its config.json, its record's `config`), also one saved before a kit
        method's settings moved into its Options (every method's settings then saved, its own read from them)."""
        from .method_settings import split_settings

        return cls(**split_settings(settings, cls.__dataclass_fields__, saved=True))

    def replace(self, **changes) -> "TrainConfig":
        """A copy with changes, former field names included; another method starts from its own defaults."""
        if changes.get("method", self.method) != self.method and "method_options" not in changes:
            changes["method_options"] = {}
        return dataclasses.replace(self, **changes)

    def __getattr__(self, name: str):
        """A kit method's setting under the field name it had (cfg.lam), read from method_options."""
        if name.startswith("_") or name == "method_options":
            raise AttributeError(name)
        from .method_settings import former_value

        return former_value(self, name)


_init_fields = TrainConfig.__init__


def _init_with_former_names(self, **values) -> None:
    from .method_settings import split_settings

    _init_fields(self, **split_settings(values, TrainConfig.__dataclass_fields__))


_init_with_former_names.__doc__ = "Every field by name; a kit method's setting also under the field name it had."
TrainConfig.__init__ = _init_with_former_names


def parse_value(config_field: dataclasses.Field, text: str):
    """A `--set key=value` string as the field's type."""
    kind = str(config_field.type)
    # log_with=none turns the trackers off; unset (null) leaves them to $CSE_KIT_LOG_WITH and TensorBoard
    if text.lower() in ("none", "null") and "None" in kind and not (config_field.name == "log_with"
                                                                     and text.lower() == "none"):
        return None
    if kind.startswith("bool"):
        if text.lower() in ("true", "false", "1", "0", "yes", "no"):
            return text.lower() in ("true", "1", "yes")
        if "str" in kind:  # compile: true/false or a mode's name, checked by validate
            return text
        raise ValueError(f"{config_field.name} takes true/false, got {text!r}")
    for name, cast in (("int", int), ("float", float)):
        if kind.startswith(name):
            try:
                return cast(text)
            except ValueError:
                raise ValueError(f"{config_field.name} takes {'an integer' if cast is int else 'a number'} "
                                 f"(e.g. {config_field.name}={config_field.default}), got {text!r}") from None
    return text


def apply_overrides(values: dict, overrides: list[str]) -> dict:
    """values with `key=value` settings applied: a TrainConfig field, or an option of the run's method as
    `<method>.<option>=value`, by its own name or by the field name it had (`lam`): a string, parsed by the method's
    Options when the configuration is built."""
    from .method_settings import former_of, option_key, options_words

    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    out, options = dict(values), {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip() if "." in key else key.strip().replace("-", "_")
        if not sep:
            raise ValueError(f"bad setting {item!r}: write key=value")
        if key in fields:
            out[key] = parse_value(fields[key], text.strip())
        else:
            options[key] = text.strip()
    method = out.get("method", "simcse")
    given = {}
    for key, text in options.items():
        owner, dot, name = key.rpartition(".")
        if dot and owner != method:
            raise ValueError(f"{key} sets an option of method {owner}, but this run's method is {method}: add "
                             f"--set method={owner}")
        option = option_key(method, name)
        if option is None and dot:
            raise ValueError(f"method {method} has no option {name!r}; its options are: {options_words(method)}")
        if option is None:
            raise ValueError(f"bad setting {key!r}: write key=value with key one of: {', '.join(fields)} (or "
                             f"<method>.<option>=value for an option of the run's method: {options_words(method)})")
        given[option] = text
    # a kit method's options under the names presets use (its former fields), a researcher's in method_options
    former = former_of(method)
    out.update({former[option]: text for option, text in given.items() if option in former})
    given = {option: text for option, text in given.items() if option not in former}
    if given:
        previous = out.get("method_options", {}) if out.get("method") == values.get("method") else {}
        out["method_options"] = {**previous, **given}
    return out
