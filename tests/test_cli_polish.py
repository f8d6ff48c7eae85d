"""The CLI as a new user meets it: -h, clean --help, completion, did-you-mean, the estimate line, one
line per finished cell off a terminal, the progress bar's phases on one, -q, -o, --workers,
--loader-threads, and `report DIR --out OTHER`. Real runs (short, --no-probes), real processes."""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import subprocess
import termios
import time
from pathlib import Path

import psutil
import pytest

from helpers import netprof_children, netprof_cli, netprof_cmd, run_netprof, wait_no_children

# Short cells: this module runs beside others (four at a time) and checks output, not figures.
SHORT = ("-c", "10", "-d", "0.3", "--warmup", "0.1", "--no-probes", "--wait")
pytestmark = pytest.mark.concurrent  # output, exit codes and files; no probes, runs pass --wait
COMMANDS = ("run", "report", "compare", "flamegraph", "list", "doctor")


# --- help, completion, did-you-mean: nothing runs -------------------------------------------------


def test_h_is_help_everywhere():
    top = netprof_cli("-h")
    assert top.returncode == 0 and "Examples" in top.stdout and top.stdout == netprof_cli("--help").stdout
    for cmd in COMMANDS:
        res = netprof_cli(cmd, "-h")
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("Usage: netprof " + cmd), res.stdout[:200]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_placeholders_are_plain(cmd):
    """No Python types (<list[str]>, <float>) and no typer braces ({DIR}) in any command's help."""
    text = netprof_cli(cmd, "-h").stdout
    assert not re.search(r"<(str|int|float|path|list\[[a-z]+\])>", text), text
    usage = text.splitlines()[0]
    assert "{" not in usage and "[[" not in usage, usage


def test_usage_names_the_arguments():
    assert netprof_cli("run", "-h").stdout.splitlines()[0] == "Usage: netprof run [OPTIONS] [BACKEND]..."
    assert netprof_cli("report", "-h").stdout.splitlines()[0] == "Usage: netprof report [OPTIONS] DIR"
    assert "BACKEND...: the built-in backends" in netprof_cli("run", "-h").stdout


def test_shell_completion_is_offered_and_works():
    assert "--install-completion" in netprof_cli("-h").stdout
    script = netprof_cli("--show-completion", "bash")
    assert script.returncode == 0, script.stderr
    assert "_NETPROF_COMPLETE" in script.stdout and "complete " in script.stdout
    # what bash would ask: the subcommands after `netprof `, and the options of `netprof run --con`
    env = {**os.environ, "_NETPROF_COMPLETE": "complete_bash", "COMP_WORDS": "netprof ", "COMP_CWORD": "1"}
    words = netprof_cli(env=env).stdout.split()
    assert {"run", "report", "compare", "list"} <= set(words), words
    env.update(COMP_WORDS="netprof run --con", COMP_CWORD="2")
    words = netprof_cli(env=env).stdout.split()
    assert "--connections" in words, words


@pytest.mark.parametrize(
    "typo,meant", [("uvloop_sok", "uvloop_sock"), ("selectr", "selector"), ("asyncio_proto_", "asyncio_proto")]
)
def test_did_you_mean(typo, meant, tmp_path):
    res = netprof_cli("run", typo, *SHORT, "-o", str(tmp_path / "out"))
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"unknown backend '{typo}'" in lines[0] and f"did you mean {meant}?" in lines[0]
    assert not (tmp_path / "out").exists()


def test_no_suggestion_for_a_name_like_none():
    res = netprof_cli("run", "zzzzzz", *SHORT)
    assert res.returncode == 2 and "did you mean" not in res.stderr and "selector" in res.stderr


# --- real runs -----------------------------------------------------------------------------------

CELL_LINE = re.compile(
    r"^selector message framing c=10 round (\d): ([\d,]+) msgs/s, p99 [\d.,]+ (ns|µs|ms|s), "
    r"no probes$"
)


