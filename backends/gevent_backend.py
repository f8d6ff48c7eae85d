"""gevent: a StreamServer spawning one greenlet per connection, plain blocking-style code.

No monkey-patching: StreamServer hands the handler a gevent socket already, and the work model's
`sleep` must stay a real blocking sleep (it stands for blocking handler code, see common.WorkModel)
rather than silently becoming a cooperative one.
"""

from __future__ import annotations

import socket

import gevent
from gevent.event import Event
from gevent.server import StreamServer

from .common import STOP_SIGNALS, Options, announce_ready, echo_blocking, nodelay


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    work, framer = opts.work.callable(), opts.framer()
    finished = Event()  # set by SIGTERM/SIGINT

    def handle(sock, address):
        nodelay(sock)
        echo_blocking(sock, work, framer)  # sock.recv(msize - have) under message framing

    # A ready-made listening socket is used as it is, and gevent accepts on it directly when its
    # watcher fires: it must be non-blocking (as gevent's own listeners are), or a wakeup without
    # a pending connection would block the whole hub in accept().
    listener.setblocking(False)
    server = StreamServer(listener, handle)
    server.start()
    for sig in STOP_SIGNALS:
        gevent.signal_handler(sig, finished.set)
    announce_ready(listener)
    finished.wait()
    server.stop(timeout=1)  # kills handler greenlets still running (SIGTERM case)
