"""The standard library's `socketserver`: a `ThreadingTCPServer` (one thread per connection) with
a `StreamRequestHandler` reading `rfile` and writing `wfile`.

The server is built with `bind_and_activate=False` and given the harness's listen socket.
`rbufsize = 0` makes `rfile` the unbuffered socket file, so `rfile.read(n)` is one recv of at most
n bytes: under message framing each read asks for the bytes that complete the message (registry
reads="exact"), as the `thread` backend does; a buffered rfile would read 8 KiB at a time.

`serve_forever` runs in a thread; the main thread waits on common.StopWakeup for SIGTERM/SIGINT,
then returns (every other thread is a daemon).
"""

from __future__ import annotations

import socket
import socketserver
import sys

from .common import Options, StopWakeup, announce_ready, echo_pull, fatal, nodelay, start_thread


class EchoHandler(socketserver.StreamRequestHandler):
    rbufsize = 0  # rfile.read(n) = one recv(n)
    server: EchoServer

    def setup(self):
        super().setup()
        nodelay(self.connection)

    def handle(self):
        try:
            echo_pull(self.rfile.read, self.wfile.write, self.server.work, self.server.framer)
        except ConnectionError:
            pass


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True  # never wait for handler threads on the way out
    block_on_close = False

    def __init__(self, listener, work, framer, stop):
        super().__init__(listener.getsockname(), EchoHandler, bind_and_activate=False)
        self.socket.close()  # the unbound socket the constructor made
        self.socket, self.server_address = listener, listener.getsockname()
        self.work, self.framer, self.stop = work, framer, stop
        self.accepted = 0  # connections accepted so far (serve_forever's thread only), for errors

    def get_request(self):
        try:
            request = super().get_request()
        except OSError as e:  # serve_forever would swallow EMFILE and spin on the ready listener
            fatal(f"socketserver: cannot accept connection {self.accepted + 1}: {e}")
        self.accepted += 1
        return request

    def shutdown_request(self, request):  # a handler thread, its connection done
        super().shutdown_request(request)
        self.stop.exit_if_requested()  # see StopWakeup: the main thread may wait long for the GIL

    def handle_error(self, request, client_address):  # e.g. "can't start new thread"
        fatal(f"socketserver: cannot serve connection {self.accepted}: {sys.exc_info()[1]}")


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    stop = StopWakeup()
    server = EchoServer(listener, opts.work.callable(), opts.framer(), stop)
    start_thread(server.serve_forever)  # its handler threads inherit the blocked stop signals
    announce_ready(listener)
    stop.wait()  # SIGTERM/SIGINT
