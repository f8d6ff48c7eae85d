"""The `netprof` command line (typer). Thin: parses, validates, hands over, prints."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer._click import exceptions as click_errors  # typer 0.29 carries its own click (pinned: pyproject)
from typer.core import TyperCommand

import netprof
from netprof.backends import registry
from netprof.flamegraphs import check_available as flame_missing
from netprof.flamegraphs.render import MAX_FOLDED, diff_stacks
from netprof.probes import base as probe_base
from netprof.probes import check_available
from netprof.probes import registry as instrument_registry
from netprof.profiler.analysis import compare_inputs
from netprof.profiler.core import rootenv
from netprof.profiler.core.atomic import check_out_dir, ensure_out_dir
from netprof.profiler.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, InputError, NetprofError
from netprof.profiler.core.named_file import read_named_file
from netprof.profiler.core.paths import caller_uids, untrusted_reason
from netprof.profiler.core.safetext import clean_text
from netprof.profiler.model.files import RESULTS_PARQUET
from netprof.profiler.run import servers
from netprof.profiler.run.link.sshlink import parse_hosts
from netprof.profiler.run.plan import (
    RunConfig,
    check_remote_work,
    parse_env_file,
    parse_framings,
    parse_header_file,
    parse_int_list,
    parse_io_uring,
    parse_pin,
    parse_pythons,
    parse_rates,
    parse_sources,
    parse_tags,
    validate,
)

# `netprof --help`'s examples: (what it shows, the command). Each comment is printed on its own line above its
# command, and each is marked for click not to rewrap it (`\b`), so at 80 columns no comment is cut in two
# (tests/test_cli.py holds every line to 80).
EXAMPLE_LINES = (
    ("can this machine do a profiled run?", "netprof doctor"),
    ("the backends", "netprof list"),
    ("10/100/1000 connections, 3 rounds", "netprof run uvloop_sock"),
    ("three backends at three scales, 5 rounds each",
     "netprof run selector asyncio_sock uvloop_sock -c 10,100,1000 -r 5"),
    ("1, 4 and 8 messages in flight per connection", "netprof run asyncio_sock uvloop_sock -c 100 --pipeline 1,4,8"),
    ("network_ping_test's futex storm", "netprof run thread --no-pin -c 100"),
    ("latency at the load you ask for", "netprof run selector --work sleep:1000 -c 10 --rate 500,2000"),
    ("over a link with 1 ms RTT", "netprof run selector -c 100 --remote netns --netem delay=500us"),
    ("rebuild report.md / report.html", "netprof report runs/20261121-120000"),
)
EXAMPLES = "\nExamples:\n\n" + "\n\n".join(f"\b\n  # {what}\n  {cmd}" for what, cmd in EXAMPLE_LINES) + "\n"

EXIT_CODES = """
Exit codes: 0 every cell ran; 1 some cells failed (FF) or a --fail-if regression; 2 bad input or a
missing capability; 3 netprof's own error (the report of finished cells is still written);
130 interrupted.
"""

# The load options, declared once here and shared by `run`, `flamegraph`, `ab` and `knee`: each command gives its
# default and, where the text differs, its help; `one` = the command takes one value, not a comma list (a run
# dimension). typer reads the returned OptionInfo as the parameter's default.


CONNECTIONS = "--connections"  # its one declaration: the option's name, and the name its parse errors give


def connections_option(default: str | int, one: bool = False):
    return typer.Option(default, "-c", CONNECTIONS, metavar="N" if one else "N[,N...]",
                        help="Connections (one value)." if one else "Comma list of connection counts.")


def parse_connections(text: str) -> list[int]:
    """A command's comma list of connection counts (connections_option without `one`)."""
    return parse_int_list(text, CONNECTIONS)


def pipeline_option(default: str | int, one: bool = False, help: str = ""):
    return typer.Option(default, "--pipeline", metavar="K" if one else "K[,K...]",
                        help=help or ("Messages in flight per connection." if one
                                      else "Messages in flight per connection (comma list)."))


def msize_option(help: str = "Message size in bytes."):
    return typer.Option(64, "-s", "--msize", metavar="BYTES", help=help)


def warmup_option(default: float, help: str):
    return typer.Option(default, "--warmup", metavar="SECONDS", help=help)


def warmup_after_option(help: str = ""):
    return typer.Option(
        "connected", "--warmup-after", metavar="connected|served",
        help=help or "When the warm-up begins: once every connection is up (connected), or once each has had one "
                     "request answered (served: the server has accepted them all; a loop that accepts one "
                     "connection per turn, as uvloop's, otherwise starts the window with some still queued).")


def framing_option(help: str = "message or stream (as in `run`)."):
    return typer.Option("message", "--framing", metavar="message|stream", help=help)


def work_option(help: str = "Handler work per message (as in `run`)."):
    return typer.Option("none", "--work", metavar="SPEC", help=help)


def rate_option(help: str, one: bool = False):
    return typer.Option("", "--rate", metavar="R" if one else "R[,R...]", help=help)


def arrivals_option(default: str = "", help: str = "With --rate: as in `run`."):
    return typer.Option(default, "--arrivals", metavar="constant|poisson", help=help)


def max_connections_option(help: str = ""):
    return typer.Option(0, "--max-connections", metavar="N", show_default=False, help=help or MAX_CONNECTIONS_HELP)


def zmq_client_option():
    return typer.Option("libzmq", "--zmq-client", metavar="libzmq|native", help=ZMQ_CLIENT_HELP)


# --zmq-client, the same on every command that drives ZeroMQ backends (plan.ZMQ_CLIENTS).
MAX_CONNECTIONS_HELP = ("With --rate: a request that comes due while every connection has --pipeline in flight goes "
                        "out on a new connection, up to N open at once (default 1000; -c are opened before the load "
                        "and carry what they can first); past N it waits in the loader (open_loop.behind).")
NAME_DEFAULT_HELP = (" (default: its program's name, or what a Python interpreter runs: uvicorn for "
                     "'python -m uvicorn ...').")
ZMQ_CLIENT_HELP = ("How the loader drives the ZeroMQ backends (zmq_raw, zmq_poller, ...; no other server): libzmq, "
                   "its DEALER sockets (the default: the reference harness uses libzmq); native, the loader speaks "
                   "ZMTP 3.0 itself on its own epoll loop, so the thread that times an answer reads it (no libzmq "
                   "I/O-thread queue inside the loader's round trip), and --rate, `netprof knee` and ab's turns work.")

app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="eBPF/perf syscall profiler for Python network backends.\n" + EXAMPLES + EXIT_CODES,
)
# Off a terminal (a pipe, a CI log) rich would lay tables out in 80 columns and cut cells short with "…"
# (`uvloop_s…`); there is no width to fit, so lines get as long as their content (COLUMNS still wins).
WIDE_OFF_TERMINAL = 1000


def out_console(**kwargs) -> Console:
    """A Console for netprof's output: the terminal's width on one, else wide enough for any table."""
    console = Console(**kwargs)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = WIDE_OFF_TERMINAL
    return console


err = out_console(stderr=True)


