"""`cse-kit data download` against fixture archives served on 127.0.0.1: checksum, resume, atomic placement."""

import dataclasses
import hashlib
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cse_kit import data
from cse_kit.data import fetch, registry


class RangeHandler(SimpleHTTPRequestHandler):
    """Serves files from a folder, honouring `Range: bytes=N-` as real servers do, and logs each request."""

    requests_seen: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.requests_seen.append((self.path, self.headers.get("Range")))
        path = self.translate_path(self.path)
        try:
            body = open(path, "rb").read()
        except OSError:
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        if rng:
            start = int(rng.split("=")[1].rstrip("-"))
            if start >= len(body):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start:])


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    RangeHandler.requests_seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(RangeHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def fixture_archive(data_dir, server):
    """A SentEval-layout tarball holding MR and TREC, served by the loopback server."""
    root, base = server
    archive = root / "senteval-fixture.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for folder in ("MR", "TREC"):
            t.add(data_dir / "downstream" / folder, arcname=f"downstream/{folder}")
    return archive, f"{base}/{archive.name}", hashlib.sha256(archive.read_bytes()).hexdigest()


def _serve_from(monkeypatch, names, source):
    for name in names:
        monkeypatch.setitem(registry.REGISTRY, name, dataclasses.replace(registry.REGISTRY[name], source=source))


def test_download_verifies_and_places_datasets(fixture_archive, monkeypatch, tmp_path):
    archive, url, sha = fixture_archive
    _serve_from(monkeypatch, ["MR", "TREC"], registry.Source(url, "tar", sha256=sha))
    target = tmp_path / "target"
    placed = data.download(["MR", "TREC"], target, progressbar=False)
    assert placed["MR"]["verified"] and placed["TREC"]["counts"] == {"train": 5452, "test": 500}
    assert data.status(target, ["MR"])["datasets"]["MR"]["verified"]
    assert sorted(p.name for p in target.iterdir()) == [".cache", "downstream"]  # no staging folder left


def test_partial_download_is_resumed_with_a_range_request(fixture_archive, monkeypatch, tmp_path):
    archive, url, sha = fixture_archive
    _serve_from(monkeypatch, ["MR"], registry.Source(url, "tar", sha256=sha))
    target = tmp_path / "target"
    cache = target / ".cache"
    cache.mkdir(parents=True)
    body = archive.read_bytes()
    half = len(body) // 2
    (cache / (archive.name + ".part")).write_bytes(body[:half])  # what an interrupted download leaves
    placed = data.download(["MR"], target, progressbar=False)
    assert placed["MR"]["verified"]
    assert RangeHandler.requests_seen == [(f"/{archive.name}", f"bytes={half}-")]
    assert (cache / archive.name).read_bytes() == body and not (cache / (archive.name + ".part")).exists()


def test_checksum_mismatch_discards_the_download(fixture_archive, monkeypatch, tmp_path):
    archive, url, _ = fixture_archive
    _serve_from(monkeypatch, ["MR"], registry.Source(url, "tar", sha256="0" * 64))
    target = tmp_path / "target"
    with pytest.raises(data.DataError, match="SHA256 hash of downloaded file .* does not match"):
        data.download(["MR"], target, progressbar=False)
    assert not (target / "downstream").exists()
    assert [p for p in (target / ".cache").iterdir()] == []  # neither the file nor a .part is kept


def test_archive_without_the_requested_dataset_is_an_error(fixture_archive, monkeypatch, tmp_path):
    _, url, sha = fixture_archive
    _serve_from(monkeypatch, ["CR"], registry.Source(url, "tar", sha256=sha))
    with pytest.raises(data.DataError, match="does not contain CR"):
        data.download(["CR"], tmp_path / "target", progressbar=False)


def test_a_dataset_with_no_download_source_says_to_import_it(tmp_path):
    with pytest.raises(data.DataError, match="cse-kit data import"):
        data.download(["Wiki1M-sample"], tmp_path, progressbar=False)


def test_fetch_source_uses_the_cache_the_second_time(fixture_archive, tmp_path):
    _, url, sha = fixture_archive
    source = registry.Source(url, "tar", sha256=sha)
    first = fetch.fetch_source(source, tmp_path, progressbar=False)
    second = fetch.fetch_source(source, tmp_path, progressbar=False)
    assert first == second and len(RangeHandler.requests_seen) == 1


def test_a_missing_dataset_is_downloaded_on_first_use(fixture_archive, monkeypatch, tmp_path):
    """Online (no CSE_KIT_OFFLINE / HF_HUB_OFFLINE), loading a dataset that is not there fetches and verifies it."""
    archive, url, sha = fixture_archive
    _serve_from(monkeypatch, ["MR", "TREC"], registry.Source(url, "tar", sha256=sha))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CSE_KIT_OFFLINE", raising=False)
    target = tmp_path / "fresh"
    rows = data.load_classification("TREC", "train", target)
    assert len(rows) == 5452 and data.status(target, ["TREC"])["datasets"]["TREC"]["verified"]
    assert [path for path, _ in RangeHandler.requests_seen] == [f"/{archive.name}"]
    data.load_classification("TREC", "test", target)  # present now: no second request
    assert len(RangeHandler.requests_seen) == 1


@pytest.mark.parametrize("switch", ["CSE_KIT_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_a_missing_dataset_names_the_import_command(fixture_archive, monkeypatch, tmp_path, switch):
    archive, url, sha = fixture_archive
    _serve_from(monkeypatch, ["TREC"], registry.Source(url, "tar", sha256=sha))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv(switch, "1")
    with pytest.raises(data.MissingDatasetError, match="downloads are off.*cse-kit data import PATH"):
        data.load_classification("TREC", "train", tmp_path / "fresh")
    assert RangeHandler.requests_seen == []
