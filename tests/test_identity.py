"""A process's identity (its pid and when it started) does not move with the wall clock: `netprof knee` took the
warm server it had started itself for a reused pid when this VM's clock was adjusted within the run (2026-12-02:
every cell after the second failed "--attach 2256: the process was replaced (PID reused)"), and `netprof watch`
would have taken the watched server for gone. psutil's create_time() adds /proc/stat's btime as read now, which
moves with the clock; procs.start_ticks is the kernel's count of ticks since boot, which does not. The clock cannot
be stepped here, so psutil's boot time is moved instead (a mock of what the machine did, said so)."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest
from psutil import _pslinux

from netprof.profiler.core import procs
from netprof.profiler.watch import target


@pytest.fixture
def child():
    p = subprocess.Popen(["sleep", "30"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def test_the_identity_of_a_process_does_not_move_with_the_clock(child, monkeypatch):
    watched = target.by_pid(child.pid)
    assert watched.start_time == procs.start_ticks(child.pid) > 0
    before = psutil.Process(child.pid).create_time()
    moved = _pslinux.boot_time() + 1.0  # the wall clock stepped by a second: btime moves with it
    monkeypatch.setattr(_pslinux, "boot_time", lambda: moved)
    assert psutil.Process(child.pid).create_time() == pytest.approx(before + 1.0)  # what the identity was before
    assert target.alive(watched) and procs.start_ticks(child.pid) == watched.start_time


def test_a_process_gone_or_another_with_its_pid_is_not_the_same(child):
    watched = target.by_pid(child.pid)
    assert not target.alive(target.Target(child.pid, (), "", watched.start_time - 1))  # a reused pid's start
    child.kill()
    child.wait()
    assert procs.start_ticks(child.pid) is None and not target.alive(watched)


def test_a_watched_pid_that_listens_on_no_port_is_noted_and_one_whose_child_listens_is_not(child):
    """`netprof watch --pid` of a process that is not the server (a shell, a sleeper) watched on in silence, a line of
    "0 req/s" a second: it is said once when the watch starts. A pre-fork master whose worker holds the socket, or
    the server itself, is not noted (real processes and sockets)."""
    assert "has no listening TCP socket" in target.by_pid(child.pid).note
    code = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
            "print('ok', flush=True); time.sleep(30)")
    parent = subprocess.Popen(["sh", "-c", f'"$0" -c "{code}"; exit 0', sys.executable], stdout=subprocess.PIPE,
                              text=True)  # a shell that waits for its listening child (no exec)
    try:
        assert parent.stdout.readline().strip() == "ok"
        assert psutil.Process(parent.pid).children(), "the socket is the child's, not the shell's"
        assert target.by_pid(parent.pid).note == ""
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()
