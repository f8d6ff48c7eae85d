"""io_uring work counted beside syscalls (issue 50): the counting set's `ring` / `ring_per_msg`.

Independent truth: bpftrace (a separate tool on the kernel's own `io_uring:io_uring_submit_req` tracepoint)
counting the same process's ring submissions per sendto during the same run; the installed kernel header's
`enum io_uring_op` for the names; the loader's message count for cpp_uring's one receive and one send per
message; and selector, which does no io_uring work at all.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import netprof_cmd, require, require_bpf, require_tool, run_netprof
from netprof.probes.counting import CountingProbes, delta, per_message_notation
from netprof.probes.ring_ops import RING_OPS, UNKNOWN_OP, UNKNOWN_WHY, opcode_offset, ring_op_name

HEADER = Path("/usr/include/linux/io_uring.h")  # linux-libc-dev (Debian 12: the 6.1 UAPI)


def test_opcode_names_follow_the_kernels_enum():
    """Our table against the installed UAPI header's `enum io_uring_op`, in order (the kernel only appends)."""
    if not HEADER.is_file():
        pytest.skip(f"{HEADER} is not installed (Debian: linux-libc-dev)")
    body = HEADER.read_text().split("enum io_uring_op {", 1)[1].split("}", 1)[0]
    names = [m.lower() for m in re.findall(r"IORING_OP_(\w+)", body) if m != "LAST"]
    assert len(names) > 40 and RING_OPS[:len(names)] == tuple(names), names
    assert ring_op_name(29) == "epoll_ctl" and ring_op_name(27) == "recv" and ring_op_name(26) == "send"
    assert ring_op_name(62) == "pipe" and ring_op_name(63) == "op_63+"  # the set's last slot: 63 and past it
    assert ring_op_name(UNKNOWN_OP) == "unknown"  # and one more: the opcode could not be read


RING_NOP_C = r"""
#include <liburing.h>
#include <stdlib.h>
int main(int argc, char **argv) {   /* N IORING_OP_NOPs through one ring, 32 a batch, then exit */
    int n = argc > 1 ? atoi(argv[1]) : 0;
    struct io_uring ring;
    if (n <= 0 || io_uring_queue_init(32, &ring, 0) < 0) return 1;
    for (int done = 0; done < n;) {
        int b = n - done < 32 ? n - done : 32;
        for (int i = 0; i < b; i++) io_uring_prep_nop(io_uring_get_sqe(&ring));
        if (io_uring_submit_and_wait(&ring, b) != b) return 2;
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) seen++;
        io_uring_cq_advance(&ring, seen);
        done += b;
    }
    io_uring_queue_exit(&ring);
    return 0;
}
"""


@pytest.fixture(scope="module")
def ring_nop(tmp_path_factory) -> Path:
    require(Path("/usr/include/liburing.h").is_file(), "liburing's header is not installed (Debian: liburing-dev)")
    d = tmp_path_factory.mktemp("ringnop")
    (d / "ring_nop.c").write_text(RING_NOP_C)
    subprocess.run([require_tool("cc"), "-O2", "-o", str(d / "ring_nop"), str(d / "ring_nop.c"), "-luring"],
                   check=True, capture_output=True, timeout=120)
    return d / "ring_nop"


def _nops(p: CountingProbes, exe: Path, n: int):
    """Run `exe n` as the set's target (targeted before its first instruction); the set's delta over it."""
    proc = subprocess.Popen(["sh", "-c", f"read go; exec {exe} {n}"], stdin=subprocess.PIPE, text=True)
    p.target(proc.pid)
    a = p.snapshot()
    proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0
    b = p.snapshot()
    return a, b


def test_ring_submissions_counted_by_opcode_only_while_attached(bpf, ring_nop):
    """The raw tracepoints read each request's opcode at the kernel's offset (BTF): 3,000 NOPs are 3,000 `nop`
    submissions and 3,000 completions, exactly; while the set is detached nothing is hooked, nothing counted."""
    assert opcode_offset() is not None  # this kernel has BTF
    with CountingProbes(attached=False) as p:
        assert p.ring_opcodes_unknown is None
        a, b = _nops(p, ring_nop, 3000)  # detached
        assert delta(a, b).ring == {} and delta(a, b).ring_completions == 0
        p.attach()
        a, b = _nops(p, ring_nop, 3000)
    d = delta(a, b)
    assert b.ring == {RING_OPS.index("nop"): 3000}
    assert d.ring == {"nop": 3000} and d.ring_completions == 3000


