"""The table notebooks (papermill, smoke profile), their jupytext twins, and the HTML report."""

import contextlib
import http.server
import json
import os
import re
import shutil
import socketserver
import subprocess
import threading
import time
from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest

from cse_kit import report
from cse_kit.report import scheduling
from cse_kit.experiments import TABLE_MIMETYPE
from cse_kit.progress import TERMINAL_PROGRESS_ENV
from cse_kit.data.published import paper_table

import kit_process
from conftest import REPO, run_notebook

NOTEBOOKS = REPO / "notebooks"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: how every browser test runs Chromium (besides --headless and a fresh --user-data-dir): no sandbox (root in CI), and
#: none of its own calls to Google's services that can be turned off
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def headless_page(playwright, profile: Path, width: int, height: int, timeout_ms: int):
    """(browser, page): headless Chromium as every browser test runs it, a fresh profile folder, one page."""
    browser = playwright.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                            args=CHROMIUM_FLAGS,
                                                            viewport={"width": width, "height": height})
    page = browser.pages[0]
    page.set_default_timeout(timeout_ms)
    return browser, page

SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("results")


def _run(name, tmp_path, data_dir, results_dir, **params):
    return run_notebook(NOTEBOOKS / f"{name}.ipynb", tmp_path / f"{name}.out.ipynb",
                        {"data_dir": str(data_dir), "results_dir": str(results_dir), **params})


@pytest.mark.parametrize("name", report.NOTEBOOKS)
def test_notebook_is_paired_stripped_and_parameterized(name):
    source, twin = NOTEBOOKS / f"{name}.ipynb", NOTEBOOKS / f"{name}.py"
    nb, text = jupytext.read(source), jupytext.read(twin)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in text.cells], \
        f"{name}.ipynb and {name}.py differ: run `jupytext --sync notebooks/{name}.py`"
    assert all(not c.get("outputs") for c in nbformat.read(source, as_version=4).cells), f"{name}.ipynb has outputs"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    params = papermill.inspect_notebook(str(source))
    assert {"profile", "seeds", "data_dir", "results_dir", "force"} <= set(params)
    assert all(p["inferred_type_name"] != "None" and p["help"] for p in params.values()), params
    first = next(c.source for i, c in enumerate(nb.cells) if i and "parameters" in nb.cells[i - 1].metadata.get("tags", []))
    code = [line for line in first.splitlines() if line and not line.startswith(("from ", "import "))]
    assert code[0] == "ex.check_parameters()", f"{name}: its first call must check the parameters papermill injected"


#: what a notebook may display: the kit's formatters (a comparison in the paper's layout, any other table)
KIT_FORMATTERS = ("ex.show", "ex.show_values")
#: what a cell may end with: calls that show something or return nothing
LAST_CALLS = ("display", "print", "ex.save_table", "ex.check")


@pytest.mark.parametrize("name", report.NOTEBOOKS)
def test_notebook_shows_tables_through_the_kit_and_ends_no_cell_with_a_value(name):
    """One formatter for every table (a raw frame showed SCD Figure 2's 0.000199 beside Table 11's 5.81e-06 ± 1.6e-09,
    and record keys): every display() goes through the kit's, and no cell's last line is a bare value, which Jupyter
    would print as it is (a frame, a machine path)."""
    import ast

    for cell in jupytext.read(NOTEBOOKS / f"{name}.py").cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "display":
                shown = node.args[0]
                assert isinstance(shown, ast.Call) and ast.unparse(shown.func) in KIT_FORMATTERS, \
                    f"{name}: display({ast.unparse(shown)}) shows a raw value; use ex.show or ex.show_values"
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = tree.body[-1].value
            assert isinstance(last, ast.Call) and ast.unparse(last.func) in LAST_CALLS, \
                f"{name}: a cell ends with {ast.unparse(last)}, which the notebook would print raw"


