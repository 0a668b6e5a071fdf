"""`cse-kit report`: execute (or reuse) every paper's table notebooks with papermill and build one self-contained
page, reports/index.html: a coverage matrix of every table and figure of the four papers (reproduced, not run on
this profile, not implemented yet, schematic), then one section per paper with each table in its paper's layout
(paper, ours mean ± std, Δ), the figures, the environment, and the executed notebooks. No script, style, font or
image is fetched from anywhere. The modules:

- `notebooks.py`: one notebook executed (or reused, by its execution_key) and what an executed notebook holds.
- `scheduling.py`: a report's notebooks one after another or several at once, the longest first.
- `coverage_matrix.py`: each table and figure's status, as HTML and as text (`cse-kit status`); the tables saved in
  the results store, read back.
- `page.py`: build(), the page: its sections, its paths made shareable.
- `paper_tables.py`: `cse-kit report --latex DIR --markdown DIR`, the page's tables as files from the saved tables.
- `plan.py`: `cse-kit report --plan`, the report's bill before it is spent (every run its notebooks need, its steps
  and hours, the wall time on N workers), priced with `step_times.py`'s measured step times (`--measure`); `needs.py`
  what each notebook asks for
- `checkout.py`: where the notebooks are; `stopping.py`: stops every process a report started."""

from .checkout import NOTEBOOK_DIR, ROOT
from .coverage_matrix import (COMPARABLE_PROFILE, STATUS_STYLE, comparison_frame, comparison_line, coverage,
                              coverage_html, coverage_text, saved_profiles, saved_tables, scope_html, tallies,
                              tally_text)
from .notebooks import (KERNEL_ENV, NOTEBOOKS, execute, execution_key, kernel_config, notebook_html,
                        notebook_warnings, table_of)
from .page import (PAGE, build, machine_paths, section_of, sections_html, select, table_html, where_text,
                   without_machine_paths)
from .paper_tables import profile_of_store, write_report_tables
from .scheduling import NOTEBOOK_SECONDS, default_jobs, execute_all, longest_first

__all__ = ["NOTEBOOK_DIR", "ROOT", "COMPARABLE_PROFILE", "STATUS_STYLE", "comparison_frame", "comparison_line",
           "coverage", "coverage_html", "coverage_text", "saved_profiles", "saved_tables", "scope_html", "tallies",
           "tally_text", "KERNEL_ENV", "NOTEBOOKS", "execute", "execution_key", "kernel_config", "notebook_html",
           "notebook_warnings", "table_of", "PAGE", "build", "machine_paths", "section_of", "sections_html", "select",
           "table_html", "where_text", "without_machine_paths", "profile_of_store", "write_report_tables",
           "NOTEBOOK_SECONDS", "default_jobs", "execute_all", "longest_first"]