class _PlainUsage(TyperCommand):
    """Usage lines with plain placeholders: typer writes a required argument as {DIR}."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        return [p.replace("{", "").replace("}", "") for p in super().collect_usage_pieces(ctx)]


def say_error(message: str) -> None:
    # Messages quote paths and values the user gave: text, never rich markup ("[/x]" would raise). They may
    # also quote a remote host, ssh or a child: one line without control characters (safetext.py).
    err.print(f"[bold red]netprof:[/bold red] {escape(clean_text(message, lines=False))}", highlight=False,
              soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    """One line naming the fix, then exit (2 = bad input / missing capability)."""
    say_error(message)
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        print(f"netprof {netprof.__version__} ({netprof.__source__})")
        raise typer.Exit(0)


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


@app.command("list")
def list_backends(all_: bool = typer.Option(False, "--all", help="Include test-only backends.")) -> None:
    """The backends netprof can run: family, how each reads under --framing message (exact: asks the
    kernel for the rest of one message; split: a callback gets what arrived and splits it into
    messages; frames: ZeroMQ messages are already framed), and a description."""
    table = Table("backend", "family", "reads", "description", box=None, header_style="bold")
    for name in registry.names(include_test_only=all_):
        info = registry.get(name)
        needs = registry.uninstalled_requirement(info)  # too old an interpreter, or a dependency not installed
        table.add_row(name, info.family, info.reads, info.description + (f" — {needs}" if needs else ""))
    out_console().print(table)


@app.command("probes")
def probes_cmd(
    show: str = typer.Option("", "--show", metavar="NAME",
                             help="Print the BPF program instrument NAME would load with these flags: the C text BCC "
                                  "compiles (its headers pasted in) and the cflags, as bcc's tools' --ebpf."),
    syscall_time: bool = typer.Option(False, "--syscall-time", help="As in `run` (the counting set's timing)."),
) -> None:
    """The instruments a run can carry, and how each is switched on; --show NAME prints the exact program."""
    from netprof.probes import base  # deferred: only this command shows programs

    classes = instrument_registry.registered()
    if not show:
        table = Table("instrument", "switched on by", "attached", "row group", box=None, header_style="bold")
        how = {"counting": "every run (--no-probes: off)", "sockwait": "--sockwait", "breakdown": "--breakdown"}
        for cls in classes:
            table.add_row(cls.name, how.get(cls.name, f"--instrument {cls.name}"),
                          "the probed sub-window" if cls.sub_window else "the whole cell", cls.group or "top-level")
        out_console().print(table)
        return
    shown_cls = instrument_registry.by_name(show)
    if shown_cls is None:
        raise InputError(f"--show '{show}' is not an instrument; one of {', '.join(c.name for c in classes)}")
    try:
        with base.show():
            shown_cls.open(RunConfig(backends=[], syscall_time=syscall_time, instruments=(show,)))
    except base.Shown as shown:
        where = os.path.relpath(shown.path, Path(base.__file__).parent)
        sys.stdout.write(f"// netprof probes --show {show}{' --syscall-time' if syscall_time else ''}: "
                         f"probes/{where}\n// cflags: {' '.join(shown.cflags)}\n{shown.text}")
        return
    raise NetprofError(f"instrument {show} opened without loading a program: nothing to show")


@app.command()
def doctor() -> None:
    """Check every capability a profiled run needs; exit 0 only when one can work."""
    from netprof.profiler.run.doctor import all_ok, run_checks  # deferred: the checks load the run layer

    checks = run_checks()
    out = Console(highlight=False)
    width = max((len(c.name) for c in checks), default=0)  # every detail starts in one column
    for c in checks:
        mark = "[green]ok  [/green]" if c.ok else ("[red]FAIL[/red]" if c.required else "[yellow]note[/yellow]")
        fix = f"  → fix: {c.fix}" if (not c.ok and c.fix) else ""
        # text, not markup: a detail quotes paths and versions read from the system ("[" in a path)
        out.print(f"{mark} {escape(c.name.ljust(width))} {escape(c.detail + fix)}", soft_wrap=True)
    ok = all_ok(checks)
    out.print("ready for a profiled run" if ok else "[red]not ready[/red]: fix the FAIL lines above")
    raise typer.Exit(0 if ok else 1)


@app.command()
def run(
    # Documented in the docstring: typer would print an argument's help with its Python type (<list[str]>).
    backends: list[str] | None = typer.Argument(None, metavar="BACKEND", hidden=True),
    connections: str = connections_option("10,100,1000"),
    duration: float = typer.Option(5.0, "-d", "--duration", metavar="SECONDS", help="Measured seconds per cell."),
    rounds: int = typer.Option(3, "-r", "--rounds", metavar="N", help="Rounds per cell (mean ± interval across them)."),
    msize: int = msize_option(),
    pipeline: str = pipeline_option("1"),
    framing: str = framing_option(
        "message: each receive asks for one message (the reference harness's way); stream: read up to 64 KiB "
        "and echo what came; or message,stream."),
    warmup: float = warmup_option(1.0, "Seconds of load before measuring."),
    warmup_after: str = warmup_after_option(),
    tag: str = typer.Option(
        "", "--tag", metavar="TAG[,TAG...]",
        help="Label the cells (a run dimension, in every row, table, label and file name): --tag old / --tag new "
             "names what two runs compare; --tag a,b runs every cell once per tag (an A/A control)."),
    work: str = work_option(
        "Handler work per message: none|sleep:US|spin:US|poisson-sleep:MEAN|poisson-spin:MEAN|remote:US "
        "(a blocking call to a helper that answers after US µs)."),
    think: str = typer.Option("none", "--think", metavar="SPEC",
                              help="Loader think time: none|fixed:US|uniform:MIN-MAX|poisson:MEAN."),
    io_uring: str = typer.Option(
        "on", "--io-uring", metavar="on|off",
        help="off: start the server with io_uring_setup failing (ENOSYS), as a container's seccomp profile may, so "
             "a loop that falls back does its ring work as syscalls; on,off runs both (a run dimension)."),
    rate: str = rate_option(
        "Open-loop load: requests/s over all connections, sent on a schedule whatever the replies do (a run "
        "dimension: 500,2k,1.5m runs each); latency counts from each request's intended send time. "
        "Default: closed loop (each connection sends when its reply came)."),
    arrivals: str = arrivals_option(
        help="With --rate: requests evenly spaced (constant, the default) or at random (poisson) times."),
    max_connections: int = max_connections_option(),
    zmq_client: str = zmq_client_option(),
    no_probes: bool = typer.Option(False, "--no-probes", help="No BPF: throughput, latency and /proc CPU only."),
    probe_share: float = typer.Option(
        0.3, "--probe-share", metavar="SHARE",
        help="Share of each cell's window (its middle) with the counting probes attached; headline throughput, "
             "latency and fairness come from the rest. 1 = probes throughout, 0 = none."),
    syscall_time: bool = typer.Option(
        False, "--syscall-time",
        help="Also time every syscall (costs about as much again as counting)."),
    sockwait: bool = typer.Option(
        False, "--sockwait",
        help="Also time where each message waits: unread in the socket queue vs in the handler, per connection "
             "(socket-wait probes, attached for the whole cell: their cost, ~10% on a fast loop, is in the headline)."),
    breakdown: bool = typer.Option(
        False, "--breakdown",
        help="Also split each request's time into parts measured by the kernel (socket-queue wait, the loop's "
             "turn, run queue, on CPU, off CPU by cause, send, transit), with the composition of the slowest 1% "
             "(implies --sockwait; docs/breakdown.md)."),
    instrument: list[str] = typer.Option(
        None, "--instrument", metavar="NAME",
        help="Also carry this instrument of probes/registry.py (repeatable); the counting set and --sockwait have "
             "options of their own."),
    stacks: bool = typer.Option(
        False, "--stacks",
        help="Also collect user stacks of selected syscalls (evidence set)."),
    flamegraph: bool = typer.Option(False, "--flamegraph", help="Add a sampling round per cell with flamegraphs."),
    no_pin: bool = typer.Option(False, "--no-pin", help="Do not pin backend and loader to CPUs (= --pin no)."),
    pin_mode: str = typer.Option(
        "yes", "--pin", metavar="yes|no|both",
        help="yes: backend on --backend-cpu, loader on the others (the reference harness's way); no; both: every "
             "cell pinned and unpinned (the loader stays pinned), to see what pinning changes."),
    backend_cpu: str = typer.Option("0", "--backend-cpu", metavar="CPUS", help="CPU(s) the backend is pinned to."),
    loader_cpus: str = typer.Option("", "--loader-cpus", metavar="CPUS",
                                    help="CPUs for the loader (default: all others)."),
    loader_threads: int = typer.Option(
        1, "--loader-threads", metavar="N",
        help="Loader threads (more when the loader, not the backend, is the limit)."),
    workers: int = typer.Option(
        2, "--workers", metavar="N",
        help="Processes/threads of the multi-worker backends (prefork, prethread, select_prethread, zmq_threads, "
             "gunicorn_sync)."),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                    help="Results directory (default runs/<timestamp>/)."),
    quiet: bool = typer.Option(False, "-q", "--quiet",
                               help="No progress and no summary: errors and the report's path."),
    no_report: bool = typer.Option(
        False, "--no-report",
        help="Write the results and summary.json (and the --json summary, anomalies included) but draw no report: "
             "no plots, report.md or report.html, and no drawing process beside the run (`netprof report DIR` "
             "draws it later). For scripts that read the JSON."),
    verbose: bool = typer.Option(False, "-v", "--verbose",
                                 help="Also print every finished cell on a terminal (off a terminal it always is)."),
    force: bool = typer.Option(False, "--force", help="Replace the run already in --out."),
    wait: bool = typer.Option(
        False, "--wait",
        help="If another netprof run is measuring, wait for it (default: refuse: two runs would disturb each other's "
             "numbers)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before a run planned to take over an hour."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON summary on stdout, nothing else there."),
    remote: str = typer.Option(
        "", "--remote", metavar="netns",
        help="netns: backend and loader in two network namespaces of their own, joined by a link (needs root)."),
    netem: str = typer.Option(
        "", "--netem", metavar="SPEC",
        help="With --remote netns, impair both ends of the link: delay=200us[,jitter=50us][,loss=0.1%][,rate=1gbit]."),
    sources: str = typer.Option(
        "auto", "--sources", metavar="ADDRS|auto",
        help="Loader source addresses (127.x, round-robin); auto: one 127.0.0.x per 12,000 connections."),
    server_host: str = typer.Option(
        "", "--server-host", metavar="[USER@]HOST",
        help="Run the server and its probes (the whole run) on another host, over ssh: a `netprof agent` there "
             "runs it and this one shows its output and copies its results here. --loader-hosts are then reached "
             "from that host."),
    loader_hosts: str = typer.Option(
        "", "--loader-hosts", metavar="[USER@]HOST",
        help="Run the loader on another host, over ssh (a `netprof agent` there; the server and probes stay "
             "here): a host as your ssh config names it."),
    ssh_config: Path | None = typer.Option(
        None, "--ssh-config", metavar="FILE",
        help="ssh_config for --loader-hosts and --server-host (default: your own ~/.ssh/config); it, and every file it "
             "includes, owned by root or you and writable by nobody else (ssh runs what it says)."),
    remote_netprof: str = typer.Option(
        "", "--remote-netprof", metavar="PATH",
        help="The netprof command on the loader hosts (default: this interpreter's path, with -m netprof.profiler)."),
    python: str = typer.Option(
        "", "--python", metavar="VERSIONS",
        help="Interpreter(s) for the backends: comma list of versions (3.11,3.13, via pyenv) or paths; default: "
             "netprof's own."),
    cmd: list[str] | None = typer.Option(
        None, "--cmd", metavar="TEMPLATE",
        help="Your own server's command, {port} replaced by a free port and {host} by the address to listen on "
             "(127.0.0.1; with --loader-hosts the one they reach); repeatable; runs as the sudo caller unless "
             "--as-root."),
    name: list[str] | None = typer.Option(
        None, "--name", metavar="NAME",
        help="Label of the --cmd (or --attach) server of the same position" + NAME_DEFAULT_HELP),
    ready_regex: str = typer.Option(
        "", "--ready-regex", metavar="REGEX",
        help="--cmd is ready when a line of its stdout matches (default: when its port accepts)."),
    ready_timeout: float = typer.Option(
        20.0, "--ready-timeout", metavar="SECONDS",
        help="How long --cmd may take to become ready before its cells fail."),
    attach: int | None = typer.Option(
        None, "--attach", metavar="PID",
        help="Profile a server that is already running, where it listens on loopback (or at --target): nothing is "
             "started or stopped."),
    target: str = typer.Option(
        "", "--target", metavar="HOST:PORT",
        help="Where --attach's server (when it listens on more than one port) or a --cmd without {port} listens."),
    as_root: bool = typer.Option(False, "--as-root", help="Run --cmd as root instead of the user who invoked sudo."),
    env: list[str] | None = typer.Option(
        None, "--env", metavar="NAME=VALUE",
        help="Set a variable in --cmd's environment (repeatable). Through sudo, --cmd gets your environment (your "
             "HOME, USER, and the PATH netprof got: sudo's secure_path unless kept); --env PATH=... sets another."),
    env_file: Path | None = typer.Option(
        None, "--env-file", metavar="FILE",
        help="Variables for --cmd's environment from a file, one NAME=VALUE per line (blank lines and # comments "
             "skipped); unlike --env, not visible to other users."),
    protocol: str = typer.Option(
        "echo", "--protocol", metavar="echo|http|line",
        help="echo (64-byte echo), http (HTTP/1.1 keep-alive), line (a request line, one reply line)."),
    request: str = typer.Option("GET /", "--request", metavar="'METHOD /path'", help="--protocol http: the request."),
    header: list[str] | None = typer.Option(
        None, "--header", metavar="'Name: value'",
        help="--protocol http: an extra header (repeatable). A value on the command line is visible to every local "
             "user in /proc/PID/cmdline while netprof runs: give secrets with --header-file (the body with "
             "--body-file)."),
    body: str | None = typer.Option(None, "--body", metavar="TEXT", help="--protocol http: the request body."),
    body_file: Path | None = typer.Option(
        None, "--body-file", metavar="FILE",
        help="--protocol http: the request body, from a file."),
    header_file: Path | None = typer.Option(
        None, "--header-file", metavar="FILE",
        help="--protocol http: extra headers from a file, one 'Name: value' per line (blank lines and # comments "
             "skipped); unlike --header, not visible to other users."),
    keep_secrets: bool = typer.Option(
        False, "--keep-secrets",
        help="Write header values and the body into meta.json and the reports as given (default: the values of "
             "Authorization, Cookie and headers named like *key*, *token*, *secret*, *auth*, and the body, are "
             "redacted to their length and a hash)."),
    line: str = typer.Option("PING", "--line", metavar="TEXT", help="--protocol line: the request line."),
) -> None:
    """Run servers × connections × pipeline × rounds and report what each message costs.

    BACKEND...: the built-in backends to run (`netprof list`); or --cmd / --attach for your own server."""
    env_items = list(env or []) + _env_file(env_file)
    own = _own_servers(cmd or [], name or [], ready_regex, attach, target, as_root, ready_timeout, env_items)
    headers, body = _http_request(header, header_file, body, body_file)
    pin, pin_both = parse_pin(pin_mode, no_pin)
    cfg = validate(RunConfig(
            backends=list(backends or []), own=own, protocol=protocol, request=request, headers=headers,
            body=body, keep_secrets=keep_secrets, line=line, connections=parse_connections(connections),
            pipeline=parse_int_list(pipeline, "--pipeline"), duration=duration, warmup=warmup,
            warmup_after=warmup_after, rounds=rounds, msize=msize, work=work, think=think, probes=not no_probes,
            stacks=stacks,
            probe_share=probe_share, syscall_time=syscall_time, sockwait=sockwait or breakdown,
            instruments=tuple(dict.fromkeys([*(instrument or []), *(["breakdown"] if breakdown else [])])),
            flamegraph=flamegraph, pin=pin, pin_both=pin_both, backend_cpu=backend_cpu, loader_cpus=loader_cpus,
            loader_threads=loader_threads, workers=workers,
            out_dir=str(out) if out else "", force=force, wait=wait, remote=remote, netem=netem,
            sources=parse_sources(sources), pythons=parse_pythons(python), framings=parse_framings(framing),
            loader_hosts=parse_hosts(loader_hosts), server_host=(parse_hosts(server_host, "--server-host") or [""])[0],
            ssh_config=str(ssh_config) if ssh_config else "",
            remote_netprof=remote_netprof,
            env=env_items, extra_dims={**parse_tags(tag), **parse_rates(rate), **parse_io_uring(io_uring)},
            arrivals=arrivals, max_connections=max_connections,
            zmq_client=zmq_client,
        ))
    _confirm_long_plan(cfg, yes)
    if cfg.server_host:
        _run_on_server_host(cfg)
    from netprof.profiler.report import plotset, report  # deferred: pandas and the report's modules

    # The report's drawing process, started before the capability checks: its matplotlib import runs beside
    # their BPF compile (and is waited for before the run, never during a measured load), not after the run.
    with contextlib.nullcontext() if no_report else plotset.warm(report._draw, preload=report.DRAW_PRELOAD):
        _execute(cfg, as_json, quiet=quiet, verbose=verbose, render_report=not no_report)


# `run`'s options that stay on this side with --server-host: where the results land here, the host itself, and
# those that may carry secrets: their values go to the server host through the agent's channel (`secrets` of its
# run request, docs/agent-protocol.md), never on the remote command line, which every user there can read.
_LOCAL_OPTIONS = ("--server-host", "-o", "--out", "--header", "--header-file", "--body", "--body-file", "--env",
                  "--env-file")


def forwarded_args(argv: list[str]) -> list[str]:
    """`netprof run`'s arguments for the server host's netprof: all of them but _LOCAL_OPTIONS (given as
    `--opt VALUE` or `--opt=VALUE`) and `--yes` (this side asked already)."""
    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in _LOCAL_OPTIONS:
            skip = True
        elif a.startswith(tuple(f"{o}=" for o in _LOCAL_OPTIONS if o.startswith("--"))) or a in ("-y", "--yes"):
            pass
        elif a.startswith("-o") and len(a) > 2 and not a.startswith("--"):
            pass  # -oDIR
        else:
            args.append(a)
    return args


def _run_on_server_host(cfg: RunConfig) -> None:
    """--server-host: the run by the netprof there (sshlink.run_on_server_host); its exit code is ours."""
    from netprof.profiler.core import runlock  # deferred: only this mode
    from netprof.profiler.run.link import sshlink

    argv = sys.argv[sys.argv.index("run") + 1:] if "run" in sys.argv else []
    out = Path(cfg.out_dir) if cfg.out_dir else runlock.unique_out_dir()
    secrets = {"headers": cfg.headers, "body": cfg.body, "env": cfg.env}  # read here, files included
    code = sshlink.run_on_server_host(cfg.server_host, forwarded_args(argv), out, cfg.ssh_config,
                                      cfg.remote_netprof, probes=cfg.probes, secrets=secrets)
    if code == 0:
        err.print(f"results of {cfg.server_host}: {escape(str(out))}")
    raise typer.Exit(code)


def _http_request(header: list[str] | None, header_file: Path | None, body: str | None,
                  body_file: Path | None) -> tuple[list[str], str | None]:
    """--header/--header-file and --body/--body-file → (headers, body)."""
    if body_file is not None:
        body = read_named_file(body_file, "--body-file")
    headers = list(header or [])
    if header_file is not None:
        headers += parse_header_file(read_named_file(header_file, "--header-file"), str(header_file))
    return headers, body


def _env_file(env_file: Path | None) -> list[str]:
    """--env-file's NAME=VALUE lines."""
    if env_file is None:
        return []
    return parse_env_file(read_named_file(env_file, "--env-file"), str(env_file))


