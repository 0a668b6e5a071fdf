"""The kit's long steps outside training (fitting an MLM head, tokenizing) report where the person is
(cse_kit.progress): in a notebook run by papermill, on the terminal as the training steps do, and one final line
each in the saved notebook instead of a bar's hundreds of outputs."""

import os
import re
import subprocess
import sys

import nbformat

from cse_kit.progress import TERMINAL_PROGRESS_ENV

from conftest import REPO


def test_fitting_an_mlm_head_and_tokenizing_in_papermill_report_on_the_terminal_and_leave_one_line_each(
        tmp_path, data_dir):
    cells = [
        "import cse_kit.experiments  # as every notebook's first cell\nfrom cse_kit import progress\n"
        "progress.STATUS_SECONDS = 0  # a status line after every update",
        "from cse_kit.data import load_corpus\nfrom cse_kit.models import load_model\n"
        "from cse_kit.train.data import tokenize\n"
        f"data_dir = {str(data_dir)!r}\n"
        "tokenizer = load_model('all-MiniLM-L6-v2', offline=True)[0]\n"
        "sentences = [(s,) for s in load_corpus('Wiki1M-sample', data_dir)[:2500]]\n"
        f"dataset = tokenize(sentences, tokenizer, 32, {str(tmp_path / 'cache')!r})",
        "from cse_kit.methods.mlm_head import fit_mlm_head\n"
        f"report = fit_mlm_head('all-MiniLM-L6-v2', {str(tmp_path / 'mlm')!r}, data_dir=data_dir, steps=3, "
        "batch_size=8, holdout=40)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "in.ipynb")
    # a person's shell: no report's setting, and no pytest, under which ipykernel leaves fd 2 alone
    env = {k: v for k, v in os.environ.items() if k not in (TERMINAL_PROGRESS_ENV, "PYTEST_CURRENT_TEST")}
    env["HF_HUB_OFFLINE"] = "1"
    terminal = subprocess.run([sys.executable, "-m", "papermill", str(tmp_path / "in.ipynb"),
                               str(tmp_path / "out.ipynb")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600)
    assert terminal.returncode == 0, terminal.stdout
    printed = re.findall(r"\[cse-kit\] [^\r\n]*", terminal.stdout)
    for done in (1000, 2000):  # datasets' batches of 1,000
        assert [line for line in printed if re.fullmatch(rf"\[cse-kit\] tokenizing: {done}/2500 examples, about "
                                                         r"\d+ s left", line)], printed
    assert re.fullmatch(r"\[cse-kit\] fitting all-MiniLM-L6-v2's MLM head: 1/3 steps, about \d+ s left",
                        next(line for line in printed if "MLM head: 1/3" in line))
    finals = [re.compile(r"tokenizing: 2500 examples in \d+ s"),
              re.compile(r"fitting all-MiniLM-L6-v2's MLM head: 3 steps in \d+ s; masked-token accuracy "
                         r"\d+\.\d% on 40 held-out sentences")]
    assert all(any(f.fullmatch(line.removeprefix("[cse-kit] ")) for line in printed) for f in finals), printed
    saved = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    stderr = [o["text"] for c in saved.cells for o in c.get("outputs", []) if o.get("name") == "stderr"]
    lines = [line for text in stderr for line in text.splitlines()]
    assert len(lines) == 2 and all(f.fullmatch(line) for f, line in zip(finals, lines)), stderr
    assert "\r" not in "".join(stderr)
