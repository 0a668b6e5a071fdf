"""Presets (the papers' hyper-parameters) and profiles (which models and data they run on).

A preset is what the paper tables and official scripts fix; a profile maps its backbone to real checkpoints:
`paper` (the papers' models and Wiki1M; GPU and the Hub), `cpu` (all-MiniLM-L6-v2 on the local Wiki1M sample, real
but small, not comparable to BERT-base), `smoke` (tiny random models, seconds)."""

from __future__ import annotations

from ..data.registry import STS_TEXTS
from ..eval.prompt import PROMPTBERT_BERT
from ..methods.promptbert import TEMPLATES as PROMPTBERT_TEMPLATES
from ..methods.scd import VARIANTS as SCD_VARIANTS
from .config import OFFICIAL_PRECISION, OFFICIAL_VARIANTS, TrainConfig, apply_overrides
from .method_settings import former_defaults, takes, variant_field
from .optim import OPTIMIZERS
from .precision import unit_words

_SIMCSE = {"method": "simcse", "projector": "mlp", "epochs": 1, "metric": "stsb_spearman"}
# DiffCSE App. A and run_diffcse.sh:17 (--metric_for_best_model stsb_spearman): every model, the transfer ones too, is
# the checkpoint with the best STS-B dev Spearman; Table 13's transfer dev accuracies chose the transfer models'
# hyper-parameters, not their checkpoints (--set metric=transfer_devacc selects on those instead)
_DIFFCSE = {"method": "diffcse", "projector": "batchnorm", "epochs": 2, "variant": "official-code",
            "metric": "stsb_spearman"}
# ESimCSE §4.2 and the official run.sh: batch 64, 1 epoch, momentum 0.995, STS-B dev every 125 steps, [CLS] + MLP in
# training, cls_before_pooler at test; lr, dup_rate, queue and dropout per backbone as run.sh, but BERT-large's dropout,
# a variant (the paper's 0.15 for large models; run.sh and the BERT-large training log use 0.1)
_ESIMCSE = {"method": "esimcse", "projector": "mlp", "pooler": "cls_before_pooler", "epochs": 1, "batch_size": 64,
            "eval_steps": 125, "metric": "stsb_spearman", "momentum": 0.995, "esimcse_variant": "paper"}
# SCD §3.1 and the README: batch 192, lr 3e-5, 1 epoch, [CLS] without the NSP pooler. The paper does not say how
# checkpoints were selected; every SCD preset does as the README (SICK-R dev every 250 steps).
_SCD = {"method": "scd", "lr": 3e-5, "batch_size": 192, "epochs": 1, "pooler": "cls_before_pooler",
        "metric": "sickr_spearman", "eval_steps": 250}

# DiffAug, Table 5 and the official scripts (run_semi_sup_bert.sh, run_sup_bert.sh): PromptBERT's template and its
# [MASK] state (training-only MLP, denoising in stage 2), two prefixes of l = 8, stage 1 at lr 1e-3 on NLI batches of
# 128, sentences truncated to 32 sub-words before the template, STS-B dev every 50 steps, temperature 0.05
_DIFFAUG = {"method": "diffaug", "projector": "mlp", "pooler": "prompt_mask", "template": PROMPTBERT_BERT,
            "prefix_len": 8, "stage1_lr": 1e-3, "nli_data": "NLI", "nli_batch_size": 128, "max_seq_length": 32,
            "temp": 0.05, "eval_steps": 50, "metric": "stsb_spearman", "diffaug_variant": "paper"}
_DIFFAUG_SEMI = {**_DIFFAUG, "data": "Wiki1M", "batch_size": 256, "lr": 1e-5, "epochs": 1}
_DIFFAUG_SUP = {**_DIFFAUG, "data": "NLI", "batch_size": 128, "lr": 5e-5, "epochs": 3}
#: the official scripts' choices where they differ from the paper: the code's variant (denoising row, stage-1
#: clipping; and, as under every official variant, the scripts' fp16), the semi script's 1500 stage-1 steps (the
#: w/o-aux run has no script of its own: the script's value with --use_aux_loss dropped), the sup script's gradient
#: accumulation 4
_DIFFAUG_OFFICIAL = {"diffaug_variant": "official-code"}
DIFFAUG_PRESETS = {
    "semi": {**_DIFFAUG_SEMI, "stage1_steps": 2000},
    "semi-aux": {**_DIFFAUG_SEMI, "stage1_steps": 1500, "aux_weight": 1e-3},
    "sup": {**_DIFFAUG_SUP, "stage1_steps": 1250},
    "semi-official": {**_DIFFAUG_SEMI, **_DIFFAUG_OFFICIAL, "stage1_steps": 1500},
    "semi-aux-official": {**_DIFFAUG_SEMI, **_DIFFAUG_OFFICIAL, "stage1_steps": 1500, "aux_weight": 1e-3},
    "sup-official": {**_DIFFAUG_SUP, **_DIFFAUG_OFFICIAL, "stage1_steps": 1250, "gradient_accumulation": 4},
}