def test_ring_submissions_are_unknown_without_the_opcode_offset(bpf, ring_nop, monkeypatch):
    """Where the kernel's BTF gives no io_kiocb.opcode, submissions are counted as `unknown`, and the set says
    why, rather than reading a byte at a guessed offset."""
    from netprof.probes.counting import counting

    monkeypatch.setattr(counting, "opcode_offset", lambda: None)
    with CountingProbes() as p:
        assert p.ring_opcodes_unknown == UNKNOWN_WHY
        a, b = _nops(p, ring_nop, 1000)
    d = delta(a, b)
    assert b.ring == {UNKNOWN_OP: 1000} and d.ring == {"unknown": 1000} and d.ring_completions == 1000


def test_notation_marks_ring_operations():
    assert (per_message_notation({"epoll_ctl": 6.0, "sendto": 1.0}, {"epoll_ctl": 0.9})
            == "6 × epoll_ctl + sendto + 0.9 × epoll_ctl (ring)")
    assert per_message_notation({"sendto": 1.0}, {}) == per_message_notation({"sendto": 1.0}) == "sendto"


BPFTRACE = """
tracepoint:io_uring:io_uring_submit_req /args->opcode == 29/ { @ring[pid] = count(); }
tracepoint:syscalls:sys_enter_sendto { @send[pid] = count(); }
"""


def _bpftrace_counts(out: str) -> dict[str, dict[int, int]]:
    maps: dict[str, dict[int, int]] = {"ring": {}, "send": {}}
    for name, pid, n in re.findall(r"@(ring|send)\[(\d+)\]: (\d+)", out):
        maps[name][int(pid)] = int(n)
    return maps


def test_uvloop_ring_epoll_ctl_agrees_with_bpftrace_and_selector_has_none(tmp_path):
    """uvloop_sock (libuv hands epoll_ctl ADD/MOD to its ring) at 100 connections: netprof's ring epoll_ctl per
    sendto within 5% of bpftrace's over the same kind of run; selector does no ring work; the terminal line and
    the headline's total show the ring's operations."""
    require_bpf()
    out, maps = tmp_path / "run", tmp_path / "bpftrace.txt"
    # The CLI's entry point through the interpreter: bpftrace -c runs an ELF executable, not a script; -P keeps
    # the working directory off the path. It splits its command at spaces.
    cmd = [sys.executable, "-P", "-m", "netprof.profiler",
           *netprof_cmd("run", "uvloop_sock", "selector", "-c", "100", "-d", "1", "-r", "1", "--warmup", "0.3",
                        "--probe-share", "1", "--wait", "--json", "--out", str(out))[1:]]
    assert not any(" " in a for a in cmd), cmd
    # bpftrace starts the run itself (-c): only once its probes are attached, and it ends when the run does.
    # Not SIGINT: bpftrace 0.17 leaves its loop only when the signal interrupts its epoll_wait; one that lands
    # while it attaches or between two waits is lost and it runs on (CI hung 60 s so, 2026-12-04). Its maps go
    # to -o's file, the run's stdout and stderr to ours.
    tracer = subprocess.run(["bpftrace", "-o", str(maps), "-e", BPFTRACE, "-c", " ".join(cmd)],
                            capture_output=True, text=True, timeout=300)
    # bpftrace 0.17 exits 0 whatever its child did: the run's own output says whether it finished
    assert tracer.returncode == 0 and '"runs"' in tracer.stdout, (tracer.returncode, tracer.stderr[-2000:])
    traced = maps.read_text()
    rows = {r["backend"]: r for r in json.loads(tracer.stdout)["runs"]}
    uv, sel = rows["uvloop_sock"], rows["selector"]
    counts = _bpftrace_counts(traced)
    assert counts["ring"], (traced, tracer.stderr[-2000:])
    backend = max(counts["ring"], key=counts["ring"].get)  # the only process of the run that uses a ring
    truth = counts["ring"][backend] / counts["send"][backend]
    ours = uv["ring_per_msg"]["epoll_ctl"] / uv["syscalls_per_msg"]["sendto"]
    assert ours == pytest.approx(truth, rel=0.05), (ours, truth, uv["ring_per_msg"])
    assert truth > 0.3, truth  # libuv really batches through the ring here (0.89-0.92 measured)
    assert all(v < 0.01 for v in sel["ring_per_msg"].values()), sel["ring_per_msg"]
    assert sel["ring_cpu_us_per_msg"] == 0, sel
    # shown beside the syscalls, marked as the ring's, and in the headline's total
    assert "epoll_ctl (ring)" in tracer.stderr, tracer.stderr[-2000:]
    md = (out / "report.md").read_text()
    assert "kernel ops/msg" in md and "epoll_ctl (ring)" in md