def test_off_a_terminal_the_plan_and_one_line_per_cell(tmp_path):
    """stderr (not a terminal here): the estimate first, then one line per finished cell; stdout: the
    headline table. -o is --out."""
    out = tmp_path / "run"
    t0 = time.monotonic()
    res = run_netprof("run", "selector", *SHORT, "-r", "2", "-o", str(out), timeout=180)
    wall = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[0] == "2 cells × (0.1 s warm-up + 0.3 s) ≈ 3 s", lines
    assert wall >= 2 * 0.4  # the estimate is a lower bound: every cell's warm-up and window did run
    cells = [m for ln in lines[1:] if (m := CELL_LINE.match(ln))]
    assert [m.group(1) for m in cells] == ["1", "2"], lines
    rows = __import__("pandas").read_parquet(out / "results.parquet")  # -o wrote the run where asked
    for m, (_, row) in zip(cells, rows.sort_values("round").iterrows()):
        assert int(m.group(2).replace(",", "")) == round(row["msgs_per_sec"])  # the line says the row's figure
    assert "Headline" in res.stdout and "selector" in res.stdout
    assert not wait_no_children()


def test_no_report_writes_the_summary_and_the_report_comes_later(tmp_path):
    """--no-report: the rows, summary.json and the JSON summary (anomalies included) as any run writes them, no
    plots or pages and no drawing process; `netprof report DIR` draws the report from the same results."""
    out = tmp_path / "run"
    res = run_netprof("run", "selector", *SHORT, "-r", "1", "--no-report", "--json", "-o", str(out), timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert len(doc["runs"]) == 1 and doc["runs"][0]["status"] == "ok" and isinstance(doc["anomalies"], list)
    assert doc["artifacts"]["report_html"] is None and doc["artifacts"]["plots"] == []
    assert json.loads((out / "summary.json").read_text())["runs"] == doc["runs"]
    assert not [p for p in ("report.md", "report.html", "plots") if (out / p).exists()]
    quiet = run_netprof("run", "selector", *SHORT, "-r", "1", "--no-report", "-q", "-o", str(tmp_path / "q"),
                        timeout=180)
    assert quiet.returncode == 0 and quiet.stdout.strip() == str(tmp_path / "q"), quiet.stdout
    rep = run_netprof("report", str(out), "--json", timeout=120)
    assert rep.returncode == 0, rep.stderr[-2000:]
    later = json.loads(rep.stdout)
    assert (out / "report.html").is_file() and later["artifacts"]["plots"]
    assert [a["id"] for a in later["anomalies"]] == [a["id"] for a in doc["anomalies"]]


def test_quiet_prints_only_the_report_path(tmp_path):
    out = tmp_path / "run"
    res = run_netprof("run", "selector", *SHORT, "-r", "1", "-q", "-o", str(out), timeout=180)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert res.stdout.splitlines() == [str(out / "report.html")]
    assert (out / "report.html").exists()


def _pty_run(args: list[str], cols: int = 220) -> tuple[int, str]:
    """Run netprof with stdout and stderr on a pseudo-terminal (what a user's shell gives it)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols)}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(netprof_cmd(*args), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_on_a_terminal_the_bar_shows_phase_and_last_rate(tmp_path):
    # phases of a second or more: the bar redraws 10 times a second, a shorter phase may fall between two
    rc, text = _pty_run(["run", "selector", "-c", "10", "-d", "1", "--warmup", "1", "--no-probes", "--wait", "-r", "2",
                         "-o", str(tmp_path / "run")])
    assert rc == 0, text[-2000:]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    for phase in ("warm-up", "measuring"):
        assert phase in plain, phase
    assert re.search(r"last: [\d.]+k? msgs/s", plain), plain[-3000:]
    assert re.search(r"live: [\d.]+k? msgs/s", plain), plain[-3000:]  # the loader's progress events, while it runs
    lines = plain.replace("\r", "\n").splitlines()
    assert not any(CELL_LINE.match(ln.strip()) for ln in lines)  # no per-cell lines on a terminal without -v


def _watch(pred, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in netprof_children():
            try:
                got = pred(p)
            except psutil.Error:
                continue
            if got:
                return got
        time.sleep(0.05)
    return None


def test_workers_and_loader_threads_reach_their_processes(tmp_path):
    """--workers 3: the prefork backend forks 3 workers; --loader-threads 2: the loader runs with 2."""
    proc = subprocess.Popen(
        netprof_cmd(
            "run",
            "prefork",
            "-c",
            "10",
            "-d",
            "2",
            "--warmup",
            "0.5",
            "-r",
            "1",
            "--no-probes",
            "--wait",
            "--workers",
            "3",
            "--loader-threads",
            "2",
            "-o",
            str(tmp_path / "run"),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        loader = _watch(lambda p: p if p.name() == "netprof-loader" else None)
        assert loader is not None, "no loader"
        assert "--threads 2" in " ".join(loader.cmdline())

        def workers(p):
            if "netprof.backends" not in " ".join(p.cmdline()) or "--workers" not in p.cmdline():
                return None
            kids = p.children(recursive=True)
            return (p, kids) if len(kids) >= 3 else None

        found = _watch(workers)
        assert found is not None, "the prefork backend never had 3 workers"
        backend, kids = found
        assert backend.cmdline()[backend.cmdline().index("--workers") + 1] == "3"
        assert len(kids) == 3, [k.cmdline() for k in kids]
    finally:
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert not wait_no_children()


# --- report DIR --out OTHER ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    from test_report import build_results

    return build_results(tmp_path_factory.mktemp("results") / "run")


def test_report_out_writes_elsewhere_and_links_back(results_dir, tmp_path):
    before = {p.name: p.stat().st_mtime_ns for p in results_dir.iterdir()}
    other = tmp_path / "elsewhere" / "rep"
    res = run_netprof("report", str(results_dir), "--out", str(other), "-q", timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(other / "report.html")
    for name in ("report.md", "report.html", "summary.json", "plots/throughput.svg"):
        assert (other / name).exists(), name
    assert {p.name: p.stat().st_mtime_ns for p in results_dir.iterdir()} == before  # DIR untouched
    page = (other / "report.html").read_text()
    links = re.findall(r'href="([^"#]+/oncpu\.svg)"', page)
    assert links and all((other / link).resolve().is_file() for link in links)  # flamegraphs reached in DIR


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda p: p.write_text("x"), "is an existing file, not a directory"),
        (lambda p: (p.mkdir(), (p / "results.parquet").write_bytes(b"x")), "holds another run's results"),
    ],
)
def test_report_out_refuses(make, expected, results_dir, tmp_path):
    target = tmp_path / "target"
    make(target)
    res = run_netprof("report", str(results_dir), "--out", str(target), timeout=60)
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], res.stderr


def test_report_out_does_not_follow_a_planted_link(results_dir, tmp_path):
    """A symlink planted at OTHER/report.html is replaced, never written through (atomic.open_atomic)."""
    other = tmp_path / "other"
    other.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (other / "report.html").symlink_to(victim)
    res = run_netprof("report", str(results_dir), "--out", str(other), "-q", timeout=120)
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == "keep me"
    assert not (other / "report.html").is_symlink() and "netprof report" in (other / "report.html").read_text()


def test_report_without_out_still_writes_in_place(results_dir):
    res = run_netprof("report", str(results_dir), "-q", timeout=120)
    assert res.returncode == 0 and Path(res.stdout.strip()) == results_dir / "report.html"


def test_verbose_adds_cell_lines_on_a_terminal(tmp_path):
    rc, text = _pty_run(["run", "selector", *SHORT, "-r", "1", "-v", "-o", str(tmp_path / "run")])
    assert rc == 0, text[-2000:]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "\n")
    assert "1 cell × (0.1 s warm-up + 0.3 s) ≈ 1 s" in plain
    assert any(CELL_LINE.match(ln.strip()) for ln in plain.splitlines()), plain[-3000:]
