"""Twisted: a `Protocol` whose `dataReceived` echoes, on the default reactor (epoll on Linux,
`twisted`) or on the asyncio reactor (`twisted_asyncio`, asyncioreactor installed first). The
harness's listen socket is handed over with `reactor.adoptStreamPort`.

Framing: `dataReceived` gets whatever the reactor read (it cannot choose a read size, registry
reads="split"); common.Splitter splits it into messages under message framing.

Stopping: the reactor's own SIGTERM/SIGINT handlers stop it; `reactor.run()` then returns and the
process exits 0.
"""

from __future__ import annotations

import signal
import socket

from .common import Options, announce_ready


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    if name == "twisted_asyncio":
        import asyncio

        from twisted.internet import asyncioreactor

        asyncioreactor.install(asyncio.new_event_loop())
    from twisted.internet import reactor
    from twisted.internet.protocol import Factory, Protocol

    work, framer = opts.work.callable(), opts.framer()

    class Echo(Protocol):
        def __init__(self):
            self.splitter = framer.splitter(work)
            self.dataReceived = self.splitter.feed

        def connectionMade(self):
            self.transport.setTcpNoDelay(True)
            self.splitter.write = self.transport.write

    def ready():  # once the reactor runs: its SIGTERM/SIGINT handlers are installed by then
        announce_ready(listener)
        listener.close()  # the port holds its own duplicate of the descriptor

    listener.setblocking(False)  # adoptStreamPort requires it: Port.doRead accepts until EAGAIN
    reactor.adoptStreamPort(listener.fileno(), listener.family, Factory.forProtocol(Echo))
    reactor.callWhenRunning(ready)
    # The reactor takes SIGINT only from Python's default handler, and a process started from a
    # non-interactive shell's background job inherits SIGINT ignored: restore it first.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    reactor.run()  # type: ignore[misc]  # twisted types the reactor module object oddly: its methods look unbound
