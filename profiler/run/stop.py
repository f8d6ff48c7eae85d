"""The stop flag of a run, `knee` or `ab`: SIGTERM and Ctrl-C set it (cli._terminate_like_ctrl_c) as they raise
KeyboardInterrupt. The flag outlives the exception where Python swallows it: raised inside an at-fork hook (a
signal landing while a child starts) or a finalizer, it is printed and dropped. So the loops between cells check
it, and so does the wait for a loader's result (loader_client.Loader.run, every STOP_POLL_S): a 30-s cell whose
interrupt was swallowed at its start would otherwise run to its end."""

from __future__ import annotations

import threading

STOP = threading.Event()
STOP_POLL_S = 0.25  # how late a swallowed interrupt may be seen while a loader runs (a wake-up 4 times a second)


def raise_if_stopped() -> None:
    if STOP.is_set():
        raise KeyboardInterrupt
