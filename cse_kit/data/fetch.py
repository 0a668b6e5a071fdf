"""Getting datasets into the data directory: download, import from local archives, verify.

Every path goes through a staging folder inside the data directory: archives are unpacked there, the dataset is
verified there (counts, md5), and only then are its files renamed into place (os.replace, atomic on one
filesystem). A failed or interrupted run leaves no half-written file where the loaders look.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

from .loaders import (
    ACCEPTED, CHUNK, DataError, accepted_md5s, checksum_problems, count_problems, count_records, md5_file,
)
from ..io import ensure_dir, remove_abandoned, write_json_atomic, writing
from .registry import REGISTRY, SIMCSE_HUB_REPO, DatasetSpec, Source, resolve_data_dir, spec


class ImportRefused(DataError):
    """Some datasets of an archive failed verification and were not placed (the verified ones were)."""

    def __init__(self, message: str, placed: dict, refused: dict):
        super().__init__(message)
        self.placed, self.refused = placed, refused


# --- verification ------------------------------------------------------------------------------------------------

def verify(ds: DatasetSpec, data_dir=None) -> dict:
    """{"present", "verified", "counts", "problems"} for one dataset under data_dir."""
    root = resolve_data_dir(data_dir)
    report = {"present": all(p.is_file() for p in ds.paths(root)), "verified": False, "counts": {}, "problems": []}
    if not report["present"]:
        return report
    report["problems"] = checksum_problems(ds, root)
    try:
        report["counts"] = count_records(ds.name, root)
    except DataError as e:
        report["problems"].append(str(e))
    report["problems"] += count_problems(ds, report["counts"])
    report["verified"] = not report["problems"]
    return report


def status(data_dir=None, names=None) -> dict:
    return {"datasets": {n: verify(spec(n), data_dir) for n in (names or REGISTRY)}}


# --- staging and placement ---------------------------------------------------------------------------------------

@contextmanager
def staging(data_dir: Path):
    """A fresh staging folder, named with this process's id so that the next run can tell (and remove) the ones
    a killed run left behind. A full disk is named as one (WriteFailed)."""
    ensure_dir(data_dir, "data directory (--data-dir, else $CSE_KIT_DATA)")
    remove_abandoned(data_dir, ".staging-")
    tmp = Path(tempfile.mkdtemp(prefix=f".staging-{os.getpid()}-", dir=data_dir))
    try:
        with writing(data_dir):
            yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_tail(stream) -> None:
    """Read a tar stream to its end. tarfile stops without a word at the first unreadable header after the first
    member (a damaged archive would place what came before and drop the rest), so only NUL padding may follow; and
    a gzip stream checks its CRC and length at its end."""
    while block := stream.read(CHUNK):
        if block.strip(b"\0"):
            raise tarfile.ReadError("unreadable data after the last member read (a damaged header)")


class UnsafeMember(Exception):
    """A tar member that would be placed outside the data directory, or is no plain file or folder."""

    def __init__(self, member: str, why: str):
        super().__init__(member, why)
        self.member, self.why = member, why


#: Why tarfile's "data" filter refuses a member (by the names of tarfile.FilterError's subclasses, which Pythons
#: without extraction filters do not have).
_UNSAFE = {"AbsolutePathError": "an absolute path", "OutsideDestinationError": "it would land outside the data "
           "directory", "AbsoluteLinkError": "a link to an absolute path", "LinkOutsideDestinationError": "a link "
           "out of the data directory", "SpecialFileError": "a device or other special file"}


def _extract_data(t: tarfile.TarFile, dest: Path) -> None:
    """Extract with tarfile's "data" filter (nothing outside dest, no devices, no links out of it). Pythons without
    extraction filters (3.10.0-3.10.11, 3.11.0-3.11.3: Debian 12's system Python is 3.11.2) extract the archive
    only if it holds plain files and folders inside dest, as every dataset archive does. UnsafeMember names the
    member refused."""
    if hasattr(tarfile, "data_filter"):
        try:
            t.extractall(dest, filter="data")
        except tarfile.FilterError as e:
            raise UnsafeMember(e.tarinfo.name, _UNSAFE.get(type(e).__name__, str(e))) from None
        return
    root = dest.resolve()
    for member in t.getmembers():
        if not (root / member.name).resolve().is_relative_to(root):
            raise UnsafeMember(member.name, _UNSAFE["OutsideDestinationError"])
        if not (member.isfile() or member.isdir()):
            raise UnsafeMember(member.name, "not a plain file or folder")
    t.extractall(dest)


def unpack(archive: Path, dest: Path) -> None:
    """Unpack a tar(.gz), zip or .gz file, or copy a plain file or a folder, into dest."""
    name = archive.name
    try:
        if archive.is_dir():
            shutil.copytree(archive, dest / name, symlinks=True)  # a link is another name of a file there
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as t:
                _extract_data(t, dest)
                _check_tail(t.fileobj)
        elif zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                z.extractall(dest)
        elif name.endswith(".gz"):
            with gzip.open(archive, "rb") as src, open(dest / name[:-3], "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
        else:
            shutil.copy2(archive, dest / name)
    except UnsafeMember as e:  # the archive is whole: one member is refused
        raise DataError(f"{archive} holds an unsafe path, member {e.member!r}: {e.why}; "
                        "nothing was placed. Use the archive from the dataset's own source, or unpack it yourself "
                        "and import the folder.") from None
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DataError(f"{archive} is not a complete archive ({type(e).__name__}: {e}); it is truncated or "
                        "not a .tar(.gz)/.zip/.gz file: copy or download it again. Nothing was placed.") from None


def find_dataset(ds: DatasetSpec, tree: Path) -> Path | None:
    """The folder under tree that holds all of ds's files at their registry-relative paths, if any."""
    first = ds.files[0]
    depth = len(Path(first).parts)
    for hit in sorted(tree.rglob(Path(first).name)):
        if hit.as_posix().endswith("/" + first):
            base = hit.parents[depth - 1]
            if all((base / f).is_file() for f in ds.files):
                return base
    return None


def _place(ds: DatasetSpec, base: Path, data_dir: Path) -> None:
    for rel in ds.files:
        target = data_dir / ds.group / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(base / rel, target)  # same filesystem: an atomic rename


def _record_accepted(ds: DatasetSpec, data_dir: Path, accept: bool) -> None:
    """Remember (accept) or forget the md5 of ds's placed files whose md5 differs from the reference by design."""
    before = accepted_md5s(data_dir)
    accepted = dict(before)
    for rel, path in zip(ds.files, ds.paths(data_dir)):
        key = f"{ds.group}/{rel}"
        accepted.pop(key, None)
        if accept and ds.reference_md5(rel) is not None and md5_file(path) != ds.reference_md5(rel):
            accepted[key] = md5_file(path)
    if accepted != before:
        write_json_atomic(data_dir / ACCEPTED, accepted)


def _stage_and_place(tree: Path, candidates, data_dir: Path, why_md5_differs: str | None = None):
    """Verify every dataset found in tree while it is still in staging, then move the verified ones into place.
    why_md5_differs: the reason a source's copy differs from the reference by design (the SNLI conversion); such
    a copy is placed when its counts match. Returns ({name: report} placed, {name: problems} refused)."""
    good, refused = {}, {}
    for ds in candidates:
        base = find_dataset(ds, tree)
        if base is None:
            continue
        shadow = tree / ".verify" / ds.name  # a data-dir-shaped view of this one dataset
        (shadow / ds.group).mkdir(parents=True)
        for rel in ds.files:
            (shadow / ds.group / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).rename(shadow / ds.group / rel)
        report = verify(ds, shadow)
        problems = [p.replace(f"{shadow}/", "") for p in report["problems"]]
        md5_only = bool(problems) and all("md5 differs" in p for p in problems)
        if problems and not (md5_only and why_md5_differs):
            refused[ds.name] = problems
            continue
        if problems:
            report.update(verified=True, problems=[], accepted=f"md5 differs from the reference copy: {why_md5_differs}")
        good[ds.name] = (ds, shadow, report)
    placed = {}
    for name, (ds, shadow, report) in good.items():
        _place(ds, shadow / ds.group, data_dir)
        _record_accepted(ds, data_dir, accept="accepted" in report)
        placed[name] = report
    return placed, refused


def _refusal(src, placed: dict, refused: dict) -> str:
    reasons = "; ".join(f"{name}: {' / '.join(problems)}" for name, problems in refused.items())
    kept = f"placed (verified): {', '.join(placed)}" if placed else "nothing was placed"
    return (f"{src}: {kept}; refused, failed verification (the copy already in the data directory, if any, was "
            f"kept): {reasons}. Fix: import an intact copy of the refused datasets (`cse-kit data import PATH`) "
            "or download them (`cse-kit data download NAME`)")


# --- import ------------------------------------------------------------------------------------------------------

def import_path(path, data_dir=None) -> dict[str, dict]:
    """Lay out every registry dataset found in a local archive or folder. Returns {name: verification report};
    raises ImportRefused (after placing the verified ones) when any dataset found failed verification."""
    src = Path(path).expanduser()
    if not src.exists():
        raise DataError(f"{src} does not exist; give an archive (.tar.gz, .tar, .zip, .gz) or a folder")
    root = resolve_data_dir(data_dir)
    with staging(root) as tmp:
        tree = tmp / "tree"
        tree.mkdir()
        if src.is_dir():
            shutil.copytree(src, tree / src.name)  # keep the folder's name: it may be part of the layout
        else:
            unpack(src, tree)
        for converter, inputs in IMPORT_CONVERTERS.items():
            if any(next(tree.rglob(name), None) for name in inputs):
                CONVERTERS[converter](tree)
        placed, refused = _stage_and_place(tree, REGISTRY.values(), root)
    if refused:
        raise ImportRefused(_refusal(src, placed, refused), placed, refused)
    if not placed:
        raise DataError(f"{src} holds none of the registry's datasets (expected e.g. downstream/STS/..., "
                        "sts_raw/stsbenchmark/..., wiki1m_for_simcse*.txt)")
    return placed


# --- download ----------------------------------------------------------------------------------------------------

class ResumableHTTPDownloader:
    """A pooch downloader that keeps a `.part` file beside the cache and continues it with an HTTP Range request,
    so an interrupted download of a large archive resumes instead of restarting."""

    def __init__(self, progressbar: bool = True, timeout: float = 60):
        self.progressbar = progressbar
        self.timeout = timeout

    def __call__(self, url: str, output_file: str, pooch_obj=None, check_only: bool = False):
        import requests
        from tqdm.auto import tqdm

        if check_only:
            return requests.head(url, timeout=self.timeout, allow_redirects=True).ok
        part = Path(pooch_obj.path if pooch_obj is not None else Path(output_file).parent) / (
            url.rstrip("/").rsplit("/", 1)[-1] + ".part")
        have = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with requests.get(url, headers=headers, stream=True, timeout=self.timeout) as r:
            if r.status_code == 416:  # the .part is already complete
                r.close()
            else:
                r.raise_for_status()
                if r.status_code != 206:  # server ignored the Range header: start over
                    have = 0
                total = have + int(r.headers.get("Content-Length", 0)) or None
                with open(part, "ab" if have else "wb") as f, tqdm(
                        total=total, initial=have, unit="B", unit_scale=True, desc=part.name[:-5],
                        disable=not self.progressbar) as bar:
                    for block in r.iter_content(CHUNK):
                        f.write(block)
                        bar.update(len(block))
        shutil.move(part, output_file)


def fetch_source(source: Source, cache_dir: Path, progressbar: bool = True) -> Path:
    """Download one source into cache_dir (resumable, checksum-checked when a checksum is known)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    if source.url.startswith("file:///"):  # a local source (e.g. a folder a system package installs)
        local = Path(source.url[len("file://"):])
        if not local.exists():
            raise DataError(f"{local} does not exist on this machine (its source: {source.url}); import a copy "
                            "with `cse-kit data import PATH`")
        return local
    if source.url.startswith("file:"):
        raise DataError(f"{source.filename} has no download source; import it: `cse-kit data import PATH`")
    if source.hub_file is not None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            return Path(hf_hub_download(SIMCSE_HUB_REPO, source.hub_file, repo_type="dataset",
                                        local_dir=cache_dir))
        except LocalEntryNotFoundError as e:
            raise DataError(f"cannot download {source.hub_file} from the Hugging Face Hub ({e}). Check the "
                            "connection (HF_HUB_OFFLINE must be unset), or import a local copy with "
                            "`cse-kit data import PATH`") from None
    import pooch

    known = f"sha256:{source.sha256}" if source.sha256 else None
    try:
        return Path(pooch.retrieve(source.url, known_hash=known, fname=source.filename, path=cache_dir,
                                   downloader=ResumableHTTPDownloader(progressbar), progressbar=progressbar))
    except ValueError as e:  # pooch's hash mismatch
        raise DataError(f"{source.url}: {e}. The download was discarded; try again, or import a local copy "
                        "with `cse-kit data import PATH`") from None


def _convert_snli_jsonl(tree: Path) -> None:
    """snli_1.0_{dev,test}.jsonl -> SentEval's SNLI/{s1,s2,labels}.{dev,test} (pairs with a gold label only)."""
    out = tree / "converted" / "SNLI"
    out.mkdir(parents=True)
    for split in ("dev", "test"):
        found = sorted(tree.rglob(f"snli_1.0_{split}.jsonl"))
        if not found:
            raise DataError(f"snli_1.0_{split}.jsonl not found in the SNLI archive")
        cols = {"s1": [], "s2": [], "labels": []}
        for line in found[0].read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["gold_label"] == "-":
                continue
            cols["s1"].append(row["sentence1"])
            cols["s2"].append(row["sentence2"])
            cols["labels"].append(row["gold_label"])
        for name, values in cols.items():
            (out / f"{name}.{split}").write_text("\n".join(values) + "\n", encoding="utf-8")


#: a sentence ends at . ! or ? followed by space and a capital letter, a quote or an opening bracket
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
#: shorter pieces are headings or list labels, not sentences
MIN_WORDS = 4


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in SENTENCE_END.split(" ".join(paragraph.split())) if len(s.split()) >= MIN_WORDS]


