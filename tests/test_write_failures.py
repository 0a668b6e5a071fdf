"""Every write failure in one line: a full disk or a file over the size limit at any write names the path and the
cause, exits 2, keeps nothing half-written, and the rerun after freeing space resumes; and the other one-line
answers of the CLI (a file where a folder belongs, a malformed $CSE_KIT_EXECUTOR_PARAMS, the results store read)."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cse_kit import cli
from cse_kit.io import write_json_atomic

from conftest import ARCHIVES

NO_SPACE = "No space left on device"


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs of its own (root may mount one), unmounted at the end; skipped where mounting is not permitted
    (test_an_injected_enospc_... runs everywhere)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill disk with one file until `leave` bytes are free (all of it: leave=0)."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    with filler.open("wb") as f:
        f.write(b"\0" * (os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - leave))
    return filler


def one_error_line(capsys) -> str:
    """The one line the command printed on stderr (no traceback, nothing else)."""
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def leftovers(folder: Path) -> list[str]:
    """Temporary files and folders of the kit's writers (`.<name>.*`, `.checkpoint.new`, staging, datasets' tmp)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.startswith((".checkpoint.new", ".staging-", "tmp"))
                  or (p.name.startswith(".") and not p.name.endswith(".lock")))


def test_a_full_disk_at_a_checkpoint_or_the_model_export_and_ctrl_c_keep_nothing_and_the_rerun_resumes(
        small_disk, data_dir, capsys, monkeypatch):
    from cse_kit.train import loop

    run = small_disk / "run"
    train = ["train", "--preset", "simcse-bert", "--profile", "smoke", "--data-dir", str(data_dir), "--no-progress",
             "--output-dir", str(run), "--max-steps", "4", "--set", "save_steps=2", "--set", "eval_steps=4"]
    write_process_files = loop.write_process_files

    def interrupted(*args, **kw):  # Ctrl-C while the checkpoint's files are being written
        write_process_files(*args, **kw)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(loop, "write_process_files", interrupted)
        assert cli.main(train) == 130
    assert "interrupted; nothing half-written is kept" in capsys.readouterr().err and leftovers(run) == []
    filler = fill(small_disk, 6 << 20)  # the smoke checkpoint is 12 MB
    assert cli.main(train) == 2
    assert one_error_line(capsys) == (
        f"cse-kit: error: cannot write {run / 'checkpoint'}: {NO_SPACE}; nothing half-written was kept. Free space "
        "there (or raise the file size limit, `ulimit -f`) and run the same command again: it resumes where it "
        "stopped")
    assert leftovers(run) == [] and not (run / "checkpoint").exists()  # the 12 MB .checkpoint.new is gone
    filler = fill(small_disk, 15 << 20)  # the checkpoint fits, the exported model (4.6 MB) not
    assert cli.main(train) == 2
    assert f"cannot write {run / 'model'}: {NO_SPACE}" in one_error_line(capsys)
    assert leftovers(run) == [] and (run / "checkpoint" / "trainer_state.json").is_file()
    filler.unlink()
    assert cli.main(train) == 0
    assert "; resuming at step 2; output" in capsys.readouterr().out
    steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines() if "loss" in line]
    assert steps == sorted(set(steps)) and steps[-1] == 4  # each step logged once


def test_records_eval_output_data_import_the_tokenized_cache_and_the_report_page_on_a_full_disk(
        small_disk, data_dir, capsys, monkeypatch):
    from cse_kit import results
    from cse_kit.report import page
    from cse_kit.io import WriteFailed
    from cse_kit.models import load_model
    from cse_kit.results import Pretrained, ResultStore
    from cse_kit.train.data import tokenize

    fill(small_disk, 0)
    output = small_disk / "eval.json"
    assert cli.main(["eval", "--model", "smoke-bert", "--pooler", "cls_before_pooler", "--tasks", "STSBenchmark",
                     "--mode", "dev", "--data-dir", str(data_dir), "--output", str(output)]) == 2
    assert f"cse-kit: error: cannot write {output}: {NO_SPACE}; nothing half-written was kept. Free space" in \
        capsys.readouterr().err.splitlines()[-1]
    assert cli.main(["data", "import", str(ARCHIVES["sts_raw"]), "--data-dir", str(small_disk / "data")]) == 2
    assert one_error_line(capsys).startswith(f"cse-kit: error: cannot write {small_disk / 'data'}: {NO_SPACE}")
    monkeypatch.setitem(results.EVALUATIONS, "sts_dev", lambda *args: {"measured": True})  # the record's write only
    store = ResultStore(small_disk / "results", data_dir)
    pretrained = Pretrained("smoke-bert", "cls_before_pooler", "smoke")
    with pytest.raises(WriteFailed, match=f"cannot write {store.record_path(store.key(pretrained))}: {NO_SPACE}"):
        store.get(pretrained, ("sts_dev",))
    tokenizer, _ = load_model("smoke-bert")
    with pytest.raises(WriteFailed, match=f"cannot write {small_disk / 'cache'}/.*arrow: {NO_SPACE}"):
        tokenize([(f"sentence number {i}",) for i in range(5000)], tokenizer, 32, small_disk / "cache")
    capsys.readouterr()  # the tokenizing progress bar
    monkeypatch.setattr(page, "execute_all", lambda *args: [])  # the page of no notebook: its own write only
    pages = small_disk / "reports"
    assert cli.main(["report", "--profile", "smoke", "--only", "table8_lambda", "--out", str(pages)]) == 2
    assert one_error_line(capsys).startswith(f"cse-kit: error: cannot write {pages / 'index.html'}: {NO_SPACE}")
    assert leftovers(small_disk) == [] and not list((small_disk / "cache").iterdir())


