"""DiffCSE (Chuang et al., NAACL 2022), the primary paper: which run stands behind each row of each table (presets,
overrides and the paper's row labels), the notebooks' parameter checks, and the notebooks that reproduce it.

The identities the paper's numbers show are kept, so shared rows are trained once: λ = 0 (Table 8) is SimCSE with
the BatchNorm projector (Table 5; our inference from their equal 82.22, §5 says only that λ = 0 is SimCSE);
DiffCSE with BatchNorm (Table 5) = DistilBERT generator (Table 6) = 30% masking (Table 7) = λ 0.005 (Table 8) =
DiffCSE in Table 3, all the `diffcse-bert-sts` preset; SimCSE in Tables 3, 5, 6 and 15 is `simcse-bert`; MLM 15% in
Tables 4 and 15 is Table 7's 15% row."""

from __future__ import annotations

from ..experiments import Row, check
from ..train.presets import (GENERATORS, PRESETS, PROFILES, ProfileUnavailable, generator_unavailable, per_profile,
                             resolve_generator)
from .released import released_row

#: notebook -> the DiffCSE artefacts it reproduces, in the paper's order (the report's coverage reads this)
NOTEBOOKS = {
    "table1_sts": ["Table 1"], "table2_transfer": ["Table 2"], "table3_objective": ["Table 3"],
    "table4_augmentation": ["Table 4"], "table5_batchnorm": ["Table 5"],
    "table6_generator": ["Table 6"], "table7_mask_ratio": ["Table 7"], "table8_lambda": ["Table 8"],
    "table9_10_retrieval": ["Table 9", "Table 10"], "table11_alignment": ["Table 11"], "figure2_cosine": ["Figure 2"],
    "table12_14_hparams": ["Table 12", "Table 13", "Table 14"], "table15_pos_neg": ["Table 15"],
}
#: artefact -> the (row, column) of its notebook's comparison the report's coverage matrix quotes
HEADLINES = {
    "Table 1": ("DiffCSE-BERT-base", "Avg."), "Table 2": ("DiffCSE-BERT-base", "Avg."),
    "Table 3": ("DiffCSE", "STS-B"), "Table 4": ("randomly insert 15%", "STS-B"),
    "Table 15": ("+ Additional negatives: MLM 15%", "STS-B"),
    "Table 5": ("DiffCSE w/ BatchNorm", "STS-B"), "Table 6": ("DistilBERT-base (L=6, H=768)", "STS-B"),
    "Table 7": ("30%", "STS-B"), "Table 8": ("0.005", "STS-B"), "Table 10": ("DiffCSE-BERT-base", "@1"),
    "Table 11": ("DiffCSE-BERT-base", "Alignment"), "Table 14": ("14: DiffCSE (train)", "BERT-base"),
}

BACKBONE_LABELS = {"bert": "BERT-base", "roberta": "RoBERTa-base"}
#: SimCSE with DiffCSE's BatchNorm projector and DiffCSE's STS settings (lr, epochs, batch): Table 5, Table 8 λ = 0
SIMCSE_BATCHNORM = Row("SimCSE w/ BatchNorm", "diffcse-bert-sts", {"method": "simcse"})
#: Table 6 generator name -> the paper's row label
GENERATOR_ROWS = {"bert-large": "BERT-large (L=24, H=1024)", "bert-base": "BERT-base (L=12, H=768)",
                  "distilbert": "DistilBERT-base (L=6, H=768)", "bert-medium": "BERT-medium (L=8, H=512)",
                  "bert-small": "BERT-small (L=4, H=512)", "bert-mini": "BERT-mini (L=4, H=256)",
                  "bert-tiny": "BERT-tiny (L=2, H=128)"}
TABLE6_GENERATORS = list(GENERATOR_ROWS)
#: the generator the BERT presets use on the paper profile; on other profiles the profile's own generator stands in
DEFAULT_GENERATOR = "distilbert"