def test_the_design_cards_papermill_command_shows_the_kits_progress_and_the_papers_value(tmp_path, data_dir,
                                                                                          results_dir):
    """`papermill notebooks/table8_lambda.ipynb out.ipynb -p lam 0.005` as a person types it (on smoke, with the
    test's stores): without --log-output papermill prints only its cell bar, so the kit's progress lines (which run,
    which step, the time left) reach the terminal through the kernel process's own stderr, which papermill's terminal
    shows; the notebook's stderr stream keeps its lines of each run's start and end, once each, and no step."""
    import os
    import sys

    out = tmp_path / "out.ipynb"
    # a person's shell: no report's setting, and no pytest, under which ipykernel leaves fd 2 alone
    env = {k: v for k, v in os.environ.items() if k not in (TERMINAL_PROGRESS_ENV, "PYTEST_CURRENT_TEST")}
    terminal = subprocess.run([sys.executable, "-m", "papermill", "notebooks/table8_lambda.ipynb", str(out), "-p",
                               "lam", "0.005", "-p", "profile", "smoke", "-p", "data_dir", str(data_dir), "-p",
                               "results_dir", str(results_dir)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600)
    assert terminal.returncode == 0, terminal.stdout
    printed = re.findall(r"\[cse-kit\] [^\r\n]*", terminal.stdout)  # papermill's bar may share their line
    # the trained row, then its untrained start (smoke and cpu tables show it: issue 56), evaluated, not trained
    assert printed[:2] == ["[cse-kit] 2 runs: 0 finished, computing 2", "[cse-kit] run 1/2: 0.005, seed 1"], printed
    assert any(re.fullmatch(r"\[cse-kit\] run 2/2: untrained smoke-bert \(\w+\), seed 1", line) for line in printed)
    steps = [line for line in printed if line.startswith("[cse-kit] step ")]
    assert re.fullmatch(r"\[cse-kit\] step 1/8, about \d+ (s|min) left", steps[0]), printed
    assert "[cse-kit] evaluating sts_dev" in printed, printed
    assert [line for line in printed if re.match(r"\[cse-kit\] run 1/2: done in \d+ (s|min)", line)], printed
    nb = nbformat.read(out, as_version=4)
    stream = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stderr")
    # the notebook's own output: one line as each run starts and ends, as before; its steps went to the terminal only
    # (a run's header lines, what it trains and the official run it reproduces, go to both)
    run_line = re.compile(r"\[cse-kit\] (\d+ runs?: |run \d+/\d+: )")
    runs = [line for line in printed if run_line.match(line)]
    kept = re.findall(r"\[cse-kit\] [^\n]*", stream)
    assert [line for line in kept if run_line.match(line)] == runs, stream
    assert not [line for line in kept if re.match(r"\[cse-kit\] (step|evaluating) ", line)], stream
    table = report.table_of(nb)
    assert table["profile"] == "smoke" and table["seeds"] == [1]  # the smoke profile's one seed
    [row] = table["comparison"]
    assert row["row"] == "0.005" and row["paper"] == 84.56 and row["n"] == 1
    assert -100 < row["mean"] < 100 and row["diff"] == pytest.approx(row["mean"] - 84.56)
    shown = "".join(o.get("data", {}).get("text/html", "") for c in nb.cells for o in c.get("outputs", []))
    assert "84.56" in shown and "0.005" in shown
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert len(list((results_dir / "records").glob("*.json"))) == 2  # the run and its untrained start


def test_a_notebooks_table_reaches_the_notebook_and_the_store_as_strict_json(tmp_path, data_dir):
    """A row a profile cannot run leaves NaN in a notebook's extra tables (ESimCSE Table 8's gains, compare_methods'
    paper number beside the shared recipe): save_table's display message carries it as null, not as NaN, which is
    not JSON (jupyter_client warned that such messages are deprecated); so does the table it writes."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import math\nfrom cse_kit import experiments as ex\n"
        f"s = ex.setup('smoke', [1], {str(data_dir)!r}, {str(tmp_path / 'results')!r})\n"
        "ex.save_table(s, 'gains', 'gains', extra={'tables': {'gains': [{'ours': math.nan, 'paper': -math.inf}]}})")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, tmp_path / "gains.ipynb")
    table = report.table_of(run_notebook(tmp_path / "gains.ipynb", tmp_path / "gains.out.ipynb", {}))
    assert table["extra"]["tables"]["gains"] == [{"ours": None, "paper": None}]

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    saved = json.loads((tmp_path / "results" / "tables" / "gains.json").read_text(), parse_constant=refuse)
    assert saved["extra"] == table["extra"]


def test_diffaug_table8_single_alpha_and_table5_show_the_papers_values(tmp_path, data_dir, results_dir):
    table = report.table_of(_run("diffaug_table8_aux_weight", tmp_path, data_dir, results_dir, aux_weight=0.001,
                                 profile="smoke", seeds=[1]))
    [row] = table["comparison"]
    assert (row["row"], row["column"], row["paper"], row["n"]) == ("0.001", "STS-B dev.", 86.3, 1)
    assert table["paper"] == "diffaug" and -100 < row["mean"] < 100
    table = report.table_of(_run("diffaug_table5_hparams", tmp_path, data_dir, results_dir, profile="smoke"))
    cells = {(c["row"], c["column"]): c for c in table["comparison"]}
    assert cells[("Semi-supervised w/o aux", "stage 1 training steps")]["mean"] == 2000
    assert cells[("Semi-supervised w/o aux (official code)", "stage 1 training steps")]["diff"] == -500
    assert cells[("Supervised (w/o aux) (smoke profile)", "stage 1 training steps")]["mean"] == 4


def test_diffaug_table6_shows_the_papers_consert_joint_beside_ours_and_the_alpha_it_chose(tmp_path, data_dir,
                                                                                             results_dir):
    nb = _run("diffaug_table6_semi_baselines", tmp_path, data_dir, results_dir, profile="smoke", seeds=[1],
              strategies=["joint"], alphas=[0.1, 1.0], baselines=["ConSERT"])
    table = report.table_of(nb)
    cells = {(c["row"], c["column"]): c for c in table["comparison"]}
    assert {r for r, _ in cells} == {"ConSERT_joint"}
    joint = cells[("ConSERT_joint", "Avg.")]
    assert joint["paper"] == 78.87 and joint["n"] == 1 and -100 < joint["mean"] < 100
    chosen = {r["row"]: r["α chosen on STS-B dev"] for r in table["extra"]["tables"]["α chosen on STS-B dev"]}
    assert set(chosen) == {"ConSERT_joint"} and set(chosen.values()) <= {"0.1", "1"}
    assert any("prints Avg. 79.81; its cells average to 79.57" in note for note in table["notes"])


def test_compare_methods_shows_seeds_significance_and_cost_on_smoke(tmp_path, data_dir, results_dir):
    from cse_kit.papers import comparison as cmp
    from cse_kit.results import ResultStore
    from test_mteb import sts_task

    # one run with an MTEB result (as `cse-kit eval --benchmark mteb` on its model leaves it): its method gains MTEB
    # columns, the other none
    store = ResultStore(results_dir, data_dir)
    simcse = store.get(cmp.rows("smoke", ["SimCSE"], ["paper recipe"])[0].subject("smoke", 1), cmp.evaluations(None))
    record, _ = store.get_mteb(simcse["key"], [sts_task(data_dir)[0]])
    nb = _run("compare_methods", tmp_path, data_dir, results_dir, profile="smoke", methods=["SimCSE", "ConSERT"],
              recipes=["paper recipe"], bootstrap_samples=50)
    table = report.table_of(nb)
    assert table["paper"] is None and table["seeds"] == [1, 2]
    scores = {r["method"]: r for r in table["extra"]["tables"]["scores"]}
    assert set(scores) == {"SimCSE", "ConSERT"} and scores["SimCSE"]["seeds"] == 2
    mteb = table["extra"]["tables"]["MTEB main scores"]
    assert [(r["method"], r["seeds"]) for r in mteb] == [("SimCSE", 1)]
    assert mteb[0]["MTEB LocalSTSBenchmark"] == 100 * record["metrics"]["mteb"]["LocalSTSBenchmark"]["main_score"]
    assert scores["SimCSE"]["Avg. MTEB mean"] == mteb[0]["Avg. MTEB"]
    assert scores["SimCSE"]["paper Avg. STS"] == 76.25 and -100 < scores["ConSERT"]["Avg. STS mean"] < 100
    matrix = table["extra"]["tables"]["paper recipe: paired t-test over seeds"]
    assert {r["row − column"] for r in matrix} == {"SimCSE", "ConSERT"}
    assert any(note.startswith("paper recipe: SimCSE > ConSERT (DiffAug Table 1): ") for note in table["notes"])
    cost = {r["method"]: r for r in table["extra"]["tables"]["cost"]}
    assert cost["SimCSE"]["time ratio to SimCSE"] == 1.0 and cost["ConSERT"]["projected hours"] > 0
    assert len(table["figures"]) == 2


def test_diffaug_figure3_measures_every_stage1_snapshot_of_the_run(tmp_path, data_dir, results_dir):
    nb = _run("diffaug_figure3_dynamics", tmp_path, data_dir, results_dir, profile="smoke", seeds=[1],
              stage1_steps=3, snapshot_steps=1, sentences=40)
    table = report.table_of(nb)
    cells = {(c["row"], c["column"]): c for c in table["comparison"]}
    assert {row for row, _ in cells} == {"1", "2", "3", "dropout (SimCSE)"}
    assert all(cells[(k, "δ")]["n"] == 1 and cells[(k, "κ")]["mean"] > 0 for k in ("1", "2", "3"))
    assert cells[("dropout (SimCSE)", "δ")]["mean"] > 0 and "40 STS-B dev sentences" in table["notes"][0]
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.slow
@pytest.mark.parametrize("name,params,row,column", [
    ("diffaug_table1_sts", {}, "DiffAug (ours) w/ aux loss", "Avg."),
    ("diffaug_table2_7_label_fraction", {"fraction": 0.01}, "7: DiffAug (ours) (supervised)", "1%"),
    ("diffaug_figure5_stage1_steps", {"stage1_steps": [2, 4]}, "4", "STS-B"),
    ("diffaug_table3_modules", {}, "LoRA (different, r = 64)", "STS-B dev."),
    ("diffaug_table4_cost", {}, "DiffAug (ours)", "time ratio to SimCSE"),
    ("diffaug_figure4_prefix_length", {"lengths": [2, 4]}, "4", "STS-B"),
])
def test_diffaug_notebooks_run_on_smoke(name, params, row, column, tmp_path, data_dir, results_dir):
    table = report.table_of(_run(name, tmp_path, data_dir, results_dir, profile="smoke", seeds=[1], **params))
    cells = {(c["row"], c["column"]): c for c in table["comparison"]}
    assert cells[(row, column)]["n"] == 1 and -100 < cells[(row, column)]["mean"] < 100


@pytest.mark.slow
@pytest.mark.parametrize("name,params,row", [
    ("table3_objective", {"variant": "DiffCSE use next sent. for x′"}, "DiffCSE use next sent. for x′"),
    ("table4_augmentation", {"edit": "delete"}, "randomly delete 15%"),
    ("table15_pos_neg", {"roles": ["negative"], "edits": ["insert"]}, "+ Additional negatives: random insert 15%"),
])
def test_ablation_notebooks_run_on_smoke(name, params, row, tmp_path, data_dir, results_dir):
    """Tables 3, 4, 15 with one row (besides SimCSE): the paper's value beside ours, STS-B dev only off `paper`."""
    table = report.table_of(_run(name, tmp_path, data_dir, results_dir, profile="smoke", seeds=[1], **params))
    cells = {(c["row"], c["column"]): c for c in table["comparison"]}
    assert cells[(row, "STS-B")]["n"] == 1 and -100 < cells[(row, "STS-B")]["mean"] < 100
    assert cells[(row, "STS-B")]["paper"] == paper_table(int(name.split("_")[0][5:]))["STS-B"][row]
    assert cells[(row, "Avg. transfer")]["n"] == 0 and "paper profile only" in table["notes"][0]


# each case starts a kernel (~9 s): a few in the default run (the parameter parsing shared by every notebook,
# one check per paper), the rest with -m slow
@pytest.mark.parametrize("name,params,message", [
    ("table8_lambda", {"lam": -1.0}, "λ must be"),
    pytest.param("table7_mask_ratio", {"mask_ratio": 1.5}, "masking ratios must lie in", marks=SLOW),
    pytest.param("table6_generator", {"generator": "gpt2"}, "unknown generator", marks=SLOW),
    pytest.param("table1_sts", {"profile": "laptop"}, "unknown profile", marks=SLOW),
    pytest.param("table3_objective", {"variant": "w/o RTD"}, r"unknown Table 3 variant\(s\) \['w/o RTD'\]", marks=SLOW),
    pytest.param("table4_augmentation", {"edit": "swap"}, r"unknown edit\(s\) \['swap'\]", marks=SLOW),
    pytest.param("table15_pos_neg", {"roles": ["neutral"]}, r"unknown role\(s\) \['neutral'\]", marks=SLOW),
    pytest.param("table15_pos_neg", {"edits": ["all"]}, r"unknown edit\(s\) \['all'\]", marks=SLOW),
    ("scd_table3_ablation", {"recipe": "nope"}, "unknown SCD recipe"),
    pytest.param("scd_table1_sts", {"recipe": "official-code"}, "BERT only", marks=SLOW),
    pytest.param("scd_figure2_alignment", {"geometry": "cosine"}, "unknown geometry", marks=SLOW),
    ("table8_lambda", {"lamda": 0.1}, r"unknown notebook parameter\(s\) \['lamda'\]; this notebook takes: data_dir"),
    ("diffaug_table1_sts", {"recipe": "nope"}, "unknown DiffAug recipe"),
    pytest.param("table8_lambda", {"seeds": [1, 1]}, r"repeat \[1\]: each seed is one run", marks=SLOW),
    ("table8_lambda", {"seeds": "[1, 1]"}, r"repeat \[1\]: each seed is one run"),  # `-p seeds '[1, 1]'`: text, parsed
    ("table8_lambda", {"lams": "0.1"}, r"notebook parameter lams is a list, got the text '0.1'; pass it as -p lams"),
    pytest.param("diffaug_table2_7_label_fraction", {"fraction": 1.5}, r"label fractions lie in \(0, 1\]", marks=SLOW),
    pytest.param("diffaug_table2_7_label_fraction", {"recipe": "official-code"}, "BERT only", marks=SLOW),
    pytest.param("diffaug_table8_aux_weight", {"aux_weight": -0.1}, "α is a positive number", marks=SLOW),
    pytest.param("diffaug_figure5_stage1_steps", {"stage1_steps": [0, 4]}, "stage-1 lengths are positive integers", marks=SLOW),
])
def test_bad_parameters_fail_in_the_first_cell_before_training(name, params, message, tmp_path, data_dir):
    with pytest.raises(papermill.PapermillExecutionError, match=message):
        _run(name, tmp_path, data_dir, tmp_path / "results", **{"profile": "smoke", **params})
    assert not (tmp_path / "results").exists()


class _CountingProxy(socketserver.ThreadingTCPServer):
    """Every connection the browser opens through its proxy: any request for a non-file URL lands here."""

    allow_reuse_address = True

    def __init__(self):
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def handle_one_request(self):
                line = self.rfile.readline(2048).decode(errors="replace").strip()
                if line:
                    outer.requests.append(line)

        super().__init__(("127.0.0.1", 0), Handler)


def test_report_builds_reuses_and_renders_offline(tmp_path, data_dir, results_dir):
    only = ["figure2_cosine", "table12_14_hparams"]
    out = tmp_path / "reports"
    console = []
    index = report.build("smoke", results_dir, data_dir, out, only=only, log=console.append)
    page = index.read_text()
    assert any(line.startswith("    figure2_cosine: ") and re.search(r" runs?: ", line) for line in console), console
    assert any(line.startswith("    figure2_cosine: run 1/") for line in console) or \
        any(line.endswith("computing 0") for line in console)  # a line per run it computed (none if all cached)
    assert "[cse-kit]" not in page  # the progress lines went to the console only
    assert "Figure 2: cosine similarity by gold-score group" in page and "Tables 12-14" in page
    assert page.count("data:image/png;base64,") >= 2 and "class='failed'" not in page
    assert "http://" not in page and "https://" not in page  # nothing to fetch: no script, style, font, image URL
    assert "7e-06" in page and ">0.005<" in page  # Table 12's learning rate and λ, not rounded to 0.00 / 0.01
    built = json.loads((out / "report.json").read_text())
    lines = {(c["paper"], c["artefact"]): c for c in built["coverage"]}
    assert len([c for c in lines.values() if c["status"] != "schematic"]) == 42
    assert lines[("DiffCSE", "Figure 2")]["status"] == "built (smoke)" and lines[("DiffCSE", "Figure 2")]["profile"] == "smoke"
    assert lines[("DiffCSE", "Table 8")]["status"] == "not built"  # implemented, not executed in this build
    assert lines[("DiffCSE", "Figure 1")]["status"] == "schematic"
    assert "reproduced (" not in page and "DiffCSE 4/16 built on smoke; SCD 0/4 built on smoke" in page  # the tallies
    assert page.index("id=\"coverage\"") < page.index("id='paper-diffcse'") < page.index("id='figure2_cosine'")
    runs = built["runs"]
    assert [r["status"] for r in runs] == ["ok", "ok"]
    killed = out / "executed" / "figure2_cosine__0123456789abcdef.running.ipynb"  # a report killed mid-notebook
    killed.write_text("{}")
    report.build("smoke", results_dir, data_dir, out, only=only, log=lambda *_: None)
    assert [r["status"] for r in json.loads((out / "report.json").read_text())["runs"]] == ["reused", "reused"]
    assert not killed.exists()
    assert "PosixPath(" not in page  # no notebook's last cell shows a machine path
    assert not [p for p in (results_dir, data_dir, report.ROOT) if str(p) in page]  # nor any printed output

    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    shot = tmp_path / "report.png"
    hosts = _render(index.as_uri(), shot, tmp_path / "chromium")
    assert _page_width(index, tmp_path) <= 1400  # nothing runs off a 1400-px window
    assert shot.is_file() and shot.stat().st_size > 10_000
    # Chromium calls its own Google services (time, accounts, component updates) even for an empty page; the page
    # adds nothing
    assert all(_chromiums_own(h) for h in hosts), hosts
    blank = tmp_path / "blank.html"
    blank.write_text("<!doctype html><title>blank</title>")
    assert all(_chromiums_own(h) for h in _render(blank.as_uri(), tmp_path / "b.png", tmp_path / "c-blank"))


def _chromiums_own(host: str) -> bool:
    """A host of the Google services Chromium calls by itself (Chromium 156 added update.googleapis.com)."""
    return any(host == domain or host.endswith("." + domain) for domain in ("google.com", "googleapis.com"))


def _render(url: str, screenshot: Path, profile_dir: Path) -> list[str]:
    """Screenshot url in headless Chromium with every request sent through a counting proxy; the hosts asked for."""
    proxy = _CountingProxy()
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        subprocess.run([CHROMIUM, "--headless", *CHROMIUM_FLAGS,
                        f"--user-data-dir={profile_dir}", f"--proxy-server=127.0.0.1:{proxy.server_address[1]}",
                        "--proxy-bypass-list=<-loopback>", "--window-size=1200,2000", f"--screenshot={screenshot}",
                        url], check=True, capture_output=True, timeout=120)
    finally:
        proxy.shutdown()
    return [_host(line) for line in proxy.requests]


def _page_width(index: Path, tmp_path: Path) -> int:
    """The page's scroll width in a 1400-px headless Chromium window (a copy of the page reports it in its title)."""
    probe = tmp_path / "width.html"
    probe.write_text(index.read_text().replace(
        "</body>", "<script>document.title = 'width=' + document.documentElement.scrollWidth</script></body>"))
    out = subprocess.run([CHROMIUM, "--headless", *CHROMIUM_FLAGS,
                          f"--user-data-dir={tmp_path / 'chromium-width'}", "--window-size=1400,900", "--dump-dom",
                          probe.as_uri()], check=True, capture_output=True, text=True, timeout=120).stdout
    return int(out.split("width=", 1)[1].split("<", 1)[0])


def test_jupyterlab_runs_table8_in_a_browser_and_opens_its_py_twin_as_a_notebook(tmp_path, data_dir, results_dir):
    """`jupyter lab notebooks` from the checkout, driven in headless Chromium as a person would: open
    table8_lambda.ipynb, set the profile to smoke and λ to 0.005 in its parameters cell, Run All Cells on the kernel
    the install gives; the table (paper, ours, Δ in each cell) and the figure render and no cell shows an error. The
    paired table8_lambda.py opens as a notebook too (Open With > Jupytext Notebook). The runs come from the module's
    store (the papermill test computed them; run alone, this test trains them)."""
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    before = _checkout_state()
    stores = {"CSE_KIT_DATA": str(data_dir), "CSE_KIT_RESULTS": str(results_dir)}
    with _jupyterlab(tmp_path / "jupyter", stores) as url, sync_playwright() as playwright:
        # 240 s: a loaded 2-core machine, JupyterLab's first load, a kernel's start
        browser, page = headless_page(playwright, tmp_path / "chromium-lab", 1280, 1300, 240_000)
        try:
            _run_table8_in_jupyterlab(page, url)
        finally:
            page.screenshot(path=tmp_path / "jupyterlab.png")
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        stderr = stderr.all_inner_texts()
        table = page.locator(".jp-OutputArea-output table.paper-layout")
        assert all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), prompts  # every cell ran
        errors = [text for text in stderr if re.search(r"Traceback|^-{20,}$", text, re.MULTILINE)]
        assert not errors, errors
        # the λ run, then its untrained start (issue 56: smoke tables show it)
        assert "[cse-kit] run 1/2: 0.005, seed 1" in "".join(stderr) or "computing 0" in "".join(stderr), stderr
        assert table.locator(".paper").first.inner_text() == "84.56" and table.locator(".delta").count() == 1
        assert re.search(r"\(n=|±", table.locator("td b").first.inner_text())  # ours, over the seeds
        assert page.locator(".jp-RenderedImage img").evaluate("img => img.naturalWidth") > 300  # the figure

        page.locator(".jp-DirListing-itemText", has_text=re.compile(r"^table8_lambda\.py$")).click(button="right")
        page.locator(".lm-Menu-item", has_text="Open With").hover()
        page.get_by_role("menuitem", name="Jupytext Notebook").click()
        # the .py itself, not its .ipynb twin, becomes the current tab; wait for it: until it opens, the .ipynb's
        # panel is the visible one (a label read at once saw ['', 'table8_lambda.ipynb'] in a loaded full run)
        current = page.locator(".lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")
        expect(current.filter(has_text=re.compile(r"^table8_lambda\.py$"))).to_have_count(1, timeout=60_000)
        twin = page.locator(".jp-NotebookPanel:visible")
        twin.locator(".jp-CodeCell", has_text="lam: float").wait_for()
        # JupyterLab renders a long notebook's cells a few at a time: wait for all of them, do not count once
        expect(twin.locator(".jp-Cell")).to_have_count(len(jupytext.read(NOTEBOOKS / "table8_lambda.py").cells),
                                                      timeout=60_000)
        browser.close()
    assert (tmp_path / "jupyterlab.png").stat().st_size > 50_000
    assert _checkout_state() == before  # nothing was saved into notebooks/


