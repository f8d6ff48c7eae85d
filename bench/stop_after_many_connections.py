"""A thread per connection, 12,000 connections, then SIGTERM: how long each such built-in backend takes to stop.

12,000 handler threads that all see their connection close at once contend for the GIL for tens of seconds; a
SIGTERM then must not wait for the main thread's turn (a cell SIGKILLs a backend that has not exited 5 s after it,
and fails the cell): the first thread that runs ends the process, exit 0. tests/test_backends.py checks this on
one backend of the kind (`thread`, issue 49: the suite keeps one representative of each kind of server); this
script checks it on every backend that starts a thread per connection (the registry's `threads` family, less
those whose thread count does not grow with the connections), each round in a rotated order.

Per backend and round: the loader's connections (all must connect), the backend's threads when told to stop (more
than 1,000: still winding down), the seconds from SIGTERM to its exit and its exit code (0 within 5 s passes).

    .venv/bin/python bench/stop_after_many_connections.py -r 3 [--write]
    .venv/bin/python bench/stop_after_many_connections.py --from bench/data/stop_many/FILE.json [--write]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import lib
import psutil
import results_md
import rounds

PY = lib.ROOT / ".venv" / "bin" / "python"
LOADER = lib.ROOT / ".venv" / "bin" / "netprof-loader"
DATA = lib.ROOT / "bench" / "data" / "stop_many"
HEADING = "A thread per connection: stopping after 12,000 connections (bench/stop_after_many_connections.py)"
BACKENDS = ("thread", "socketserver")  # a thread per connection (prethread and select_prethread: a fixed pool)
CONNECTIONS = 12_000
LIMIT_S = 5.0


def one(name: str) -> dict:
    backend = subprocess.Popen([str(PY), "-m", "netprof.backends", name, "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert backend.stdout is not None
        line = backend.stdout.readline().split()
        if line[:1] != ["ready"]:
            raise SystemExit(f"{name} did not start: {line} {backend.stderr.read() if backend.stderr else ''}")
        port = int(line[2])
        out = subprocess.run([str(LOADER), "--target", f"127.0.0.1:{port}", "-c", str(CONNECTIONS), "-d", "1",
                              "--warmup", "0.2", "--json"], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"the loader failed against {name}: {out.stderr.strip()[-500:]}")
        connected = json.loads(out.stdout)["connected"]
        threads = len(psutil.Process(backend.pid).threads())
        t0 = time.monotonic()
        backend.send_signal(signal.SIGTERM)
        try:
            code: int | None = backend.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - t0
        return {"backend": name, "connected": connected, "threads_at_stop": threads, "stop_s": round(took, 3),
                "exit": code, "ok": connected == CONNECTIONS and threads > 1000 and code == 0 and took < LIMIT_S}
    finally:
        if backend.poll() is None:
            os.killpg(backend.pid, signal.SIGKILL)
            backend.wait(timeout=30)


def table(doc: dict) -> str:
    recs = doc["records"]
    lines = ["| backend | rounds passed | connected | threads at SIGTERM | SIGTERM to exit, s (each round) | exits |",
             "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["backend"] for r in recs):
        rs = [r for r in recs if r["backend"] == name]
        stops, exits = ", ".join(f"{r['stop_s']:.3f}" for r in rs), ", ".join(str(r["exit"]) for r in rs)
        lines.append(f"| {name} | {sum(r['ok'] for r in rs)}/{len(rs)} | {min(r['connected'] for r in rs):,} | "
                     f"{min(r['threads_at_stop'] for r in rs):,}–{max(r['threads_at_stop'] for r in rs):,} | "
                     f"{stops} | {exits} |")
    lines += ["", f"Passing: all {CONNECTIONS:,} connected, more than 1,000 threads alive when told to stop, exit 0 "
              f"within {LIMIT_S:g} s of SIGTERM."]
    return "\n".join(lines)


def main() -> int:
    args = lib.cli(__doc__, rounds=3).parse_args()
    doc = lib.earlier(args)
    if doc is None:
        records = rounds.rotated_records(list(BACKENDS), args.rounds, lambda name: [one(name)])
        doc = lib.keep("stop_after_many_connections", DATA, rounds=args.rounds, records=records)
    intro = (f"Measured by `.venv/bin/python bench/stop_after_many_connections.py -r {doc['rounds']}`; "
             f"table by {results_md.command()}; commit {doc['commit']}, {doc['date']}: each backend loaded by "
             f"netprof-loader with {CONNECTIONS:,} connections for 1 s (0.2 s warm-up), then SIGTERM. "
             "tests/test_backends.py runs the same check on `thread` alone.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0 if all(r["ok"] for r in doc["records"]) else 1


if __name__ == "__main__":
    sys.exit(main())