# PromptBERT, the official run.sh (kongds/Prompt-BERT@690ba6e): sentences cut to 32 sub-words before the template,
# τ 0.05, STS-B dev every 125 steps (run.sh:5-6, 158-164), template denoising in training
# (--mask_embedding_sentence_delta).
# Unsupervised (unsup-bert :91-108, unsup-roberta :73-90): two templates, the MLP in training only (--mlp_only_train),
# Wiki1M, batch 256 on one GPU, lr 1e-5, 1 epoch, tested on the first template's raw [MASK] state (:106-107, :88-89).
# Supervised (sup-bert :125-141, sup-roberta :109-124): NLI triplets in the first template, 4 GPUs x 128, lr 5e-5,
# 3 epochs, tested denoised (:120-123, :137-140); sup-bert's head is BERT's MLM transform before the denoising
# (--mask_embedding_sentence_org_mlp), sup-roberta's the MLP after it
_PROMPTBERT = {"method": "promptbert", "max_seq_length": 32, "temp": 0.05, "eval_steps": 125,
               "metric": "stsb_spearman", "denoise": True, "promptbert_variant": "paper"}
_PROMPTBERT_UNSUP = {**_PROMPTBERT, "data": "Wiki1M", "batch_size": 256, "lr": 1e-5, "epochs": 1, "projector": "mlp",
                     "pooler": "prompt_mask"}
_PROMPTBERT_SUP = {**_PROMPTBERT, "data": "NLI", "batch_size": 512, "lr": 5e-5, "epochs": 3,
                   "pooler": "prompt_mask_denoised"}

# ConSERT (yym6472/ConSERT@03c9e8f, scripts/): batch 96, STS-B dev every 200 steps, τ 0.1, --cl_rate 0.15. Training
# reads the mean of the last layer (main.py:189-192) without a projector; the test reads the mean of the last two
# layers (README.md:72). The schedule is linear with 10% warm-up (main.py:283-284). max_seq_length is 67 because the
# scripts' --max_seq_length 64 counts sub-words: sentence_transformers cuts at min(longest, 64) + 3 tokens, [CLS] and
# [SEP] included (sentence_transformers/models/Transformer.py:88), which keeps 65 sub-words.
_CONSERT = {"method": "consert", "projector": "none", "pooler": "avg", "consert_test_pooler": "avg_top2",
            "batch_size": 96, "max_seq_length": 67, "eval_steps": 200, "temp": 0.1, "consert_cl_rate": 0.15,
            "metric": "stsb_spearman", "consert_variant": "official-code"}
# unsup-consert-base.sh:1 (roberta/unsup-consert-base.sh:1 is the same): --da_final_1 feature_cutoff
# --cutoff_rate_final_1 0.2 --da_final_2 shuffle --no_dropout --cl_loss_only, lr 5e-7. The script trains 10 epochs on
# the STS and SICK texts (89,192 sentences, 9,300 steps). DiffAug (App. C) re-trained it on Wiki1M, and so does this
# preset: one epoch of Wiki1M at batch 96 is 10,416 steps, close to the script's count, with 1,042 of warm-up.
_CONSERT_UNSUP = {**_CONSERT, "data": "Wiki1M", "lr": 5e-7, "epochs": 1, "warmup_steps": 1042, "dropout": 0.0,
                  "consert_supervision": "none", "consert_aug1": "feature_cutoff", "consert_rate1": 0.2,
                  "consert_aug2": "shuffle", "consert_rate2": 0.0}
# ConSERT's own unsupervised recipe, unsup-consert-base.sh:1 (and roberta/): --train_data stssick, 10 epochs over the
# 89,192 unlabelled sentences of STS12-16, STS-B and SICK-R (main.py:219-221, data_utils.py:203-219: STS-texts here),
# 929 full batches of 96 an epoch (the official DataLoader adds a last one of 8), warm-up 10% of the steps (main.py:284:
# ceil(89,192 · 10 / 96 · 0.1) = 930), STS-B dev every 200 steps of each epoch and at its end, stopped after 10
# evaluations without a new best (--patience 10; sentence_transformers/SentenceTransformer.py:612-640)
_CONSERT_STS = {**_CONSERT_UNSUP, "data": STS_TEXTS, "epochs": 10, "warmup_steps": 930, "eval_epoch_end": True,
                "early_stopping_patience": 10}
# unsup-consert-large.sh:1 (and roberta/): BERT-large, 25 epochs (warm-up ceil(89,192 · 25 / 96 · 0.1) = 2,323), dev
# every 100 steps, dropout kept (no --no_dropout), and --data_augmentation_strategy shuffle without --da_final_*: the
# un-augmented pass against its token shuffle (AdvCLSoftmaxLoss.py:558-579, 772-774)
_CONSERT_STS_LARGE = {**_CONSERT_STS, "epochs": 25, "warmup_steps": 2323, "eval_steps": 100, "dropout": None,
                      "consert_aug1": "none", "consert_rate1": 0.0, "consert_aug2": "shuffle", "consert_rate2": 0.0}
