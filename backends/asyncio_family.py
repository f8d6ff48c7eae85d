"""asyncio and uvloop: streams, Protocol and raw-socket styles, the same code on either loop.

As in the seed: the uvloop variants are the asyncio code with `uvloop.new_event_loop` as the loop
factory, nothing else changes.

Framing (common.Framer): streams and sock styles pull, `reader.read(msize - have)` and
`loop.sock_recv(conn, msize - have)`, as the reference harness does; a whole message waiting in the
buffer / socket is then returned without yielding to the loop (the starvation effect). The Protocol
style cannot choose its read size: `data_received` gets what arrived and splits it into messages.
"""

from __future__ import annotations

import asyncio
import functools

from .common import BACKLOG, STOP_SIGNALS, ConnTracker, Framer, announce_ready, nodelay

# --- the three styles. Each starts serving and returns a function that stops accepting. ---


async def start_streams(listener, work, tracker, on_closed, framer: Framer):
    first, whole = framer.first, framer.whole

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        nodelay(writer.get_extra_info("socket"))
        tracker.opened()
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
            on_closed()

    # backlog: with sock=, asyncio calls listen() again with this value (default 100).
    server = await asyncio.start_server(handle, sock=listener, backlog=BACKLOG)
    return server.close


class EchoProtocol(asyncio.Protocol):
    def __init__(self, work, tracker, on_closed, framer: Framer):
        self.work, self.tracker, self.on_closed = work, tracker, on_closed
        self.whole = framer.whole  # msize under message framing, 0 under stream framing
        self.rest = None  # bytearray: the start of a message still incomplete

    def connection_made(self, transport):
        nodelay(transport.get_extra_info("socket"))
        self.tracker.opened()
        self.transport = transport

    def data_received(self, data):
        """Stream framing: echo what came. Message framing: work() and write() once per whole
        message; a trailing partial message waits for more data."""
        if self.rest is not None:
            self.rest += data
            data, self.rest = self.rest, None
        whole, work, write = self.whole, self.work, self.transport.write
        if len(data) == whole or not whole:  # one message (the common case), or stream framing
            if work:
                work()
            write(data)
            return
        end = len(data) - len(data) % whole
        for start in range(0, end, whole):
            if work:
                work()
            write(data[start:start + whole])
        if end < len(data):
            self.rest = bytearray(memoryview(data)[end:])

    def connection_lost(self, exc):
        self.on_closed()


async def start_proto(listener, work, tracker, on_closed, framer: Framer):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: EchoProtocol(work, tracker, on_closed, framer),
                                      sock=listener, backlog=BACKLOG)
    return server.close


async def start_sock(listener, work, tracker, on_closed, framer: Framer):
    loop = asyncio.get_running_loop()
    tasks = set()  # the loop keeps only weak references to tasks
    first, whole = framer.first, framer.whole

    async def echo(conn):
        recv = functools.partial(loop.sock_recv, conn)
        try:
            while data := await recv(first):
                if len(data) < whole and not (data := await framer.finish_async(recv, data)):
                    break
                if work:
                    work()
                await loop.sock_sendall(conn, data)
        except ConnectionError:
            pass
        finally:
            conn.close()
            on_closed()

    async def accept_loop():
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            nodelay(conn)
            tracker.opened()
            task = loop.create_task(echo(conn))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    listener.setblocking(False)
    acceptor = loop.create_task(accept_loop())
    return acceptor.cancel


STYLES = {"": start_streams, "_proto": start_proto, "_sock": start_sock}


async def main(style, listener, work, framer):
    loop = asyncio.get_running_loop()
    finished = loop.create_future()

    def finish():
        if not finished.done():
            finished.set_result(None)

    def on_closed():
        if tracker.closed():
            finish()

    tracker = ConnTracker()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, finish)
    stop = await STYLES[style](listener, work, tracker, on_closed, framer)
    announce_ready(listener)
    await finished
    stop()


def serve(name, listener, opts):
    family, _, style = name.partition("_")
    style = "_" + style if style else ""
    loop_factory = None
    if family == "uvloop":
        import uvloop

        loop_factory = uvloop.new_event_loop
    # asyncio.Runner cancels whatever handler tasks are still pending (SIGTERM case) on exit.
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main(style, listener, opts.work.callable(), opts.framer()))
