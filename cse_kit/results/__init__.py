"""The results store: one JSON record per run, keyed by what determines its numbers, so notebooks and the report
reuse finished runs instead of retraining them.

- `identity.py`: what a run is (its computing settings, code, data and files, evaluation protocol), its key and its
  configuration digest (the key without the seed); the one place that decides it.
- `store.py`: `ResultStore`, the records and run folders, locked per key, and the only reader of record files.
- `records.py`: a record's fields, its content digest, reading one from its file.
- `evaluations.py`: the evaluations a record can hold, by name.
- `upgrade.py`: a store of an older key scheme re-keyed in place, once, retraining nothing.
- `set_aside.py`: stale records kept readable while they are recomputed, and restored.
- `parallel.py`: its workers (local processes or SLURM)."""

from .evaluations import EVALUATIONS, SHARED_ENCODINGS, evaluation_name, with_shared_encodings
from .identity import (KEY_SCHEME, OUTSIDE_RESULT_CODE, RESULT_CODE, SAMPLES, Pretrained, code_version,
                       configuration_digest, data_checksums, data_fingerprint, evaluation_protocol, evaluation_sample,
                       identity, record_key, subject_dict)
from .records import CorruptRecord, UnreadableRecord, check_record, content_digest, default_results_dir, read_record
from .store import EVAL_AMP_ENV, ResultStore, evaluation_amp

__all__ = ["EVALUATIONS", "SHARED_ENCODINGS", "evaluation_name", "with_shared_encodings", "KEY_SCHEME",
           "OUTSIDE_RESULT_CODE", "RESULT_CODE", "SAMPLES", "Pretrained", "code_version", "configuration_digest",
           "data_checksums", "data_fingerprint", "evaluation_protocol", "evaluation_sample", "identity", "record_key",
           "subject_dict", "CorruptRecord", "UnreadableRecord", "check_record", "content_digest",
           "default_results_dir", "read_record", "EVAL_AMP_ENV", "ResultStore", "evaluation_amp"]