def _own_servers(cmds: list[str], names: list[str], ready_regex: str, attach: int | None, target: str,
                 as_root: bool, ready_timeout: float, env_items: list[str]) -> list:
    """ServerSpecs of --cmd templates and --attach (servers.py checks each)."""
    if len(names) > len(cmds) + (attach is not None):
        raise InputError("more --name than --cmd/--attach: give one --name per server, in the same order")
    env = servers.parse_env(env_items)
    if env and not cmds:
        raise InputError("--env sets the environment of a --cmd server: give --cmd, or drop --env")
    own = [servers.from_cmd(c, names[i] if i < len(names) else "", ready_regex,
                            target if "{port}" not in c else "", as_root, ready_timeout, env)
           for i, c in enumerate(cmds)]
    if attach is not None:  # without --target, where it listens on loopback (servers.attached)
        own.append(servers.attached(attach, target, names[len(cmds)] if len(names) > len(cmds) else ""))
    elif target and not any("{port}" not in c for c in cmds):
        raise InputError("--target is for --attach, or for a --cmd without {port}")
    return own


LONG_PLAN_S = 3600.0


def _confirm_long_plan(cfg: RunConfig, yes: bool) -> None:
    """A plan over an hour says so and asks (or needs --yes when nobody can answer)."""
    total = cfg.estimate_s()
    if total <= LONG_PLAN_S or yes:
        return
    from netprof.profiler.run.runner import plan_line  # deferred: the run layer, only for commands that run

    text = plan_line(cfg)
    if not sys.stdin.isatty():
        raise InputError(f"this plan takes {text}; pass --yes to run it, or fewer cells/rounds")
    if not typer.confirm(f"This plan takes {text}. Run it?", default=False, err=True):
        raise typer.Exit(EXIT_BAD_INPUT)