# sup-consert-joint-base.sh:1: NLI, lr 2e-5 (the default at main.py:65), 1 epoch, dropout kept. The loss is the
# cross-entropy + 0.15 · the contrastive loss between the un-augmented pass and a token cutoff of 0.1
# (--data_augmentation_strategy cutoff --cutoff_direction row --cutoff_rate 0.1; AdvCLSoftmaxLoss.py:582-601,
# 775-777). 48 triplets give the script's 96 pairs a step: 5,741 steps over NLI's 275,601 triplets, 575 of warm-up.
_CONSERT_SUP = {**_CONSERT, "data": "NLI", "lr": 2e-5, "epochs": 1, "batch_size": 48, "warmup_steps": 575,
                "consert_supervision": "joint", "consert_aug1": "none", "consert_rate1": 0.0,
                "consert_aug2": "token_cutoff", "consert_rate2": 0.1}


def _scd_recipes(backbone: str, variant: str) -> dict:
    """SCD's settings: each recipe value per scd_variant (a variant without a recipe for the backbone is refused
    when chosen), the preset's variant chosen."""
    recipes = {name: values[backbone] for name, values in SCD_VARIANTS.items() if backbone in values}
    return {**_SCD, "scd_variant": variant,
            **{key: {name: recipe[key] for name, recipe in recipes.items()} for key in recipes["paper"]}}


#: name -> (backbone, settings). Sources: the SimCSE README (princeton-nlp/SimCSE), DiffCSE App. A Tables 12-13 and
#: run_diffcse.sh, SCD §3.1 with the official README and issue #2, ESimCSE §4.2 and ESimCSE/run.sh.
PRESETS = {
    "simcse-bert": ("bert", {**_SIMCSE, "lr": 3e-5, "batch_size": 64}),
    "simcse-roberta": ("roberta", {**_SIMCSE, "lr": 1e-5, "batch_size": 512}),
    # supervised SimCSE (DiffAug's baseline): NLI triplets with hard negatives, [CLS] + MLP kept at test (the
    # official run_sup_example.sh: 4 GPUs x 128, 3 epochs, lr 5e-5, no --mlp_only_train; README: bs 512)
    **{f"simcse-sup-{backbone}": (backbone, {**_SIMCSE, "data": "NLI", "lr": 5e-5, "batch_size": 512, "epochs": 3,
                                             "pooler": "cls_before_pooler", "keep_projector": True})
       for backbone in ("bert", "roberta")},
    "diffcse-bert-sts": ("bert", {**_DIFFCSE, "lr": 7e-6, "batch_size": 64, "mask_ratio": 0.30, "lam": 0.005}),
    "diffcse-roberta-sts": ("roberta", {**_DIFFCSE, "lr": 1e-5, "batch_size": 64, "mask_ratio": 0.20, "lam": 0.005}),
    "diffcse-bert-transfer": ("bert", {**_DIFFCSE, "lr": 2e-6, "batch_size": 64, "mask_ratio": 0.15, "lam": 0.05}),
    "diffcse-roberta-transfer": ("roberta", {**_DIFFCSE, "lr": 3e-6, "batch_size": 128, "mask_ratio": 0.15,
                                             "lam": 0.05}),
    # SCD: one preset per recipe of cse_kit.methods.scd.VARIANTS (Table 3's rows are scd-bert with scd_terms set)
    "scd-bert": ("bert", _scd_recipes("bert", "paper")),
    "scd-roberta": ("roberta", _scd_recipes("roberta", "paper")),
    "scd-bert-official": ("bert", _scd_recipes("bert", "official-code")),
    "scd-bert-released": ("bert", _scd_recipes("bert", "released-checkpoints")),
    "esimcse-bert": ("bert", {**_ESIMCSE, "lr": 3e-5, "dup_rate": 0.32, "queue_size": 160, "dropout": 0.1}),
    # BERT-large's dropout: the paper's 0.15 (§4.2), or the official run.sh's 0.1 (the run behind the published 79.31)
    "esimcse-bert-large": ("bert-large", {**_ESIMCSE, "lr": 1e-5, "dup_rate": 0.32, "queue_size": 160,
                                          "dropout": {"paper": 0.15, "official-code": 0.1}}),
    "esimcse-roberta": ("roberta", {**_ESIMCSE, "lr": 1e-5, "dup_rate": 0.30, "queue_size": 160, "dropout": 0.1}),
    "esimcse-roberta-large": ("roberta-large", {**_ESIMCSE, "lr": 1e-5, "dup_rate": 0.28, "queue_size": 128,
                                                "dropout": 0.15}),
    # DiffAug: BERT's from the paper (the -official ones from its scripts); the paper gives no RoBERTa recipe, so
    # the RoBERTa presets are ours: BERT's settings and template (the official utils.py strips RoBERTa's leading
    # space, as cse_kit.eval.prompt.Template does)
    **{f"diffaug-{name.replace('-official', '')}-bert{'-official' if 'official' in name else ''}": ("bert", settings)
       for name, settings in DIFFAUG_PRESETS.items()},
    **{f"diffaug-{name}-roberta": ("roberta", DIFFAUG_PRESETS[name]) for name in ("semi", "semi-aux", "sup")},
    **{f"prompt{backbone}-{backbone}": (backbone, {**_PROMPTBERT_UNSUP, "template": PROMPTBERT_TEMPLATES[backbone][0],
                                                   "template2": PROMPTBERT_TEMPLATES[backbone][1]})
       for backbone in ("bert", "roberta")},
    "promptbert-sup-bert": ("bert", {**_PROMPTBERT_SUP, "template": PROMPTBERT_TEMPLATES["bert"][0],
                                     "projector": "none", "mlm_transform": True}),
    "promptroberta-sup-roberta": ("roberta", {**_PROMPTBERT_SUP, "template": PROMPTBERT_TEMPLATES["roberta"][0],
                                              "projector": "mlp"}),
    # ConSERT: the unsupervised best (feature cutoff + shuffle, no dropout) on Wiki1M, as DiffAug re-trained it, and
    # the supervised joint objective on NLI (--set consert_supervision=sbert gives sup-sbert-base.sh's objective)
    "consert-bert": ("bert", _CONSERT_UNSUP),
    "consert-roberta": ("roberta", _CONSERT_UNSUP),
    "consert-sup-bert": ("bert", _CONSERT_SUP),
    # ConSERT's own unsupervised recipes, on the STS and SICK texts
    "consert-bert-sts": ("bert", _CONSERT_STS),
    "consert-roberta-sts": ("roberta", _CONSERT_STS),
    "consert-bert-large-sts": ("bert-large", _CONSERT_STS_LARGE),
    "consert-roberta-large-sts": ("roberta-large", _CONSERT_STS_LARGE),
}