JUPYTER_TOKEN = "cse-kit-test-token"


def _run_table8_in_jupyterlab(page, url: str) -> None:
    """What a person does: open the notebook, double-click the values to change in the parameters cell and type the
    new ones, Run > Run All Cells, wait until no cell is left to run; the figure in view."""
    from playwright.sync_api import expect

    page.goto(f"{url}/lab/tree/table8_lambda.ipynb?token={JUPYTER_TOKEN}")
    parameters = page.locator(".jp-CodeCell", has_text="lam: float")  # its kernel starts meanwhile; Run All waits
    for line, old, new in (("profile: str", '"auto"', "smoke"), ("lam: float", "None", "0.005")):
        parameters.locator(".cm-line", has_text=line).get_by_text(old, exact=True).first.dblclick()
        page.keyboard.type(new)
    expect(parameters.locator(".cm-content")).to_contain_text('profile: str = "smoke"')
    expect(parameters.locator(".cm-content")).to_contain_text("lam: float = 0.005")
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.get_by_role("menuitem", name=re.compile("^Run All Cells")).click()
    page.wait_for_function("""() => { const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
        .map(p => p.textContent); return /\\d/.test(prompts[0]) && !prompts.some(p => p.includes('*')); }""",
                           polling=500)
    page.locator(".jp-RenderedImage img").scroll_into_view_if_needed()