def check_lams(lams: list) -> None:
    bad = [x for x in lams if not isinstance(x, (int, float)) or x < 0]
    check(not bad, f"λ must be a number >= 0 (0 is SimCSE with the BatchNorm projector); got {bad}")


def check_mask_ratios(ratios: list) -> None:
    bad = [x for x in ratios if not isinstance(x, (int, float)) or not 0 < x < 1]
    check(not bad, f"masking ratios must lie in (0, 1), e.g. 0.3 for 30%; got {bad}")


def check_generators(names: list) -> None:
    bad = [g for g in names if g not in GENERATORS]
    check(not bad, f"unknown generator(s) {bad}; choose from {', '.join(GENERATORS)}")


#: backbone -> the released checkpoints of SimCSE and DiffCSE (STS and transfer models), cse_kit/papers/released.json
RELEASED = {"bert": {"simcse": "princeton-nlp/unsup-simcse-bert-base-uncased",
                     "sts": "voidism/diffcse-bert-base-uncased-sts", "transfer": "voidism/diffcse-bert-base-uncased-trans"},
            "roberta": {"simcse": "princeton-nlp/unsup-simcse-roberta-base", "sts": "voidism/diffcse-roberta-base-sts",
                        "transfer": "voidism/diffcse-roberta-base-trans"}}


def table1_rows(backbones: list[str], profile: str) -> list[Row]:
    """STS test: SimCSE (its authors' checkpoint, and as the DiffCSE authors reproduced it by training) and
    DiffCSE's STS models (the released checkpoint, and ours)."""
    return [row for b in backbones for row in (
        released_row(RELEASED[b]["simcse"], f"SimCSE-{BACKBONE_LABELS[b]}", profile),
        Row(f"SimCSE-{BACKBONE_LABELS[b]} (reproduce)", f"simcse-{b}"),
        released_row(RELEASED[b]["sts"], f"DiffCSE-{BACKBONE_LABELS[b]}", profile),
        Row(f"DiffCSE-{BACKBONE_LABELS[b]}", f"diffcse-{b}-sts"))]


def table2_rows(backbones: list[str], profile: str) -> list[Row]:
    """Transfer test: SimCSE and DiffCSE's transfer models (Table 13's hyper-parameters, which the paper chose on
    average transfer dev accuracy; the checkpoint with the best STS-B dev, App. A), each beside its authors' released
    checkpoint."""
    return [row for b in backbones for row in (
        released_row(RELEASED[b]["simcse"], f"SimCSE-{BACKBONE_LABELS[b]}", profile),
        Row(f"SimCSE-{BACKBONE_LABELS[b]}", f"simcse-{b}"),
        released_row(RELEASED[b]["transfer"], f"DiffCSE-{BACKBONE_LABELS[b]}", profile),
        Row(f"DiffCSE-{BACKBONE_LABELS[b]}", f"diffcse-{b}-transfer"))]


def table5_rows() -> list[Row]:
    return [Row("DiffCSE w/ BatchNorm", "diffcse-bert-sts"),
            Row("DiffCSE w/o BatchNorm", "diffcse-bert-sts", {"projector": "mlp"}),
            SIMCSE_BATCHNORM,
            Row("SimCSE w/o BatchNorm", "simcse-bert")]


def table6_rows(generators: list[str], profile: str) -> list[Row]:
    rows = [Row("SimCSE (no generator)", "simcse-bert")]
    for name in generators:
        if name == DEFAULT_GENERATOR and profile != "paper":  # the profile's generator (e.g. the fitted MiniLM MLM
            rows.append(Row(GENERATOR_ROWS[name], "diffcse-bert-sts"))  # head, mini's half-depth miniature) stands in
            continue
        try:
            resolve_generator(name, profile)
        except ProfileUnavailable:
            rows.append(Row(GENERATOR_ROWS[name], unavailable=generator_unavailable(profile, "profile='paper'"),
                            missing=GENERATORS[name]))
            continue
        rows.append(Row(GENERATOR_ROWS[name], "diffcse-bert-sts", {"generator": name}))
    return rows


