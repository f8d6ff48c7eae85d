"""trio, and anyio on its asyncio and trio backends: structured concurrency, one task per connection.

- `trio`: `trio.serve_listeners` over a `trio.SocketListener` wrapping the harness's listen socket
  (what `trio.serve_tcp` does after opening its own), each connection a `SocketStream`:
  `receive_some(n)` / `send_all`.
- `anyio_asyncio`, `anyio_trio`: `anyio.abc.SocketListener.from_socket(listener).serve(handler)`,
  each connection an anyio `SocketStream`: `receive(n)` / `send`, run by `anyio.run` on that backend.

Framing (common.Framer): pull-style, each receive asks for the bytes that complete the current
message (registry reads="exact"). trio's `receive_some(n)` is one recv(n) on the socket; anyio's
asyncio backend reads through a transport and hands out at most n of what it buffered.

Stopping: SIGTERM/SIGINT (a signal receiver task) cancels the task group's cancel scope; every
handler is cancelled with it and the run returns.
"""

from __future__ import annotations

import socket

from .common import STOP_SIGNALS, Options, announce_ready, echo_pull_async


async def _cancel_on_signal(signals, scope) -> None:
    async for _ in signals:
        scope.cancel()
        return


def _handler(echo):
    """The per-connection task: echo until EOF, then close."""

    async def handle(stream):
        async with stream:
            await echo(stream)

    return handle


async def serve_trio(listener, work, framer) -> None:
    import trio

    async def echo(stream):
        try:
            await echo_pull_async(stream.receive_some, stream.send_all, work, framer)
        except trio.BrokenResourceError:  # reset by the peer
            pass

    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_signal, signals, nursery.cancel_scope)
            # SocketStream sets TCP_NODELAY itself.
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(listener))]
            await nursery.start(trio.serve_listeners, _handler(echo), listeners)
            announce_ready(listener)


async def serve_anyio(listener, work, framer) -> None:
    import anyio
    from anyio.abc import SocketListener

    async def echo(stream):
        try:
            await echo_pull_async(stream.receive, stream.send, work, framer)
        except (anyio.EndOfStream, anyio.BrokenResourceError):  # EOF (also mid-message), reset
            pass

    server = await SocketListener.from_socket(listener)  # accepted streams get TCP_NODELAY
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, signals, tg.cancel_scope)
            tg.start_soon(server.serve, _handler(echo), tg)
            announce_ready(listener)


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    work, framer = opts.work.callable(), opts.framer()
    if name == "trio":
        import trio

        trio.run(serve_trio, listener, work, framer)
    else:
        import anyio

        anyio.run(serve_anyio, listener, work, framer, backend=name.partition("_")[2])