@contextlib.contextmanager
def _jupyterlab(home: Path, env: dict):
    """`jupyter lab notebooks` run from the checkout on 127.0.0.1 with a token, no browser; its config, runtime, data,
    settings (autosave off, every cell kept in the page, no news), workspaces, checkpoints and IPython folders under
    `home`. Yields its URL; stops it (and its kernels) after."""
    import os
    import socket
    import sys
    import urllib.request

    settings = {"docmanager-extension/plugin": {"autosave": False},
                "notebook-extension/tracker": {"windowingMode": "none"},
                "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False}}
    for plugin, values in settings.items():
        path = home / "settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    folders = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_RUNTIME_DIR": "runtime", "JUPYTER_DATA_DIR": "data",
               "JUPYTERLAB_SETTINGS_DIR": "settings", "JUPYTERLAB_WORKSPACES_DIR": "workspaces",
               "IPYTHONDIR": "ipython"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "notebooks", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={JUPYTER_TOKEN}", "--allow-root", "--LabApp.extension_manager=readonly",
         "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         f"--FileCheckpoints.checkpoint_dir={home / 'checkpoints'}"],
        cwd=REPO, env={**os.environ, **{k: str(home / v) for k, v in folders.items()}, **env},
        stdout=subprocess.DEVNULL, stderr=(home / "server.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            assert server.poll() is None, (home / "server.log").read_text()
            try:
                urllib.request.urlopen(f"{url}/api/status?token={JUPYTER_TOKEN}", timeout=5)
                break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _checkout_state() -> str:
    """What git sees of notebooks/ (changes, untracked files): a test must leave it as it found it."""
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "notebooks"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout


def _host(request_line: str) -> str:
    """Host of `GET http://host/path HTTP/1.1` or `CONNECT host:443 HTTP/1.1`."""
    target = request_line.split()[1]
    return target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]


def test_the_report_runner_refuses_a_parameter_the_notebook_does_not_take(tmp_path):
    with pytest.raises(ValueError, match=r"table8_lambda has no parameter\(s\) \['lamda'\]"):
        report.execute("table8_lambda", {"lamda": 0.1}, tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_reports_kernel_variables_are_its_kernels_not_its_callers_for_good(tmp_path, monkeypatch):
    """The report sets its kernels' variables (cse_kit.report.notebooks.KERNEL_ENV) for the kernel it starts; the
    process that called it (a notebook, a test) has its own environment back after (it once kept them for good)."""
    from cse_kit.report import notebooks

    monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", tmp_path)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nprint(os.environ.get('TQDM_DISABLE'))")]), tmp_path / "probe.ipynb")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    before = dict(os.environ)
    ran = report.execute("probe", {}, tmp_path / "executed")
    assert ran["status"] == "ok", ran["error"]
    assert nbformat.read(ran["path"], 4).cells[0].outputs[0]["text"] == "1\n"
    assert dict(os.environ) == before


