"""Thread-based models: `thread` (one blocking thread per connection), `prethread` (a fixed pool
of threads sharing the listen socket) and `select_prethread` (select() reads, a pool of threads
replies), the last two from the socket-patterns seed.

The main thread waits for SIGTERM/SIGINT (common.StopWakeup), then returns; the other threads are
daemons, so nothing keeps the process alive after that.
"""

from __future__ import annotations

import queue
import select
import socket

from .common import Options, StopWakeup, announce_ready, echo_blocking, fatal, nodelay, start_thread
from .selector_family import SelectorServer, accept_for_select


def serve_thread_per_connection(listener, work, framer, stop):
    def handle(conn):
        echo_blocking(conn, work, framer)
        stop.exit_if_requested()

    def accept_loop():
        n = 0  # the connection being accepted (1-based), for the error
        try:
            while True:
                n += 1
                conn, _ = listener.accept()
                nodelay(conn)
                start_thread(handle, conn)
        except (OSError, RuntimeError) as e:  # EMFILE, "can't start new thread"
            fatal(f"thread: cannot accept and start a thread for connection {n}: {e}")

    start_thread(accept_loop)


def serve_prethread(listener, work, opts):
    """The seed's prethread has each pool thread accept one connection and serve it until it
    closes, so a pool smaller than the connection count leaves the rest unserved for the whole
    (persistent-connection) run. Here each pool thread runs its own selector loop over the
    connections it accepted from the shared listen socket: the same fixed pool, but it serves any
    number of connections ("one loop per thread", as memcached or netty worker groups do)."""
    def worker():
        try:
            SelectorServer(listener, work, opts.framer()).serve_forever()
        except OSError as e:  # EMFILE and the like: fail loudly rather than serve with one thread less
            fatal(f"prethread: a worker thread failed: {e}")

    for _ in range(opts.workers):
        start_thread(worker)


def serve_select_prethread(listener, work, workers, stop, framer):
    """select() in the main loop thread reads; sender threads do the work and send the reply, so a
    slow reply does not hold up reading. The reader assembles whole messages (message framing) and
    queues each one; a sender calls work() once per queued item. The seed feeds all senders from
    one queue; that can reorder two chunks of the same connection, so here a connection always
    goes to the same sender (queues[fd % workers]), which keeps its bytes in order. The sender also
    closes the socket, after anything still queued for it, so an fd number is never reused under a
    sender."""
    queues = [queue.SimpleQueue() for _ in range(workers)]

    def sender(q):
        while True:
            conn, data = q.get()
            if data is None:
                conn.close()
                continue
            if work:
                work()
            try:
                conn.sendall(data)
            except OSError:  # reset by the peer: the reader sees EOF and queues the close
                pass

    for q in queues:
        start_thread(sender, q)
    readers = {listener, stop.sock}
    while True:  # until a stop signal
        readable, _, _ = select.select(readers, [], [])
        for sock in readable:
            if sock is stop.sock:
                if stop.woken():
                    return
                continue
            if sock is listener:
                # blocking: the sender threads use sendall()
                readers.add(accept_for_select(listener, blocking=True))
                continue
            try:
                data = framer.recv(sock)
            except ConnectionError:
                data = b""
            if data is None:  # part of a message so far
                continue
            q = queues[sock.fileno() % workers]
            if data:
                q.put((sock, data))
            else:
                readers.discard(sock)
                framer.forget(sock)
                q.put((sock, None))


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    stop = StopWakeup()
    work = opts.work.callable()
    announce_ready(listener)  # listening already; connections queue until the threads accept
    if name == "thread":
        serve_thread_per_connection(listener, work, opts.framer(), stop)
    elif name == "prethread":
        serve_prethread(listener, work, opts)
    else:
        serve_select_prethread(listener, work, opts.workers, stop, opts.framer())
        return
    stop.wait()  # SIGTERM/SIGINT
