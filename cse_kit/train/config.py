"""One training configuration: every knob of SimCSE, DiffCSE, SCD and ESimCSE, with the official code's defaults
(SCD: the paper's BERT recipe, its official recipes are presets; ESimCSE: the paper's method, its official code a
variant)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..data.registry import ORDERED_CORPORA
from ..eval.encode import POOLERS, PROMPT_POOLERS
from ..methods.contrastive import PROJECTORS
from ..methods.diffaug import CHOICES as DIFFAUG_CHOICES
from ..methods.diffaug import MODULES as DIFFAUG_MODULES
from ..methods.diffaug import PREFIX_MODES
from ..methods.diffaug import VARIANTS as DIFFAUG_VARIANTS
from ..methods.diffcse import ABLATIONS, CHOICES, VARIANTS, check_ablation
from ..methods.esimcse import CHOICES as ESIMCSE_CHOICES
from ..methods.esimcse import QUEUE_PER_BATCH
from ..methods.esimcse import VARIANTS as ESIMCSE_VARIANTS
from ..methods.promptbert import CHOICES as PROMPTBERT_CHOICES
from ..methods.promptbert import VARIANTS as PROMPTBERT_VARIANTS
from ..methods.scd import REDUCTIONS, TERMS, parse_widths
from ..methods.scd import VARIANTS as SCD_VARIANTS
from .optim import OPTIMIZERS, default_weight_decay

METRICS = ("stsb_spearman", "sickr_spearman", "avg_sts", "transfer_devacc", "dev_data_spearman")
MIXED_PRECISION = ("auto", "no", "fp16", "bf16")
#: The smallest temperature of SimCSE's temperature ablation (Gao et al. 2021, appendix: 0.001 to 1). Below it the
#: logits cos/temp span more than 2/temp = 2000, so exp() of every negative but the hardest underflows even in fp32
#: (e^-2000 = 0), the gradient reaches one negative per row, and the loss grows as 1/temp.
MIN_TEMP = 1e-3
SIMCSE_VARIANTS = ("paper", "official-code")
#: each method's paper-vs-code variant field
VARIANT_FIELDS = {"simcse": "simcse_variant", "diffcse": "variant", "scd": "scd_variant", "esimcse": "esimcse_variant",
                  "diffaug": "diffaug_variant", "promptbert": "promptbert_variant", "consert": "consert_variant"}
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
    # a researcher's method's hyper-parameters (its Options dataclass), every one resolved over its defaults;
    # set with --set <method>.<option>=value. The kit's own methods' settings are the fields below
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
    compile: bool = False  # torch.compile the encoder (CUDA: faster steps after a compile of about a minute)
    log_steps: int = 10
    # the trackers that show the training curves (cse_kit.train.tracking): none, or a comma-separated list of
    # Accelerate's (tensorboard, wandb, mlflow, ...); None: $CSE_KIT_LOG_WITH, else TensorBoard where it is installed
    log_with: str | None = None
    data_dir: str | None = None
    # DiffCSE
    generator: str = "distilbert-base-uncased"
    mask_ratio: float = 0.30
    lam: float = 0.005
    variant: str = "official-code"  # official-code | paper-text: the defaults of the seven choices below
    generator_output: str | None = None
    generator_dropout: bool | None = None
    rtd_reduction: str | None = None
    condition: str | None = None
    edited_padding: str | None = None
    edit_views: str | None = None
    masking: str | None = None
    # DiffCSE ablations (Tables 3, 4, 15; cse_kit.methods.diffcse.ABLATIONS)
    task: str = "rtd"  # rtd | cmlm | corrective | positive | negative
    edit: str = "replace"  # replace | insert | delete | all
    target: str = "same"  # same | next | same+next (next needs an ordered corpus)
    contrastive: bool = True  # False: λ·L_task only ("w/o contrastive loss")
    # ESimCSE (defaults: the paper's method; esimcse_variant=official-code gives the official code's two choices)
    dup_rate: float = 0.32  # maximal repetition rate (Table 9)
    dup_level: str = "subword"  # subword (the method) | word (Table 5)
    length_extension: str = "repetition"  # repetition | stopword | mask | masked_prediction | none (Tables 4-6)
    momentum: float = 0.995  # EMA coefficient of the momentum encoder
    queue_size: int | None = None  # momentum queue length M; None: 2.5 x batch_size; 0: no momentum encoder
    esimcse_variant: str = "paper"  # paper | official-code: the defaults of the two choices below
    dup_sampling: str | None = None  # paper (re-drawn each time, Eq. 3) | official (fixed per sentence)
    momentum_init: str | None = None  # encoder (paper) | random (official code)
    length_buckets: str | None = None  # Table 6: "b" (two buckets, length <= b and > b) | "3-8" (<=3, 4, ..., >=8)
    # SCD (defaults: the paper's BERT recipe, cse_kit.methods.scd.VARIANTS)
    scd_dropout_low: float = 0.05  # r_A at every dropout site of view A (official hidden_dropout_prob)
    scd_dropout_high: float = 0.15  # r_B of view B (official hidden_dropout_prob_noise)
    scd_terms: str = "both"  # both | self_contrast | decorrelation: the loss terms used (Table 3)
    scd_self_contrast_weight: float = 1.0  # weight of L_S (official task_alpha; the paper has none, i.e. 1)
    scd_decorrelation_weight: float = 0.005  # weight of L_C (paper α, official task_beta)
    scd_lambda: float = 0.013  # weight of the off-diagonal sum in L_C (paper λ, official task_lambda)
    scd_temp: float = 1.0  # L_S averages cos / scd_temp: 1 in the paper, 0.05 in the official code
    scd_reduction: str = "mean"  # mean | sum of L_S over the batch (sum: the released checkpoints)
    scd_projector: str = "4096-4096-4096"  # widths of the projector's three layers (official --projector)
    scd_variant: str = "paper"  # paper | official-code | released-checkpoints: the recipe (the presets' values)
    # and, off paper, the official code's optimizer
    # prompt-based representation (PromptBERT's template; pooler prompt_mask): the sentence's sub-words, truncated
    # to max_seq_length, are wrapped in it before training
    template: str | None = None
    # DiffAug (defaults: the paper; diffaug_variant=official-code gives the official code's choices)
    prefix_len: int = 8  # l: positions of each of the two prefixes (the official --prefix_len is 2l)
    stage1_steps: int = 0  # stage 1 (prefix-tuning on NLI, encoder frozen) before the contrastive stage
    stage1_lr: float = 1e-3  # its learning rate (official --sup_learning_rate)
    # k > 0: the stage-1 state (prefix table, classifier) saved every k stage-1 steps and at the last one, under
    # <run>/stage1/ (DiffAug Figure 3: cse_kit.eval.prefix_dynamics); 0: none
    stage1_snapshot_steps: int = 0
    aux_weight: float = 0.0  # α of the auxiliary NLI cross-entropy in stage 2 (0: none)
    denoise: bool = True  # template denoising in stage 2 (official --apply_template_delta_train)
    nli_data: str | None = None  # NLI triplets for stage 1 and the auxiliary loss (NLI; SNLI-triplets offline)
    nli_batch_size: int = 128  # global NLI triplets per stage-1 step and per auxiliary batch
    nli_fraction: float = 1.0  # train on this fraction of the NLI triplets (Tables 2, 7: 0.01, 0.1)
    nli_subset: int = 0  # seed of the fraction's random subset (the paper draws five)
    gradient_accumulation: int = 1  # stage-2 batches per optimizer step, each its own loss (the official sup script)
    # N > 0: the main stage's step computed N rows at a time with gradient caching (cse_kit.methods.grad_cache):
    # the whole batch's loss and gradients (its negatives) in the memory of N rows; 0: off. Dropout draws its masks
    # per chunk, so a cached run is the same objective, not the same numbers: it is part of the run's key
    grad_cache: int = 0
    diffaug_variant: str = "paper"  # paper | official-code: the defaults of the two choices below
    denoise_offset: str | None = None  # sentence (paper) | sentence+prefix (official code)
    stage1_clip: str | None = None  # trained (paper) | all (official code)
    # DiffAug Table 3: the module making the two views, prefix | adapter | lora (two sets, one per view), the
    # adapters' / LoRA's rank r, and the prefix variants different (DiffAug) | same | fix | tuning
    augmentation_module: str = "prefix"
    module_rank: int = 4
    prefix_mode: str = "different"
    # PromptBERT (defaults: the paper; promptbert_variant=official-code gives the official code's choices). It also
    # reads template (view 0's, and the test template), denoise (template denoising), projector (mlp: Linear + tanh
    # after the denoising, training only | none) and pooler (prompt_mask | prompt_mask_denoised: the test vector)
    template2: str | None = None  # the other views' template (unsupervised: the positive's); None: all in template
    mlm_transform: bool = False  # BERT's pretrained MLM-head transform before the denoising (official sup-bert)
    promptbert_variant: str = "paper"  # paper | official-code: the defaults of the three choices below
    denoise_positions: str | None = None  # sentence (paper) | from-zero (official code)
    promptbert_test: str | None = None  # the exported test vector: plain (paper) | official (evaluation.py's)
    promptbert_dev: str | None = None  # the checkpoint selection's vector: test (paper) | official (the trainer's)
    # DiffAug Table 6's semi-supervised strategies for any method with a training sentence vector (SimCSE,
    # PromptBERT, ConSERT; cse_kit.methods.semi): none | joint (L_cl + aux_weight · L_ce on nli_data) | sup-unsup
    # (L_ce for stage1_steps at stage1_lr, then L_cl) | sup-joint (L_ce, then the joint loss)
    semi_strategy: str = "none"
    # ConSERT (cse_kit.methods.consert; defaults: the official unsup-consert-base.sh). It also reads temp, pooler (its
    # training vector: avg, the mean of the last layer) and dropout (0.0 is the script's --no_dropout)
    consert_supervision: str = "none"  # none (contrastive only) | sbert (NLI cross-entropy only) | joint (both)
    consert_aug1: str = "feature_cutoff"  # view 1's augmentation (--da_final_1): cse_kit.methods.consert.AUGMENTATIONS
    consert_rate1: float = 0.2  # its rate (--cutoff_rate_final_1); 0 for none, shuffle and adversarial
    consert_aug2: str = "shuffle"  # view 2's augmentation (--da_final_2)
    consert_rate2: float = 0.0  # its rate (--cutoff_rate_final_2)
    consert_cl_rate: float = 0.15  # weight of the contrastive loss (--cl_rate)
    consert_noise_norm: float = 0.01  # the adversarial view's perturbation norm per token (what main.py:259 leaves)
    consert_test_pooler: str = "avg_top2"  # the evaluated and exported vector (README.md:72: last two layers' mean)
    consert_variant: str = "official-code"  # official-code | paper: the defaults of the five choices below
    consert_cl_reduction: str | None = None  # mean (paper: the 2N losses averaged) | sum (code: two directions added)
    consert_unsup_scale: str | None = None  # plain (paper) | scaled (code: cl_rate multiplies the unsupervised loss)
    consert_nli_features: str | None = None  # sbert (paper: [u; v; |u - v|]) | sbert+max_square (code: + max(u, v)²)
    consert_dropout_aug: str | None = None  # bernoulli (paper) | exact (code: exactly int(n·d·rate) elements zeroed)
    consert_shuffle_positions: str | None = None  # model (paper) | from_zero (code: permutes arange; moves RoBERTa's)
    consert_test_truncation: str | None = None  # none (paper) | max_seq_length (code: eval.py cuts test sentences)
    consert_dev_pooler: str | None = None  # test (paper: the test vector selects) | training (code: the last layer's mean)
    # provenance
    preset: str | None = None
    profile: str | None = None
    extra: dict = field(default_factory=dict)  # free-form labels recorded with the run (not used in training)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        def need(ok, message):
            if not ok:
                raise ValueError(message)

        from ..methods.objective import resolve_options
        from ..methods.registry import method_class

        self.method_options = resolve_options(method_class(self.method), self.method_options)
        need(self.pooler in POOLERS, f"unknown pooler {self.pooler!r}; choose one of: {', '.join(POOLERS)}")
        need(self.projector in PROJECTORS, f"unknown projector {self.projector!r}; choose one of: "
             f"{', '.join(PROJECTORS)}")
        need(self.metric in METRICS, f"unknown metric {self.metric!r}; choose one of: {', '.join(METRICS)}")
        self._check_dev_data(need)
        need(self.mixed_precision in MIXED_PRECISION,
             f"mixed_precision must be one of {', '.join(MIXED_PRECISION)}, got {self.mixed_precision!r}")
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
        need(self.scd_variant in SCD_VARIANTS, f"unknown scd_variant {self.scd_variant!r}; choose one of: "
             f"{', '.join(SCD_VARIANTS)}")
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
        need(0 < self.mask_ratio < 1, f"mask_ratio must be in (0, 1), got {self.mask_ratio}")
        need(self.lam >= 0, f"lam (the RTD weight) must be >= 0, got {self.lam}")
        need(self.variant in VARIANTS, f"unknown DiffCSE variant {self.variant!r}; choose one of: {', '.join(VARIANTS)}")
        for name, choices in {**CHOICES, **ABLATIONS}.items():
            value = getattr(self, name)
            need(value is None or value in choices, f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")
        check_ablation(self.task, self.edit, self.target, self.contrastive)
        need(not self.keep_projector or (self.projector == "mlp" and self.pooler == "cls_before_pooler"),
             "keep_projector exports SimCSE's MLP (Linear + tanh on [CLS]) as the model's pooler: it needs "
             "projector='mlp' and pooler='cls_before_pooler' in training")
        need(self.target == "same" or self.data in ORDERED_CORPORA,
             f"target {self.target!r} needs the next sentence: train on an ordered corpus "
             f"({', '.join(ORDERED_CORPORA)}), not {self.data!r}")
        self._validate_esimcse(need)
        self._validate_scd(need)
        self._validate_diffaug(need)
        self._validate_promptbert(need)
        self._validate_semi(need)
        self._validate_consert(need)

    def _check_dev_data(self, need) -> None:
        from ..eval.user_tasks import load_user_pairs

        if self.dev_data is None:
            need(self.metric != "dev_data_spearman", "metric dev_data_spearman reads a dev set of your own: set "
                 "dev_data=pairs.csv (sentence1, sentence2, score)")
            return
        load_user_pairs(self.dev_data)  # a bad file: one line naming it, its row and the fix
        if self.metric == "stsb_spearman":
            self.metric = "dev_data_spearman"

    def _validate_consert(self, need) -> None:
        from ..eval.encode import PROMPT_POOLERS
        from ..methods.consert import AUGMENTATIONS, RATED, SUPERVISION
        from ..methods.consert import CHOICES as CONSERT_CHOICES
        from ..methods.consert import VARIANTS as CONSERT_VARIANTS
        from .data import is_nli

        need(self.consert_supervision in SUPERVISION, f"unknown consert_supervision {self.consert_supervision!r}; "
             f"choose one of: {', '.join(SUPERVISION)}")
        for view in (1, 2):
            kind, rate = getattr(self, f"consert_aug{view}"), getattr(self, f"consert_rate{view}")
            need(kind in AUGMENTATIONS, f"unknown consert_aug{view} {kind!r}; choose one of: "
                 f"{', '.join(AUGMENTATIONS)}")
            need((kind in RATED) == (0 < rate < 1), f"consert_aug{view} {kind} takes " + (
                f"a rate in (0, 1): set consert_rate{view}" if kind in RATED else f"no rate: set consert_rate{view}=0")
                + f" (got {rate})")
            need(kind != "adversarial" or self.consert_supervision == "joint", "ConSERT's adversarial view follows "
                 "the NLI cross-entropy's gradient: set consert_supervision=joint")
        need(self.consert_cl_rate >= 0 and self.consert_noise_norm > 0,
             "consert_cl_rate must be >= 0 and consert_noise_norm > 0")
        need(self.consert_test_pooler in POOLERS and self.consert_test_pooler not in PROMPT_POOLERS,
             f"consert_test_pooler must be one of: {', '.join(p for p in POOLERS if p not in PROMPT_POOLERS)}")
        need(self.consert_variant in CONSERT_VARIANTS, f"unknown consert_variant {self.consert_variant!r}; choose "
             f"one of: {', '.join(CONSERT_VARIANTS)}")
        for name, choices in CONSERT_CHOICES.items():
            value = getattr(self, f"consert_{name}")
            need(value is None or value in choices, f"unknown consert_{name} {value!r}; choose one of: "
                 f"{', '.join(choices)}")
        if self.method == "consert":
            need(self.projector == "none", "ConSERT has no projector (official main.py:189-197): set projector=none")
            need((self.consert_supervision == "none") != is_nli(self.data), "ConSERT trains on a corpus with "
                 "consert_supervision=none and on NLI triplets with sbert or joint; got consert_supervision="
                 f"{self.consert_supervision} on {self.data}")

    def _validate_diffaug(self, need) -> None:
        need(self.max_seq_length >= 1, f"max_seq_length must be >= 1, got {self.max_seq_length}")
        need(self.prefix_len >= 1, f"prefix_len must be >= 1, got {self.prefix_len}")
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
        need(self.diffaug_variant in DIFFAUG_VARIANTS, f"unknown diffaug_variant {self.diffaug_variant!r}; choose "
             f"one of: {', '.join(DIFFAUG_VARIANTS)}")
        for name, choices in {**DIFFAUG_CHOICES, "augmentation_module": DIFFAUG_MODULES,
                              "prefix_mode": PREFIX_MODES}.items():
            value = getattr(self, name)
            need(value is None or value in choices, f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")
        need(self.module_rank >= 1, f"module_rank must be >= 1, got {self.module_rank}")
        need(self.prefix_mode == "different" or self.augmentation_module == "prefix", f"prefix_mode "
             f"{self.prefix_mode} is a prefix variant (Table 3): set augmentation_module=prefix")
        need(not self.pooler.startswith("prompt_mask") or self.template, f"pooler {self.pooler} needs a template "
             "(e.g. template='This sentence of \"*sent0*\" means*mask*.')")
        need(self.method != "diffaug" or (self.template and self.pooler == "prompt_mask"),
             "DiffAug reads the [MASK] of a prompt template: set pooler=prompt_mask and a template")
        need(self.method != "diffaug" or self.nli_data or not (self.stage1_steps or self.aux_weight),
             "DiffAug's stage 1 and auxiliary loss train on NLI triplets: set nli_data (NLI, or SNLI-triplets offline)")

    def _validate_semi(self, need) -> None:
        from ..methods.semi import STRATEGIES

        strategy = self.semi_strategy
        need(strategy in STRATEGIES, f"unknown semi_strategy {strategy!r}; choose one of: {', '.join(STRATEGIES)}")
        if strategy == "none":
            need(self.method == "diffaug" or not (self.stage1_steps or self.aux_weight), "stage1_steps and "
                 f"aux_weight train DiffAug's stages or a semi-supervised strategy; for {self.method} set "
                 "semi_strategy=joint|sup-unsup|sup-joint, or leave them 0")
            return
        need(self.method != "diffaug", "DiffAug has its own semi-supervised training (stage1_steps, aux_weight): "
             "leave semi_strategy=none")
        need(self.nli_data, f"semi_strategy {strategy} trains on NLI triplets: set nli_data (NLI, or SNLI-triplets "
             "offline)")
        need((strategy == "joint") == (self.stage1_steps == 0), f"semi_strategy {strategy} "
             + ("has no supervised stage: set stage1_steps=0" if strategy == "joint"
                else "starts with a supervised stage: set stage1_steps > 0"))
        need((strategy == "sup-unsup") == (self.aux_weight == 0), f"semi_strategy {strategy} "
             + ("has no joint loss: set aux_weight=0" if strategy == "sup-unsup"
                else "adds aux_weight · L_ce (Eq. 13): set aux_weight > 0"))

    def _validate_promptbert(self, need) -> None:
        need(self.promptbert_variant in PROMPTBERT_VARIANTS, f"unknown promptbert_variant "
             f"{self.promptbert_variant!r}; choose one of: {', '.join(PROMPTBERT_VARIANTS)}")
        for name, choices in PROMPTBERT_CHOICES.items():
            value = getattr(self, name)
            need(value is None or value in choices, f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")
        need(self.method == "promptbert" or not (self.template2 or self.mlm_transform),
             "template2 and mlm_transform are PromptBERT's: set method=promptbert, or leave them unset")
        if self.method != "promptbert":
            return
        need(self.template and self.pooler in PROMPT_POOLERS, "PromptBERT reads the [MASK] of a prompt template: "
             f"set a template and pooler={' or '.join(PROMPT_POOLERS)}")
        need(self.projector in ("mlp", "none"), f"PromptBERT's training head is projector=mlp (Linear + tanh) or "
             f"none, got {self.projector!r}")
        need(not (self.mlm_transform and self.projector == "mlp"), "mlm_transform replaces the MLP as the official "
             "code's head (models.py:57-61): set projector=none with it")

    def variant_name(self) -> str:
        """The method's paper-vs-code variant (its VARIANT_FIELDS field); a researcher's method has none: "paper",
        the kit's protocol."""
        return getattr(self, VARIANT_FIELDS[self.method]) if self.method in VARIANT_FIELDS else "paper"

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

    def promptbert_options(self) -> dict:
        """The paper-vs-code choices of PromptBERT: explicit settings over the variant's defaults."""
        out = dict(PROMPTBERT_VARIANTS[self.promptbert_variant])
        for name in out:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def diffaug_options(self) -> dict:
        """The paper-vs-code choices of DiffAug: explicit settings over the variant's defaults."""
        out = dict(DIFFAUG_VARIANTS[self.diffaug_variant])
        for name in out:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def _validate_scd(self, need) -> None:
        need(0 <= self.scd_dropout_low <= self.scd_dropout_high < 1, "SCD's dropout rates need 0 <= "
             f"scd_dropout_low <= scd_dropout_high < 1, got {self.scd_dropout_low} and {self.scd_dropout_high}")
        need(self.scd_terms in TERMS, f"unknown scd_terms {self.scd_terms!r}; choose one of: {', '.join(TERMS)}")
        need(self.scd_reduction in REDUCTIONS,
             f"unknown scd_reduction {self.scd_reduction!r}; choose one of: {', '.join(REDUCTIONS)}")
        need(min(self.scd_self_contrast_weight, self.scd_decorrelation_weight, self.scd_lambda) >= 0,
             "scd_self_contrast_weight, scd_decorrelation_weight and scd_lambda must be >= 0")
        need(self.scd_temp > 0, f"scd_temp must be positive, got {self.scd_temp}")
        parse_widths(self.scd_projector)
        need(self.method != "scd" or self.dropout is None, "SCD sets the dropout of each view itself: leave "
             "dropout unset and use scd_dropout_low / scd_dropout_high")

    def _validate_esimcse(self, need) -> None:
        from .data import parse_length_buckets

        need(0 <= self.dup_rate <= 1, f"dup_rate must be in [0, 1], got {self.dup_rate}")
        need(0 <= self.momentum < 1, f"momentum must be in [0, 1), got {self.momentum}")
        need(self.queue_size is None or self.queue_size >= 0,
             f"queue_size must be >= 0 (0: no momentum encoder) or unset (2.5 x batch_size), got {self.queue_size}")
        need(self.esimcse_variant in ESIMCSE_VARIANTS, f"unknown esimcse_variant {self.esimcse_variant!r}; choose one "
             f"of: {', '.join(ESIMCSE_VARIANTS)}")
        for name, choices in ESIMCSE_CHOICES.items():
            value = getattr(self, name)
            need(value is None or value in choices, f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")
        parse_length_buckets(self.length_buckets)

    def esimcse_options(self) -> dict:
        """The paper-vs-code choices of ESimCSE: explicit settings over the variant's defaults."""
        out = dict(ESIMCSE_VARIANTS[self.esimcse_variant])
        for name in out:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def esimcse_queue_size(self) -> int:
        return round(QUEUE_PER_BATCH * self.batch_size) if self.queue_size is None else self.queue_size

    def diffcse_options(self) -> dict:
        """The paper-vs-code choices (explicit settings over the variant's defaults) and the ablation settings."""
        out = dict(VARIANTS[self.variant])
        for name in out:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return {**out, **{name: getattr(self, name) for name in (*ABLATIONS, "contrastive")}}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


def parse_value(config_field: dataclasses.Field, text: str):
    """A `--set key=value` string as the field's type."""
    kind = str(config_field.type)
    if text.lower() in ("none", "null") and "None" in kind:
        return None
    if kind.startswith("bool"):
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"{config_field.name} takes true/false, got {text!r}")
        return text.lower() in ("true", "1", "yes")
    for name, cast in (("int", int), ("float", float)):
        if kind.startswith(name):
            try:
                return cast(text)
            except ValueError:
                raise ValueError(f"{config_field.name} takes {'an integer' if cast is int else 'a number'} "
                                 f"(e.g. {config_field.name}={config_field.default}), got {text!r}") from None
    return text


def apply_overrides(values: dict, overrides: list[str]) -> dict:
    """values with `key=value` settings applied; `<method>.<option>=value` sets an option of the run's method (a
    string, parsed by the method's Options when the configuration is built)."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    out = dict(values)
    options = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if sep and "." in key:
            options[key] = text.strip()
            continue
        key = key.replace("-", "_")
        if not sep or key not in fields:
            raise ValueError(f"bad setting {item!r}: write key=value with key one of: {', '.join(fields)} (or "
                             "<method>.<option>=value for an option of a method of your own)")
        out[key] = parse_value(fields[key], text.strip())
    if options:
        out["method_options"] = {**out.get("method_options", {}), **_method_options(options, out.get("method"))}
    return out


def _method_options(options: dict, method: str | None) -> dict:
    """{option: text} from {"<method>.<option>": text}, each naming the run's method."""
    out = {}
    for key, text in options.items():
        owner, _, option = key.partition(".")
        if owner != method:
            raise ValueError(f"{key} sets an option of method {owner}, but this run's method is {method}: add "
                             f"--set method={owner}")
        out[option] = text
    return out