def _terminate_like_ctrl_c(signum, frame) -> None:
    """SIGTERM and Ctrl-C: clean up, keep finished cells. The flag survives where the exception may
    not (run/stop.py: Python swallows one raised inside an at-fork hook or a finalizer)."""
    from netprof.profiler.run.stop import STOP  # deferred: the run layer, only for commands that run

    STOP.set()
    raise KeyboardInterrupt


def _stop_on_signals() -> None:
    """SIGTERM, and Ctrl-C unless started ignoring it (nohup), end a run like Ctrl-C: finished cells kept."""
    signal.signal(signal.SIGTERM, _terminate_like_ctrl_c)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _terminate_like_ctrl_c)


def _execute(cfg: RunConfig, as_json: bool, quiet: bool = False, verbose: bool = False,
             render_report: bool = True) -> None:
    """Shared tail of `run` and `flamegraph`: capability checks, the run, the report (`render_report`: else
    summary.json only), the exit code. Progress goes to stderr (stdout: the summary, or the JSON); -q silences
    both but the report's path (the results directory without a report)."""
    for inst in instrument_registry.wanted(cfg):  # each compiles once here and is parked for the run
        if why := inst.missing(cfg):
            fail(why)
    if cfg.stacks and not cfg.probes:
        why = check_available(syscall_time=cfg.syscall_time)
        if why:
            fail(f"probes cannot attach: {why}; or pass --no-probes to measure without BPF")
    if cfg.flamegraph:
        why = flame_missing()
        if why:
            fail(f"flamegraphs cannot be sampled: {why}")

    from netprof.profiler.model import results  # deferred: run layer, pandas, report
    from netprof.profiler.report import report
    from netprof.profiler.run import interpreters, runner

    console = out_console(stderr=True, quiet=quiet) if as_json else out_console(quiet=quiet)
    progress = out_console(stderr=True, quiet=quiet)
    interps: dict[str, interpreters.Interpreter] = {}
    for spec in cfg.pythons:
        if not spec:  # netprof's own interpreter: nothing to prepare, nothing to say
            interps[spec] = interpreters.prepare(spec)
            continue
        with progress.status(f"preparing the backends' environment for --python {spec} (cached after the first run)"):
            interps[spec] = interpreters.prepare(spec)
    _stop_on_signals()
    from netprof.profiler.report import plotset

    plotset.ready()  # run's warm drawing process has done its import: none of it overlaps the load
    probe_base.settle_ahead()  # nor a BPF compile begun ahead (profiler/entry.py)
    outcome = runner.execute(cfg, sys.argv, progress, interps, verbose=verbose)
    if outcome.store.rows:
        summary = report.finish(outcome.out_dir, console=None if as_json or quiet else console,
                                render_report=render_report)
        if as_json:
            print(json.dumps(summary, default=str))
        elif quiet:
            print(summary["artifacts"]["report_html"] or summary["artifacts"]["dir"])
    elif (index := results.read_json(outcome.out_dir, "flamegraphs/index.json")) is not None:
        # read as results.py reads: under sudo the directory is the caller's, who could swap in a link
        print(json.dumps(index) if as_json else "\n".join(report.flamegraph_lines(outcome.out_dir)))
    if outcome.closing is not None:
        outcome.closing.join()  # the probes came off while the report was written
    if outcome.error:
        fail(f"netprof's own error: {outcome.error} (traceback in {outcome.out_dir}/{runner.ERROR_LOG}); "
             f"{len(outcome.store.rows)} finished cells and their report are kept in {outcome.out_dir}",
             EXIT_INTERNAL)
    if outcome.interrupted:
        err.print(f"interrupted: {len(outcome.store.rows)} finished cells kept in {escape(str(outcome.out_dir))}")
        raise typer.Exit(130)
    if outcome.failed:
        err.print(f"{outcome.failed} cell(s) failed (FF); see {escape(str(outcome.out_dir))}/"
                  f"{'report.md' if render_report else 'summary.json'}")
        raise typer.Exit(1)


