"""The standard library's `socketserver`: a `ThreadingTCPServer` (one thread per connection) with
a `StreamRequestHandler` reading `rfile` and writing `wfile`.

The server is built with `bind_and_activate=False` and given the harness's listen socket.
`rbufsize = 0` makes `rfile` the unbuffered socket file, so `rfile.read(n)` is one recv of at most
n bytes: under message framing each read asks for the bytes that complete the message (registry
reads="exact"), as the `thread` backend does; a buffered rfile would read 8 KiB at a time.

`serve_forever` runs in a thread; the main thread waits on common.StopWakeup for SIGTERM/SIGINT or
"all connections closed", then returns (every other thread is a daemon).
"""

from __future__ import annotations

import socket
import socketserver
import sys

from .common import ConnTracker, Options, StopWakeup, announce_ready, echo_pull, fatal, nodelay, start_thread


class EchoHandler(socketserver.StreamRequestHandler):
    rbufsize = 0  # rfile.read(n) = one recv(n)
    server: EchoServer

    def setup(self):
        super().setup()
        nodelay(self.connection)
        self.server.tracker.opened()

    def handle(self):
        try:
            echo_pull(self.rfile.read, self.wfile.write, self.server.work, self.server.framer)
        except ConnectionError:
            pass

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.tracker.closed()


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True  # never wait for handler threads on the way out
    block_on_close = False

    def __init__(self, listener, work, tracker, framer):
        super().__init__(listener.getsockname(), EchoHandler, bind_and_activate=False)
        self.socket.close()  # the unbound socket the constructor made
        self.socket, self.server_address = listener, listener.getsockname()
        self.work, self.tracker, self.framer = work, tracker, framer

    def get_request(self):
        try:
            return super().get_request()
        except OSError as e:  # serve_forever would swallow EMFILE and spin on the ready listener
            fatal(f"socketserver: cannot accept connection {self.tracker.accepted + 1}: {e}")

    def handle_error(self, request, client_address):  # e.g. "can't start new thread"
        fatal(f"socketserver: cannot serve connection {self.tracker.accepted}: {sys.exc_info()[1]}")


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    stop = StopWakeup()
    server = EchoServer(listener, opts.work.callable(), ConnTracker(on_done=stop.notify), opts.framer())
    start_thread(server.serve_forever)  # its handler threads inherit the blocked stop signals
    announce_ready(listener)
    stop.wait()  # SIGTERM, or the last connection closed