_SIMCSE_REPO = "princeton-nlp/SimCSE@49fa580"
_DIFFCSE_RUN = "voidism/DiffCSE@f724b2c run_diffcse.sh"
_ESIMCSE_RUN = "caskcsg/sentemb@5eeec55 ESimCSE/run.sh"
_DIFFAUG_REPO = "TianduoWang/DiffAug@e6292b6"
_PROMPTBERT_RUN = "kongds/Prompt-BERT@690ba6e run.sh"
_CONSERT_REPO = "yym6472/ConSERT@03c9e8f"
_DISTRIBUTED = "python -m torch.distributed.launch --nproc_per_node"
#: preset -> (the official run behind its published number, that run's process count). Under an official variant
#: the count becomes the run's official_processes (cse_kit.methods.contrastive.official_share). The scripts: SimCSE
#: run_unsup_example.sh (one GPU, maintainer in issue #135), run_sup_example.sh:18 (4 processes); DiffCSE, SCD and
#: ESimCSE train on one GPU (no launcher in their scripts; ESimCSE's logs: 1 GPU); DiffAug run_semi_sup_bert.sh:6-9
#: (2 processes) and run_sup_bert.sh:6 (1); Prompt-BERT run.sh:74, :92 (python train.py) and :110, :126 (4
#: processes); ConSERT's main.py trains in one process (SentenceTransformer.fit, no DDP).
OFFICIAL_RUNS = {
    "simcse-bert": (f"{_SIMCSE_REPO} run_unsup_example.sh", 1),
    "simcse-roberta": (f"{_SIMCSE_REPO} run_unsup_example.sh with the README's RoBERTa-base batch and lr", 1),
    **{f"simcse-sup-{b}": (f"{_SIMCSE_REPO} run_sup_example.sh ({_DISTRIBUTED} 4, 128 each)", 4)
       for b in ("bert", "roberta")},
    "diffcse-bert-sts": (_DIFFCSE_RUN, 1),
    **{name: (f"{_DIFFCSE_RUN} with App. A's {name[8:]} settings", 1)
       for name in ("diffcse-roberta-sts", "diffcse-bert-transfer", "diffcse-roberta-transfer")},
    **{name: ("SAP-samples/acl2022-self-contrastive-decorrelation@fb1438a README.md's BERT command"
              + (" with issue #2's released-checkpoint values" if name.endswith("released") else ""), 1)
       for name in ("scd-bert", "scd-bert-official", "scd-bert-released")},
    **{f"esimcse-{m}": (f"{_ESIMCSE_RUN} {model}", 1) for m, model in (
        ("bert", "bert-base-uncased"), ("bert-large", "bert-large-uncased"), ("roberta", "roberta-base"),
        ("roberta-large", "roberta-large"))},
    "diffaug-semi-bert-official": (f"{_DIFFAUG_REPO} run_semi_sup_bert.sh without --use_aux_loss "
                                   f"({_DISTRIBUTED} 2, 128 each)", 2),
    "diffaug-semi-aux-bert-official": (f"{_DIFFAUG_REPO} run_semi_sup_bert.sh ({_DISTRIBUTED} 2, 128 each)", 2),
    "diffaug-sup-bert-official": (f"{_DIFFAUG_REPO} run_sup_bert.sh (one GPU, 128 x accumulation 4)", 1),
    **{f"diffaug-{name}-bert": (f"{_DIFFAUG_REPO} {script} with the paper's settings", n)
       for name, script, n in (("semi", "run_semi_sup_bert.sh", 2), ("semi-aux", "run_semi_sup_bert.sh", 2),
                               ("sup", "run_sup_bert.sh", 1))},
    "promptbert-bert": (f"{_PROMPTBERT_RUN} unsup-bert", 1),
    "promptroberta-roberta": (f"{_PROMPTBERT_RUN} unsup-roberta", 1),
    "promptbert-sup-bert": (f"{_PROMPTBERT_RUN} sup-bert ({_DISTRIBUTED} 4, 128 each)", 4),
    "promptroberta-sup-roberta": (f"{_PROMPTBERT_RUN} sup-roberta ({_DISTRIBUTED} 4, 128 each)", 4),
    "consert-bert": (f"{_CONSERT_REPO} scripts/unsup-consert-base.sh's objective, on Wiki1M (DiffAug App. C)", 1),
    "consert-roberta": (f"{_CONSERT_REPO} scripts/roberta/unsup-consert-base.sh's objective, on Wiki1M "
                        "(DiffAug App. C)", 1),
    "consert-sup-bert": (f"{_CONSERT_REPO} scripts/sup-consert-joint-base.sh", 1),
    "consert-bert-sts": (f"{_CONSERT_REPO} scripts/unsup-consert-base.sh", 1),
    "consert-roberta-sts": (f"{_CONSERT_REPO} scripts/roberta/unsup-consert-base.sh", 1),
    "consert-bert-large-sts": (f"{_CONSERT_REPO} scripts/unsup-consert-large.sh", 1),
    "consert-roberta-large-sts": (f"{_CONSERT_REPO} scripts/roberta/unsup-consert-large.sh", 1),
}

