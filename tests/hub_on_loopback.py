"""A fake Hugging Face Hub on 127.0.0.1 serving model repositories read-only from local folders, for tests that
download with huggingface_hub and transformers (HF_ENDPOINT pointed at it) and must not reach the internet.

    with serve_repos({"google/bert_uncased_L-2_H-128_A-2": folder}) as hub:
        subprocess.run([...], env=hub.env(tmp_path / "hf-home"))   # HF_ENDPOINT=hub.endpoint, HF_HUB_OFFLINE=0, ...
        hub.requests     # [("HEAD", "/google/.../resolve/main/config.json"), ...], in the order they came
        hub.downloads()  # [("google/bert_uncased_L-2_H-128_A-2", "config.json"), ...]: the files whose bytes were sent

What it answers, as the Hub does (huggingface_hub 2.x's hf_hub_download and get_hf_file_metadata, transformers'
cached_file and has_file):
- `HEAD|GET /{repo_id}/resolve/{revision}/{filename}` (revision `main` or the repo's commit): a small file with 200,
  `X-Repo-Commit` (a fixed 40-hex commit per repository), `ETag` (its git blob sha1) and `Content-Length`; a large
  one (LFS: *.bin, *.safetensors, ...) with 302 to a second loopback host standing in for the CDN (127.0.0.2, which
  huggingface_hub does not follow with the HEAD, as off-Hub), `X-Linked-Etag` (its sha256) and `X-Linked-Size`.
  GET honours `Range: bytes=N-`.
- a file the repository lacks: 404 with `X-Error-Code: EntryNotFound` and `X-Repo-Commit` (transformers probes
  model.safetensors, tokenizer.json, ... and falls back; huggingface_hub caches the absence under .no_exist); an
  unknown repository: 404 `RepoNotFound`; an unknown revision: 404 `RevisionNotFound`.
- `GET /api/models/{repo_id}` and `/api/models/{repo_id}/revision/{rev}` (model_info: id, sha, siblings) and
  `/api/models/{repo_id}/tree/{rev}` (list_repo_tree, what snapshot_download and `hf download` list); `HEAD /` (the
  kit's reachability probe, cse_kit.models.hub_unreachable) with 200; anything else 404 without an error code.
Every request is recorded (method, path without the query) in `requests`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: files the Hub keeps in LFS (served by redirect to the CDN, with X-Linked-Etag / X-Linked-Size)
LFS_SUFFIXES = (".bin", ".safetensors", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gz")
#: the CDN's stand-in: another loopback address, so huggingface_hub treats it as off-Hub (127.0.0.0/8 is loopback)
CDN_HOST = "127.0.0.2"
#: variables that would send the cache elsewhere or authenticate, removed from the environments `hub_env` makes
_HF_VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_DATASETS_CACHE", "HF_TOKEN",
                 "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                 "HF_XET_CACHE", "HF_ASSETS_CACHE")


def commit_of(repo_id: str) -> str:
    """The fixed commit (40 hex) the server gives `repo_id`."""
    return hashlib.sha1(f"hub-on-loopback:{repo_id}".encode()).hexdigest()


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class _Entry:
    size: int
    git_oid: str  # the blob's (an LFS file's: its pointer's) git sha1, the Hub's ETag
    sha256: str | None  # LFS files only
    pointer_size: int | None  # LFS files only: the size of the pointer git holds


class Hub:
    """The server's state, what the tests read: `endpoint`, `requests`, `repos` (repo_id -> folder)."""

    def __init__(self, repos: dict):
        self.repos = {repo_id: Path(folder) for repo_id, folder in repos.items()}
        self.requests: list[tuple[str, str]] = []
        self._sent: list[tuple[str, str]] = []
        self._entries: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.endpoint = self.cdn = ""

    # --- what the tests use --------------------------------------------------------------------------------------
    def downloads(self) -> list[tuple[str, str]]:
        """(repo_id, filename) of every file whose bytes were sent (a GET answered 200 or 206), in order."""
        return list(self._sent)

    def env(self, home, *, offline: bool = False, **extra) -> dict:
        """A subprocess environment downloading from this server into the Hugging Face home `home`."""
        return hub_env(self.endpoint, home, offline=offline, **extra)

    def files(self, repo_id: str) -> list[str]:
        """The repository's files, as the Hub lists them (dot-files and folders left out)."""
        root = self.repos[repo_id]
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                      if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    # --- serving -------------------------------------------------------------------------------------------------
    def _start(self) -> None:
        hub = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, cdn=False))
        self.endpoint = f"http://127.0.0.1:{hub.server_port}"
        self._servers.append(hub)
        try:
            cdn = ThreadingHTTPServer((CDN_HOST, 0), _handler(self, cdn=True))
            self.cdn = f"http://{CDN_HOST}:{cdn.server_port}"
            self._servers.append(cdn)
        except OSError:  # no 127.0.0.2 here: LFS files are sent by the Hub itself (200, with X-Linked-* headers)
            self.cdn = ""
        for server in self._servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def _path(self, repo_id: str, filename: str) -> Path | None:
        if repo_id not in self.repos or filename not in self.files(repo_id):
            return None
        return self.repos[repo_id] / filename

    def _entry(self, path: Path) -> _Entry:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        with self._lock:
            if key not in self._entries:
                if path.name.endswith(LFS_SUFFIXES):
                    digest = hashlib.sha256()
                    with path.open("rb") as f:
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            digest.update(chunk)
                    pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest.hexdigest()}\n"
                               f"size {stat.st_size}\n").encode()
                    self._entries[key] = _Entry(stat.st_size, _git_blob_sha1(pointer), digest.hexdigest(), len(pointer))
                else:
                    self._entries[key] = _Entry(stat.st_size, _git_blob_sha1(path.read_bytes()), None, None)
            return self._entries[key]

    def _model_info(self, repo_id: str) -> dict:
        return {"_id": commit_of(repo_id)[:24], "id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0],
                "sha": commit_of(repo_id), "private": False, "gated": False, "disabled": False, "downloads": 0,
                "likes": 0, "tags": [], "library_name": "transformers", "lastModified": "2021-05-19T00:00:00.000Z",
                "createdAt": "2020-03-11T00:00:00.000Z", "siblings": [{"rfilename": f} for f in self.files(repo_id)]}

    def _tree(self, repo_id: str) -> list[dict]:
        entries = []
        for name in self.files(repo_id):
            entry = self._entry(self.repos[repo_id] / name)
            item = {"type": "file", "oid": entry.git_oid, "size": entry.size, "path": name}
            if entry.sha256:
                item["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": entry.pointer_size}
            entries.append(item)
        return entries


