"""Downloading a model over real HTTP from a local server that speaks the Hugging Face Hub protocol.

The server answers exactly the requests huggingface_hub 2.4.0's `snapshot_download` makes (read from its
source: `_snapshot_download.py`, `file_download.py`, `hf_api.py`, `utils/_http.py`):

  GET  /api/models/{repo}/revision/{rev}            repo_info: JSON with "sha" (the commit) and "siblings"
  GET  /api/models/{repo}/tree/{commit}?recursive=  list_repo_tree: JSON list of files (LFS ones with "lfs")
  HEAD /{repo}/resolve/{commit}/{path}              file metadata, one per file not yet in the cache:
         regular file: 200 with X-Repo-Commit, ETag (git blob sha1) and Content-Length;
         LFS file: 302 to a CDN host with X-Repo-Commit, X-Linked-Etag (sha256) and X-Linked-Size, like the
         Hub. huggingface_hub stops at a redirect to another host and reads the metadata from it.
  GET  /{repo}/resolve/{commit}/{path}              a regular file's bytes
  GET  /cdn/{sha256} on the "CDN" host              an LFS file's bytes (Range supported)

No Xet headers are sent, so huggingface_hub takes its plain HTTP path. The endpoint is http://127.0.0.1:PORT
and the "CDN" is http://localhost:PORT (the same server under another host name, so another origin).
It serves the tiny random checkpoint in the real repository layout, so the downloaded folder goes through
the same checking and loading code as the real model.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import torch

from engine.errors import DownloadCancelled, ModelFilesError, ModelNotFoundError
from engine.model.store import (
    MIMI_CHECKPOINT,
    check_model_folder,
    download,
    find_local_model,
    is_offline,
    models_dir,
    resolve_model,
)
from engine.protocol import Progress

REPO_ID = "test-org/LFM2.5-Audio-tiny"
COMMIT = "3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345"
LFS_SUFFIXES = (".safetensors",)
CDN_PATH = "/cdn/"


# --------------------------------------------------------------------------- the fake Hub


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


@dataclass(frozen=True)
class Request:
    method: str
    host: str  # the Host header without the port: "127.0.0.1" (the Hub) or "localhost" (the CDN)
    path: str  # unquoted, without the query string


@dataclass
class FakeHub:
    """A ThreadingHTTPServer on 127.0.0.1 serving `repos` (repo id -> {path in repo: bytes}) at COMMIT."""

    repos: dict[str, dict[str, bytes]]
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0  # kept after stop(), so that the same endpoint can be probed again
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn(self) -> str:
        return f"http://localhost:{self.port}"

    def start(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join(timeout=5)
        assert not self._thread.is_alive()
        self._server = None

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def take_requests(self) -> list[Request]:
        with self._lock:
            taken, self.requests = self.requests, []
        return taken

    def blob_by_sha256(self, sha256: str) -> bytes | None:
        for files in self.repos.values():
            for path, data in files.items():
                if _is_lfs(path) and hashlib.sha256(data).hexdigest() == sha256:
                    return data
        return None


def _make_handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: no pooled sockets outlive the server

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
            pass  # requests are recorded in hub.requests instead of printed

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        # ----------------------------------------------------------------- routing

        def _route(self, *, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
            hub.log(Request(self.command, host, path))
            try:
                if path.startswith(CDN_PATH):
                    self._cdn(path.removeprefix(CDN_PATH), head=head)
                elif path.startswith("/api/models/"):
                    self._api(path.removeprefix("/api/models/"), head=head)
                elif "/resolve/" in path:
                    self._resolve(path.lstrip("/"), head=head)
                else:
                    self._send(404, b"Not Found", head=head)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (a cancelled download)

        def _api(self, rest: str, *, head: bool) -> None:
            # {org}/{name}/revision/{rev} or {org}/{name}/tree/{rev}[/{path}]
            parts = rest.split("/") + ["", ""]
            repo_id, kind, revision = "/".join(parts[:2]), parts[2], parts[3]
            files = hub.repos.get(repo_id)
            if files is None:
                return self._repo_not_found(head=head)
            if not _known_revision(revision):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head=head)
            if kind == "revision":
                info = {
                    "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": COMMIT,
                    "private": False,
                    "gated": False,
                    "disabled": False,
                    "lastModified": "2025-01-01T00:00:00.000Z",
                    "tags": [],
                    "siblings": [{"rfilename": name} for name in sorted(files)],
                }
                return self._send_json(info, head=head)
            if kind == "tree":
                return self._send_json(_tree(files), head=head)
            return self._send(404, b"Not Found", head=head)

        def _resolve(self, rest: str, *, head: bool) -> None:
            before, _, after = rest.partition("/resolve/")
            revision, _, filename = after.partition("/")
            files = hub.repos.get(before)
            if files is None:
                return self._repo_not_found(head=head)
            if not _known_revision(revision):
                return self._error(404, "RevisionNotFound", "Invalid rev id", head=head)
            data = files.get(filename)
            if data is None:
                return self._error(404, "EntryNotFound", "Entry not found", head=head, commit=True)
            if _is_lfs(filename):
                sha256 = hashlib.sha256(data).hexdigest()
                self.send_response(302)
                self.send_header("Location", f"{hub.cdn}{CDN_PATH}{sha256}")
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("X-Linked-Etag", f'"{sha256}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("ETag", f'"{_git_blob_sha1(_lfs_pointer(data))}"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            return self._send(200, data, head=head, etag=_git_blob_sha1(data), commit=True)

        def _cdn(self, sha256: str, *, head: bool) -> None:
            data = hub.blob_by_sha256(sha256)
            if data is None:
                return self._send(404, b"NoSuchKey", head=head)
            start = _range_start(self.headers.get("Range"))
            if start:
                return self._send(206, data[start:], head=head, etag=sha256, content_range=(start, len(data)))
            return self._send(200, data, head=head, etag=sha256)

        # ----------------------------------------------------------------- responses

        def _repo_not_found(self, *, head: bool) -> None:
            # What the Hub answers for a repo that does not exist (or is private and no token was sent).
            self._error(404, "RepoNotFound", "Repository not found", head=head)

        def _error(self, status: int, code: str, message: str, *, head: bool, commit: bool = False) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            if commit:
                self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _send_json(self, value: object, *, head: bool) -> None:
            self._send(200, json.dumps(value).encode(), head=head, content_type="application/json")

        def _send(
            self,
            status: int,
            body: bytes,
            *,
            head: bool,
            etag: str | None = None,
            commit: bool = False,
            content_type: str = "application/octet-stream",
            content_range: tuple[int, int] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            if etag is not None:
                self.send_header("ETag", f'"{etag}"')
            if commit:
                self.send_header("X-Repo-Commit", COMMIT)
            if content_range is not None:
                start, total = content_range
                self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
            self.end_headers()
            if head:
                return
            view = memoryview(body)
            for offset in range(0, len(view), 1 << 20):
                self.wfile.write(view[offset : offset + (1 << 20)])

    return Handler


def _known_revision(revision: str) -> bool:
    return revision in ("main", COMMIT)


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header.removeprefix("bytes=").split("-", 1)[0] or 0)


def _lfs_pointer(data: bytes) -> bytes:
    sha256 = hashlib.sha256(data).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n".encode()


def _tree(files: dict[str, bytes]) -> list[dict[str, object]]:
    """The Hub's recursive /tree listing: folders, then files; LFS files carry their sha256 and real size."""
    folders = sorted({"/".join(path.split("/")[:i]) for path in files for i in range(1, path.count("/") + 1)})
    entries: list[dict[str, object]] = [
        {"type": "directory", "oid": _git_blob_sha1(folder.encode()), "size": 0, "path": folder} for folder in folders
    ]
    for path, data in sorted(files.items()):
        entry: dict[str, object] = {"type": "file", "size": len(data), "path": path}
        if _is_lfs(path):
            pointer = _lfs_pointer(data)
            entry["oid"] = _git_blob_sha1(pointer)
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": len(pointer)}
        else:
            entry["oid"] = _git_blob_sha1(data)
        entries.append(entry)
    return entries