def test_report_table_mimetype_is_not_rendered(tmp_path, data_dir, results_dir):
    nb = _run("table12_14_hparams", tmp_path, data_dir, results_dir, profile="smoke")
    assert report.table_of(nb)["name"] == "table12_14_hparams"
    assert TABLE_MIMETYPE not in report.notebook_html(nb)


@pytest.mark.slow
def test_whole_smoke_report(tmp_path, data_dir):
    """The README's command as written, `cse-kit report --profile smoke`, in a fresh copy of the checkout (its
    tracked files) with an empty results store: every notebook, one numbering on the console."""
    import os

    clone = tmp_path / "clone"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    env = {**os.environ, "PYTHONPATH": str(clone), "CSE_KIT_DATA": str(data_dir)}
    env.pop("CSE_KIT_RESULTS", None)
    done = subprocess.run(["cse-kit", "report", "--profile", "smoke"], cwd=clone, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    console = done.stdout.splitlines()
    assert console[0] == f"executing the notebooks in {clone / 'notebooks'}", console[:4]
    finished = [line.split("] ")[0] for line in console if " finished] " in line]
    assert finished == [f"[{i} of {len(report.NOTEBOOKS)} finished" for i in range(1, len(report.NOTEBOOKS) + 1)]
    index = clone / "reports" / "index.html"
    runs = json.loads((clone / "reports" / "report.json").read_text())["runs"]
    assert [r["name"] for r in runs] == list(report.NOTEBOOKS) and all(r["status"] == "ok" for r in runs)
    assert index.read_text().count("<h3 id=") == len(report.NOTEBOOKS)
    assert " smoke profile): smoke-" not in index.read_text()  # no training header above the tables
    coverage = json.loads((clone / "reports" / "report.json").read_text())["coverage"]
    assert all(c["kind"] in ("built", "partial", "not implemented yet", "schematic") for c in coverage), coverage
    assert not any(c["kind"] == "reproduced" for c in coverage)  # smoke numbers are never called reproduced


def test_report_exits_non_zero_and_names_a_failed_notebook(tmp_path, capsys, monkeypatch):
    """A notebook that fails (here: no data where it looks for it) makes `cse-kit report` exit 1, naming it. Its
    first lines say which notebooks it executes and where everything goes: typed in another clone (here a folder
    that looks like one), it executes the installed kit's checkout, and says so."""
    from cse_kit import cli

    (tmp_path / "nodata").mkdir()
    clone = tmp_path / "clone"
    (clone / "notebooks").mkdir(parents=True)
    (clone / "pyproject.toml").write_text("")
    monkeypatch.chdir(clone)
    code = cli.main(["report", "--profile", "smoke", "--only", "table8_lambda", "--data-dir", "../nodata",
                     "--results-dir", str(tmp_path / "results"), "--out", "../reports"])
    captured = capsys.readouterr()
    assert code == 1 and "1 notebook(s) failed: table8_lambda" in captured.err
    assert "table8_lambda: running (0 notebook(s) not started)" in captured.out
    assert "[1 of 1 finished] table8_lambda: failed" in captured.out
    assert captured.out.splitlines()[:4] == [
        f"executing the notebooks in {NOTEBOOKS}",
        f"page {tmp_path / 'reports' / 'index.html'}, executed notebooks in {tmp_path / 'reports' / 'executed'}",
        f"results store {tmp_path / 'results'}; data {tmp_path / 'nodata'}",
        f"(not the notebooks of {clone}: the cse-kit installed is {REPO}'s; run `pip install -e .` in {clone} to "
        "use its own)"]


def test_each_kernel_gets_its_own_absolute_ipc_folder():
    """What keeps two reports' kernels apart (the slow test below runs two reports at once): each kernel's IPC
    sockets are in a folder of its own, named by an absolute path, not jupyter's relative "kernel-ipc"."""
    ips = [Path(report.kernel_config().KernelManager.ip) for _ in range(2)]
    try:
        assert all(ip.is_absolute() and ip.parent.is_dir() for ip in ips) and ips[0].parent != ips[1].parent
    finally:
        for ip in ips:
            ip.parent.rmdir()


@pytest.mark.slow  # two reports of two notebooks each (a minute); the test above checks what keeps them apart
def test_two_reports_at_once_each_talk_to_their_own_kernels(tmp_path, data_dir):
    """Two `cse-kit report` started together on one checkout: each kernel has its own IPC socket folder (jupyter's
    default relative "kernel-ipc" let one report's kernels answer the other's, "Invalid Signature")."""
    import os

    def start(name):
        return kit_process.popen(["report", "--profile", "smoke", "--only",
                                  "diffaug_table5_hparams", "table12_14_hparams", "--data-dir", str(data_dir),
                                  "--results-dir", str(tmp_path / name / "results"), "--out", str(tmp_path / name)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env={**os.environ, "TQDM_DISABLE": "1"})

    reports = [start("a"), start("b")]
    outputs = [r.communicate(timeout=600)[0] for r in reports]
    for r, out in zip(reports, outputs):
        assert r.returncode == 0, out
        assert "Invalid Signature" not in out and "Invalid Message" not in out
        assert out.count(": ok (") == 2, out
        assert "[cse-kit]" not in out, out  # its kernels leave their progress lines to the report, which names them


def test_the_warnings_an_executed_notebook_raised_are_read_back_once_each():
    """What `cse-kit report` prints under a notebook's line: its cells' warnings, not their other stderr."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    text = ("/x/results.py:249: UserWarning: result record r.json is corrupt (bad); moved to r.corrupt and recomputing"
            " it\n  warnings.warn(\ntokenizing: 100%\n/x/loop.py:12: RuntimeWarning: stage1_steps 9 exceed\n")
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stderr", text=text),
                           nbformat.v4.new_output("stream", name="stdout", text="UserWarning: printed, not raised\n"),
                           nbformat.v4.new_output("stream", name="stderr", text=text)]
    assert report.notebook_warnings(nb) == [
        "UserWarning: result record r.json is corrupt (bad); moved to r.corrupt and recomputing it",
        "RuntimeWarning: stage1_steps 9 exceed"]


def test_notebooks_run_several_at_once_with_their_progress_on_the_console(tmp_path, data_dir, results_dir):
    only = ["figure2_cosine", "table12_14_hparams"]  # the report's order
    console = []
    report.build("smoke", results_dir, data_dir, tmp_path / "reports", only=only[::-1], log=console.append, jobs=2)
    runs = json.loads((tmp_path / "reports" / "report.json").read_text())["runs"]
    assert [r["name"] for r in runs] == only and [r["status"] for r in runs] == ["ok", "ok"]  # in the report's order
    assert console[0] == f"executing the notebooks in {NOTEBOOKS}" and console[3] == "2 notebook(s), 2 at once"
    started = [line for line in console if ": running (" in line]
    assert sorted(line.split(":")[0] for line in started) == only, console  # no number: they start in any order
    assert [line.split(": ")[1] for line in started] == ["running (1 notebook(s) not started)",
                                                         "running (0 notebook(s) not started)"], console
    finished = [line.split("] ")[0] for line in console if " finished] " in line]
    assert finished == ["[1 of 2 finished", "[2 of 2 finished"], console  # one numbering: as they finish
    assert any(line.startswith("    figure2_cosine: ") and re.search(r" runs?: ", line) for line in console), console  # progress
    for name in only:
        assert any(re.match(rf"\[[12] of 2 finished\] {name}: ok \(\d+ s\)$", line) for line in console), console


def test_relative_data_and_results_directories_are_the_callers_not_the_notebooks(tmp_path, data_dir, results_dir,
                                                                                   monkeypatch):
    """`cse-kit report --data-dir data` from the repository: the kernels run in notebooks/, where `data` would be
    notebooks/data (every cpu notebook failed: "dataset STS12 is missing from data"). The results store is named
    `store` here (a link to the module's), so code that resolved it in notebooks/ would write notebooks/store, which
    this test removes and fails on (such a run once left results0/locks/<key>.lock in the checkout, committed)."""
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").symlink_to(results_dir, target_is_directory=True)
    try:
        report.build("smoke", "store", os.path.relpath(data_dir), "reports", only=["figure2_cosine"],
                     log=lambda *_: None)
    finally:
        leaked = NOTEBOOKS / "store"
        if leaked.exists():
            shutil.rmtree(leaked)
            pytest.fail(f"the report wrote into {leaked}")
    runs = json.loads((tmp_path / "reports" / "report.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["ok"], runs


def test_a_kernels_own_log_stays_off_the_reports_console(tmp_path, capfd):
    """A kernel writes its log ("[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel." when jupyter_client's
    shutdown interrupt meets a kernel still finishing its last reply) to the report's stderr; the report's kernels
    keep it off, and a cell's own stderr still reaches the notebook."""
    import papermill
    from traitlets.config import Config

    source = tmp_path / "log.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys\nget_ipython().kernel.log.error('the kernel logs this')\nprint('the cell says this', file=sys.stderr)")]),
        source)

    def console(config):
        nb = papermill.execute_notebook(str(source), str(tmp_path / "out.ipynb"), kernel_name="python3",
                                        progress_bar=False, config=config)
        assert "the cell says this" in nb.cells[0].outputs[0]["text"]
        return capfd.readouterr().err

    assert "[IPKernelApp] ERROR | the kernel logs this" in console(Config())  # what the test would catch
    assert "the kernel logs this" not in console(report.kernel_config())


def test_the_report_starts_the_longest_notebooks_first_and_an_unmeasured_one_before_them(tmp_path, monkeypatch):
    """Several at once, the report starts notebooks by their seconds in the profile's last measured report, longest
    first, so that no long one starts last and runs alone at the end; one not yet measured could be long: first."""
    seconds = tmp_path / "seconds.json"
    seconds.write_text(json.dumps({"smoke": {"a": 5, "b": 300, "c": 40}, "cpu": {"a": 900}}))
    monkeypatch.setattr(scheduling, "NOTEBOOK_SECONDS", seconds)
    assert report.longest_first(["a", "b", "c", "new"], "smoke") == ["new", "b", "c", "a"]
    assert report.longest_first(["b", "a", "c"], "paper") == ["b", "a", "c"]  # nothing measured: the given order
    monkeypatch.setattr(scheduling, "NOTEBOOK_SECONDS", tmp_path / "absent.json")
    assert report.longest_first(["c", "a"], "smoke") == ["c", "a"]


def test_the_measured_notebook_seconds_name_only_notebooks_the_report_runs():
    table = json.loads(report.NOTEBOOK_SECONDS.read_text())
    assert table["smoke"] and all(set(times) <= set(report.NOTEBOOKS) for times in table.values())
