"""What the table notebooks call (`from cse_kit import experiments as ex`): notebooks hold parameters, calls and plots
only. The modules:

- `parameters.py`: a notebook's parameters checked before any training (check_parameters, check, sweep;
  ParameterError).
- `profiles.py`: what each profile's numbers are and can show; `auto` resolved to a profile whose models this machine
  can have.
- `session.py`: setup(), a notebook's first call: the profile, the seeds and the results store, as a Setup.
- `rows.py`: a table's rows over seeds through the results store (Row, run_rows, records, best_on_dev), each trained
  row with its untrained start where the profile shows it; the records other library versions computed.
- `columns.py`: a record's numbers as the papers' table columns.
- `paper_vs_ours.py`: the paper's number beside ours, mean ± std over seeds and Δ (compare), and what a notebook
  displays (show, show_values).
- `tables.py`: a notebook's table saved for the report (save_table).
- `render.py`: a comparison drawn in the paper's layout; `plots.py`: the figures.
- `typeset.py`: the same tables as LaTeX (booktabs) and Markdown, for a paper (write_tables)."""

import warnings

# tqdm.auto, imported by the libraries below, warns in a kernel without ipywidgets; the kit's bars are plain tqdm
warnings.filterwarnings("ignore", message="IProgress not found")

from ..train.presets import ProfileUnavailable  # noqa: E402  (what Row.subject raises on a profile it cannot run)
from .columns import (STS_COLUMNS, TRANSFER_COLUMNS, dev_columns, geometry_columns, retrieval_columns,  # noqa: E402
                      sts_test_columns, training_cost, transfer_eval, transfer_test_columns)
from .paper_vs_ours import (compare, comparison_frame, show, show_values, side_by_side, sweep_cell,  # noqa: E402
                            unpublished, why_not_run, with_paper)
from .parameters import ParameterError, as_list, check, check_parameters, sweep  # noqa: E402
from .profiles import (CPU_PROFILE_EVIDENCE, CPU_PROFILE_SCOPE, PROFILE_NOTES, PROFILE_SCOPES,  # noqa: E402
                       STARTS_SHOWN, auto_profile, chosen_profile, models_missing, require_models, resolve_profile)
from .rows import (RELEASED_SUFFIX, START_COLUMN, START_LABEL, Row, best_on_dev, records, run_rows,  # noqa: E402
                   stale_note, starting_point)
from .session import AMP_NOTE, Setup, setup  # noqa: E402
from .tables import TABLE_MIMETYPE, extra_layout, save_table, strict_json  # noqa: E402
from .typeset import write_tables  # noqa: E402

__all__ = ["ProfileUnavailable", "STS_COLUMNS", "TRANSFER_COLUMNS", "dev_columns", "geometry_columns",
           "retrieval_columns", "sts_test_columns", "training_cost", "transfer_eval", "transfer_test_columns",
           "compare", "comparison_frame", "show", "show_values", "side_by_side", "sweep_cell", "unpublished",
           "why_not_run", "with_paper", "ParameterError", "as_list", "check", "check_parameters", "sweep", "CPU_PROFILE_EVIDENCE",
           "CPU_PROFILE_SCOPE", "PROFILE_NOTES", "PROFILE_SCOPES", "STARTS_SHOWN", "auto_profile", "chosen_profile",
           "models_missing", "require_models", "resolve_profile", "RELEASED_SUFFIX", "START_COLUMN", "START_LABEL",
           "Row", "best_on_dev", "records", "run_rows", "stale_note", "starting_point", "AMP_NOTE", "Setup", "setup",
           "TABLE_MIMETYPE", "extra_layout", "save_table", "strict_json", "write_tables"]