@app.command(cls=_PlainUsage)
def flamegraph(
    args: list[str] = typer.Argument(..., metavar="BACKEND", hidden=True),  # in the docstring (see `run`)
    connections: str = connections_option("100"),
    duration: float = typer.Option(5.0, "-d", "--duration", metavar="SECONDS", help="Sampled seconds per cell."),
    pipeline: str = pipeline_option("1"),
    msize: int = msize_option(),
    framing: str = framing_option(),
    warmup: float = warmup_option(1.0, "Seconds of load before sampling."),
    warmup_after: str = warmup_after_option("As in `run`."),
    work: str = work_option(),
    python: str = typer.Option(
        "", "--python", metavar="VERSIONS",
        help="Interpreter(s) for the backends (as in `run`); 3.13 adds the mixed Python+kernel view."),
    no_pin: bool = typer.Option(False, "--no-pin", help="Do not pin backend and loader to CPUs."),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="PATH",
                                    help="Results directory, or the SVG for `diff`."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON summary on stdout."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress and no summary."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Also print every finished cell on a terminal."),
) -> None:
    """Sampling rounds only (on-CPU, Python, off-CPU flamegraphs), or a differential flamegraph:
    `netprof flamegraph diff A.folded B.folded -o diff.svg` (red = grew in B, blue = shrank).

    BACKEND...: the backends to sample (`netprof list`), or `diff A.folded B.folded`."""
    if args and args[0] == "diff":
        if len(args) != 3:
            fail("usage: netprof flamegraph diff A.folded B.folded [-o diff.svg]")
        stacks = []
        for f in args[1:]:
            if not Path(f).is_file():
                raise InputError(f"{f}: no such folded-stacks file (flamegraphs/<cell>/*.folded of a run)")
            # Read as root for the caller (no link; under sudo, a file they could read), then handed to inferno.
            stacks.append(read_named_file(f, "flamegraph diff", limit=MAX_FOLDED))
            if not stacks[-1].strip():
                raise InputError(f"{f} holds no stacks (the sampler saw nothing): diff two non-empty .folded files")
        target = Path(out or "diff.svg")
        if not target.parent.is_dir():
            raise InputError(f"-o {target}: {target.parent} is not a directory; give a path in an existing one")
        check_out_dir(target.parent, "-o")  # the rules of --out; the SVG is written by atomic.py: a link is replaced
        try:
            a, b = Path(args[1]), Path(args[2])
            diff_stacks(stacks[0], stacks[1], str(target), title=f"{b.parent.name} vs {a.parent.name}",
                        names=(a.name, b.name))
        except (OSError, RuntimeError) as e:
            raise NetprofError(f"flamegraph diff failed: {e}") from None
        print(target)
        return
    cfg = validate(RunConfig(
            backends=list(args), connections=parse_connections(connections),
            pipeline=parse_int_list(pipeline, "--pipeline"), duration=duration, warmup=warmup, rounds=1,
            warmup_after=warmup_after, msize=msize, work=work, probes=False, flamegraph=True, pin=not no_pin,
            out_dir=str(out) if out else "", evidence_only=True, pythons=parse_pythons(python),
            framings=parse_framings(framing),
        ))
    _execute(cfg, as_json, quiet=quiet, verbose=verbose)


