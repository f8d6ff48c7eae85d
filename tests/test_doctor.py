"""`netprof doctor` exits 0 on a ready machine and names what is missing without privileges."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from helpers import netprof_cmd, require_bpf


def test_doctor_ready_here():
    require_bpf()
    res = subprocess.run(netprof_cmd("doctor"), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("privileges", "bcc module", "kernel headers", "raw_syscalls tracepoints", "sched tracepoints",
                 "kprobes", "BPF compile+attach", "perf", "netprof-loader", "ulimit -n", "local port range", "CPUs"):
        assert name in res.stdout
    # this kernel's io_uring: its tracepoints, and its requests' opcode where BTF puts it (64 on 6.18, FACTS)
    (ring,) = [line for line in res.stdout.splitlines() if line.split()[1:2] == ["io_uring"]]
    assert ring.startswith("ok ") and "counted by operation (struct io_kiocb's opcode at byte " in ring, ring
    # every detail starts in one column, the longest name's included
    checks = [ln for ln in res.stdout.splitlines() if ln[:5] in ("ok   ", "note ", "FAIL ")]
    col = next(ln for ln in checks if "raw_syscalls tracepoints" in ln).index(" /sys/") + 1
    assert all(ln[col - 1] == " " != ln[col] for ln in checks), res.stdout


def test_doctor_unprivileged_fails_and_names_fix():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop to an unprivileged user")
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", *netprof_cmd("doctor")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=os.environ | {"HOME": "/tmp"})
    assert res.returncode != 0, res.stdout
    priv = [ln for ln in res.stdout.splitlines() if "privileges" in ln]
    assert priv and "FAIL" in priv[0] and "CAP_BPF" in priv[0] and "fix:" in priv[0], res.stdout


def test_doctor_notes_symlink_protection_and_removes_stale_files():
    """A note (not a failure) when root would follow links planted in /tmp; stderr files and sampling
    scratch of a dead netprof are removed."""
    import tempfile

    from netprof.flamegraphs.session import WORK_PREFIX
    from netprof.profiler.run import doctor

    with open("/proc/sys/fs/protected_symlinks") as f:
        value = f.read().strip()
    check = doctor.check_symlink_protection()
    assert not check.required and check.ok == (value != "0")
    if value == "0":
        assert "fs.protected_symlinks=0" in check.detail and "sysctl -w fs.protected_symlinks=1" in check.fix
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale_err = os.path.join(tempfile.gettempdir(), f"netprof-{dead.pid}-backend-x-test.stderr")
    stale_dir = os.path.join(tempfile.gettempdir(), f"{WORK_PREFIX}{dead.pid}-test")
    open(stale_err, "w").close()
    os.mkdir(stale_dir)
    check = doctor.check_stale_files()
    assert not os.path.exists(stale_err) and not os.path.exists(stale_dir)
    assert check.ok and "removed" in check.detail


def test_doctor_says_what_the_counts_miss_of_io_uring_on_other_kernels(monkeypatch, tmp_path):
    """This kernel has io_uring and BTF for its requests' opcode; the two other kernels are mocked (the machine cannot
    be them): one whose BTF gives no opcode (a note: submissions counted as `unknown`), one without io_uring (its
    tracepoints missing: the counting set, which hooks them, cannot attach)."""
    from netprof.probes import ring_ops
    from netprof.profiler.run import doctor

    monkeypatch.setattr(ring_ops, "opcode_offset", lambda: None)
    c = doctor.check_io_uring()
    assert (c.ok, c.required) == (False, False) and "submissions not told apart: the running kernel's BTF" in c.detail
    (tmp_path / "events").mkdir()
    monkeypatch.setattr(doctor, "TRACEFS", (str(tmp_path),))
    c = doctor.check_io_uring()
    assert (c.ok, c.required) == (False, True) and "without io_uring" in c.detail and "--no-probes" in c.fix
