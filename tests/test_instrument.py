"""The instrument protocol (probes/instrument.py): a new instrument is its folder plus its name in
probes/registry.py, and the run path carries it with no other change.

The throw-away instrument of issue 32 lives in tests/instruments/getpid/ (BPF C, Python, row shaping:
what a folder under probes/ holds). The test lets `netprof.probes` find that folder and adds its name to
registry.NAMES — the one registration line — then runs a real cell against a real server that calls
getpid() once per message, with the real counting set beside it, and checks the count against the
loader's own message count.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import netprof.probes
from helpers import require_bpf
from netprof.probes import registry
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.model import results
from netprof.profiler.run.cell import CellEnv, run_cell
from netprof.profiler.run.interpreters import prepare
from netprof.profiler.run.loader_client import Loader
from netprof.profiler.run.plan import RunConfig, validate
from netprof.profiler.run.runner import close_instruments, open_instruments
from netprof.profiler.run.servers import from_cmd

HERE = Path(__file__).resolve().parent

# One 64-byte message per receive, answered; one getpid() per message (glibc does not cache it).
SERVER = textwrap.dedent("""
    import os, selectors, socket, sys
    port = int(sys.argv[1])
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port)); ls.listen(128); ls.setblocking(False)
    sel = selectors.DefaultSelector(); sel.register(ls, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is ls:
                c, _ = ls.accept(); c.setblocking(False); sel.register(c, selectors.EVENT_READ)
                continue
            c = key.fileobj
            try:
                data = c.recv(64)
            except BlockingIOError:
                continue
            except ConnectionError:  # the loader resets its connections at the end
                data = b""
            if not data:
                sel.unregister(c); c.close(); continue
            os.getpid()
            c.sendall(data)
""")


@pytest.fixture
def getpid_registered(monkeypatch):
    """The one registration line: the instrument's name in NAMES (and its folder findable)."""
    monkeypatch.setattr(netprof.probes, "__path__", [*netprof.probes.__path__, str(HERE / "instruments")])
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "getpid"))
    registry.registered.cache_clear()
    yield
    registry.registered.cache_clear()


def test_registry_lists_the_instruments_with_one_protocol():
    classes = registry.registered()
    assert [c.name for c in classes] == list(registry.NAMES) == ["counting", "sockwait", "breakdown"]
    assert registry.groups() == ["sockwait", "breakdown"]
    cfg = RunConfig(backends=["selector"])
    assert [c.name for c in registry.wanted(cfg)] == ["counting"]  # on unless --no-probes
    cfg = RunConfig(backends=["selector"], probes=False, sockwait=True)
    assert [c.name for c in registry.wanted(cfg)] == ["sockwait"]
    # --breakdown carries the socket-wait set: it takes the set's place
    cfg = RunConfig(backends=["selector"], probes=False, sockwait=True, instruments=("breakdown",))
    assert [c.name for c in registry.wanted(cfg)] == ["breakdown"]


def test_an_unknown_instrument_is_bad_input():
    with pytest.raises(InputError, match="--instrument 'nope' is not known; use one of counting, sockwait"):
        validate(RunConfig(backends=["selector"], instruments=("nope",)))


def test_a_new_instrument_is_its_folder_and_one_name(getpid_registered, tmp_path):
    require_bpf()
    script = tmp_path / "getpid_echo.py"
    script.write_text(SERVER)
    spec = from_cmd(f"{sys.executable} {script} {{port}}", name="getpid_echo")
    # The whole 1-s window probed (probe_share 1, as the other exact counts: tests/conftest.py's probed_run): over
    # the default 0.3-s sub-window, the marks' lag at its two edges put getpid 5.5% above the loader's count in a
    # fresh-clone run beside bench/bystander.py (1.055, 19,526 calls, 2026-12-02); over 1 s the same lag is a third.
    cfg = validate(RunConfig(backends=[], own=[spec], connections=[4], duration=1.0, warmup=0.2, rounds=1,
                             probe_share=1.0, instruments=("getpid",)))
    instruments = open_instruments(cfg)
    assert [i.name for i in instruments] == ["counting", "getpid"]
    try:
        with ProcessGroup() as group:
            env = CellEnv(cfg, Loader.start(group), prepare(""), instruments=tuple(instruments))
            out = run_cell(next(cfg.cells()), env)
    finally:
        close_instruments(instruments)
    row = out.row
    assert out.ok, (row["error"], row.get("messages"), out.per_conn_messages)
    assert row["probes"] == ["counting", "getpid"]
    # The counting set ran in the probed window; the new instrument (not sub_window) all cell, read at the same two
    # marks: both divide by that window's message count, which the loader reports.
    assert "probed" not in row  # the whole window probed: no sub-window of its own
    probed = row["messages"]
    assert probed > 500, (row["messages"], row["msgs_per_sec"])
    assert row["getpid"]["attached"] is True
    # One getpid per message, against the loader's count carried over to the span each instrument's counters were
    # read over (stats.counted_span): within 5%, as the counters are read when netprof hears the loader's marks
    # (0.969 and 1.055 over a 0.3-s sub-window on a busy host). The two are read at the same two marks but not at
    # the same moment (the counting set first, then /proc, then the others), so their raw counts cover different
    # spans: 5.1% apart once beside bench/bystander.py (27,968 getpid calls against 29,483 messages in the counting
    # set's 0.3-s sub-window, 2026-12-02). Each per message, over its own span, they agree: the counting set's count
    # is the new instrument's.
    assert row["getpid"]["per_msg"] == pytest.approx(1.0, abs=0.05), row["getpid"]
    assert row["syscalls_per_msg"]["getpid"] == pytest.approx(1.0, abs=0.05), row["syscalls_per_msg"]
    assert row["getpid"]["calls"] > 0.5 * probed, (row["getpid"], probed)  # a count, not a rate
    # The row group survives the results files like the built-in ones.
    store = results.ResultsStore(tmp_path / "out")
    store.add(row, out.per_conn_messages, out.conn_rows)
    back = results.rows_of(store.frame())[0]
    assert back["getpid"]["per_msg"] == pytest.approx(row["getpid"]["per_msg"])
    assert back["sockwait"] == {"attached": False}


@pytest.mark.parametrize("name, args", [("counting", ["--syscall-time"]), ("breakdown", [])])
def test_probes_show_prints_the_program_and_cflags_the_set_loads(name, args):
    """`netprof probes --show NAME` (bcc's --ebpf): the text and cflags it prints are what the instrument's set
    compiles with the same flags: the loaded set's own key (its source path and BCC's cflags) says so."""
    require_bpf()
    from helpers import netprof_cli

    res = netprof_cli("probes", "--show", name, *args)
    assert res.returncode == 0, res.stderr
    head, flags, text = res.stdout.split("\n", 2)
    cls = registry.by_name(name)
    inst = cls.open(RunConfig(backends=[], syscall_time=bool(args), instruments=(name,)))
    try:
        path, cflags = inst.probes.bpf.netprof_key
    finally:
        inst.close()
    assert head.endswith(str(Path(path).relative_to(Path(netprof.probes.__file__).parent.parent))), (head, path)
    assert flags == "// cflags: " + " ".join(cflags)
    assert text.startswith(Path(path).read_text().splitlines()[0])
    bad = netprof_cli("probes", "--show", "nosuch")
    assert bad.returncode == 2 and "one of counting, sockwait, breakdown" in bad.stderr