def ratio_label(ratio: float) -> str:
    return f"{round(ratio * 100, 6):g}%"


def table7_rows(ratios: list[float]) -> list[Row]:
    return [Row(ratio_label(r), "diffcse-bert-sts", {"mask_ratio": r}) for r in ratios]


def table8_rows(lams: list[float]) -> list[Row]:
    return [Row(f"{lam:g}", SIMCSE_BATCHNORM.preset, SIMCSE_BATCHNORM.overrides) if lam == 0
            else Row(f"{lam:g}", "diffcse-bert-sts", {"lam": lam}) for lam in lams]


#: Tables 3, 4 and 15 (dev, BERT-base) report STS-B dev Spearman and average transfer dev accuracy. Their 16 runs of
#: their own would each encode the 108k transfer sentences for the second column (about 4 min a model on a 2-core
#: CPU, docs/notebooks.md): off the `paper` profile they are evaluated on STS-B dev only, which keeps the three
#: notebooks' addition to the cpu report under 40 minutes (docs/notebooks.md, "Profiles and their cost").
ABLATION_EVALS = per_profile({"paper": ("sts_dev", "transfer_dev"), "cpu": ("sts_dev",),
                               "mini": ("sts_dev", "transfer_dev"), "smoke": ("sts_dev",)})
#: Table 3: the paper's row label -> the DiffCSE ablation settings (cse_kit.methods.diffcse.ABLATIONS)
TABLE3_VARIANTS = {
    "DiffCSE": {},
    "DiffCSE w/o contrastive loss": {"contrastive": False},
    "DiffCSE use next sent. for x′": {"target": "next"},
    "DiffCSE use same+next sent. for x′": {"target": "same+next"},
    "Conditional MLM — for same sent.": {"task": "cmlm"},
    "Conditional MLM — for next sent.": {"task": "cmlm", "target": "next"},
    "Conditional MLM — for same+next sent.": {"task": "cmlm", "target": "same+next"},
    "Conditional Corrective LM": {"task": "corrective"},
}
#: Tables 4 and 15 edit 15% of the tokens: edit -> (Table 4's label, Table 15's label)
EDIT_RATIO = 0.15
EDIT_ROWS = {"replace": ("MLM 15%", "MLM 15%"), "insert": ("randomly insert 15%", "random insert 15%"),
             "delete": ("randomly delete 15%", "random delete 15%"), "all": ("combining all", None)}
TABLE15_ROLES = {"positive": "+ Additional positives", "negative": "+ Additional negatives",
                 "equivariance": "+ Equivariance (Ours)"}


def check_choices(values: list, allowed, what: str) -> None:
    bad = [v for v in values if v not in allowed]
    check(not bad, f"unknown {what} {bad}; choose from: {', '.join(allowed)}")


def table3_rows(variants: list[str]) -> list[Row]:
    """SimCSE, then each DiffCSE objective variant on the `diffcse-bert-sts` settings; the next-sentence ones train
    on the profile's ordered corpus (build_config switches the data)."""
    rows = [Row("SimCSE", "simcse-bert")]
    return rows + [Row(label, "diffcse-bert-sts", TABLE3_VARIANTS[label]) for label in variants]


def equivariance_row(edit: str, label: str) -> Row:
    """DiffCSE detecting the edit (15% of the tokens); MLM 15% = Table 7's 15% row, the same run."""
    return Row(label, "diffcse-bert-sts", {"mask_ratio": EDIT_RATIO, **({} if edit == "replace" else {"edit": edit})})


def table4_rows(edits: list[str]) -> list[Row]:
    return [equivariance_row(edit, EDIT_ROWS[edit][0]) for edit in edits]


