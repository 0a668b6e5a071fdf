"""The data layer on the real shared data: counts, known records, verification, and bad input."""

import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from cse_kit import data
from cse_kit.cli import main
from cse_kit.data.fetch import md5_file

OFFICIAL_COUNTS = {
    "STS12": {"test": 3108}, "STS13": {"test": 1500}, "STS14": {"test": 3750}, "STS15": {"test": 3000},
    "STS16": {"test": 1186}, "STSBenchmark": {"train": 5749, "dev": 1500, "test": 1379},
    "SICKRelatedness": {"train": 4500, "dev": 500, "test": 4927}, "MR": {"all": 10662}, "CR": {"all": 3775},
    "SUBJ": {"all": 10000}, "MPQA": {"all": 10606}, "SST2": {"train": 67349, "dev": 872, "test": 1821},
    "TREC": {"train": 5452, "test": 500}, "MRPC": {"train": 4076, "test": 1725},
    "SNLI": {"dev": 9842, "test": 9824}, "Wiki1M-sample": {"train": 11913},
}


def test_status_json_reports_every_evaluation_set_verified_with_official_counts(data_dir, capsys):
    assert main(["data", "status", "--json", "--data-dir", str(data_dir)]) == 0
    report = json.loads(capsys.readouterr().out)["datasets"]
    assert set(report) == set(data.REGISTRY)
    for name, counts in OFFICIAL_COUNTS.items():
        assert report[name]["present"] and report[name]["verified"], (name, report[name])
        assert report[name]["counts"] == counts
    assert report["Wiki1M"] == {"present": False, "verified": False, "counts": {}, "problems": []}


def test_status_names_the_profiles_each_dataset_serves_and_fails_only_for_the_asked_profiles_needs(data_dir, capsys):
    assert main(["data", "status", "--data-dir", str(data_dir)]) == 0  # Wiki1M is missing: only paper needs it
    out = capsys.readouterr().out
    assert "needed by" in out and any(line.split()[:3] == ["Wiki1M", "missing", "paper"] for line in out.splitlines())
    assert main(["data", "status", "--profile", "paper", "--data-dir", str(data_dir)]) == 1
    err = capsys.readouterr().err
    assert "missing or not verified (needed by the paper profile): Wiki1M, NLI, WikiText-103" in err