@app.command("report", cls=_PlainUsage)
def report_cmd(
    directory: Path = typer.Argument(..., metavar="DIR", hidden=True),  # in the docstring (see `run`)
    as_json: bool = typer.Option(False, "--json", help="Print the JSON summary on stdout."),
    out: Path | None = typer.Option(
        None, "--out", "-o", metavar="OTHER",
        help="Write the report (report.md, report.html, plots/, summary.json) into OTHER instead of DIR."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only the report's path."),
) -> None:
    """Rebuild report.md / report.html (and summary.json) from a results directory.

    DIR: a results directory written by `netprof run`; nothing is re-run."""
    if not directory.is_dir():
        raise InputError(f"{directory}: no such directory; give a results directory written by `netprof run`")
    if not os.path.lexists(directory / RESULTS_PARQUET):  # (a link there is refused by the reading itself)
        raise InputError(f"{directory} holds no {RESULTS_PARQUET}: is it a netprof results directory?")
    if out is not None:
        if (out / RESULTS_PARQUET).exists() and out.resolve() != directory.resolve():
            raise InputError(f"--out {out} holds another run's results: give a directory of its own for the report")
        ensure_out_dir(out)  # refuses an existing non-directory, /proc, and directories others may write
    else:  # in place: only where --out itself could go (whoever else may write there chooses what root overwrites)
        why = untrusted_reason(directory, uids=caller_uids())
        if why:
            raise InputError(f"{directory}: {why}, so netprof (root) does not write its report there; write it "
                             "elsewhere with --out OTHER")
    from pyarrow.lib import ArrowException  # deferred (as `report`): loaded once the input is known good

    from netprof.profiler.report import report  # deferred: pandas, jinja2 and the report's modules

    try:
        summary = report.finish(directory, console=None if as_json or quiet else out_console(), dest=out)
    except InputError:  # a link or another user's file in DIR: its own line says so
        raise
    except FileNotFoundError as e:
        raise InputError(str(e)) from None
    except (OSError, ValueError, ArrowException) as e:  # a corrupt or truncated results file
        raise InputError(f"{directory}: its results cannot be read ({type(e).__name__}: {e}); "
                         "the run that wrote it was cut off or the file was changed: re-run it") from None
    if as_json:
        print(json.dumps(summary, default=str))
    elif quiet:
        print(summary["artifacts"]["report_html"])


@app.command("compare", cls=_PlainUsage)
def compare_cmd(
    runs: list[Path] = typer.Argument(..., metavar="BASE NEW", hidden=True),  # in the docstring (see `run`)
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout, nothing else there."),
    out: Path | None = typer.Option(
        None, "--out", "-o", metavar="DIR",
        help="Also write compare.md, compare.html, compare.json (and differential flamegraphs) here."),
    fail_if: str = typer.Option(
        "", "--fail-if", metavar="RULES",
        help="Exit 1 on a significant regression beyond a threshold, e.g. slower:5%,p99:+10%,syscalls:+0.5 (also "
             "p50, cpu, ctx, jain; slower: at a set rate, the p99)."),
) -> None:
    """Did it get faster, and is that real? Matched cells of NEW against BASE: ratios with 95% intervals,
    Welch's t-test verdicts, and the syscall and CPU deltas that explain each change.

    BASE NEW [NEW...]: results directories of `netprof run` (or their summary.json)."""
    compare_inputs.check(runs, fail_if)  # light: refused input leaves before pandas loads
    from netprof.profiler.report import compare_report  # deferred: pandas and the comparison's statistics

    raise typer.Exit(compare_report.main([str(r) for r in runs], as_json=as_json, out=str(out) if out else None,
                                  fail_if=fail_if, console=out_console()))


@app.command("ab", cls=_PlainUsage)
def ab_cmd(
    variants: list[str] | None = typer.Argument(None, metavar="VARIANT", hidden=True),  # in the docstring (see `run`)
    cmd: list[str] | None = typer.Option(
        None, "--cmd", metavar="TEMPLATE",
        help="A variant that is your own server's command, {port} replaced by a free port (repeatable; after the "
             "built-in VARIANTs, in order); runs as the sudo caller unless --as-root."),
    name: list[str] | None = typer.Option(None, "--name", metavar="NAME",
                                          help="Label of the --cmd of the same position" + NAME_DEFAULT_HELP),
    aa: bool = typer.Option(False, "--aa", help="The one variant given against itself (two servers of it): the "
                                                "control, whose interval should hold 1."),
    python: str = typer.Option(
        "", "--python", metavar="SPEC[,SPEC...]",
        help="Interpreter of the built-in variants: one value = all of them; a comma list = one per variant in order "
             "(empty = netprof's own; a --cmd's place stays empty), e.g. --python 3.12,3.13."),
    env: list[str] | None = typer.Option(
        None, "--env", metavar="[X:]NAME=VALUE",
        help="Set a variable in the --cmd variants' environment (repeatable); X: (a variant's letter, A = the first) "
             "sets it for that variant only, e.g. --env B:PYTHONMALLOC=malloc."),
    io_uring: str = typer.Option(
        "on", "--io-uring", metavar="on|off[,...]",
        help="off: the variant's server starts with io_uring_setup failing (ENOSYS); one value = every variant, a "
             "comma list = one per variant; with one SERVER, on,off compares it with io_uring and without."),
    connections: int = connections_option(100, one=True),
    pipeline: int = pipeline_option(1, one=True),
    msize: int = msize_option(),
    framing: str = framing_option("How the built-in echo backends read (as in `run`; one value)."),
    work: str = work_option(),
    # Short cells (ab.default_window): the two of a pair fall in the same speed regime of the host more often
    # (its regimes last 0.3-3 s), which the canary adjustment cannot fully undo; 0.3 s halved the variance per
    # second of 1.0 s.
    window: float | None = typer.Option(
        None, "--window", metavar="SECONDS",
        help="Turns: seconds of turns per loader run (default 2, a whole number of 0.1 s turns). Cells: measured "
             "seconds per cell (default 0.3; with --rate long enough for 2,000 requests, so a p99 stands on 20)."),
    method: str = typer.Option(
        "", "--method", metavar="turns|cells",
        help="turns (the default in closed loop): one loader serves the variants in 0.1 s turns, A B, B A, ...; "
             "cells: paired cells, one variant at a time (the default with --rate, --fresh or ZeroMQ)."),
    warmup: float = warmup_option(0.1, "Seconds of load before each cell's window (the servers stay warm)."),
    precision: str = typer.Option("1%", "--precision", metavar="SHARE",
                                  help="Stop once the --metric ratio's 95% interval is within ± this (1% or 0.01)."),
    rate: str = rate_option(
        "Open-loop load at R requests/s (one value, as in `run`): both variants get the same schedule, so the "
        "stopping rule reads latency (--metric defaults to lat_us.p99). Default: closed loop.", one=True),
    arrivals: str = arrivals_option(),
    max_connections: int = max_connections_option(),
    zmq_client: str = zmq_client_option(),
    metric: str = typer.Option("", "--metric", metavar="NAME",
                               help="The figure the stopping rule reads: msgs_per_sec (the default), lat_us.p50, "
                                    "lat_us.p99 (the default with --rate), cpu_us_per_msg.user, cpu_us_per_msg.sys "
                                    "or cpu_us_per_msg_total."),
    max_time: float = typer.Option(300.0, "--max-time", metavar="SECONDS",
                                   help="Stop after this long whatever the interval (no pair starts that would end "
                                        "later)."),
    fresh: bool = typer.Option(False, "--fresh", help="Restart every server before each pair (cold processes)."),
    flamegraph: bool = typer.Option(False, "--flamegraph", help="After the pairs, sample each variant's server "
                                    "(as `run --flamegraph`) and draw the differential flamegraph of a change."),
    no_probes: bool = typer.Option(False, "--no-probes", help="No BPF: no syscalls per message."),
    backend_cpu: str = typer.Option("0", "--backend-cpu", metavar="CPUS",
                                    help="CPU(s) the servers (and the speed canary) are pinned to."),
    loader_cpus: str = typer.Option("", "--loader-cpus", metavar="CPUS",
                                    help="CPUs for the loader (default: all others)."),
    protocol: str = typer.Option("echo", "--protocol", metavar="echo|http|line", help="As in `run`."),
    request: str = typer.Option("GET /", "--request", metavar="'METHOD /path'", help="--protocol http: the request."),
    header: list[str] | None = typer.Option(None, "--header", metavar="'Name: value'",
                                            help="--protocol http: an extra header (repeatable)."),
    header_file: Path | None = typer.Option(None, "--header-file", metavar="FILE",
                                            help="--protocol http: extra headers from a file (as in `run`)."),
    body: str | None = typer.Option(None, "--body", metavar="TEXT", help="--protocol http: the request body."),
    body_file: Path | None = typer.Option(None, "--body-file", metavar="FILE",
                                          help="--protocol http: the request body, from a file."),
    line: str = typer.Option("PING", "--line", metavar="TEXT", help="--protocol line: the request line."),
    keep_secrets: bool = typer.Option(False, "--keep-secrets", help="As in `run`."),
    ready_regex: str = typer.Option("", "--ready-regex", metavar="REGEX", help="As in `run`, for every --cmd."),
    ready_timeout: float = typer.Option(20.0, "--ready-timeout", metavar="SECONDS", help="As in `run`."),
    as_root: bool = typer.Option(False, "--as-root", help="Run --cmd as root instead of the user who invoked sudo."),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                    help="Results directory (default runs/<timestamp>/)."),
    force: bool = typer.Option(False, "--force", help="Replace the run already in --out."),
    wait: bool = typer.Option(False, "--wait", help="If another netprof run is measuring, wait for it."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout, nothing else there."),
    fail_if: str = typer.Option("", "--fail-if", metavar="RULES",
                                help="Exit 1 on a significant regression beyond a threshold, as in `compare`, e.g. "
                                     "slower:2%,p99:+10%."),
) -> None:
    """Did my change make it faster? Variants alternate in pairs (A B, B A, ...) on warm servers, with a speed
    canary on the backend CPU, until the ratio's 95% interval is within ±--precision or --max-time ends.
    Prints compare's tables (base = the first variant) and writes ab.json, compare.md/html and the rows.

    VARIANT...: built-in backends (`netprof list`); --cmd variants follow them, in order. Letters name the
    variants in that order (A, B, ...). Two identical variants are labelled apart (selector, selector′)."""
    from netprof.profiler import ab  # deferred: the run layer, pandas and the comparison's pages

    headers, body = _http_request(header, header_file, body, body_file)
    rates = parse_rates(rate)
    template = RunConfig(  # duration: each variant's own (ab.plan) from --window or the method's default
        backends=[], connections=[connections], pipeline=[pipeline], duration=1.0, warmup=warmup, rounds=1,
        msize=msize, work=work, probes=not no_probes, backend_cpu=backend_cpu, loader_cpus=loader_cpus,
        out_dir=str(out) if out else "", force=force, wait=wait, framings=parse_framings(framing), protocol=protocol,
        request=request, headers=headers, body=body, line=line, keep_secrets=keep_secrets,
        extra_dims=rates, arrivals=arrivals, max_connections=max_connections, zmq_client=zmq_client)
    check_remote_work(template, "ab")
    plan = ab.plan(template, list(variants or []), list(cmd or []), cmd_names=list(name or []), python=python,
                   env_items=list(env or []), io_uring=io_uring, aa=aa, fresh=fresh, window=window,
                   precision=ab.parse_precision(precision), metric=metric, max_time=max_time, fail_if=fail_if,
                   wait=wait, ready_regex=ready_regex, ready_timeout=ready_timeout, as_root=as_root,
                   flamegraph=flamegraph, method=method)
    if why := ab.missing_capability(plan):
        fail(f"probes cannot attach: {why}; or pass --no-probes to measure without BPF")
    if flamegraph and (why := flame_missing()):
        fail(f"flamegraphs cannot be sampled: {why}; run without --flamegraph")
    _stop_on_signals()
    outcome = ab.execute(plan, sys.argv, out_console(stderr=True), out_dir=str(out) if out else "")
    doc = outcome.doc
    if doc is not None:
        if as_json:
            print(json.dumps(doc, default=str))
        else:
            ab.report(doc, out_console())
        for line_ in doc["fail_if"]["breaches"]:
            if as_json:
                err.print(f"FAIL {line_}", markup=False, highlight=False)
    where = escape(str(outcome.out_dir))
    if outcome.interrupted:
        err.print(f"interrupted: the pairs measured so far are in {where}")
        raise typer.Exit(130)
    if outcome.failed:
        fail(f"{outcome.failed} (the pairs measured before are in {outcome.out_dir})", 1)
    if doc is None:
        fail(f"no pair was measured within --max-time {max_time:g} s (every one lost: see {outcome.out_dir})", 1)
    if doc is not None and doc["fail_if"]["breaches"]:
        raise typer.Exit(1)


@app.command("knee", cls=_PlainUsage)
def knee_cmd(
    server: str | None = typer.Argument(None, metavar="[SERVER]", help="A built-in backend (`netprof list`)."),
    cmd: str | None = typer.Option(None, "--cmd", metavar="TEMPLATE",
                                   help="Your own server's command instead, {port} replaced by a free port."),
    name: str = typer.Option("", "--name", metavar="NAME", help="Label of the --cmd server" + NAME_DEFAULT_HELP),
    slo: str = typer.Option(..., "--slo", metavar="pNN<TIME",
                            help="The latency objective, from each request's intended time: p50, p90, p95, p99 or "
                                 "p999 below a time, e.g. 'p99<5ms' (quoted for the shell)."),
    connections: int = connections_option(10, one=True),
    pipeline: int = pipeline_option(1, one=True, help="Requests in flight per connection at most."),
    arrivals: str = arrivals_option("constant", "How the requests of each probed rate are spaced."),
    max_connections: int = max_connections_option(
        "Open-loop cells open connections as requests need them, up to N (default 1000; -c is the closed-loop "
        "ceiling's and opened first); -c's value keeps them to -c."),
    zmq_client: str = zmq_client_option(),
    steps: int = typer.Option(6, "--steps", metavar="N",
                              help="Open-loop probes after the closed-loop ceiling; each halves the interval the knee "
                                   "is in (6: to 1/64 of the ceiling)."),
    tries: int = typer.Option(3, "--tries", metavar="N",
                              help="Cells a rate may take to pass (a rate fails only when all N fail; the ceiling is "
                                   "the best of N): this host's slow speed regimes fail single cells."),
    window: float = typer.Option(2.0, "--window", metavar="SECONDS", help="Measured seconds per cell."),
    warmup: float = warmup_option(0.5, "Seconds of load before each window."),
    msize: int = msize_option("Message size in bytes (echo)."),
    work: str = work_option(),
    protocol: str = typer.Option("echo", "--protocol", metavar="echo|http|line", help="As in `run`."),
    request: str = typer.Option("GET /", "--request", metavar="'METHOD /path'", help="--protocol http: the request."),
    line: str = typer.Option("PING", "--line", metavar="TEXT", help="--protocol line: the request line."),
    python: str = typer.Option("", "--python", metavar="SPEC", help="Interpreter of a built-in SERVER."),
    no_probes: bool = typer.Option(False, "--no-probes", help="No BPF: no syscalls per message."),
    backend_cpu: str = typer.Option("0", "--backend-cpu", metavar="CPUS", help="CPU(s) the server is pinned to."),
    loader_cpus: str = typer.Option("", "--loader-cpus", metavar="CPUS",
                                    help="CPUs for the loader (default: all others)."),
    ready_regex: str = typer.Option("", "--ready-regex", metavar="REGEX", help="As in `run`, for --cmd."),
    as_root: bool = typer.Option(False, "--as-root", help="Run --cmd as root instead of the user who invoked sudo."),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                    help="Results directory (default runs/<timestamp>/)."),
    force: bool = typer.Option(False, "--force", help="Replace the run already in --out."),
    wait: bool = typer.Option(False, "--wait", help="If another netprof run is measuring, wait for it."),
    as_json: bool = typer.Option(False, "--json", help="Print knee.json on stdout, nothing else there."),
) -> None:
    """The highest request rate SERVER serves within --slo: a closed-loop cell for its ceiling, then open-loop
    cells (latency from each request's intended time) bisecting below it. Writes the cells' rows, knee.json
    and the report (latency against load, and why the curve bends)."""
    from netprof.profiler import knee_plan  # deferred, and light: the checks come before what measures a knee

    if bool(server) == bool(cmd):
        raise InputError("give one SERVER (a built-in backend) or one --cmd")
    own = _own_servers([cmd] if cmd else [], [name] if name else [], ready_regex, None, "", as_root,
                       servers.READY_TIMEOUT, [])
    cfg = validate(RunConfig(
        backends=[server] if server else [], own=own, connections=[connections], pipeline=[pipeline],
        duration=window, warmup=warmup, rounds=1, msize=msize, work=work, probes=not no_probes,
        backend_cpu=backend_cpu, loader_cpus=loader_cpus, out_dir=str(out) if out else "", force=force, wait=wait,
        pythons=parse_pythons(python), protocol=protocol, request=request, line=line, zmq_client=zmq_client))
    cfg.max_connections = max_connections  # the open-loop cells' (knee_plan.check checks it; validate: closed loop)
    check_remote_work(cfg, "knee")
    plan = knee_plan.KneePlan(cfg, cfg.backends[0], knee_plan.parse_slo(slo), steps=steps, arrivals=arrivals,
                              wait=wait, tries=tries)
    knee_plan.check(plan)
    from netprof.profiler import knee  # deferred past the checks: the run layer and the report's modules
    from netprof.profiler.model import knee_doc
    from netprof.profiler.report import report

    _stop_on_signals()
    outcome = knee.execute(plan, sys.argv, out_console(stderr=True), out_dir=str(out) if out else "")
    where = escape(str(outcome.out_dir))
    if outcome.interrupted:
        err.print(f"interrupted: the cells measured so far are in {where}")
        raise typer.Exit(130)
    if outcome.doc is not None:
        report.finish(outcome.out_dir, console=None)
        if as_json:
            print(json.dumps(outcome.doc, default=str))
        else:
            out_console().print(knee_doc.summary_line(outcome.doc), markup=False, highlight=False)
            out_console().print(f"report: {outcome.out_dir / 'report.html'}", markup=False, highlight=False)
    if outcome.failed:
        fail(f"{outcome.failed} (the cells measured before are in {outcome.out_dir})", 1)


