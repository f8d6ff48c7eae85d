"""A small echo server whose cost per message the caller chooses: one 64-byte recv per message (the
reference harness's one message per receive), then `--spin-ns N` of busy CPU, then the echo. Non-blocking
sockets under one selector, as the `selector` backend. netprof ab's acceptance injects its slowdown with
it (bench/ab_acceptance.py) and tests/test_ab.py plays its variants.

    python bench/spin_echo.py --port 5000 --spin-ns 100
"""

import argparse
import selectors
import socket
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--spin-ns", type=int, default=0, help="busy CPU per message, in ns (0: none)")
args = ap.parse_args()
sel = selectors.DefaultSelector()
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", args.port))
srv.listen(1024)
srv.setblocking(False)
sel.register(srv, selectors.EVENT_READ)
spin = args.spin_ns
while True:
    for key, _ in sel.select():
        s = key.fileobj
        if s is srv:
            conn, _ = srv.accept()
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sel.register(conn, selectors.EVENT_READ)
            continue
        try:
            data = s.recv(64)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            sel.unregister(s)
            s.close()
            continue
        if spin:  # no clock read at all for 0: the base variant pays nothing for the option
            end = time.perf_counter_ns() + spin
            while time.perf_counter_ns() < end:
                pass
        s.sendall(data)
