"""gunicorn with a WSGI app: `gunicorn_sync` (`--workers` sync workers, default 2: gunicorn's
default worker class and the classic deployment) and `gunicorn_gevent` (1 gevent worker: greenlets,
monkey-patched).

The process netprof started is gunicorn's arbiter; the workers are its forked children (registry
multiprocess=True: the probes follow them), pinned with it. Sync workers answer one request per
connection and close it (`Connection: close`: gunicorn's sync worker does not keep alive, by
design), so every request costs the loader a reconnect; the gevent worker keeps connections alive.

gunicorn takes the harness's listen socket (`--bind fd://N`); the ready line is printed by the last
worker forked at start, once it has loaded the app and is about to accept (gunicorn's
post_worker_init hook), for the arbiter's pid. On SIGTERM the arbiter stops the workers (SIGTERM,
then SIGKILL after the graceful timeout) and exits 0. The control socket gunicorn 27 opens by
default is disabled (a root process would leave a socket file behind), and so is the access log.
"""

from __future__ import annotations

import socket

from gunicorn.app.base import BaseApplication

from . import http_common
from .common import Options

WORKER_CLASS = {"gunicorn_sync": "sync", "gunicorn_gevent": "gevent"}
GRACEFUL_TIMEOUT = 1  # s the arbiter gives workers to finish on SIGTERM (gunicorn's default: 30)
# The gevent worker serves at most this many connections at once (gunicorn's default, 1000, would
# leave the rest of a netprof run's connections waiting unserved in the accept queue).
WORKER_CONNECTIONS = 20000


def wsgi_app(work):
    headers = [("Content-Type", http_common.CONTENT_TYPE), ("Content-Length", str(len(http_common.BODY)))]
    body, path = [http_common.BODY], http_common.PATH

    def app(environ, start_response):
        if environ["PATH_INFO"] != path:
            start_response("404 Not Found", [("Content-Length", "0")])
            return [b""]
        if work:
            work()
        start_response("200 OK", headers)
        return body

    return app


class Application(BaseApplication):
    """gunicorn configured in code (no config file, no command line, no GUNICORN_CMD_ARGS)."""

    def __init__(self, app, settings: dict):
        self.app, self.settings = app, settings
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.settings.items():
            self.cfg.set(key, value)

    def load(self):
        return self.app


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    worker_class = WORKER_CLASS[name]
    workers = opts.workers if worker_class == "sync" else 1  # one gevent worker: one process, many greenlets
    port = listener.getsockname()[1]

    def post_worker_init(worker) -> None:
        # The last of the first `workers` the arbiter forks, one after the other: once it runs, the
        # whole tree exists. (Ready earlier, the probes, which find the existing tree when they are
        # pointed at the backend and see later forks only while attached, would miss a worker.)
        # A respawned worker (older age) does not announce again.
        if worker.age == workers:
            http_common.announce_ready_as(worker.ppid, port)

    # The work function is made here, in the arbiter, before gevent's monkey-patching in the worker:
    # a `sleep` stays a blocking sleep (common.WorkModel).
    app = wsgi_app(opts.work.callable())
    Application(app, {
        # detach(): gunicorn closes the fd it is given once it has its own copy
        "bind": [f"fd://{listener.detach()}"], "worker_class": worker_class, "workers": workers,
        "worker_connections": WORKER_CONNECTIONS, "graceful_timeout": GRACEFUL_TIMEOUT,
        "loglevel": "warning", "errorlog": "-", "accesslog": None, "control_socket_disable": True,
        "post_worker_init": post_worker_init,
    }).run()  # returns only by SystemExit: 0 after SIGTERM