#: DiffAug Table 6's semi-supervised strategies (cse_kit.methods.semi), set on any SimCSE, PromptBERT or ConSERT
#: preset with `semi_strategy`: what each fills in unless given. The paper gives none of these; the supervised stage
#: is ConSERT's sup-sbert run (scripts/sup-sbert-base.sh: 96 sentence pairs a batch, i.e. 48 triplets of 2 pairs;
#: main.py:65 lr 2e-5; 1 epoch: 5741 steps over NLI's 275,601 triplets), α is one point of the grid the paper tunes
#: over (the notebooks sweep it and select on dev)
SEMI_STRATEGY_SETTINGS = {
    "joint": {"aux_weight": 0.1},
    "sup-unsup": {"stage1_steps": 5741},
    "sup-joint": {"stage1_steps": 5741, "aux_weight": 0.1},
}
_SEMI_COMMON = {"nli_data": "NLI", "nli_batch_size": 48, "stage1_lr": 2e-5}

#: DiffCSE Table 6: generator name -> checkpoint on the paper profile (Turc et al. compact BERTs on the Hub).
GENERATORS = {
    "bert-large": "bert-large-uncased", "bert-base": "bert-base-uncased", "distilbert": "distilbert-base-uncased",
    "bert-medium": "google/bert_uncased_L-8_H-512_A-8", "bert-small": "google/bert_uncased_L-4_H-512_A-8",
    "bert-mini": "google/bert_uncased_L-4_H-256_A-4", "bert-tiny": "google/bert_uncased_L-2_H-128_A-2",
    "distilroberta": "distilroberta-base",
}


_EVALUATION_DATA = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "MR", "CR", "SUBJ",
                    "MPQA", "SST2", "TREC", "MRPC")
#: profile -> the registered datasets its reports train and evaluate on (`cse-kit data status --profile`): the
#: evaluation sets, the corpus, the NLI triplets (SNLI's dev/test off `paper`) and the ordered corpus
PROFILE_DATA = {"paper": (*_EVALUATION_DATA, "Wiki1M", "NLI", "WikiText-103"),
                "cpu": (*_EVALUATION_DATA, "Wiki1M-sample", "SNLI", "Licenses-ordered"),
                "mini": (*_EVALUATION_DATA, "Wiki1M-sample", "SNLI", "Licenses-ordered"),
                "mini-rehearsal": (*_EVALUATION_DATA, "Wiki1M-sample", "SNLI", "Licenses-ordered"),
                "smoke": (*_EVALUATION_DATA, "Wiki1M-sample", "SNLI", "Licenses-ordered")}


class ProfileUnavailable(ValueError):
    """What a profile cannot run here (e.g. RoBERTa offline). `cause` says why in the same words for every row it
    stops, so the report counts rows per cause; `missing` names what this one lacks (a preset, a checkpoint)."""

    def __init__(self, cause: str, missing: str = ""):
        super().__init__(f"{missing}: {cause}" if missing else cause)
        self.cause, self.missing = cause, missing


