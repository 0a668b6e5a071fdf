"""SCD (Klein & Nabi, ACL 2022): which run stands behind each row of its Tables 1-3 and Figure 2, their column
functions and parameter checks, and the notebooks that reproduce them.

Trained rows are the kit's presets (`scd-bert`, `scd-roberta`: the paper's recipe; `scd-bert-official` and
`scd-bert-released`: the official README's and the released checkpoints' recipes, cse_kit.methods.scd.VARIANTS);
the [CLS] and first-last-avg baselines are the untrained backbone evaluated by the kit; literature rows (marked
♣ ♡ ♢ in the paper) are shown as the paper's numbers only."""

from __future__ import annotations

from ..experiments import Row, check
from ..data.published import paper_table
from ..train.presets import PROFILES
from .released import released_row

#: notebook -> the SCD artefacts it reproduces, in the paper's order (Figure 1 is a schematic)
NOTEBOOKS = {"scd_table1_sts": ["Table 1"], "scd_table2_transfer": ["Table 2"],
             "scd_table3_ablation": ["Table 3"], "scd_figure2_alignment": ["Figure 2"]}
#: artefact -> the (row, column) of its notebook's comparison the report's coverage matrix quotes
HEADLINES = {"Table 1": ("SCD-BERT-base", "Avg."), "Table 2": ("SCD-BERT-base", "Avg."),
             "Table 3": ("SCD (L_S + L_C)", "STS-B")}

BACKBONE_LABELS = {"bert": "BERT-base", "roberta": "RoBERTa-base"}
#: the SCD recipes a notebook can train (`recipe` parameter): preset suffix per recipe; the official ones are BERT's
RECIPES = {"paper": "", "official-code": "-official", "released-checkpoints": "-released"}
RELEASED = {"bert": "sap-ai-research/BERT-base-uncased-SCD-ACL2022",
            "roberta": "sap-ai-research/RoBERTa-base-SCD-ACL2022"}
#: Table 3's rows: label -> the loss terms (scd_terms) of that run
TABLE3_TERMS = {"SCD (L_S)": "self_contrast", "SCD (L_C)": "decorrelation", "SCD (L_S + L_C)": "both"}


def check_backbones(backbones: list) -> None:
    check(set(backbones) <= set(BACKBONE_LABELS), f"backbones are {list(BACKBONE_LABELS)}, got {backbones}")


def check_recipe(recipe: str, backbones: list) -> None:
    check(recipe in RECIPES, f"unknown SCD recipe {recipe!r}; choose one of: {', '.join(RECIPES)}")
    check(recipe == "paper" or backbones == ["bert"], f"the {recipe} recipe exists for BERT only (the official "
          "README gives no RoBERTa command): run it with backbone='bert'")


def scd_preset(backbone: str, recipe: str = "paper") -> str:
    return f"scd-{backbone}{RECIPES[recipe]}"


def backbone_row(label: str, backbone: str, pooler: str, profile: str) -> Row:
    """The untrained backbone of this profile evaluated as it is, or why the profile has none."""
    unavailable = PROFILES[profile].get("unavailable", {})
    if backbone in unavailable:
        return Row(label, unavailable=f"{unavailable[backbone]}")
    return Row(label, model=PROFILES[profile]["backbones"][backbone][0], pooler=pooler)


def table1_rows(backbones: list[str], profile: str, recipe: str = "paper") -> list[Row]:
    """STS test: the untrained backbone's [CLS] (`cls_before_pooler`) and first-last average (`avg_emb_last`: the
    embedding output + last layer, what the SimCSE-era code the ♢ row comes from calls first-last), SimCSE as the
    SCD authors trained it, and SCD (the authors' released checkpoint, and ours)."""
    return [row for b in backbones for row in (
        backbone_row(f"{BACKBONE_LABELS[b]} [CLS]-embedding", b, "cls_before_pooler", profile),
        backbone_row(f"{BACKBONE_LABELS[b]} (first-last avg)", b, "avg_emb_last", profile),
        Row(f"SimCSE-{BACKBONE_LABELS[b]}", f"simcse-{b}"),
        released_row(RELEASED[b], f"SCD-{BACKBONE_LABELS[b]}", profile),
        Row(f"SCD-{BACKBONE_LABELS[b]}", scd_preset(b, recipe)))]


