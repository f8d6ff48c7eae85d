"""netprof.flamegraphs against a real workload: a small selector echo server (its own script, so this
test does not depend on the backends) driven by a ping-pong client thread on 127.0.0.1, sampled once
with all views at the same time; plus offline checks of folding and the differential graph.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
import xml.etree.ElementTree as ET

import pytest

from helpers import require_bpf, require_tool
from netprof.flamegraphs import check_available, compile_offcpu, diff, sample
from netprof.flamegraphs.fold import fold_perf_script, read_folded, write_folded
from netprof.flamegraphs.offcpu import state_frame

SVG = "{http://www.w3.org/2000/svg}"
SAMPLE_SECONDS = 2
PY313 = "/root/.pyenv/versions/3.13.0/bin/python3.13"

# Distinctive function names, so the Python view's assertion cannot match anything else.
ECHO_SERVER = textwrap.dedent("""
    import os, selectors, socket
    sel = selectors.DefaultSelector()

    def fgtest_accept(ls):
        c, _ = ls.accept()
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ, fgtest_echo_once)

    def fgtest_echo_once(c):
        data = c.recv(4096)
        if not data:
            sel.unregister(c)
            c.close()
            return
        c.sendall(data)

    def fgtest_serve():
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(128)
        ls.setblocking(False)
        sel.register(ls, selectors.EVENT_READ, fgtest_accept)
        print("ready", os.getpid(), ls.getsockname()[1], flush=True)
        while True:
            for key, _ in sel.select():
                key.data(key.fileobj)

    fgtest_serve()