# --------------------------------------------------------------------------- fixtures


# Files of a real model repository that the app never reads: a download must not fetch them. (The tiny
# checkpoint's README.md is one too; the Mimi checkpoint is read only when there is no audio_detokenizer/.)
UNREAD_FILES = {"assets/demo-ja.wav": b"RIFF" + bytes(4096), MIMI_CHECKPOINT: b"\0" * 8192}


def _read_by_the_app(files: dict[str, bytes]) -> dict[str, bytes]:
    return {path: data for path, data in files.items() if path != "README.md" and path not in UNREAD_FILES}


@pytest.fixture(scope="session")
def app_files(tiny_files: dict[str, bytes]) -> dict[str, bytes]:
    """The tiny checkpoint's files that the app reads: what a download fetches."""
    files = _read_by_the_app(tiny_files)
    assert set(files) == {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "audio_detokenizer/config.json", "audio_detokenizer/model.safetensors",
    }
    return files


@pytest.fixture(scope="session")
def tiny_files(tiny_model_dir: Path) -> dict[str, bytes]:
    """Every file of the tiny checkpoint, keyed by its path in the repository ("audio_detokenizer/config.json")."""
    return {
        path.relative_to(tiny_model_dir).as_posix(): path.read_bytes()
        for path in sorted(tiny_model_dir.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def online(isolated_user_dirs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Isolated user dirs (model store in tmp_path) with huggingface_hub's offline mode off.

    huggingface_hub reads `constants.HF_HUB_OFFLINE` when it sends a request, so the constant is patched (the
    environment variable that isolated_user_dirs sets is only read at import). Nothing may read or write the
    real ~/.cache/huggingface: the token files point into tmp_path, and the agent-harness registry that
    huggingface_hub fetches from `{ENDPOINT}/api/agent-harnesses` (and caches in HF_HOME) on its first request
    is pinned to the empty registry it falls back to when offline.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent

    hf_home = tmp_path / "hf-home"
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens"))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(hf_home / ".agent_harnesses.json"))
    monkeypatch.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)
    for variable in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    assert str(models_dir()).startswith(str(isolated_user_dirs))
    return isolated_user_dirs


StartHub = Callable[[dict[str, dict[str, bytes]]], FakeHub]


@pytest.fixture
def start_hub(online: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StartHub]:
    """Start a FakeHub and point huggingface_hub at it; every hub started is shut down at teardown."""
    from huggingface_hub import constants

    hubs: list[FakeHub] = []

    def start(repos: dict[str, dict[str, bytes]]) -> FakeHub:
        hub = FakeHub(repos)
        hub.start()
        hubs.append(hub)
        # Both are computed from HF_ENDPOINT at import time; hf_hub_url and HfApi read them at call time.
        monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
        template = hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        return hub

    yield start
    for hub in hubs:
        hub.stop()


@pytest.fixture
def hub(start_hub: StartHub, tiny_files: dict[str, bytes]) -> FakeHub:
    return start_hub({REPO_ID: {**tiny_files, **UNREAD_FILES}})


def _snapshot(repo_id: str = REPO_ID) -> Path:
    return models_dir() / f"models--{repo_id.replace('/', '--')}" / "snapshots" / COMMIT


def _expected_requests(files: dict[str, bytes], repo_id: str = REPO_ID) -> set[Request]:
    """What snapshot_download sends for a first download of `files` (in no fixed order: 8 worker threads)."""
    expected = {
        Request("GET", "127.0.0.1", f"/api/models/{repo_id}/revision/main"),
        Request("GET", "127.0.0.1", f"/api/models/{repo_id}/tree/{COMMIT}"),
    }
    for path, data in files.items():
        expected.add(Request("HEAD", "127.0.0.1", f"/{repo_id}/resolve/{COMMIT}/{path}"))
        if _is_lfs(path):
            expected.add(Request("GET", "localhost", f"{CDN_PATH}{hashlib.sha256(data).hexdigest()}"))
        else:
            expected.add(Request("GET", "127.0.0.1", f"/{repo_id}/resolve/{COMMIT}/{path}"))
    return expected


def _byte_events(events: list[Progress]) -> list[Progress]:
    return [event for event in events if event.done_bytes is not None]


# --------------------------------------------------------------------------- tests


def test_is_offline_follows_the_server_on_its_own_port(start_hub: StartHub) -> None:
    from huggingface_hub import constants

    hub = start_hub({})
    assert hub.port not in (80, 443)
    assert constants.ENDPOINT == hub.endpoint
    assert is_offline(timeout_s=2.0) is False
    hub.stop()
    assert constants.ENDPOINT == hub.endpoint  # same endpoint, nobody listening any more
    assert is_offline(timeout_s=2.0) is True
    assert hub.requests == []  # the probe only connects; it sends no request


def test_download_fetches_every_file_over_http_and_loads(
    hub: FakeHub, app_files: dict[str, bytes], tiny_model_dir: Path, tiny_loaded
) -> None:
    from engine.model.loading import load_model

    assert find_local_model(REPO_ID) is None
    assert hub.take_requests() == []  # the local look-up never touches the network

    events: list[Progress] = []
    folder = resolve_model(REPO_ID, progress=events.append)

    assert folder == _snapshot()
    assert check_model_folder(folder) == []
    downloaded = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert downloaded == set(app_files)
    for path, data in app_files.items():
        assert (folder / path).read_bytes() == data, path

    requests = hub.take_requests()
    assert set(requests) == _expected_requests(app_files)
    assert len(requests) == len(set(requests)), "a request was sent twice"

    total = sum(len(data) for data in app_files.values())
    byte_events = _byte_events(events)
    assert byte_events, "the progress callback got no byte counts"
    assert all(event.stage == "download" for event in byte_events)
    assert max(event.done_bytes or 0 for event in byte_events) == total
    final = byte_events[-1]
    assert (final.done_bytes, final.total_bytes, final.fraction) == (total, total, 1.0)

    loaded = load_model(folder, device="cpu")
    name = "lfm.embed_tokens.weight"
    reference = tiny_loaded.model.state_dict()
    assert name in reference
    assert torch.equal(loaded.model.state_dict()[name], reference[name])
    assert loaded.folder == folder


def test_downloaded_model_is_found_without_the_server(hub: FakeHub, app_files: dict[str, bytes]) -> None:
    folder = download(REPO_ID)
    hub.stop()
    hub.take_requests()

    assert is_offline() is True
    assert find_local_model(REPO_ID) == folder
    assert resolve_model(REPO_ID, allow_download=False) == folder
    assert hub.requests == []
    assert (folder / "model.safetensors").read_bytes() == app_files["model.safetensors"]


def test_cancelled_download_leaves_no_broken_files_and_resumes(
    hub: FakeHub, app_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    # Small chunks, so that the weights arrive in many pieces and the cancel lands inside them.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256 * 1024)
    small = {path for path in app_files if not _is_lfs(path)}
    cancel = threading.Event()
    events: list[Progress] = []

    def on_progress(event: Progress) -> None:
        # Cancel once the small files are in (the weights, 20 and 47 MB, are still streaming).
        events.append(event)
        if event.done_bytes and all((_snapshot() / path).is_file() for path in small):
            cancel.set()

    with pytest.raises(DownloadCancelled):
        download(REPO_ID, progress=on_progress, cancel=cancel)
    assert cancel.is_set()
    total = sum(len(data) for data in app_files.values())
    assert max(event.done_bytes or 0 for event in events) < total

    store = models_dir()
    assert not [p for p in store.rglob("*") if p.name.endswith(".incomplete")], "partial files were left behind"
    blob_names = {
        path: hashlib.sha256(data).hexdigest() if _is_lfs(path) else _git_blob_sha1(data)
        for path, data in app_files.items()
    }
    blobs = store / f"models--{REPO_ID.replace('/', '--')}" / "blobs"
    assert {blob.name for blob in blobs.iterdir()} <= set(blob_names.values())
    kept = {path for path, name in blob_names.items() if (blobs / name).exists()}
    for path in kept:  # every blob that is there is complete
        assert (blobs / blob_names[path]).read_bytes() == app_files[path], path
    assert small <= kept
    assert "audio_detokenizer/model.safetensors" not in kept
    assert check_model_folder(_snapshot()) != []
    assert find_local_model(REPO_ID) is None  # an interrupted snapshot is not taken for a model

    hub.take_requests()
    events.clear()
    folder = download(REPO_ID, progress=events.append)
    assert folder == _snapshot()
    assert check_model_folder(folder) == []
    for path, data in app_files.items():
        assert (folder / path).read_bytes() == data, path

    # Files finished before the cancel are kept: the second run fetches only the others, and the tree
    # listing (cached on disk per commit by huggingface_hub) is not asked for again.
    requests = hub.take_requests()
    fetched = {r.path for r in requests if r.method == "GET"}
    for path, data in app_files.items():
        url_path = f"{CDN_PATH}{blob_names[path]}" if _is_lfs(path) else f"/{REPO_ID}/resolve/{COMMIT}/{path}"
        assert (url_path in fetched) == (path not in kept), path
    assert f"/api/models/{REPO_ID}/revision/main" in fetched
    assert f"/api/models/{REPO_ID}/tree/{COMMIT}" not in fetched
    refetched = sum(len(app_files[path]) for path in app_files if path not in kept)
    assert _byte_events(events)[-1].done_bytes == refetched


def test_unknown_repo_is_reported_by_name(hub: FakeHub) -> None:
    missing = "test-org/no-such-model"
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_model(missing)
    message = caught.value.message
    assert missing in message
    assert "Repository Not Found" in message
    assert caught.value.values["source"] == missing
    assert hub.take_requests() == [Request("GET", "127.0.0.1", f"/api/models/{missing}/revision/main")]
    assert not (models_dir() / f"models--{missing.replace('/', '--')}" / "snapshots").exists()


def test_truncated_weights_on_the_server_are_named(
    start_hub: StartHub, tiny_files: dict[str, bytes]
) -> None:
    files = dict(tiny_files)
    weights = files["model.safetensors"]
    files["model.safetensors"] = weights[: len(weights) // 2]
    hub = start_hub({REPO_ID: files})

    with pytest.raises(ModelFilesError) as caught:
        download(REPO_ID)
    error = caught.value
    assert error.folder == _snapshot()
    (problem,) = error.problems
    assert problem.startswith("model.safetensors is")
    assert "truncated" in problem
    assert str(_snapshot()) in error.message and problem in error.message
    assert (_snapshot() / "model.safetensors").stat().st_size == len(weights) // 2
    assert set(hub.take_requests()) == _expected_requests(_read_by_the_app(files))
    assert find_local_model(REPO_ID) is None  # a broken download is not offered as a model


def test_a_repository_without_the_detokenizer_gets_the_mimi_checkpoint(
    start_hub: StartHub, tiny_files: dict[str, bytes]
) -> None:
    files = {path: data for path, data in tiny_files.items() if not path.startswith("audio_detokenizer/")}
    hub = start_hub({REPO_ID: {**files, **UNREAD_FILES}})

    folder = download(REPO_ID)
    assert check_model_folder(folder) == []
    downloaded = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert downloaded == {*_read_by_the_app(files), MIMI_CHECKPOINT}  # still no demo media, no README
    assert (folder / MIMI_CHECKPOINT).read_bytes() == UNREAD_FILES[MIMI_CHECKPOINT]
    fetched = {r.path for r in hub.take_requests() if r.method == "HEAD"}
    assert f"/{REPO_ID}/resolve/{COMMIT}/assets/demo-ja.wav" not in fetched
    assert f"/{REPO_ID}/resolve/{COMMIT}/README.md" not in fetched
    hub.stop()
    assert find_local_model(REPO_ID) == folder  # and it is found again without the server


def test_progress_bars_behave_like_tqdm_for_huggingface_hub() -> None:
    """huggingface_hub sets totals, counts, and asks for the rate (Xet downloads do) on our progress class."""
    from huggingface_hub.utils._xet_progress_reporting import _set_aggregate_rate_postfix

    from engine.model.store import _byte_progress_class

    events: list[Progress] = []
    progress_class = _byte_progress_class(events.append, None)
    bar = progress_class(desc="Downloading bytes", total=0, initial=0, unit="B", unit_scale=True)
    bar.total = 300
    bar.update(100)
    bar.update(200)
    _set_aggregate_rate_postfix(bar)
    bar.close()
    assert [(e.done_bytes, e.total_bytes, e.detail) for e in events] == [
        (100, 300, "Downloading bytes"),
        (300, 300, "Downloading bytes"),
    ]