def _handler(hub: Hub, cdn: bool):
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request a connection, so a stopped server answers nothing (no kept-alive handler threads)
        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self._answer(send_body=False)

        def do_GET(self):
            self._answer(send_body=True)

        def do_POST(self):
            self._record()
            self._json(404, {"error": f"not served here: {self.path}"}, send_body=True)

        def _record(self) -> str:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path))
            return path

        def _answer(self, send_body: bool) -> None:
            path = self._record()
            try:
                if cdn:
                    return self._cdn(path, send_body)
                if path == "/":
                    return self._bytes(200, b"hub on loopback\n", {"Content-Type": "text/plain"}, send_body)
                if path.startswith("/api/"):
                    return self._api(path[len("/api/"):], send_body)
                return self._resolve(path, send_body)
            except (BrokenPipeError, ConnectionResetError):  # the client went away mid-answer
                pass

        # --- /{repo_id}/resolve/{revision}/{filename} -----------------------------------------------------------
        def _resolve(self, path: str, send_body: bool) -> None:
            parts = path.strip("/").split("/")
            at = next((i for i in (1, 2) if len(parts) > i + 2 and parts[i] == "resolve"), None)
            if at is None:
                return self._json(404, {"error": f"not served here: {path}"}, send_body)
            repo_id, revision, filename = "/".join(parts[:at]), parts[at + 1], "/".join(parts[at + 2:])
            if repo_id not in hub.repos:
                return self._error(404, "RepoNotFound", "Repository not found", send_body)
            commit = commit_of(repo_id)
            if revision not in ("main", commit):
                return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, send_body)
            file = hub._path(repo_id, filename)
            if file is None:
                return self._error(404, "EntryNotFound", "Entry not found", send_body, {"X-Repo-Commit": commit})
            entry = hub._entry(file)
            headers = {"X-Repo-Commit": commit, "ETag": f'"{entry.git_oid}"', "Accept-Ranges": "bytes"}
            if entry.sha256:
                headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
                if hub.cdn:
                    location = f"{hub.cdn}/cdn/{repo_id}/{commit}/{filename}"
                    return self._bytes(302, b"", {**headers, "Location": location}, send_body)
            self._file(repo_id, filename, file, headers, send_body)

        # --- the CDN: /cdn/{repo_id}/{commit}/{filename} ----------------------------------------------------------
        def _cdn(self, path: str, send_body: bool) -> None:
            for repo_id in hub.repos:
                prefix = f"/cdn/{repo_id}/{commit_of(repo_id)}/"
                if path.startswith(prefix) and hub._path(repo_id, path[len(prefix):]) is not None:
                    filename = path[len(prefix):]
                    return self._file(repo_id, filename, hub._path(repo_id, filename),
                                      {"ETag": f'"{hub._entry(hub._path(repo_id, filename)).sha256}"'}, send_body)
            self._bytes(404, b"NoSuchKey", {"Content-Type": "text/plain"}, send_body)

        # --- /api/models/{repo_id}[/revision/{rev} | /tree/{rev}[/{path}]] ----------------------------------------
        def _api(self, path: str, send_body: bool) -> None:
            if not path.startswith("models/"):
                return self._json(404, {"error": f"not served here: /api/{path}"}, send_body)
            rest = path[len("models/"):].strip("/")
            repo_id = next((r for r in sorted(hub.repos, key=len, reverse=True)
                            if rest == r or rest.startswith(r + "/")), None)
            if repo_id is None:
                return self._error(404, "RepoNotFound", "Repository not found", send_body)
            tail = rest[len(repo_id):].strip("/").split("/") if rest != repo_id else []
            if tail and tail[0] in ("revision", "tree") and len(tail) >= 2 and tail[1] not in ("main",
                                                                                                 commit_of(repo_id)):
                return self._error(404, "RevisionNotFound", "Invalid rev id: " + tail[1], send_body)
            if not tail or (tail[0] == "revision" and len(tail) == 2):
                return self._json(200, hub._model_info(repo_id), send_body)
            if tail[0] == "tree" and len(tail) >= 2:
                under = "/".join(tail[2:])
                entries = [e for e in hub._tree(repo_id) if not under or e["path"].startswith(under + "/")]
                if under and not entries:  # as the Hub answers a folder the repository lacks
                    return self._error(404, "EntryNotFound", f"{under} does not exist on \"{tail[1]}\"", send_body)
                return self._json(200, entries, send_body)
            self._json(404, {"error": f"not served here: /api/{path}"}, send_body)

        # --- answers ---------------------------------------------------------------------------------------------
        def _file(self, repo_id: str, filename: str, file: Path, headers: dict, send_body: bool) -> None:
            size = file.stat().st_size
            start, status = 0, 200
            wanted = self.headers.get("Range", "")
            if send_body and wanted.startswith("bytes="):
                first = wanted[len("bytes="):].split(",")[0].split("-")[0]
                start = int(first) if first.isdigit() else 0
                if start >= size and size:
                    return self._bytes(416, b"", {"Content-Range": f"bytes */{size}"}, send_body)
                status = 206 if start else 200
            self.send_response(status)
            for name, value in {"Content-Type": "application/octet-stream", **headers}.items():
                self.send_header(name, value)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.send_header("Content-Length", str(size - start))
            self.end_headers()
            if send_body:
                with file.open("rb") as f:
                    f.seek(start)
                    shutil.copyfileobj(f, self.wfile, 1 << 20)
                hub._sent.append((repo_id, filename))

        def _error(self, status: int, code: str, message: str, send_body: bool, headers: dict | None = None):
            self._json(status, {"error": message}, send_body,
                       {"X-Error-Code": code, "X-Error-Message": message, **(headers or {})})

        def _json(self, status: int, body, send_body: bool, headers: dict | None = None) -> None:
            self._bytes(status, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})},
                        send_body)

        def _bytes(self, status: int, data: bytes, headers: dict, send_body: bool) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if send_body and data:
                self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def serve_repos(repos: dict):
    """A Hub serving `repos` ({repo_id: folder}) on loopback while the block runs (stopped after it; `requests`
    stays readable)."""
    hub = Hub(repos)
    hub._start()
    try:
        yield hub
    finally:
        hub.stop()


