"""What a run ran on: enough to tell whether two results directories are comparable."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from importlib import metadata

import netprof
from netprof.profiler.core import redact
from netprof.profiler.model import schema


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_load() -> dict:
    """How busy the machine is now: load averages and the CPU time counters of /proc/stat (steal is
    time a hypervisor gave this VM's CPUs to someone else). Taken before and after a run, the
    difference says whether the run shared the machine (compare warns when the runs differ)."""
    out: dict = {"time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    try:
        out["loadavg"] = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        pass
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        hz = os.sysconf("SC_CLK_TCK")
        ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
        out["cpu_total_s"] = sum(ticks) / hz
        out["steal_s"] = ticks[7] / hz
        out["idle_s"] = (ticks[3] + ticks[4]) / hz
    except (OSError, ValueError, IndexError):
        pass
    return out


def cell_load(before: dict, after: dict) -> dict:
    """The machine over one cell, from `host_load()` before and after it: the 1-minute load average
    at both ends, the share of CPU time stolen by the hypervisor, and how many CPUs were busy on
    average (every process: backend, loader, netprof and whatever else ran). With the backend's and
    the loader's own CPU in the row, `anomalies.machine_busy` tells a slow round that the machine
    caused from one the backend did."""
    out: dict = {"loadavg_before": (before.get("loadavg") or [None])[0],
                 "loadavg_after": (after.get("loadavg") or [None])[0]}
    try:
        total = after["cpu_total_s"] - before["cpu_total_s"]
        steal = after["steal_s"] - before["steal_s"]
        idle = after["idle_s"] - before["idle_s"]
    except (KeyError, TypeError):
        return out
    if total > 0:
        cpus = os.cpu_count() or 1
        out["steal_frac"] = round(max(0.0, steal) / total, 4)
        out["busy_cpus"] = round(max(0.0, total - idle - steal) / total * cpus, 3)
        out["seconds"] = round(total / cpus, 2)
    return out


def add_cell_load(meta: dict, row: dict, before: dict) -> None:
    """meta["host_per_cell"] gains the machine over the cell whose row is `row`, from `host_load()` taken before
    it (anomalies.machine_busy reads it): a run's cells and a knee's alike."""
    meta["host_per_cell"].append({"cell": schema.cell_slug(row), "round": row.get("round"),
                                  **cell_load(before, host_load())})


def collect(argv: list[str], config: dict) -> dict:
    """meta.json: what ran and on what. Header credentials and the body are redacted (redact.py) in the
    config and the command line unless the run was given --keep-secrets."""
    if not config.get("keep_secrets"):
        argv, config = redact.argv(argv), redact.config(config)
    return {
        "netprof_version": netprof.__version__,
        "netprof_source": netprof.__source__,  # the commit it was built from (two builds of one version differ)
        "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(argv),
        "python": {
            "version": platform.python_version(),
            "implementation": sys.implementation.name,
            "executable": sys.executable,
            "build": " ".join(platform.python_build()),
            "compiler": platform.python_compiler(),
        },
        "packages": {name: _version(name) for name in ("uvloop", "gevent", "pandas", "numpy")},
        "kernel": platform.release(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "pinning": {
            "enabled": config.get("pin", True),
            "backend_cpu": config.get("backend_cpu"),
            "loader_cpus": config.get("loader_cpus_effective"),
        },
        "config": config,
        "host_before": host_load(),  # the runner adds "host_after" when the run ends
        "host_per_cell": [],  # the runner adds one `cell_load` per cell × round, with its "cell" and "round"
    }