def table15_rows(roles: list[str], edits: list[str]) -> list[Row]:
    """SimCSE, then SimCSE (`simcse-bert`: its projector, learning rate and epoch) with the edited sentence as an
    extra positive or negative, then the equivariance rows of Table 4 (the same runs)."""
    rows = [Row("SimCSE", "simcse-bert")]
    for role in roles:
        for edit in edits:
            label = f"{TABLE15_ROLES[role]}: {EDIT_ROWS[edit][1] if role != 'equivariance' else EDIT_ROWS[edit][0]}"
            rows.append(equivariance_row(edit, label) if role == "equivariance" else
                        Row(label, "simcse-bert", {"method": "diffcse", "task": role, "edit": edit,
                                                   "mask_ratio": EDIT_RATIO}))
    return rows


def geometry_rows(profile: str) -> list[Row]:
    """Tables 9-11 and Figure 2: the BERT STS models, and (Table 11) the untrained backbone, averaged over tokens
    as DiffCSE's evaluation.py does ("first-last avg" = embeddings + last layer there)."""
    backbone = PROFILES[profile]["backbones"]["bert"][0]
    return [Row("Avg. BERT-base", model=backbone, pooler="avg_emb_last"),
            Row("SimCSE-BERT-base", "simcse-bert"), Row("DiffCSE-BERT-base", "diffcse-bert-sts")]


def hyperparameter_rows(kind: str) -> dict[str, dict]:
    """Tables 12 (kind="sts") and 13 ("transfer") from the presets, in the paper's columns."""
    out = {}
    for backbone, label in BACKBONE_LABELS.items():
        _, p = PRESETS[f"diffcse-{backbone}-{kind}"]
        out[label] = {"learning rate": p["lr"], "masking ratio": p["mask_ratio"], "λ": p["lam"],
                      "training epochs": p["epochs"], "batch size": p["batch_size"]}
    return out


def _architecture(profile: str, backbone: str):
    """The profile's encoder for counting parameters. On `paper` the BERT/RoBERTa-base shapes are built from their
    configurations with random weights, so counting needs no download."""
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

    from ..models import load_encoder

    if profile == "paper":
        if backbone == "bert":
            return BertModel(BertConfig(), add_pooling_layer=False)
        return RobertaModel(RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1),
                            add_pooling_layer=False)
    if backbone in PROFILES[profile].get("unavailable", {}):
        raise ProfileUnavailable(PROFILES[profile]["unavailable"][backbone])
    return load_encoder(PROFILES[profile]["backbones"][backbone][0])[1]


def count_parameters(encoder) -> dict[str, int]:
    """Trainable parameters of SimCSE and DiffCSE at training time, and of the encoder kept for testing.
    DiffCSE trains the encoder, its BatchNorm projector, a discriminator of the encoder's size and the RTD head;
    its generator is frozen and not counted (as in the paper's Table 14)."""
    import copy

    from torch import nn

    from ..methods import SimCSE

    def n(*modules):
        return sum(p.numel() for m in modules for p in m.parameters() if p.requires_grad)

    hidden = encoder.config.hidden_size
    return {"SimCSE": n(SimCSE(encoder, projector="mlp")),
            "DiffCSE (train)": n(SimCSE(encoder, projector="batchnorm"), copy.deepcopy(encoder), nn.Linear(hidden, 2)),
            "DiffCSE (test)": n(encoder)}


def parameter_table(profile: str) -> dict[str, dict[str, int | str]]:
    """Table 14 on a profile: method -> backbone label -> count, or the reason the backbone cannot be built."""
    out: dict[str, dict] = {}
    for backbone, label in BACKBONE_LABELS.items():
        try:
            counts = count_parameters(_architecture(profile, backbone))
        except ProfileUnavailable as err:
            counts = dict.fromkeys(("SimCSE", "DiffCSE (train)", "DiffCSE (test)"), f"not run: {err}")
        for method, value in counts.items():
            out.setdefault(method, {})[label] = value
    return out