def hub_env(endpoint: str, home, *, offline: bool = False, **extra) -> dict:
    """os.environ for a subprocess with the Hub at `endpoint`, the Hugging Face home `home` (its cache in
    home/hub), offline mode as asked, no token, no other cache location, no progress bars, and every request to a
    host other than the loopback Hub and CDN sent to a proxy that refuses it (a request meant for the real Hub, or
    for safetensors-convert.hf.space, fails at once, as on a machine offline); `extra` added last (a value of None
    removes the variable)."""
    env = {k: v for k, v in os.environ.items() if k not in _HF_VARIABLES}
    nowhere = closed_endpoint()  # every request off loopback goes to a proxy that refuses it: never to the internet
    env = {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    env.update({"HTTP_PROXY": nowhere, "HTTPS_PROXY": nowhere, "ALL_PROXY": nowhere,
                "NO_PROXY": f"127.0.0.1,{CDN_HOST}"})
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1" if offline else "0",
                "TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"})
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def closed_endpoint() -> str:
    """An endpoint on a loopback port nobody listens on: connection refused, as on a machine offline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def mini_standins(root) -> dict:
    """{repo_id: folder} of random-weight stand-ins (cse_kit.models.standins.write_standin) of every model the
    mini profile downloads, written under `root` (a folder already written there, marked complete, is reused)."""
    from cse_kit.models.standins import write_standin
    from cse_kit.train.presets import hub_models

    repos = {}
    for repo_id in hub_models("mini"):
        folder = Path(root) / repo_id.replace("/", "--")
        if not (folder / ".complete").is_file():
            write_standin(repo_id, folder)
            (folder / ".complete").touch()
        repos[repo_id] = folder
    return repos