def test_cpp_uring_submits_one_receive_and_one_send_per_message(tmp_path):
    """cpp_uring (liburing): each message one RECV and one SEND through the ring, no recvfrom/sendto syscalls;
    the breakdown follows its requests (a SEND's submission is its send's entry) and the parts add up to the
    loader's round trip."""
    require_bpf()
    res = run_netprof("run", "cpp_uring", "-c", "100", "-d", "1", "-r", "1", "--warmup", "0.3", "--probe-share", "1",
                      "--breakdown", "--no-report", "--wait", "--json", "--out", str(tmp_path / "run"), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = json.loads(res.stdout)["runs"]
    assert row["ring_per_msg"]["recv"] == pytest.approx(1.0, abs=0.05), row["ring_per_msg"]
    assert row["ring_per_msg"]["send"] == pytest.approx(1.0, abs=0.05), row["ring_per_msg"]
    sys_ = row["syscalls_per_msg"]
    assert sys_.get("recvfrom", 0) < 0.05 and sys_.get("sendto", 0) < 0.05, sys_
    assert 0 < sys_["io_uring_enter"] <= 1.05, sys_  # one enter per batch of completions
    b = row["breakdown"]
    assert b["requests"] >= 0.9 * row["msgs_per_sec"] * row["sockwait"]["window_s"], b
    assert b["parts_mean_us"] == pytest.approx(b["rtt_mean_us"], rel=0.05), b


def test_io_uring_off_moves_the_rings_epoll_ctl_back_to_syscalls(tmp_path):
    """--io-uring on,off: uvloop_sock's epoll_ctl operations per message (syscalls + ring) agree between the two
    cells within 5% (the off cell's server has io_uring_setup denied, so libuv makes every call a syscall), the
    off cell has no ring work, and each row records its value."""
    require_bpf()
    res = run_netprof("run", "uvloop_sock", "-c", "100", "--io-uring", "on,off", "-d", "1", "-r", "1", "--warmup",
                      "0.3", "--probe-share", "1", "--no-report", "--wait", "--json", "--out", str(tmp_path / "run"),
                      timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {r["io_uring"]: r for r in json.loads(res.stdout)["runs"]}
    on, off = rows["on"], rows["off"]
    assert off["ring_per_msg"] == {} and off["ring_cpu_us_per_msg"] == 0, off["ring_per_msg"]
    assert on["ring_per_msg"]["epoll_ctl"] > 0.3, on["ring_per_msg"]
    both = [r["syscalls_per_msg"]["epoll_ctl"] + r["ring_per_msg"].get("epoll_ctl", 0) for r in (on, off)]
    assert both[0] == pytest.approx(both[1], rel=0.05), (both, on["syscalls_per_msg"], off["syscalls_per_msg"])


SETUP = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
fd = libc.syscall(425, 4, params)  # io_uring_setup (x86_64)
print(fd if fd >= 0 else -ctypes.get_errno())
"""


def test_spawn_can_deny_io_uring_to_a_child_and_its_children():
    """procs.spawn(deny_io_uring=True): io_uring_setup fails with ENOSYS in the child and in what it starts;
    without it the same call makes a ring (the kernel allows it here)."""
    import errno
    import sys

    from netprof.profiler.core.procs import ProcessGroup

    nested = f"import subprocess, sys; sys.stdout.write(subprocess.run([sys.executable, '-c', {SETUP!r}], " \
             "capture_output=True, text=True).stdout)"
    got = {}
    with ProcessGroup() as g:
        for deny in (False, True):
            proc = g.spawn("ring-check", [sys.executable, "-c", nested], deny_io_uring=deny)
            assert proc.popen.wait(timeout=60) == 0
            got[deny] = int(proc.popen.stdout.read().strip())
    assert got[True] == -errno.ENOSYS, got
    assert got[False] >= 0, got