def _write_documents(path: Path, documents) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for doc in documents:
            if doc:
                out.write("\n".join(doc) + "\n\n")


#: WikiText's tokenizer splits hyphens, thousands separators and decimal points inside words and numbers into
#: " @-@ ", " @,@ " and " @.@ " (e.g. "role @-@ playing", "8 @,@ 600", "3 @.@ 5"); the converter joins them back
WIKITEXT_AT_TOKENS = re.compile(r" @([-,.])@ ")
#: the train file of each WikiText-103 archive: the raw one (the registry's source: no <unk>) first, else the
#: tokenized one (wikitext-103-v1.zip: rare words are <unk>, kept as they are)
WIKITEXT_TRAIN_FILES = ("wiki.train.raw", "wiki.train.tokens")


def _wikitext_articles(lines):
    """WikiText's train file: an article starts at its ' = Title = ' line; ' = = Section = = ' (and deeper) lines and
    blank lines are not text; every other line is a paragraph, split into sentences after its @-@, @,@ and @.@
    tokens are joined back (the rest of WikiText's tokenization, spaces around punctuation, is kept)."""
    article = None
    for line in lines:
        text = line.strip()
        if text.startswith("= ") and text.endswith(" =") and not text.startswith("= ="):
            if article:
                yield article
            article = []
        elif text and not text.startswith("=") and article is not None:
            article.extend(split_sentences(WIKITEXT_AT_TOKENS.sub(r"\1", f" {text} ")))
    if article:
        yield article


