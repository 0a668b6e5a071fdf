"""What a published model came from, as a card and MTEB's metadata name it: its method's paper and the baselines'
papers (BibTeX in cse_kit/papers/citations.json), its base model and training data on the Hub."""

from __future__ import annotations

import json
from importlib import resources


#: method -> (the paper it is from, the papers of the baselines it is compared with), keys of citations.json
METHOD_PAPERS = {"simcse": ("simcse", ()), "diffcse": ("diffcse", ("simcse",)), "scd": ("scd", ("simcse",)),
                 "esimcse": ("esimcse", ("simcse",)), "diffaug": ("diffaug", ("simcse", "promptbert")),
                 "promptbert": ("promptbert", ("simcse",)), "consert": ("consert", ("simcse",))}
#: a method of one's own (docs/extending.md): no paper yet; cited beside SimCSE, the preset family it trains on
OWN_METHOD_PAPERS = (None, ("simcse",))


def method_papers(method: str) -> tuple[str | None, tuple]:
    """(the paper a method is from, its baselines' papers); a method of one's own is from none."""
    return METHOD_PAPERS.get(method, OWN_METHOD_PAPERS)


def declared_paper(method: str) -> tuple[str | None, str | None]:
    """(paper, BibTeX) a method of one's own declares on its class (Objective.paper, .citation); (None, None) where
    it declares none or is not importable here."""
    from ..methods.errors import MethodError
    from ..methods.registry import method_class

    try:
        cls = method_class(method)
    except MethodError:
        return None, None
    return cls.paper, cls.citation


def method_words(method: str) -> str:
    """How a card names a method's origin: its paper, or a method of one's own (with the paper it declares)."""
    paper_key, _ = method_papers(method)
    if paper_key:
        return citations()[paper_key]["paper"]
    paper, _ = declared_paper(method)
    return f"`{method}`, a method of one's own" + (f" ({paper})" if paper else "")


#: a model reference of the profiles -> (its Hub id, its licence); a base model not listed has no known licence
BASE_MODELS = {"bert-base-uncased": ("google-bert/bert-base-uncased", "apache-2.0"),
               "bert-large-uncased": ("google-bert/bert-large-uncased", "apache-2.0"),
               "roberta-base": ("FacebookAI/roberta-base", "mit"),
               "roberta-large": ("FacebookAI/roberta-large", "mit"),
               "all-MiniLM-L6-v2": ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")}
#: training data -> its Hub dataset (Wiki1M and SimCSE's NLI triplets are files of one dataset; the sample is Wiki1M's
#: first lines; the SNLI triplets are built from SNLI's dev and test)
DATASETS = {"Wiki1M": "princeton-nlp/datasets-for-simcse", "Wiki1M-sample": "princeton-nlp/datasets-for-simcse",
            "NLI": "princeton-nlp/datasets-for-simcse", "SNLI-triplets": "stanfordnlp/snli",
            "WikiText-103": "Salesforce/wikitext"}


def citations() -> dict:
    return json.loads(resources.files("cse_kit.papers").joinpath("citations.json").read_text())