PROFILES = {
    "paper": {"backbones": {"bert": ("bert-base-uncased", "distilbert-base-uncased"),
                            "roberta": ("roberta-base", "distilroberta-base"),
                            "bert-large": ("bert-large-uncased", "distilbert-base-uncased"),
                            "roberta-large": ("roberta-large", "distilroberta-base")},
              "settings": {"data": "Wiki1M"},
              # DiffCSE's next-sentence variants need sentence order, which Wiki1M (a random sample) lacks:
              # WikiText-103 is Wikipedia too (Wiki1M's domain), in article order
              "ordered_data": "WikiText-103",
              "nli_data": "NLI",
              "report": {"seeds": [42, 43, 44], "transfer_mode": "test"}},
    "cpu": {"backbones": {"bert": ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2-mlm")},
            "unavailable": {"roberta": "no RoBERTa checkpoint is available offline; run it with --profile paper",
                            "bert-large": "no BERT-large checkpoint is available offline; run it with --profile paper",
                            "roberta-large": "no RoBERTa-large checkpoint is available offline; run it with "
                                             "--profile paper"},
            # sized so the whole cpu report (14 runs of 8 steps an epoch, and their evaluations, of which encoding the
            # 108k transfer sentences is the largest) fits in under two hours on a 2-core CPU; mixed_precision auto
            # (also for the -official presets' fp16, which needs CUDA): bf16 on a CPU with a bf16 unit (AMX,
            # AVX512-BF16), fp32 elsewhere (docs/training.md, "Precision")
            "settings": {"data": "Wiki1M-sample", "max_examples": 512, "eval_steps": 8, "mixed_precision": "auto"},
            "ordered_data": "Licenses-ordered",
            # SimCSE's NLI triplets are a download: SNLI dev + test triplets stand in (about 5.9k)
            "nli_data": "SNLI-triplets",
            # DiffAug: batches of 32 (256 would leave the 512-sentence sample 2 steps): 16 stage-2 steps and 8 of
            # stage 1, about the paper's ratio (2000 / 3906; both schedules are sized to stage 2, so a stage 1 longer
            # than stage 2 would run at learning rate 0)
            "method_settings": {"diffaug": {"batch_size": 32, "nli_batch_size": 32, "stage1_steps": 8},
                                # PromptBERT: batches of 64, 8 steps on the 512 sentences, as SimCSE's cpu runs
                                "promptbert": {"batch_size": 64},
                                # ConSERT: batches of 32 (16 steps on the 512 examples), 10% of them warm-up
                                "consert": {"batch_size": 32, "warmup_steps": 2}},
            "semi_settings": {"nli_batch_size": 32, "stage1_steps": 8},
            "report": {"seeds": [42], "transfer_mode": "test"}},
    # The papers' premise in miniature: Google's masked-LM-pretrained BERT miniatures (cse_kit.models.miniatures),
    # BERT-Mini (4 x 256) for BERT-base and, for DiffCSE's generator, the miniature of half its depth and the same width
    # (as DistilBERT is to BERT-base); BERT-Medium (8 x 512) for BERT-large with BERT-Small (4 x 512) as its generator.
    # The papers' recipes (batch, lr, temperature, pooler, epochs) on Wiki1M's first 11,913 sentences, which are the
    # local Wiki1M sample (so only the models are downloaded): 187 steps of 64 an epoch; dev every 25 steps. DiffAug and
    # PromptBERT train with batches of 64 too (256 would leave 47 steps), DiffAug's stage 1 96 steps (about the paper's
    # 2000 / 3906). Sized so the whole report runs in a working day on an 8-core CPU (docs/notebooks.md, "The mini
    # profile", measured by bench/mini_budget.py)
    "mini": {"backbones": {"bert": ("google/bert_uncased_L-4_H-256_A-4", "google/bert_uncased_L-2_H-256_A-4"),
                           "bert-large": ("google/bert_uncased_L-8_H-512_A-8", "google/bert_uncased_L-4_H-512_A-8")},
             "unavailable": {name: f"no masked-LM-pretrained {label} miniature exists (Turc et al. released BERT "
                                   "miniatures only); run it with --profile paper"
                             for name, label in (("roberta", "RoBERTa"), ("roberta-large", "RoBERTa"))},
             "settings": {"data": "Wiki1M-sample", "eval_steps": 25, "mixed_precision": "auto"},
             "ordered_data": "Licenses-ordered",
             "nli_data": "SNLI-triplets",
             "method_settings": {"diffaug": {"batch_size": 64, "nli_batch_size": 64, "stage1_steps": 96},
                                 "promptbert": {"batch_size": 64},
                                 # ConSERT: the preset's warm-up (1,042 steps of Wiki1M's 10,416) is 10% of its
                                 # run: here of the 125 steps of 96
                                 "consert": {"warmup_steps": 13}},
             "semi_settings": {"nli_batch_size": 64, "stage1_steps": 96},
             # one seed a table, as cpu (three would triple the working day: docs/notebooks.md, "The mini
             # profile"); the head-to-head keeps its three (comparison.SEEDS)
             "report": {"seeds": [42], "transfer_mode": "test"}},
    # the mini profile's models at the smoke profile's sizes (filled in below, from both; here for the profiles'
    # order): every notebook on the miniatures, to check the downloads and the code paths before the working day
    # `mini` takes (its numbers mean nothing)
    "mini-rehearsal": {"sizing": "smoke"},
    # the large backbones' stand-ins are the same tiny models: smoke runs check the code path, not the size
    "smoke": {"backbones": {"bert": ("smoke-bert", "smoke-bert-mlm"), "roberta": ("smoke-roberta", "smoke-roberta-mlm"),
                            "bert-large": ("smoke-bert", "smoke-bert-mlm"),
                            "roberta-large": ("smoke-roberta", "smoke-roberta-mlm")},
              # STS-B dev selects here for every preset: transfer dev accuracy encodes 100k sentences, not seconds
              "settings": {"data": "Wiki1M-sample", "max_examples": 128, "batch_size": 16, "epochs": 1,
                           "eval_steps": 8, "log_steps": 2, "lr": 1e-4, "mixed_precision": "no",
                           "metric": "stsb_spearman",
                           # SCD's projector 512 wide instead of 4096: 4096² weights would make the tiny runs slow
                           "scd_projector": "512-512-512"},
              "ordered_data": "Licenses-ordered",
              "nli_data": "SNLI-triplets",
              "method_settings": {"diffaug": {"nli_batch_size": 16, "stage1_steps": 4, "eval_steps": 4},
                                  "consert": {"warmup_steps": 1}},  # ConSERT: 10% of the 8 steps warm-up
              "semi_settings": {"nli_batch_size": 16, "stage1_steps": 4},
              # one seed, SentEval's fast configuration on 1,000 records per transfer split (each class its share)
              # and STS test on 100 pairs per subset keep the smoke report within 10 minutes on 2 cores: every code
              # path runs, on a twentieth of the transfer sentences and a fifth of the STS ones (the head-to-head,
              # comparison.SEEDS, keeps two seeds: its paired test needs them)
              "report": {"seeds": [1], "transfer_mode": "fasttest", "transfer_sample": 1000, "sts_sample": 100}},
}


PROFILES["mini-rehearsal"] = {**PROFILES["smoke"], **{k: PROFILES["mini"][k] for k in ("backbones", "unavailable")},
                              "sizing": "smoke"}


def per_profile(values: dict) -> dict:
    """A per-profile setting (keyed by profile) with an entry for each profile that runs at another's sizes."""
    return {**values, **{p: values[sizing(p)] for p in PROFILES if p not in values and sizing(p) in values}}


def sizing(profile: str) -> str:
    """The profile whose budget (steps, grids, evaluation samples) a profile runs at: its own, or for
    mini-rehearsal the smoke profile's."""
    return PROFILES[profile].get("sizing", profile)


def hub_models(profile: str) -> list[str]:
    """The Hub models a profile's report downloads where the papers' do not: the mini profile's miniatures (its
    backbones, generators and Table 6's miniature generators). The paper profile's are the papers' own."""
    from ..models.miniatures import is_miniature

    named = [m for pair in PROFILES[profile]["backbones"].values() for m in pair]
    if not any(is_miniature(m) for m in named):
        return []
    return list(dict.fromkeys([*named, *(ref for ref in GENERATORS.values() if is_miniature(ref))]))


def generator_unavailable(profile: str, fix: str) -> str:
    """Why a profile cannot run a Table 6 generator (the same words for each one of a kind)."""
    if hub_models(profile):
        return (f"a full-size generator beside the {profile} profile's miniature discriminator (Table 6's question, the "
                f"generator's size against the discriminator's, is asked with the miniatures); run it with {fix}")
    return f"no offline checkpoint of the generator on the {profile} profile; run it with {fix}"


def resolve_generator(name: str, profile: str) -> str:
    """A Table 6 generator name on the paper profile, and one of the miniatures where the profile downloads them
    (mini); any other reference is used as given."""
    from ..models.miniatures import is_miniature

    if profile == "paper" or (name in GENERATORS and is_miniature(GENERATORS[name]) and hub_models(profile)):
        return GENERATORS.get(name, name)
    if name in GENERATORS:
        raise ProfileUnavailable(generator_unavailable(profile, "--profile paper"), f"generator {name!r}")
    return name


def variant_of(values: dict) -> str:
    """The variant of the method of a preset's settings (its variant_field, else that field's default)."""
    field = variant_field(values["method"])  # none for a researcher's method: the kit's protocol
    if field is None:
        return "paper"
    own = TrainConfig.__dataclass_fields__
    return values.get(field, own[field].default if field in own else former_defaults()[field])


def _resolve_variant_settings(values: dict, preset: str) -> dict:
    """A preset setting given per variant of its method ({"paper": 0.15, "official-code": 0.1}) takes the run's
    variant's value (an explicit --set of the setting has already replaced it); a variant the preset has no value
    for is refused. Then, under an official variant, the process count of the official run behind the preset
    (OFFICIAL_RUNS) and the official scripts' precision (OFFICIAL_PRECISION), unless set (the cpu profile sets auto,
    the smoke profile fp32)."""
    variant = variant_of(values)
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and key not in ("extra", "method_options"):
            if variant not in value:
                raise ValueError(f"{preset} has no {variant} recipe ({key} is given for {', '.join(value)} only): "
                                 f"choose {variant_field(values['method'])}={' or '.join(value)}")
            value = value[variant]
        out[key] = value
    if variant in OFFICIAL_VARIANTS:
        if preset in OFFICIAL_RUNS and "official_processes" not in values:
            out["official_processes"] = OFFICIAL_RUNS[preset][1]
        if "mixed_precision" not in values:
            out["mixed_precision"] = OFFICIAL_PRECISION[values["method"]][0]
    return out


def official_run(cfg: TrainConfig) -> str | None:
    """The line a run under an official variant starts with: the official run it reproduces (script, process count,
    optimizer); None under a paper variant with the kit's optimizer and scale."""
    optimizer = cfg.optimizer_name()
    if not cfg.official_code() and optimizer == "torch-adamw" and cfg.official_processes == 1:
        return None
    script = OFFICIAL_RUNS[cfg.preset][0] if cfg.preset in OFFICIAL_RUNS else None
    n = cfg.official_processes
    scale = "the global batch's gradient" if n == 1 else (f"1/{n} of the gathered contrastive loss's gradient, as "
                                                          f"DDP averages it over the official {n}")
    what = ("steps as set" if not cfg.official_code() else f"reproduces {script}" if script else
            "the official code's training (no official script behind this configuration)")
    return (f"{variant_field(cfg.method)}={cfg.variant_name()}: {what}; {n} official process"
            f"{'es' if n > 1 else ''} ({scale}; here on any number); optimizer {optimizer}: {OPTIMIZERS[optimizer]}"
            + ("" if cfg.weight_decay is None else f"; weight decay set to {cfg.weight_decay}"))


#: Accelerate's mixed_precision -> what a run trains in
PRECISION_WORDS = {"no": "fp32", "bf16": "bf16 autocast",
                   "fp16": "fp16 autocast with dynamic loss scaling (a step whose gradients overflow is skipped, "
                           "gradients are clipped after unscaling)"}


def precision_words(cfg: TrainConfig, used: str) -> str:
    """The header's words for the precision a run trains in (`used`, Accelerate's mixed_precision), why it differs
    from the one asked for, and, under an official variant, the official scripts' precision."""
    words = PRECISION_WORDS[used] + unit_words(used)
    if cfg.mixed_precision == "fp16" and used != "fp16":
        words += (" (fp16 asked; Accelerate runs fp16 on accelerators only: fp32 here, which holds every fp16 value "
                  "and needs no loss scaling)")
    if cfg.official_code():
        precision, where = OFFICIAL_PRECISION[cfg.method]
        words += f", as the official scripts ({where})" if used == precision else \
            f"; the official scripts train in {precision} ({where})"
    return words


def _semi_strategy_defaults(values: dict, profile: dict, given: set[str]) -> dict:
    """A semi-supervised strategy's settings (SEMI_STRATEGY_SETTINGS, sized by the profile) where neither the
    preset nor the caller set them."""
    strategy = values.get("semi_strategy", "none")
    if strategy not in SEMI_STRATEGY_SETTINGS:
        return values
    defaults = {**_SEMI_COMMON, **SEMI_STRATEGY_SETTINGS[strategy], **profile.get("semi_settings", {})}
    if "stage1_steps" not in SEMI_STRATEGY_SETTINGS[strategy]:  # joint: no supervised stage on any profile
        defaults.pop("stage1_steps", None)
    return {**values, **{k: v for k, v in defaults.items() if k not in given}}


def build_config(preset: str, profile: str = "paper", overrides: list[str] | dict | None = None) -> TrainConfig:
    """The preset's settings on the profile's models and data, then the overrides (`key=value` strings or a dict)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
    backbone, settings = PRESETS[preset]
    prof = PROFILES[profile]
    if backbone in prof.get("unavailable", {}):
        raise ProfileUnavailable(prof["unavailable"][backbone], preset)
    model, generator = prof["backbones"][backbone]
    values = {**settings, "model": model, "generator": generator, **prof["settings"],
              **prof.get("method_settings", {}).get(settings["method"], {}), "preset": preset,
              "profile": profile, "output_dir": f"runs/{preset}-{profile}"}
    if settings.get("data") == "NLI":  # the profile's NLI triplets (a stand-in offline), not its corpus
        values["data"] = prof["nli_data"]
    if settings.get("data") == STS_TEXTS:  # evaluation data, on every profile
        values["data"] = STS_TEXTS
    if isinstance(overrides, dict):
        values.update(overrides)
    elif overrides:
        values = apply_overrides(values, overrides)
    given = set(overrides or ()) if isinstance(overrides, dict) else \
        {o.partition("=")[0].strip().replace("-", "_") for o in overrides or ()}
    # what the preset and the profile set that the run's method does not take (the profile's generator in a SimCSE
    # run, DiffCSE's λ where a row trains its preset's SimCSE) is left out; what the caller gives is checked
    fields = TrainConfig.__dataclass_fields__
    values = {k: v for k, v in values.items() if k in given or takes(values["method"], k, fields)}
    values = _semi_strategy_defaults(values, prof, given)
    if values.get("nli_data") == "NLI":  # "NLI" is the profile's NLI triplets (a stand-in offline)
        values["nli_data"] = prof["nli_data"]
    values = _resolve_variant_settings(values, preset)
    if values.get("target", "same") != "same" and values["data"] == prof["settings"]["data"]:
        values["data"] = prof["ordered_data"]  # the next-sentence variants train on the profile's ordered corpus
    if "generator" in values:
        values["generator"] = resolve_generator(values["generator"], profile)
    return TrainConfig(**values)