def table2_rows(backbones: list[str], profile: str, recipe: str = "paper") -> list[Row]:
    """Transfer test: the untrained backbone's [CLS], SimCSE and SCD (released checkpoint and ours); one SCD model
    serves Tables 1 and 2, as in the paper."""
    short = {"bert": "BERT", "roberta": "RoBERTa"}
    return [row for b in backbones for row in (
        backbone_row(f"{short[b]} [CLS]-embedding", b, "cls_before_pooler", profile),
        Row(f"SimCSE-{BACKBONE_LABELS[b]}", f"simcse-{b}"),
        released_row(RELEASED[b], f"SCD-{BACKBONE_LABELS[b]}", profile),
        Row(f"SCD-{BACKBONE_LABELS[b]}", scd_preset(b, recipe)))]


def table3_rows(profile: str, recipe: str = "paper") -> list[Row]:
    """Loss-term ablation on BERT: the untrained [CLS], and SCD with L_S only, L_C only and both."""
    preset = scd_preset("bert", recipe)
    return [backbone_row("BERT-base", "bert", "cls_before_pooler", profile),
            *(Row(label, preset, {} if terms == "both" else {"scd_terms": terms})
              for label, terms in TABLE3_TERMS.items())]


def table3_columns(record: dict) -> dict:
    """STS = mean of STS12-16 (the paper's Table 3), STS-B and SICK-R test."""
    sts = record["metrics"]["sts_test"]
    five = [sts[f"STS1{k}"]["all"]["spearman"] for k in range(2, 7)]
    return {"STS": sum(five) / len(five), "STS-B": sts["STSBenchmark"]["test"]["spearman"],
            "SICK-R": sts["SICKRelatedness"]["test"]["spearman"]}


def figure2_rows(profile: str, recipe: str = "paper") -> list[Row]:
    """Every BERT model the kit produces on the profile: the untrained backbone ([CLS] and first-last avg), SimCSE,
    DiffCSE (its STS model) and SCD."""
    return [backbone_row("BERT-base [CLS]", "bert", "cls_before_pooler", profile),
            backbone_row("BERT-base (first-last avg)", "bert", "avg_emb_last", profile),
            Row("SimCSE-BERT-base", "simcse-bert"), Row("DiffCSE-BERT-base", "diffcse-bert-sts"),
            Row("SCD-BERT-base", scd_preset("bert", recipe))]


#: Figure 2's two ways of measuring: Wang & Isola's (L2-normalised; DiffCSE Table 11's `geometry`) and the one of
#: SCD's official sts_filter.py (raw vectors, its own uniformity; `geometry_sts_filter`)
GEOMETRIES = {"wang-isola": "geometry", "sts-filter": "geometry_sts_filter"}


def figure2_columns(geometry: str):
    def columns(record: dict) -> dict:
        g = record["metrics"][GEOMETRIES[geometry]]["align_uniform"]
        return {"Alignment": g["alignment"], "Uniformity": g["uniformity"], "STS": record["metrics"]["sts_test"]["avg"]}
    return columns


def check_geometry(geometry: str) -> None:
    check(geometry in GEOMETRIES, f"unknown geometry {geometry!r}; choose one of: {', '.join(GEOMETRIES)}")


def literature(table: int) -> "pd.DataFrame":  # noqa: F821
    """The paper's rows from other papers (marked ♣ ♡ ♢), shown as published: the kit does not re-run them."""
    from ..data.published import paper_tables

    marks = paper_tables("scd")[str(table)].get("marks", {})
    frame = paper_table(table, "scd")
    cited = [label for label, mark in marks.items() if mark != "*" and label in frame.index]
    return frame.loc[cited].assign(source=[marks[label] for label in cited])
