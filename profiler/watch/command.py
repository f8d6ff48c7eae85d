"""`netprof watch` as a command: one session (session.py) on a resolved target, its live view, the metrics
endpoint, and `--out`'s files (windows.jsonl, watch.json, and the report a run writes)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import IO, Any

from rich.console import Console

from netprof.profiler.core.atomic import ensure_out_dir, open_dir, write_text
from netprof.profiler.core.errors import InputError
from netprof.profiler.report import routes

from . import metrics, session
from .config import WatchConfig
from .live import View
from .target import Target

WINDOWS_FILE = "windows.jsonl"
SUMMARY_FILE = "watch.json"



def _windows_file(out: Path) -> IO[str]:
    """windows.jsonl, created new in --out (never through a link, never over another watch's)."""
    dfd = open_dir(out)
    try:
        fd = os.open(WINDOWS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dfd)
    except FileExistsError:
        raise InputError(f"--out {out}: holds a watch already ({WINDOWS_FILE}); give a new directory") from None
    finally:
        os.close(dfd)
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)


def execute(cfg: WatchConfig, target: Target, err: Console) -> dict[str, Any]:
    """Watch `target` (target.resolve) until the config's end; returns the whole watch's figures (with its target),
    after writing --out's files. The live view goes to `err` (stdout is --json's)."""
    out = ensure_out_dir(cfg.out) if cfg.out is not None else None
    board = metrics.Board() if cfg.metrics_port is not None else None
    server = metrics.serve(board, cfg.metrics_port, cfg.metrics_addr) if board is not None and \
        cfg.metrics_port is not None else None
    with contextlib.ExitStack() as stack:
        if server is not None:
            stack.callback(metrics.stop, server)
        windows = stack.enter_context(_windows_file(out)) if out is not None else None
        view = stack.enter_context(View(err, "watch"))

        def on_window(f: dict[str, Any]) -> None:
            view.window(f)
            if windows is not None:
                windows.write(json.dumps(f) + "\n")

        def on_attached(t) -> None:
            view.title = t.label
            where = f", metrics on http://{cfg.metrics_addr}:{cfg.metrics_port}/metrics" if server else ""
            err.print(f"watching {t.label}{where}", markup=False, highlight=False, soft_wrap=True)
            if t.note:
                err.print(f"note: {t.note}", markup=False, highlight=False, soft_wrap=True)

        outcome = session.run(cfg, target, on_window, board, on_attached)
    said = routes.sentence(outcome.figures["routes"])  # the live view's routes are a window's: this, the watch's
    if said:
        err.print(f"{outcome.target.label}, over the whole watch: {said[0].lower()}{said[1:]}", markup=False,
                  highlight=False, soft_wrap=True)
    doc = {**outcome.figures, "target": {"pid": outcome.target.pid, "label": outcome.target.label,
                                         "also": list(outcome.target.also)},
           "ended_by": outcome.ended_by}
    if out is not None:
        write_text(out / SUMMARY_FILE, json.dumps(doc, indent=1) + "\n")
        if outcome.figures["requests"]:
            _report(out, cfg, outcome)
        else:
            err.print(f"{out}: no request was answered while watching: {SUMMARY_FILE} only, no report",
                      markup=False, highlight=False, soft_wrap=True)
    return doc


def _report(out: Path, cfg: WatchConfig, outcome: session.Outcome) -> None:
    """The watch as a run's results directory and the report a run writes (rundir.py), findings included."""
    from netprof.profiler.report import report  # deferred: pandas, jinja2, matplotlib

    from . import rundir

    rundir.write(out, cfg, outcome, sys.argv)
    report.finish(out)
