"""optuna-dashboard on a study's storage, served from the `cse-kit tune` process while it runs."""

from __future__ import annotations

import contextlib
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .errors import TuneError
from .study import Study, open_storage


@contextlib.contextmanager
def dashboard(study: Study, address: str, opened=None):
    """optuna-dashboard serving the study's storage (`opened`, as check() gives it; opened here where None) at
    http://HOST:PORT (address `PORT` or `HOST:PORT`, 127.0.0.1 unless given) from a thread of this process, while the
    block runs; yields its URL."""
    try:
        import optuna_dashboard
    except ImportError:
        raise TuneError("--dashboard needs optuna-dashboard: pip install 'cse-kit[tune]'") from None
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise TuneError(f"--dashboard {address}: give a port (8080) or a host and port (0.0.0.0:8080)")

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):  # one line per request would bury the study's own lines
            pass

    try:
        app = optuna_dashboard.wsgi(opened or open_storage(study))
        server = make_server(host or "127.0.0.1", int(port), app, Server, Quiet)
    except OSError as error:
        raise TuneError(f"--dashboard {address}: cannot listen there ({error.strerror}); choose another port") from None
    thread = threading.Thread(target=server.serve_forever, name="optuna-dashboard", daemon=True)
    thread.start()
    try:
        yield f"http://{host or '127.0.0.1'}:{server.server_port}/dashboard"
    finally:
        server.shutdown()
        server.server_close()


