"""What a run is, decided here and nowhere else: which settings compute its numbers (every TrainConfig field but
those that say where its files go or how often it logs and saves: cse_kit.train.config.NOT_COMPUTING), from which
code and which files, under which evaluation protocol. A record's key is the digest of that identity; its
configuration digest is the same without the seed, so "this configuration under other seeds" is one comparison
(ResultStore.same_configuration) that cannot mix two versions of a researcher's method or two data files.

Key schemes: 1 hashed every setting but output_dir, data_dir and log_with; 2 leaves out every NOT_COMPUTING setting
and hashes a user's NLI file too; 3 (KEY_SCHEME) hashes a method's own settings as its Options (method_options),
and no other method's. A store keyed under an older scheme is re-keyed in place once (cse_kit.results.upgrade), and
so are records computed by code that the whole `cse-kit doctor` found to give the same numbers (code_lineage.json)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..data import REGISTRY, allow_unverified, resolve_data_dir
from ..data.loaders import md5_file
from ..data.registry import BUILT_SOURCES
from ..environment import PACKAGE, source_digest
from ..methods.registry import method_class, method_digest
from ..train.config import NOT_COMPUTING, TrainConfig
from ..train.precision import resolve_precision
from ..train.step import resolve_padding

#: The parts of the package whose code decides a result (notebook helpers, report and CLI do not).
RESULT_CODE = ("methods", "train", "eval", "data", "models")
#: ... but for the MTEB wrapper (it changes no SentEval number; each MTEB result carries its own digest,
#: cse_kit.eval.mteb_eval.WRAPPER_DIGEST) and the reader of the papers' published numbers
OUTSIDE_RESULT_CODE = ("eval/mteb_eval.py", "data/published.py")
#: The key scheme this release writes (the module's docstring); records say theirs in `key_scheme`.
KEY_SCHEME = 3
#: The kinds of evaluation_sample: how much of the STS test and of the transfer sets an evaluation reads.
SAMPLES = ("sts_sample", "transfer_sample")
#: The files of a run whose content its identity holds, by the TrainConfig field that names them: a user's
#: training corpus, dev set and NLI triplets (registered datasets are checked against data/checksums.json instead).
USER_FILES = {"data": "training_file_md5", "dev_data": "dev_data_md5", "nli_data": "nli_data_md5"}


@dataclass(frozen=True)
class Pretrained:
    """A model evaluated as it is, without training (e.g. DiffCSE Table 11's "Avg. BERT-base")."""

    model: str
    pooler: str
    profile: str | None = None


@lru_cache(maxsize=1)  # once per process: the code a process runs is what it imported at start
def code_version() -> str:
    return source_digest(RESULT_CODE, OUTSIDE_RESULT_CODE)


CHECKSUMS_FILE = PACKAGE / "data" / "checksums.json"


@lru_cache(maxsize=1)
def data_checksums() -> str:
    """Digest of the checksums every imported or downloaded data file is verified against."""
    return hashlib.sha256(CHECKSUMS_FILE.read_bytes()).hexdigest()[:16]


def unverified_files(data_dir: str | None = None) -> tuple[tuple[str, str], ...]:
    """(path under the data directory, md5) of every registry file present: what a run may read where
    CSE_KIT_ALLOW_UNVERIFIED_DATA lets files differ from the reference copy."""
    root = resolve_data_dir(data_dir)
    return tuple((str(path.relative_to(root)), md5_file(path)) for ds in REGISTRY.values()
                 for path in ds.paths(root) if path.is_file())


@lru_cache(maxsize=None)
def data_fingerprint(data_dir: str | None = None) -> str:
    """What the data a record is computed from is known to be. The loaders refuse any file that differs from the
    reference copy, so that is the reference checksums; with CSE_KIT_ALLOW_UNVERIFIED_DATA set, files that differ
    may be read, so it is the md5 of every registry file actually present (results from damaged data never land
    under the clean key)."""
    if not allow_unverified():
        return data_checksums()
    digest = hashlib.sha256()
    for path, md5 in unverified_files(None if data_dir is None else str(data_dir)):
        digest.update(f"{path} {md5}\n".encode())
    return f"{data_checksums()}+unverified-{digest.hexdigest()[:16]}"


def computing_settings(settings: dict) -> dict:
    """A configuration's settings (TrainConfig.to_dict()) without those that compute nothing."""
    return {k: v for k, v in settings.items() if k not in NOT_COMPUTING}


def subject_dict(subject: TrainConfig | Pretrained, cuda: bool | None = None) -> dict:
    """The subject's part of its identity, as its record holds it (`subject`): its computing settings, the method's
    own as its Options (method_options). mixed_precision is the precision the
    run trains in (resolve_precision: `auto` is bf16 or fp32 on a CPU by its bf16 unit, bf16 on a GPU; fp16 is fp32
    on a CPU), so a store shared by machines that resolve a setting differently never shows one machine's run for
    another's; pad_to likewise (resolve_padding: `auto` is fixed on a GPU, longest on a CPU). cuda: whether the run trains on a GPU, None for this machine (True for the GPU jobs a SLURM submitter
    without one plans: results.parallel; their worker nodes, with a GPU, compute the same key)."""
    if isinstance(subject, TrainConfig):
        settings = computing_settings(subject.to_dict())
        return {"kind": "trained", **settings, "mixed_precision": resolve_precision(subject.mixed_precision, cuda),
                "pad_to": resolve_padding(subject.pad_to, cuda)}
    return {"kind": "pretrained", **dataclasses.asdict(subject)}


def evaluation_sample(profile: str | None, kind: str) -> int | None:
    """How much of the evaluation sets a profile's `kind` evaluations read (None: all, as SentEval):
    "transfer_sample" records per transfer split, "sts_sample" STS test pairs per subset. Only the smoke profile
    samples: it checks the pipeline, and its tiny models would otherwise spend most of a smoke report encoding the
    108k transfer sentences (and fitting classifiers on them) and the 27k STS test sentences."""
    from ..train.presets import PROFILES

    return PROFILES.get(profile, {}).get("report", {}).get(kind)


def evaluation_protocol(profile: str | None, amp: bool = False) -> dict:
    """What decides a record's numbers beyond its subject (which holds the pooler, the max length and every training
    setting), the code and the data: how much of the evaluation sets its profile's evaluations read
    (evaluation_sample), and AMP when asked (amp). The evaluation mode is in each evaluation's name (`sts_dev`,
    `transfer_fasttest`). Whole sets in fp32 add nothing, so such a record keeps the key it had before samples and
    AMP existed. AMP is keyed as asked, not as the machine resolves it: a record evaluated under AMP, bf16 or,
    without a unit, fp32, never stands for an fp32 one; it says which it ran in (`evaluation_precision`)."""
    protocol = {kind: n for kind in SAMPLES if (n := evaluation_sample(profile, kind)) is not None}
    return {**protocol, "amp": True} if amp else protocol


def user_file(value: str | None) -> bool:
    """Whether a data setting names a file of one's own (not a registered or built dataset)."""
    return bool(value) and value not in (*REGISTRY, *BUILT_SOURCES)


def files_of(settings: dict | None, data_dir=None) -> list[dict]:
    """Every file the identity of a run of settings (TrainConfig.to_dict(); None for a model evaluated as it is)
    hashes, as its record names it: the path as given and its checksum (the reference checksums the loaders verify
    registered data against, or under CSE_KIT_ALLOW_UNVERIFIED_DATA each registry file present)."""
    if allow_unverified():
        root = resolve_data_dir(data_dir)
        files = [{"role": "registered data (unverified)", "path": str(root / path), "md5": md5}
                 for path, md5 in unverified_files(None if data_dir is None else str(data_dir))]
    else:
        files = [{"role": "registered data's reference checksums", "path": str(CHECKSUMS_FILE),
                  "sha256": data_checksums()}]
    return files + [{"role": name, "path": value, "md5": md5_file(Path(value))}
                     for name in USER_FILES if user_file(value := (settings or {}).get(name))]


def identity(subject: TrainConfig | Pretrained, data_dir=None, amp: bool = False, cuda: bool | None = None) -> dict:
    """Everything a record's numbers are computed from: its subject's computing settings, the code, the data, the
    evaluation protocol, the content of a user's files and a researcher's method's source."""
    what = {"subject": subject_dict(subject, cuda), "code": code_version(),
            "data": data_fingerprint(None if data_dir is None else str(data_dir))}
    if protocol := evaluation_protocol(subject.profile, amp):
        what["evaluation"] = protocol
    if isinstance(subject, TrainConfig):
        what.update({digest: md5_file(Path(value)) for name, digest in USER_FILES.items()
                     if user_file(value := getattr(subject, name))})
        if source := method_digest(method_class(subject.method)):
            what["method_source"] = source  # a researcher's method: editing its module recomputes its runs only
    return what


def digest_of(what: dict, length: int = 20) -> str:
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:length]


def configuration_digest(what: dict) -> str:
    """The digest of an identity without its seed: the same for the runs of one configuration under every seed."""
    return digest_of({**what, "subject": {k: v for k, v in what["subject"].items() if k != "seed"}})


def record_key(subject: TrainConfig | Pretrained, data_dir=None, amp: bool = False, cuda: bool | None = None) -> str:
    return digest_of(identity(subject, data_dir, amp, cuda))