def _convert_wikitext_sentences(tree: Path) -> None:
    """The train split of a WikiText-103 archive (only: valid and test are other articles) as documents of sentences."""
    for name in WIKITEXT_TRAIN_FILES:
        found = sorted(tree.rglob(name))
        if found:
            break
    else:
        raise DataError(f"no {' or '.join(WIKITEXT_TRAIN_FILES)} in the WikiText-103 archive")
    with open(found[0], encoding="utf-8") as f:
        _write_documents(tree / "converted" / "wikitext103_train_sentences.txt", _wikitext_articles(f))


def _convert_license_sentences(tree: Path) -> None:
    """Each licence text (a regular file, sorted by name; links are other names of the same texts) as a document,
    its paragraphs (blank-line separated, hard-wrapped) split into sentences."""
    texts = sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())
    documents = [[s for para in re.split(r"\n\s*\n", p.read_text(encoding="utf-8")) for s in split_sentences(para)]
                 for p in texts]
    _write_documents(tree / "converted" / "common_licenses_sentences.txt", documents)


CONVERTERS = {"snli_jsonl": _convert_snli_jsonl, "wikitext_sentences": _convert_wikitext_sentences,
              "license_sentences": _convert_license_sentences}
#: converters `import` also runs, on an archive or folder that holds one of these files (the original archive of a
#: dataset the kit converts, e.g. wikitext-103-raw-v1.zip)
IMPORT_CONVERTERS = {"wikitext_sentences": WIKITEXT_TRAIN_FILES}
#: converter -> why its output's md5 differs from the reference copy while its records are the same
CONVERSION_DIFFERS = {"snli_jsonl": "converted from the official jsonl without SentEval's PTB tokenizer"}


def download(names=None, data_dir=None, progressbar: bool = True) -> dict[str, dict]:
    """Download, verify and lay out the named datasets (all when names is empty)."""
    root = resolve_data_dir(data_dir)
    wanted = [spec(n) for n in (names or REGISTRY)]
    by_source: dict[Source, list[DatasetSpec]] = {}
    for ds in wanted:
        by_source.setdefault(ds.source, []).append(ds)
    placed = {}
    for source, datasets in by_source.items():
        archive = fetch_source(source, root / ".cache", progressbar)
        with staging(root) as tmp:
            tree = tmp / "tree"
            tree.mkdir()
            unpack(archive, tree)
            if source.convert:
                CONVERTERS[source.convert](tree)
            found, refused = _stage_and_place(tree, datasets, root, CONVERSION_DIFFERS.get(source.convert))
        if refused:
            raise ImportRefused(_refusal(source.filename, {**placed, **found}, refused), {**placed, **found}, refused)
        missing = [ds.name for ds in datasets if ds.name not in found]
        if missing:
            raise DataError(f"{source.filename} does not contain {', '.join(missing)}")
        placed.update(found)
    return placed
