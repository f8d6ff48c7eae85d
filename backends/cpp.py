"""The C++ backends: cpp_epoll, cpp_poll, cpp_th, cpp_uring (backends/cpp/*.cpp, a pybind11 module).

Python makes the listen socket and prints the ready line; the C++ loop then serves without the
GIL, under --msize/--framing (Framing and Receiver in backends.hpp: recv(msize - have) per
connection, as the Python pull-style backends do; cpp_uring submits the same receives to an
io_uring), and returns on SIGTERM/SIGINT (only then: connections coming and going never end it).
"""

from __future__ import annotations

import socket

from . import _cpp_backends
from .common import Options, announce_ready, die


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    work = opts.work
    announce_ready(listener)
    try:
        _cpp_backends.serve(name.removeprefix("cpp_"), listener.fileno(), work.kind, work.us, work.poisson,
                            opts.msize, opts.framing)
    except RuntimeError as e:  # a failed syscall (EMFILE, no more threads): one line, exit 1
        die(f"{name}: {e}")