""")


class PingPong:
    """Client thread: `conns` connections, one 64-byte message in flight each, until stopped
    (and never longer than `max_seconds`)."""

    def __init__(self, port: int, conns: int = 8, max_seconds: float = 30.0) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
        self.stop_at = time.monotonic() + max_seconds
        self.stopped = threading.Event()
        self.messages = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        msg = b"x" * 64
        while not self.stopped.is_set() and time.monotonic() < self.stop_at:
            for s in self.socks:
                s.sendall(msg)
            for s in self.socks:
                got = 0
                while got < len(msg):
                    got += len(s.recv(len(msg) - got))
            self.messages += len(self.socks)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)
        for s in self.socks:
            s.close()


def start_echo_server(tmp_path, python: str = sys.executable, extra: tuple[str, ...] = ()):
    script = tmp_path / "fgtest_echo_server.py"
    script.write_text(ECHO_SERVER)
    proc = subprocess.Popen([python, *extra, str(script)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    assert line[:1] == ["ready"], f"echo server did not start: {line}"
    return proc, int(line[1]), int(line[2])


def sample_under_load(tmp_path, outdir, **kw):
    proc, pid, port = start_echo_server(tmp_path, **kw.pop("server", {}))
    try:
        load = PingPong(port)
        try:
            time.sleep(0.3)  # connections established, loop warm
            art = sample(pid, SAMPLE_SECONDS, str(outdir), title="fgtest echo, 8 connections", **kw)
        finally:
            load.stop()
        assert load.messages > 1000, "the workload did not run"
        return art
    finally:
        proc.kill()
        proc.wait(timeout=5)
        # CPython's -X perf_jit leaves its jitdump behind.
        if os.path.exists(f"/tmp/jit-{pid}.dump"):
            os.unlink(f"/tmp/jit-{pid}.dump")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    require_bpf()
    for tool in ("perf", "py-spy", "inferno-flamegraph"):
        require_tool(tool)
    tmp = tmp_path_factory.mktemp("flame")
    # As a sampling round does it: the off-CPU program compiled before the window, handed to sample(), which
    # closes it (sample() compiling its own is test_mixed_view's case)
    probe, why = compile_offcpu()
    assert probe is not None, why
    art = sample_under_load(tmp, tmp / "out", offcpu=(probe, why))
    assert probe.bpf is None, "sample() left the off-CPU program it was given loaded"
    return art


@pytest.mark.slow
def test_all_tools_available(bpf):
    assert check_available() is None


@pytest.mark.slow
def test_oncpu_shows_kernel_receive_path(bpf, artifacts):
    assert artifacts.samples["oncpu"] > 50, artifacts.notes
    text = open(artifacts.oncpu_folded).read()
    assert re.search(r"(__x64_sys_recvfrom|sock_recvmsg|tcp_recvmsg|__sys_recvfrom)_\[k\]", text), text[:2000]
    # Kernel frames carry the _[k] annotation that colours them in the SVG.
    assert "__x64_sys_sendto_[k]" in text


@pytest.mark.slow
def test_python_view_shows_server_functions(bpf, artifacts):
    assert artifacts.samples["python"] > 50, artifacts.notes
    stacks = dict(read_folded(artifacts.python_folded))
    assert any("fgtest_echo_once" in s for s in stacks), list(stacks)[:10]
    assert not any(s.startswith("process ") for s in stacks), "py-spy's per-pid root must be dropped"


@pytest.mark.slow
def test_offcpu_view_has_blocked_time(bpf, artifacts):
    assert artifacts.samples["offcpu"] > 0 and artifacts.samples["offcpu_us"] > 0, artifacts.notes
    stacks = dict(read_folded(artifacts.offcpu_folded))
    # The idle server waits in epoll_wait between messages; it must show as sleeping there.
    assert any("[sleeping]" in s and "epoll_wait" in s for s in stacks), list(stacks)[:10]
    # Blocked time cannot exceed the window (one thread).
    assert artifacts.samples["offcpu_us"] <= (SAMPLE_SECONDS + 1) * 1_000_000


@pytest.mark.slow
def test_svgs_parse_and_are_titled(bpf, artifacts):
    for view in ("oncpu", "python", "offcpu"):
        svg = getattr(artifacts, f"{view}_svg")
        assert svg and os.path.exists(svg), (view, artifacts.notes)
        root = ET.parse(svg).getroot()
        title = root.find(f".//{SVG}text[@id='title']").text
        subtitle = root.find(f".//{SVG}text[@id='subtitle']").text
        assert "fgtest echo, 8 connections" in title
        assert re.search(r"\d+ (samples|off-CPU events)", subtitle), subtitle
        assert len(root.findall(f".//{SVG}g")) >= 4, view  # "all" + real frames, not an error page


@pytest.mark.slow
@pytest.mark.skipif(not os.access(PY313, os.X_OK), reason="pyenv CPython 3.13.0 not installed")
def test_mixed_view_joins_python_and_kernel_frames(bpf, tmp_path):
    require_tool("perf")
    art = sample_under_load(tmp_path, tmp_path / "out", views=("mixed",),
                            server={"python": PY313, "extra": ("-X", "perf_jit")})
    assert art.samples.get("mixed", 0) > 20, art.notes
    stacks = dict(read_folded(art.mixed_folded))
    # One stack from the Python function through to the kernel's side of its socket call. Either call: on
    # loopback the send carries the whole TCP path and the wake-up of the peer and the receive only a copy, so
    # the receive's kernel frames are rare (fresh66's serial pass beside bench/bystander.py, 2026-12-03: of 108
    # samples, 41 from fgtest_echo_once into __x64_sys_sendto, none into recvfrom).
    joined = [s for s in stacks if "py::fgtest_echo_once" in s and re.search(r"__x64_sys_(recvfrom|sendto)_\[k\]", s)]
    assert joined, list(stacks)[:10]
    # The jitdump was completed (jitdump.py): no sample ends in an unnamed trampoline.
    unnamed = sum(n for s, n in stacks.items() if re.search(r"\[perf-\d+\.map\]", s))
    assert unnamed <= art.samples["mixed"] // 10, (unnamed, art.samples)
    assert art.mixed_svg and ET.parse(art.mixed_svg).getroot() is not None


def test_diff_marks_frame_only_in_b_as_growth(tmp_path):
    require_tool("inferno-flamegraph")
    a, b = tmp_path / "a.folded", tmp_path / "b.folded"
    a.write_text("main;recv 10\nmain;send 10\n")
    b.write_text("main;recv 10\nmain;send 5\nmain;only_in_b 10\n")
    out = diff(str(a), str(b), str(tmp_path / "d.svg"), title="B vs A")
    frames = {}
    for g in ET.parse(out).getroot().iter(f"{SVG}g"):
        t, rect = g.find(f"{SVG}title"), g.find(f"{SVG}rect")
        if t is not None and rect is not None:
            frames[t.text.split(" (")[0]] = (t.text, rect.get("fill"))

    def rgb(fill):
        return tuple(int(x) for x in re.findall(r"\d+", fill))

    title, fill = frames["only_in_b"]
    r, g_, bl = rgb(fill)
    assert "+" in title and r > g_ and r > bl, (title, fill)      # growth: red
    title, fill = frames["send"]
    r, g_, bl = rgb(fill)
    assert "-" in title and bl > r, (title, fill)                   # shrink: blue


PERF_SCRIPT = """\
python3  4242    2004008\x20
\tffffffff81e80460 __x64_sys_recvfrom ([kernel.kallsyms])
\tffffffff82259cc1 do_syscall_64 ([kernel.kallsyms])
\t          10ab59 __recv (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t          1d2e3f _PyEval_EvalFrameDefault (/usr/lib/libpython3.13.so.1.0)
\t    7f0000001000 py::fgtest_echo_once:/tmp/x.py (/tmp/jitted-4242-12.so)
\t               0 [unknown] ([unknown])
\t               0 [unknown] ([unknown])

my worker  4243    2004008\x20
\tffffffff81e80460 __x64_sys_recvfrom ([kernel.kallsyms])

python3  4242    2004008\x20
\tffffffff81e80460 __x64_sys_recvfrom ([kernel.kallsyms])
\tffffffff82259cc1 do_syscall_64 ([kernel.kallsyms])
\t          10ab59 __recv (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t          1d2e3f _PyEval_EvalFrameDefault (/usr/lib/libpython3.13.so.1.0)
\t    7f0000001000 py::fgtest_echo_once:/tmp/x.py (/tmp/jitted-4242-12.so)
\t               0 [unknown] ([unknown])
"""


def test_fold_perf_script_annotates_frame_kinds(tmp_path):
    stacks = fold_perf_script(PERF_SCRIPT.splitlines())
    assert stacks == {
        "python3;[unknown];py::fgtest_echo_once:/tmp/x.py_[j];_PyEval_EvalFrameDefault_[i];__recv;"
        "do_syscall_64_[k];__x64_sys_recvfrom_[k]": 2,
        "my worker;__x64_sys_recvfrom_[k]": 1,
    }
    path = tmp_path / "x.folded"
    assert write_folded(stacks, str(path)) == 3
    assert dict(read_folded(str(path))) == dict(stacks)


def test_offcpu_state_names():
    assert state_frame(0x1) == "[sleeping]"
    assert state_frame(0x2) == "[uninterruptible]"
    assert state_frame(0) == "[preempted]"
    assert state_frame(0x100) == "[preempted]"  # TASK_REPORT_MAX: preempted while running
