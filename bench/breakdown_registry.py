"""The request breakdown over every built-in backend (issue 35: "parts add up within 5% on every built-in
backend at 100 connections"), run again so that a backend's ratio is seen with its spread.

Each repeat is one `netprof run BACKENDS -c 100 --breakdown --probe-share 1` per protocol (echo, HTTP,
ZeroMQ cannot share a run). Per backend and repeat it keeps the sum of the parts' means, the loader's mean
round trip, Little's law (100 in flight ÷ msgs/s), the requests followed and skipped, the parts and the
breakdown's measured cost. The ZeroMQ group runs once per `--zmq-client` asked (libzmq, the default, and/or
native: the loader's own ZMTP client), interleaved within each repeat; `--groups` keeps only some groups.

    sudo .venv/bin/python bench/breakdown_registry.py --repeats 3 --raw bench/data/breakdown/$(date +%F).json
    sudo .venv/bin/python bench/breakdown_registry.py --groups echo-zmq --zmq-client libzmq,native --raw ...
    .venv/bin/python bench/breakdown_registry.py --from bench/data/breakdown/2026-11-26.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lib

ROOT = lib.ROOT
NETPROF = ROOT / ".venv" / "bin" / "netprof"
PY = ROOT / ".venv" / "bin" / "python"


def groups() -> dict[str, list[str]]:
    """Installed built-in backends by (protocol, transport), from the registry itself."""
    code = ("import json; from netprof.backends import registry as r; "
            "print(json.dumps([(n, r.get(n).protocol, r.get(n).transport) for n in r.names() "
            "if r.uninstalled_requirement(r.get(n)) is None]))")
    out: dict[str, list[str]] = {}
    for name, proto, transport in json.loads(subprocess.check_output([str(PY), "-I", "-c", code], text=True)):
        out.setdefault(f"{proto}-{transport}", []).append(name)
    return out


def one_run(backends: list[str], duration: float, work: Path, zmq_client: str) -> tuple[list[dict], dict]:
    out = Path(tempfile.mkdtemp(dir=work))
    out.rmdir()
    client = ["--zmq-client", zmq_client] if zmq_client != "libzmq" else []
    res = subprocess.run([str(NETPROF), "run", *backends, "-c", "100", "-d", str(duration), "-r", "1", "--warmup",
                          "0.3", "--probe-share", "1", "--breakdown", "--json", "-o", str(out), *client],
                         capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        sys.exit(f"netprof run failed: {res.stderr.strip().splitlines()[-1:]}")
    rows = []
    for r in json.loads(res.stdout)["runs"]:
        b = r["breakdown"]
        rows.append({"backend": r["backend"], "zmq_client": zmq_client, "status": r["status"],
                     "msgs_per_sec": r["msgs_per_sec"],
                     "messages": b.get("messages"), "requests": b.get("requests"), "skipped": b.get("skipped"),
                     "rtt_mean_us": b.get("rtt_mean_us"), "parts_mean_us": b.get("parts_mean_us"),
                     "little_us": 100 / r["msgs_per_sec"] * 1e6 if r.get("msgs_per_sec") else None,
                     "mean_us": b.get("mean_us"), "tail_us": b.get("tail_us"), "cpu_us": b.get("cpu_us"),
                     "proc_cpu_us": b.get("proc_cpu_us")})
    meta = json.loads((out / "meta.json").read_text())
    return rows, meta.get("breakdown_cost_per_message") or {}


def measure(repeats: int, duration: float, only: list[str], zmq_clients: list[str]) -> dict:
    runs, costs = [], []
    chosen = {g: b for g, b in groups().items() if not only or g in only}
    with tempfile.TemporaryDirectory() as work:
        for rep in range(repeats):
            for group, backends in chosen.items():
                for client in zmq_clients if group.endswith("-zmq") else ["libzmq"]:
                    rows, cost = one_run(backends, duration, Path(work), client)
                    runs += [{"repeat": rep, "group": group, **r} for r in rows]
                    costs.append(cost)
                    print(f"repeat {rep + 1}/{repeats} {group} ({client}): {len(rows)} backends", flush=True)
    return {"when": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "commit": lib.commit(),
            "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
            "settings": {"connections": 100, "duration_s": duration, "repeats": repeats, "probe_share": 1,
                         "groups": list(chosen), "zmq_clients": zmq_clients},
            "rows": runs, "costs": costs}


def summary(doc: dict) -> str:
    by: dict[str, list[dict]] = {}
    for r in doc["rows"]:  # a ZeroMQ backend once per client when there were several (raw data before: libzmq)
        name = r["backend"] + (f" ({r['zmq_client']})" if len(doc["settings"].get("zmq_clients", [])) > 1
                               and r["group"].endswith("-zmq") else "")
        by.setdefault(name, []).append(r)
    lines = [f"breakdown over the registry, {doc['when']}, commit {doc['commit']}: -c 100, "
             f"{doc['settings']['duration_s']} s windows, {doc['settings']['repeats']} repeats",
             "| backend | parts ÷ loader's round trip, per repeat | parts ÷ Little's law | followed | skipped |",
             "|---|---|---|---|---|"]
    def ratios(rows: list[dict], key: str) -> str:
        got = [r["parts_mean_us"] / r[key] for r in rows if r.get("parts_mean_us") and r.get(key)]
        return ", ".join(f"{x:.3f}" for x in got) or "–"

    for name, rows in by.items():
        followed = statistics.mean((r["requests"] or 0) / (r["messages"] or 1) for r in rows)
        skipped: dict[str, int] = {}
        for r in rows:
            for k, v in (r["skipped"] or {}).items():
                skipped[k] = skipped.get(k, 0) + v
        skips = ", ".join(f"{k} {v}" for k, v in skipped.items() if v) or "–"
        lines.append(f"| {name} | {ratios(rows, 'rtt_mean_us')} | {ratios(rows, 'little_us')} | "
                     f"{100 * followed:.0f}% | {skips} |")
    watched = [c["added_watched_ns"] for c in doc["costs"] if c.get("added_watched_ns") is not None]
    by_cost = [c["added_bystander_ns"] for c in doc["costs"] if c.get("added_bystander_ns") is not None]
    if watched:
        lines.append(f"cost per loopback echo, both ends watched: median {statistics.median(watched):+,.0f} ns "
                     f"({min(watched):+,.0f}..{max(watched):+,.0f}); bystander median "
                     f"{statistics.median(by_cost):+,.0f} ns ({len(watched)} measurements)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("-d", "--duration", type=float, default=1.0)
    p.add_argument("--groups", default="", help="only these groups (comma-separated, e.g. echo-zmq)")
    p.add_argument("--zmq-client", default="libzmq", help="libzmq, native or both (comma-separated): the ZeroMQ "
                   "group runs once per client")
    p.add_argument("--raw", type=Path, help="also write the raw rows here (never over an earlier file)")
    p.add_argument("--from", dest="from_", type=Path, help="print the summary of earlier raw data")
    a = p.parse_args()
    if a.from_:
        print(summary(json.loads(a.from_.read_text())))
        return
    doc = measure(a.repeats, a.duration, [g for g in a.groups.split(",") if g], a.zmq_client.split(","))
    if a.raw:
        lib.save_raw(a.raw, doc)
    print(summary(doc))


if __name__ == "__main__":
    main()
