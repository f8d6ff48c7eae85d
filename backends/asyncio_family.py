"""asyncio, uvloop and rloop: streams, Protocol and raw-socket styles, the same code on each loop.

As in the seed: the uvloop variants are the asyncio code with `uvloop.new_event_loop` as the loop
factory, nothing else changes; the rloop variants (the Rust loop) likewise with
`rloop.new_event_loop`. `asyncio_eager` is the streams style on asyncio's loop with
`asyncio.eager_task_factory` (Python >= 3.12).

Framing (common.Framer): streams and sock styles pull, `reader.read(msize - have)` and
`loop.sock_recv(conn, msize - have)`, as the reference harness does; a whole message waiting in the
buffer / socket is then returned without yielding to the loop (the starvation effect). The Protocol
style cannot choose its read size: `data_received` gets what arrived and splits it into messages.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import socket

from .common import BACKLOG, STOP_SIGNALS, Framer, Options, announce_ready, echo_pull_async, nodelay

# --- the three styles. Each starts serving and returns a function that stops accepting. ---


async def start_streams(listener, work, framer: Framer):
    first, whole = framer.first, framer.whole

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        nodelay(writer.get_extra_info("socket"))
        try:
            while data := await reader.read(first):
                if len(data) < whole and not (data := await framer.finish_async(reader.read, data)):
                    break
                if work:
                    work()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            try:  # takes the reset the stream saw (else "Future exception was never retrieved")
                await writer.wait_closed()
            except ConnectionError:
                pass

    # backlog: with sock=, asyncio calls listen() again with this value (default 100).
    server = await asyncio.start_server(handle, sock=listener, backlog=BACKLOG)
    return server.close


class EchoProtocol(asyncio.Protocol):
    """data_received is the connection's common.Splitter: stream framing echoes what came, message
    framing does work() and write() once per whole message."""

    def __init__(self, work, framer: Framer):
        self.splitter = framer.splitter(work)
        # The splitter's feed stands in for the method: one call less per read.
        self.data_received = self.splitter.feed  # type: ignore[method-assign]

    def connection_made(self, transport):
        nodelay(transport.get_extra_info("socket"))
        self.splitter.write = transport.write


async def start_proto(listener, work, framer: Framer):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: EchoProtocol(work, framer),
                                      sock=listener, backlog=BACKLOG)
    return server.close


async def start_sock(listener, work, framer: Framer):
    loop = asyncio.get_running_loop()
    tasks = set()  # the loop keeps only weak references to tasks

    async def echo(conn):
        try:
            await echo_pull_async(functools.partial(loop.sock_recv, conn),
                                  functools.partial(loop.sock_sendall, conn), work, framer)
        except ConnectionError:
            pass
        finally:
            conn.close()

    async def accept_loop():
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            nodelay(conn)
            task = loop.create_task(echo(conn))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    listener.setblocking(False)
    acceptor = loop.create_task(accept_loop())
    return acceptor.cancel


STYLES = {"": start_streams, "_proto": start_proto, "_sock": start_sock}
# Loops other than asyncio's own: the module whose new_event_loop is the loop factory.
LOOPS = {"uvloop": "uvloop", "rloop": "rloop"}


async def main(start, listener, work, framer, eager=False):
    """Serve with `start(listener, work, framer)` (a style above, or another asyncio-based
    framework's, see tornado_backend) until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    if eager:  # Python >= 3.12 (registry min_python): a new task runs at once, up to its first await
        loop.set_task_factory(asyncio.eager_task_factory)
    finished = loop.create_future()

    def finish():
        if not finished.done():
            finished.set_result(None)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, finish)
    port = listener.getsockname()[1]
    stop = await start(listener, work, framer)
    announce_ready(port)  # rloop's create_server detaches the listen socket: ask for its port before
    await finished
    stop()


def run(start, listener, opts, loop_factory=None, eager=False):
    # asyncio.Runner cancels whatever handler tasks are still pending (SIGTERM case) on exit.
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main(start, listener, opts.work.callable(), opts.framer(), eager))


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    family, _, style = name.partition("_")
    eager = style == "eager"  # asyncio_eager: the streams style with eager tasks
    style = "_" + style if style and not eager else ""
    loop_factory = None
    if family in LOOPS:
        loop_factory = importlib.import_module(LOOPS[family]).new_event_loop
    run(STYLES[style], listener, opts, loop_factory, eager)
