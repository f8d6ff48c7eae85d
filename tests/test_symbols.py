"""User addresses are named in a forked child (profiler/core/symbols.py): the names are BCC's, and whatever the
symbolizer closes by mistake is the child's descriptor, never netprof's."""

from __future__ import annotations

import ctypes
import os
import re
import time

import pytest

from helpers import require_bpf
from netprof.profiler.core import procs, symbols


def test_names_an_address_of_a_live_process_as_bcc_does():
    require_bpf()  # BCC's symbolizer
    libc = ctypes.CDLL(None)
    addr = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    names = symbols.user_symbols({os.getpid(): [addr, addr]})
    assert list(names) == [(os.getpid(), addr)]  # each address once
    assert re.fullmatch(r"_*getpid \[libc[^\]]*\]", names[(os.getpid(), addr)]), names  # glibc: __getpid
    assert symbols.user_symbols({os.getpid(): []}) == {}


def test_a_stray_close_in_the_lookup_leaves_our_descriptors_open(monkeypatch):
    """What libbcc did in a --stacks run (close a descriptor it never opened) happens in the child: ours stays."""
    r, w = os.pipe()
    try:
        def stray(want):
            os.close(r)  # the child's copy of our pipe
            return {(t, a): "x [y]" for t, addrs in want.items() for a in addrs}

        monkeypatch.setattr(symbols, "_lookup", stray)
        assert symbols.user_symbols({1: [16]}) == {(1, 16): "x [y]"}
        os.write(w, b"ok")
        assert os.read(r, 2) == b"ok"  # our read end is still ours
    finally:
        os.close(r)
        os.close(w)


def test_a_child_that_fails_is_tried_again_one_that_hangs_names_nothing_and_both_are_reaped(monkeypatch, tmp_path):
    tried = tmp_path / "tried"

    def fail_once(want):  # runs in the children: they leave a mark on disk
        with open(tried, "a") as f:
            f.write("x")
        if len(tried.read_text()) == 1:
            raise RuntimeError("libbcc fell over")
        return {(1, 16): "x [y]"}

    monkeypatch.setattr(symbols, "_lookup", fail_once)
    assert symbols.user_symbols({1: [16]}) == {(1, 16): "x [y]"} and tried.read_text() == "xx"
    monkeypatch.setattr(symbols, "_lookup", lambda want: 1 / 0)
    assert symbols.user_symbols({1: [16]}) == {}
    monkeypatch.setattr(symbols, "_lookup", lambda want: time.sleep(30))
    monkeypatch.setattr(symbols, "TIMEOUT_S", 0.3)
    forked, real_fork = [], procs.fork_child

    def fork_child(work):
        got = real_fork(work)
        forked.append(got[0])
        return got

    monkeypatch.setattr(symbols.procs, "fork_child", fork_child)
    t0 = time.monotonic()
    assert symbols.user_symbols({1: [16]}) == {}
    assert time.monotonic() - t0 < 5 and len(forked) == 2  # tried again, each time out of time
    for pid in forked:  # killed and reaped: none left behind
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