FILE_SIZE_LIMIT = """
import json, resource, sys, torch
from cse_kit.io import WriteFailed, write_json_atomic, writing
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
said = []
try:
    write_json_atomic(sys.argv[1] + "/record.json", list(range(300000)))
except WriteFailed as e:
    said.append(str(e))
try:
    with writing(sys.argv[1] + "/state.pt", partial=sys.argv[1] + "/state.pt"):
        torch.save(torch.zeros(1 << 20), sys.argv[1] + "/state.pt")
except WriteFailed as e:
    said.append(str(e))
print(json.dumps(said))
"""


def test_a_file_over_the_size_limit_is_named_as_one(tmp_path):
    done = subprocess.run([sys.executable, "-c", FILE_SIZE_LIMIT, str(tmp_path)], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout) == [
        f"cannot write {tmp_path / 'record.json'}: File too large; nothing half-written was kept",
        f"cannot write {tmp_path / 'state.pt'}: File too large (over the file size limit, `ulimit -f`); nothing "
        "half-written was kept"]
    assert list(tmp_path.iterdir()) == []


def test_an_injected_enospc_is_named_with_its_path_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    from cse_kit.io import WriteFailed

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(WriteFailed, match=f"cannot write {tmp_path / 'a.json'}: {NO_SPACE}"):
        write_json_atomic(tmp_path / "a.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_a_file_where_a_folder_belongs_is_one_line(tmp_path, data_dir, capsys, monkeypatch):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert cli.main(["train", "--preset", "simcse-bert", "--profile", "smoke", "--data-dir", str(data_dir),
                     "--output-dir", str(a_file)]) == 2
    assert one_error_line(capsys) == (f"cse-kit: error: output_dir {a_file} is not a folder: {a_file} is a file. "
                                      "Choose a folder (or remove the file)")
    monkeypatch.setenv("CSE_KIT_DATA", str(a_file))
    assert cli.main(["data", "import", str(ARCHIVES["sts_raw"])]) == 2
    assert one_error_line(capsys) == (f"cse-kit: error: data directory (--data-dir, else $CSE_KIT_DATA) {a_file} is "
                                      f"not a folder: {a_file} is a file. Choose a folder (or remove the file)")
    assert cli.main(["data", "status"]) == 1
    assert f"data directory {a_file} is a file, not a folder (misspelt" in capsys.readouterr().err


def test_status_names_the_results_store_it_read_and_a_malformed_executor_setting_names_its_variable(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CSE_KIT_RESULTS", str(tmp_path / "store"))
    assert cli.main(["status", "--profile", "smoke"]) == 0
    assert f"profile smoke; results {tmp_path / 'store'}\n" in capsys.readouterr().out
    monkeypatch.setenv("CSE_KIT_EXECUTOR_PARAMS", "{slurm_partition: gpu}")
    assert cli.main(["report", "--profile", "smoke", "--only", "table8_lambda", "--workers", "2",
                     "--out", str(tmp_path / "reports")]) == 2
    assert one_error_line(capsys) == (
        "cse-kit: error: CSE_KIT_EXECUTOR_PARAMS must be a JSON object, e.g. '{\"slurm_partition\": \"gpu\"}' (names "
        "and text in double quotes), got '{slurm_partition: gpu}'")
    assert not (tmp_path / "reports").exists()  # said before any notebook ran
