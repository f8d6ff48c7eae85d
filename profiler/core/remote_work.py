"""The far end of `--work remote:US`: a helper that answers each request after US µs, standing for
another host a handler waits on (a database). netprof starts it on the loader's CPU for the run and
stops it after; the backend's handler (backends/common.py, WorkModel "remote") sends one byte on a
connection of its own and blocks until the answer comes.

    python -I -m netprof.profiler.core.remote_work --us 500 --cpu 1        # prints "ready PORT", serves

Private to the run: it listens on 127.0.0.1, and a connection is served only after it sends the run's
token (from NETPROF_REMOTE_TOKEN, in the environment, which other users cannot read), so nobody else
on the machine gets an answer from it. A thread per connection: each answer is delayed by its own
sleep, so concurrent requests wait side by side, as they would on a remote server. Bounded: it exits
at SIGTERM/SIGINT, when netprof dies (procs.spawn arms PR_SET_PDEATHSIG), or after --seconds.
"""

from __future__ import annotations

import argparse
import hmac
import os
import signal
import socket
import sys
import threading
import time

TOKEN_ENV = "NETPROF_REMOTE_TOKEN"
TOKEN_BYTES = 32  # hex characters sent first on each connection
REQUEST = b"q"
ANSWER = b"a"
READY_S = 20.0
PR_SET_TIMERSLACK = 29  # its start-up: one interpreter, no imports beyond the standard library


class RemoteWork:
    """The helper of one run (started through the run's ProcessGroup, so it goes when the run does): where
    it listens, and the token a backend's handler must send first."""

    def __init__(self, proc, port: int, token: str) -> None:
        self.proc, self.port, self.token = proc, port, token

    @classmethod
    def start(cls, group, us: float, cpus: str | None) -> RemoteWork:
        import secrets

        from .procs import child_env, parse_cpus

        token = secrets.token_hex(TOKEN_BYTES // 2)
        argv = [sys.executable, "-I", "-m", "netprof.profiler.core.remote_work", "--us", f"{us:g}",
                *(["--cpu", str(cpu[0])] if (cpu := parse_cpus(cpus)) else [])]
        proc = group.spawn("remote-work", argv, cpus=cpus, env={**child_env(), TOKEN_ENV: token})
        line = proc.wait_line("ready", READY_S)
        return cls(proc, int(line.split()[1]), token)

    def backend_work(self, spec: str) -> str:
        """The backend's --work: the run's remote:US with this helper's address."""
        return f"{spec}@127.0.0.1:{self.port}"

    def backend_env(self) -> dict[str, str]:
        """A backend's environment: the usual one (procs.child_env) and the token."""
        from .procs import child_env

        return {**child_env(), TOKEN_ENV: self.token}


def _serve_conn(conn: socket.socket, token: bytes, delay_s: float) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(5.0)
        got = b""
        try:
            while len(got) < len(token):
                chunk = conn.recv(len(token) - len(got))
                if not chunk:
                    return
                got += chunk
        except OSError:
            return
        if not hmac.compare_digest(got, token):
            return
        conn.settimeout(None)
        while True:
            try:
                if not conn.recv(1):
                    return
                time.sleep(delay_s)
                conn.sendall(ANSWER)
            except OSError:
                return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--us", type=float, required=True, help="the delay of each answer, µs")
    ap.add_argument("--cpu", type=int, default=-1, help="pin to this CPU (the loader's)")
    ap.add_argument("--seconds", type=float, default=3600.0, help="exit after this long at the latest")
    args = ap.parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "").encode()
    if len(token) != TOKEN_BYTES:
        print(f"remote_work: {TOKEN_ENV} must hold the run's {TOKEN_BYTES}-character token", file=sys.stderr)
        return 2
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    # 1 ns timer slack, not the default 50 µs: the answers' delay is the figure the breakdown is checked by
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    threading.Timer(args.seconds, lambda: os._exit(0)).start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    print(f"ready {listener.getsockname()[1]}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_conn, args=(conn, token, args.us / 1e6), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
