"""WikiText-103 (DiffCSE Table 3's ordered corpus): a small archive built here in the real layout of
wikitext-103-raw-v1.zip / wikitext-103-v1.zip (a folder with wiki.{train,valid,test}.{raw,tokens}; a ' = Title = '
line starts each article, ' = = Section = = ' lines, blank ' ' lines between, Moses tokens with ' @-@ ', ' @,@ ',
' @.@ '; the tokenized files also have <unk>) goes through `cse-kit data import` and `download`, and the documents and
sentence pairs the loaders give are checked."""

import zipfile

import pytest

from cse_kit import data
from cse_kit.data import fetch, registry
from cse_kit.data.loaders import load_documents, load_sentence_pairs

TRAIN = [
    " = Valkyria Chronicles III = ",
    " Senjō no Valkyria 3 is a tactical role @-@ playing video game developed by Sega . It sold 102 @,@ 000 copies "
    "in its first week in Japan . ",
    " = = Gameplay = = ",
    " As with previous games , the player moves units across a map of 1 @.@ 5 square kilometres . Each unit has a "
    "fixed set of weapons . ",
    " = = = Combat = = = ",
    " Battles are fought in turns that alternate between the two sides . ",
    " = Tower Building of the Little Rock Arsenal = ",
    " The Tower Building of the Little Rock Arsenal was built in 1840 . It is the oldest surviving structure in the "
    "city . ",
    " = = History = = ",
    " The arsenal was seized by <unk> troops in 1861 . Short one . The building later housed a museum of military "
    "history . ",
    " = Cicely Mary Barker = ",
    " Cicely Mary Barker was an English illustrator best known for her fairy paintings . ",
]
VALID = [" = Homarus gammarus = ", " Homarus gammarus is a species of clawed lobster from the eastern Atlantic . "]
TEST = [" = Robert Boulter = ", " Robert Boulter is an English film , television and theatre actor . "]

DOCUMENTS = [
    ["Senjō no Valkyria 3 is a tactical role-playing video game developed by Sega .",
     "It sold 102,000 copies in its first week in Japan .",
     "As with previous games , the player moves units across a map of 1.5 square kilometres .",
     "Each unit has a fixed set of weapons .",
     "Battles are fought in turns that alternate between the two sides ."],
    ["The Tower Building of the Little Rock Arsenal was built in 1840 .",
     "It is the oldest surviving structure in the city .",
     "The arsenal was seized by <unk> troops in 1861 .",
     "The building later housed a museum of military history ."],
    ["Cicely Mary Barker was an English illustrator best known for her fairy paintings ."],
]


def _split_file(lines):
    """A WikiText split file: a blank ' ' line first and after every header and paragraph."""
    return "".join(" \n" + line + "\n" for line in lines) + " \n"


def _archive(path, folder, suffix, drop_unk=False):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{folder}/", "")
        for split, lines in (("test", TEST), ("valid", VALID), ("train", TRAIN)):
            text = _split_file(lines)
            if drop_unk:  # the raw archive has the words the tokenized one replaced with <unk>
                text = text.replace("<unk>", "Confederate")
            z.writestr(f"{folder}/wiki.{split}.{suffix}", text)
    return path


@pytest.fixture
def raw_zip(tmp_path):
    """wikitext-103-raw-v1.zip, the registry's source."""
    return _archive(tmp_path / "wikitext-103-raw-v1.zip", "wikitext-103-raw", "raw", drop_unk=True)


def _raw_documents():
    return [[s.replace("<unk>", "Confederate") for s in doc] for doc in DOCUMENTS]


def test_import_of_the_raw_archive_converts_its_train_split(raw_zip, tmp_path):
    placed = data.import_path(raw_zip, tmp_path / "data")
    assert list(placed) == ["WikiText-103"] and placed["WikiText-103"]["verified"]
    assert placed["WikiText-103"]["counts"] == {"documents": 3, "pairs": 7}
    documents = load_documents("WikiText-103", tmp_path / "data")
    # one document per ' = Title = ' article of the train file; headers and blank lines are not sentences; the
    # @-@ / @,@ / @.@ tokens are joined back; pieces under 4 words ("Short one .") are dropped; valid and test
    # articles are left out
    assert documents == _raw_documents()
    pairs = load_sentence_pairs("WikiText-103", tmp_path / "data")
    assert len(pairs) == 7 and pairs[0] == (documents[0][0], documents[0][1])
    assert (documents[0][-1], documents[1][0]) not in pairs  # no pair across an article boundary
    text = (tmp_path / "data" / "training" / "wikitext103_train_sentences.txt").read_text(encoding="utf-8")
    assert "@" not in text and " = " not in text and "lobster" not in text and "Boulter" not in text


def test_the_tokenized_archive_keeps_unk(tmp_path):
    archive = _archive(tmp_path / "wikitext-103-v1.zip", "wikitext-103", "tokens")
    data.import_path(archive, tmp_path / "data")
    assert load_documents("WikiText-103", tmp_path / "data") == DOCUMENTS


def test_download_converts_the_archive_it_fetched(raw_zip, tmp_path, monkeypatch):
    source = registry.spec("WikiText-103").source
    assert source.convert == "wikitext_sentences" and source.filename == "wikitext-103-raw-v1.zip"
    monkeypatch.setattr(fetch, "fetch_source", lambda src, cache, progressbar=True: raw_zip)
    placed = data.download(["WikiText-103"], tmp_path / "data", progressbar=False)
    assert placed["WikiText-103"]["counts"] == {"documents": 3, "pairs": 7}
    assert load_documents("WikiText-103", tmp_path / "data") == _raw_documents()


def test_an_archive_without_the_train_file_is_refused(tmp_path):
    archive = tmp_path / "wikitext-103-raw-v1.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("wikitext-103-raw/wiki.valid.raw", _split_file(VALID))
    with pytest.raises(data.DataError, match="none of the registry's datasets"):
        data.import_path(archive, tmp_path / "data")


def test_registry_states_the_official_counts_and_that_the_kits_unit_is_unverified():
    ds = registry.spec("WikiText-103")
    assert ds.extra["official"] == {"train": {"articles": 28475, "tokens": 103227021},
                                    "valid": {"articles": 60, "tokens": 217646},
                                    "test": {"articles": 60, "tokens": 245569}}
    assert "28,475" in ds.notes and "103,227,021" in ds.notes and "not verified" in ds.notes
    assert ds.counts == {}  # documents / pairs of the real archive: not counted here
    assert ds.source.sha256 == "91c00ae287f0d699e18605c84afc9e45c192bc6b7797ff8837e5474655a33794"