@app.command("watch", cls=_PlainUsage)
def watch_cmd(
    pid: int | None = typer.Option(None, "--pid", metavar="PID", help="The server's pid (its children are followed)."),
    port: int | None = typer.Option(None, "--port", metavar="PORT", help="Or the TCP port it listens on."),
    cgroup: str | None = typer.Option(None, "--cgroup", metavar="PATH",
                                      help="Or its cgroup under /sys/fs/cgroup (a container, a systemd unit)."),
    duration: float | None = typer.Option(None, "--duration", "-d", metavar="SECONDS",
                                          help="Watch this long (default: until Ctrl-C or the process exits)."),
    interval: float = typer.Option(1.0, "--interval", metavar="SECONDS", help="Seconds per live window."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole watch's figures as JSON on stdout."),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                    help="Write watch.json and every window (windows.jsonl) there."),
    metrics_port: int | None = typer.Option(None, "--metrics-port", metavar="PORT",
                                            help="Serve Prometheus metrics on this port (/metrics)."),
    metrics_addr: str = typer.Option("127.0.0.1", "--metrics-addr", metavar="ADDR",
                                     help="Address of the metrics endpoint (0.0.0.0 for a scraper on another host)."),
    routes: int = typer.Option(64, "--routes", metavar="N",
                               help="Route slots, three of them (not HTTP), (other) and (unsampled): the routes "
                                    "told apart (later new ones count as (other)). 3: none told apart."),
    max_overhead: float | None = typer.Option(
        None, "--max-overhead", metavar="SHARE",
        help="Keep the probes' CPU under this share of the server's (default 0.1: a tenth): above it the whole set is "
             "attached for part of each interval only, and in the rest requests are only counted and timed, as the "
             "route (unsampled). 0: attached throughout."),
) -> None:
    """Why each request of a running server took its time, under traffic netprof did not send: requests/s,
    server time, the breakdown's parts and syscalls per request, per route for HTTP (docs/watch.md). Attaches to
    the process tree without restarting it or sending it anything; detaches on exit."""
    from netprof.profiler.watch import target as watch_target  # deferred, and light (see below)
    from netprof.profiler.watch.config import WatchConfig

    cap = {} if max_overhead is None else {"max_overhead": max_overhead}  # else the config's default
    cfg = WatchConfig(pid=pid, port=port, cgroup=cgroup, duration=duration, interval=interval, as_json=as_json,
                      out=out, metrics_port=metrics_port, metrics_addr=metrics_addr, routes=routes, **cap)
    target = watch_target.resolve(cfg.pid, cfg.port, cfg.cgroup)
    from netprof.profiler.watch import command  # deferred past the checks above: pandas and the probes' modules

    doc = command.execute(cfg, target, out_console(stderr=True))
    if as_json:
        print(json.dumps(doc))
    elif doc["ended_by"] == "process exited":
        err.print(f"{doc['target']['label']} exited: detached", markup=False, highlight=False)


@app.command(hidden=True)
def agent() -> None:
    """netprof's far side for --loader-hosts: JSON lines on stdin/stdout (docs/agent-protocol.md). Started by
    the controller over ssh; not for people."""
    from netprof.profiler.run.link import agent as agent_mod  # deferred: only the far side needs it

    raise typer.Exit(agent_mod.main())


# Options another command has: the command a user who gave them here wants.
WRONG_COMMAND_HINTS = {("flamegraph", o): "your own server's flamegraphs: netprof run --cmd TEMPLATE --flamegraph "
                       "(or --attach PID --flamegraph)" for o in ("--cmd", "--attach", "--name")}


def _usage_error(e: click_errors.UsageError) -> str:
    """click's usage error (an unknown option, a missing argument, a bad value) as one line naming the fix, where
    click prints the usage, a hint and the error on four."""
    commands = getattr(typer.main.get_command(app), "commands", {})
    if e.ctx is not None:
        path, command = e.ctx.command_path, e.ctx.info_name or ""
    else:  # an option's value missing at the end (`run -c`) fails before the command's context exists
        command = next((a for a in sys.argv[1:2] if a in commands), "")
        path = f"netprof {command}".rstrip()
    what, option = e.format_message().rstrip("."), getattr(e, "option_name", "")
    if hint := WRONG_COMMAND_HINTS.get((command, option)):
        return f"{path} has no {option}: {hint}"
    # an option another command takes (`run --slo`): name that command
    others = [n for n, c in commands.items() if n != command and any(option in p.opts for p in c.params)]
    if isinstance(e, click_errors.NoSuchOption) and others:
        names = others[0] if len(others) == 1 else f"{', '.join(others[:-1])} and {others[-1]}"
        return f"{path} has no {option}: netprof {names} take{'s' * (len(others) == 1)} it"
    return f"{what}; '{path} -h' lists what it takes"


def _app() -> int:
    """The CLI, its exit code returned; click's usage errors as netprof's one line (exit 2)."""
    try:
        rv = app(standalone_mode=False)
    except click_errors.NoArgsIsHelpError as e:  # `netprof` alone: the help, as click shows it
        e.show()
        return e.exit_code
    except click_errors.UsageError as e:
        say_error(_usage_error(e))
        return EXIT_BAD_INPUT
    except typer.Abort:  # Ctrl-C outside a command's own handling
        return EXIT_INTERRUPTED
    except click_errors.ClickException as e:
        e.show()
        return e.exit_code
    # typer.Exit(code) comes back as its code; a command that returns comes back as what it returned (None)
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def main() -> None:
    """The one handler: netprof's own errors are one line and their exit code, never a traceback."""
    try:
        rootenv.setup()  # first: nothing may find files through the caller's HOME or TMPDIR
        code = _app()
    except BrokenPipeError:  # the reader went away (`netprof list | head -1`): as click leaves it, quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except NetprofError as e:
        say_error(str(e))
        sys.exit(e.exit_code)
    except Exception as e:  # a bug: still one line, and the exit code that says so
        say_error(f"internal error: {type(e).__name__}: {e}")
        sys.exit(EXIT_INTERNAL)
    else:
        sys.exit(code)
    finally:
        # The process ends next: its last garbage collections over pandas' and BCC's objects are ~0.1 s of
        # a short run's exit and free nothing the kernel does not. Exit handlers and refcounted clean-ups
        # (temp directories, open files) still run.
        gc.freeze()


if __name__ == "__main__":
    main()