def test_status_of_a_missing_or_empty_directory_says_so_once_and_how_to_fill_it(tmp_path, capsys):
    assert main(["data", "status", "--data-dir", str(tmp_path / "dta")]) == 1
    err = capsys.readouterr().err
    assert f"data directory {tmp_path / 'dta'} does not exist (misspelt" in err and "cse-kit data import" in err
    assert main(["data", "status", "--data-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert f"holds none of the {len(data.REGISTRY)} datasets" in err and "missing" not in out


def test_sts_subsets_and_first_records(data_dir):
    sts12 = data.load_sts("STS12", data_dir=data_dir)
    assert sts12[0] == data.StsPair(
        "the problem likely will mean corrective changes before the shuttle fleet starts flying again .",
        "he said the problem needs to be corrected before the space shuttle fleet is cleared to fly again .",
        4.4, "MSRpar")
    sizes = {}
    for p in data.load_sts("STS16", data_dir=data_dir):
        sizes[p.subset] = sizes.get(p.subset, 0) + 1
    assert sizes == {"answer-answer": 254, "headlines": 249, "plagiarism": 230, "postediting": 244,
                     "question-question": 209}
    stsb = data.load_sts("STSBenchmark", "test", data_dir)
    assert stsb[0].subset == "test" and stsb[0].score == 2.5 and stsb[0].sent1 == "a girl is styling her hair ."
    sick = data.load_sts("SICKRelatedness", "dev", data_dir)
    assert len(sick) == 500 and 1.0 <= min(p.score for p in sick) and max(p.score for p in sick) <= 5.0
    with pytest.raises(data.DataError, match="split must be one of train, dev, test"):
        data.load_sts("STSBenchmark", "validation", data_dir)


def test_classification_records(data_dir):
    mr = data.load_classification("MR", data_dir=data_dir)
    assert [r.label for r in mr].count(1) == 5331 and mr[0].label == 1 and mr[-1].label == 0
    subj = data.load_classification("SUBJ", data_dir=data_dir)
    assert sum(r.label for r in subj) == 5000  # the objective file is SentEval's positive class
    trec = data.load_classification("TREC", "test", data_dir)
    assert trec[0] == data.LabelledSentence("How far is it from Denver to Aspen ?", 5)
    assert sorted({r.label for r in data.load_classification("TREC", "train", data_dir)}) == [0, 1, 2, 3, 4, 5]
    sst = data.load_classification("SST2", "dev", data_dir)
    assert {r.label for r in sst} == {0, 1}
    mrpc = data.load_classification("MRPC", "train", data_dir)
    assert mrpc[0].label == 1 and mrpc[0].sent1.startswith("Amrozi accused his brother")


def test_snli_pairs_and_triplets(data_dir):
    dev = data.load_snli("dev", data_dir)
    assert {p.label for p in dev} == {0, 1, 2}
    triplets = data.snli_triplets("dev", data_dir)
    assert 2500 < len(triplets) < 3400
    premises = {p.sent1: p for p in dev}
    t = triplets[0]
    assert t.anchor in premises
    assert data.LabelledPair(t.anchor, t.positive, 0) in dev and data.LabelledPair(t.anchor, t.negative, 2) in dev


def test_training_corpus(data_dir):
    lines = data.load_corpus("Wiki1M-sample", data_dir)
    assert len(lines) == 11913 and lines[0] == "YMCA in South Australia"


def test_missing_dataset_names_the_fix(tmp_path):
    with pytest.raises(data.MissingDatasetError, match=r"cse-kit data download STS13.*cse-kit data import"):
        data.load_sts("STS13", data_dir=tmp_path)
    with pytest.raises(KeyError, match="unknown dataset 'STS17'"):
        data.spec("STS17")


@pytest.fixture
def own_copy(data_dir, tmp_path):
    """A private, writable copy of the downstream data."""
    shutil.copytree(data_dir / "downstream", tmp_path / "downstream")
    return tmp_path


def test_truncated_file_is_caught_and_named(own_copy):
    gs = own_copy / "downstream/STS/STS13-en-test/STS.gs.FNWN.txt"
    gs.write_text("\n".join(gs.read_text().splitlines()[:100]) + "\n")
    report = data.verify(data.spec("STS13"), own_copy)
    assert report["present"] and not report["verified"]
    assert any("STS.gs.FNWN.txt: md5 differs" in p for p in report["problems"])
    assert any("has 189 lines but" in p and "truncated" in p for p in report["problems"])


def test_corrupt_file_is_caught_by_checksum_or_count(own_copy):
    f = own_copy / "downstream/MR/rt-polarity.pos"
    lines = f.read_text(encoding="latin-1").splitlines()
    f.write_text("\n".join(lines[:-3]) + "\n", encoding="latin-1")
    problems = data.verify(data.spec("MR"), own_copy)["problems"]
    assert any("rt-polarity.pos: md5 differs" in p for p in problems)
    assert "MR all: 10659 records, expected 10662" in problems


@pytest.mark.filterwarnings("ignore:reading .* although it failed verification")
def test_malformed_lines_report_file_and_line(own_copy, monkeypatch):
    monkeypatch.setenv(data.ALLOW_UNVERIFIED_ENV, "1")  # past the checksum, the parser still names file:line
    f = own_copy / "downstream/STS/STSBenchmark/sts-dev.csv"
    lines = f.read_text().splitlines()
    lines[6] = "main-captions\tMSRvid\t2012test\t0001\tfive\ta man .\ta woman ."
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(data.DataError, match=r"sts-dev.csv:7: expected a number for the score, got 'five'"):
        data.load_sts("STSBenchmark", "dev", own_copy)
    trec = own_copy / "downstream/TREC/TREC_10.label"
    trec.write_text("NOPE:x what is this ?\n" + trec.read_text(encoding="latin-1"), encoding="latin-1")
    with pytest.raises(data.DataError, match=r"TREC_10.label:1: expected 'CLASS:fine question'"):
        data.load_classification("TREC", "test", own_copy)
    mrpc = own_copy / "downstream/MRPC/msr_paraphrase_test.txt"
    mrpc.write_text(mrpc.read_text() + "1\tonly two\n")
    with pytest.raises(data.DataError, match=r"msr_paraphrase_test.txt:1727: expected Quality"):
        data.load_classification("MRPC", "test", own_copy)


def test_import_refuses_a_bad_archive_and_leaves_nothing_behind(data_dir, tmp_path):
    src = tmp_path / "src" / "downstream" / "MR"
    shutil.copytree(data_dir / "downstream" / "MR", src)
    pos = src / "rt-polarity.pos"
    pos.write_text("\n".join(pos.read_text(encoding="latin-1").splitlines()[:5000]), encoding="latin-1")
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(tmp_path / "src" / "downstream", arcname="downstream")
    target = tmp_path / "target"
    with pytest.raises(data.DataError, match="nothing was placed; refused.*MR: .*expected 10662"):
        data.import_path(archive, target)
    assert list(target.iterdir()) == []  # no staging folder, no half-placed file
    with pytest.raises(data.DataError, match="holds none of the registry's datasets"):
        data.import_path(tmp_path / "src" / "downstream" / "MR" / "rt-polarity.neg", target)
    with pytest.raises(data.DataError, match="does not exist"):
        data.import_path(tmp_path / "nope.tar.gz", target)


def test_import_of_a_folder_and_reimport_is_idempotent(data_dir, tmp_path):
    placed = data.import_path(data_dir / "downstream" / "STS", tmp_path)  # a folder holding STS12-16 and STS-B
    assert set(placed) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark"}
    again = data.import_path(data_dir / "downstream" / "STS", tmp_path)
    assert all(r["verified"] for r in again.values())
    f = "downstream/STS/STS14-en-test/STS.input.images.txt"
    assert md5_file(tmp_path / f) == md5_file(data_dir / f)


# --- faults: every loader verifies what it reads; import places only verified copies; leftovers are cleaned ---

def test_loaders_refuse_damaged_files_naming_file_and_fix_unless_overridden(own_copy, monkeypatch):
    mr = own_copy / "downstream/MR/rt-polarity.neg"
    mr.write_text("\n".join(mr.read_text(encoding="latin-1").splitlines()[:2000]) + "\n", encoding="latin-1")
    stsb = own_copy / "downstream/STS/STSBenchmark/sts-test.csv"
    stsb.write_text(stsb.read_text().replace("\t2.500\t", "\t4.500\t", 1))  # one edited score
    for load in (lambda: data.load_classification("MR", data_dir=own_copy),
                 lambda: data.load_sts("STSBenchmark", "test", own_copy)):
        with pytest.raises(data.UnverifiedDataError, match=r"(rt-polarity.neg|sts-test.csv): md5 differs.*"
                                                           r"Fix: `cse-kit data (download|import)"):
            load()
    with pytest.raises(data.UnverifiedDataError):  # a dataset is verified whole: its intact dev split too
        data.load_sts("STSBenchmark", "dev", own_copy)
    monkeypatch.setenv(data.ALLOW_UNVERIFIED_ENV, "1")
    with pytest.warns(UserWarning, match="failed verification"):
        assert len(data.load_classification("MR", data_dir=own_copy)) == 5331 + 2000
    assert "MR" in data.unverified_reads() and "md5 differs" in data.unverified_reads()["MR"][0]


def test_status_exits_non_zero_for_a_missing_or_damaged_dataset(own_copy, capsys):
    assert main(["data", "status", "MR", "--data-dir", str(own_copy)]) == 0
    assert main(["data", "status", "Wiki1M", "--data-dir", str(own_copy)]) == 1  # asked for, missing
    f = own_copy / "downstream/CR/custrev.pos"
    f.write_bytes(f.read_bytes()[:-200])
    assert main(["data", "status", "--data-dir", str(own_copy)]) == 1
    assert "not verified: CR" in capsys.readouterr().err


def test_import_places_the_verified_refuses_the_rest_and_never_replaces_a_good_file(data_dir, tmp_path, capsys):
    src = tmp_path / "src" / "downstream"
    for folder in ("MR", "TREC", "STS/STSBenchmark"):
        shutil.copytree(data_dir / "downstream" / folder, src / folder)
    test = src / "STS/STSBenchmark/sts-test.csv"
    test.write_text(test.read_text().replace("\t2.500\t", "\t4.500\t", 1))  # one edited score: counts still right
    archive = tmp_path / "mixed.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(src, arcname="downstream")
    target = tmp_path / "target"
    data.import_path(data_dir / "downstream" / "STS", target)  # a verified STS-B is already there
    good = md5_file(target / "downstream/STS/STSBenchmark/sts-test.csv")
    assert main(["data", "import", str(archive), "--data-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert "placed (verified): MR, TREC; refused" in err and "STSBenchmark: downstream/STS/STSBenchmark/sts-test.csv" \
        ": md5 differs" in err
    assert md5_file(target / "downstream/STS/STSBenchmark/sts-test.csv") == good
    assert data.verify(data.spec("MR"), target)["verified"] and data.verify(data.spec("TREC"), target)["verified"]


@pytest.mark.parametrize("damage", ["truncated", "not an archive", "flipped bytes", "tar with a damaged header"])
def test_a_truncated_or_non_archive_file_is_a_clear_error(data_dir, tmp_path, capsys, damage):
    archive = tmp_path / ("senteval.tar" if damage == "tar with a damaged header" else "senteval.tar.gz")
    with tarfile.open(archive, "w" if damage == "tar with a damaged header" else "w:gz") as t:
        t.add(data_dir / "downstream" / "MR", arcname="downstream/MR")
        t.add(data_dir / "downstream" / "TREC", arcname="downstream/TREC")
    body = bytearray(archive.read_bytes())
    if damage == "truncated":
        body = body[:len(body) // 2]
    elif damage == "not an archive":
        body = b"<html>not found</html>" * 50
    elif damage == "flipped bytes":
        body[len(body) // 2:len(body) // 2 + 64] = bytes(b ^ 0xFF for b in body[len(body) // 2:len(body) // 2 + 64])
    else:  # the second member's header (after MR's files) overwritten: tarfile would stop there silently
        second = [m for m in tarfile.open(archive).getmembers() if m.name.startswith("downstream/TREC")][0]
        body[second.offset:second.offset + 512] = b"x" * 512
    archive.write_bytes(bytes(body))
    target = tmp_path / "target"
    assert main(["data", "import", str(archive), "--data-dir", str(target)]) == 2
    assert "is not a complete archive" in capsys.readouterr().err
    assert [p.name for p in target.iterdir()] == []


@pytest.mark.parametrize("filters", [True, False], ids=["extraction-filter", "python-without-filters"])
@pytest.mark.parametrize("member", ["../outside.txt", "link-out", "a-device"])
def test_an_archive_member_outside_the_data_directory_is_refused_by_name(data_dir, tmp_path, capsys, monkeypatch,
                                                                         member, filters):
    """A whole archive with one unsafe member: one line naming it (not "truncated"), nothing placed anywhere; the
    same on a Python without tarfile's extraction filters."""
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter")
    archive = tmp_path / "senteval.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(data_dir / "downstream" / "MR", arcname="downstream/MR")
        entry = tarfile.TarInfo(member)
        if member == "link-out":
            entry.type, entry.linkname = tarfile.SYMTYPE, "../../outside.txt"
        elif member == "a-device":  # an absolute path is not refused: the filter makes it relative
            entry.type = tarfile.CHRTYPE
        t.addfile(entry, io.BytesIO(b""))
    target = tmp_path / "data" / "target"
    assert main(["data", "import", str(archive), "--data-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"holds an unsafe path, member {member!r}" in err and "truncated" not in err
    assert len(err.strip().splitlines()) == 1
    assert [p.name for p in target.iterdir()] == [] and not (tmp_path / "data" / "outside.txt").exists()


def test_leftovers_of_killed_imports_and_exports_are_removed_on_the_next_run(data_dir, tmp_path):
    from cse_kit.io import atomic_dir

    target = tmp_path / "target"
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f".staging-{dead.pid}-abc", ".staging-x1y2", f".model.new.{dead.pid}-q"):
        (target / name / "tree").mkdir(parents=True)
    alive = target / f".staging-{os.getpid()}-mine"  # a live process's staging folder is not touched
    alive.mkdir()
    data.import_path(data_dir / "downstream" / "MR", target)
    with atomic_dir(target / "model") as tmp:
        (tmp / "w").write_text("x")
    assert sorted(p.name for p in target.iterdir()) == sorted(["downstream", alive.name, "model"])


def test_an_empty_corpus_is_a_clear_error(tmp_path):
    from cse_kit.train.data import load_examples

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(data.DataError, match="holds no text"):
        load_examples(str(empty))


def test_eval_output_records_unverified_data(own_copy, monkeypatch, tmp_path):
    """The refusal promises the override is "recorded with every result": `cse-kit eval --output` too."""
    import json

    stsb = own_copy / "downstream/STS/STSBenchmark/sts-dev.csv"
    stsb.write_text(stsb.read_text().replace("\t2.500\t", "\t4.500\t", 1))
    from cse_kit.data import loaders

    monkeypatch.setattr(loaders, "_READ_UNVERIFIED", {})  # what earlier tests of this process read is not ours
    monkeypatch.setenv(data.ALLOW_UNVERIFIED_ENV, "1")
    out = tmp_path / "r.json"
    with pytest.warns(UserWarning, match="failed verification"):
        assert main(["eval", "--model", "smoke-bert", "--pooler", "avg", "--tasks", "STSBenchmark", "--mode", "dev",
                     "--data-dir", str(own_copy), "--output", str(out)]) == 0
    assert "md5 differs" in json.loads(out.read_text())["unverified_data"]["STSBenchmark"][0]


def test_the_wiki1m_sample_is_never_told_to_download(data_dir, tmp_path):
    """It has no download source: a missing or damaged sample names the file to import."""
    from cse_kit.data.loaders import dataset_root
    from cse_kit.data.registry import REGISTRY

    spec = REGISTRY["Wiki1M-sample"]
    with pytest.raises(data.MissingDatasetError) as missing:
        dataset_root(spec, tmp_path)
    [good] = spec.paths(data_dir)
    sample = tmp_path / good.relative_to(data_dir)
    sample.parent.mkdir(parents=True, exist_ok=True)
    sample.write_text(good.read_text()[:-300])
    with pytest.raises(data.UnverifiedDataError) as damaged:
        dataset_root(spec, tmp_path)
    for err in (missing, damaged):
        assert "cse-kit data import PATH/wiki1m_for_simcse.head11913.txt.gz" in str(err.value)
        assert "data download Wiki1M-sample" not in str(err.value)


def test_a_split_is_parsed_once_per_process_until_its_file_changes(own_copy, monkeypatch):
    from cse_kit.data import loaders

    parsed = []
    real = loaders._sts_split_file
    monkeypatch.setattr(loaders, "_sts_split_file", lambda *a: (parsed.append(a[0]), real(*a))[1])
    first = data.load_sts("STSBenchmark", "dev", own_copy)
    first.reverse()  # a caller's own list: reordering it changes nothing for the next caller
    again = data.load_sts("STSBenchmark", "dev", own_copy)
    assert len(parsed) == 1 and again == first[::-1] and len(again) == 1500
    f = own_copy / "downstream/STS/STSBenchmark/sts-dev.csv"
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))  # touched: read (and verified) again
    assert data.load_sts("STSBenchmark", "dev", own_copy) == again and len(parsed) == 2
