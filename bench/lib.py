"""What the bench scripts share: the commit a measurement was made at, and raw data written once.
(Run as files from this folder, like results_md: `import lib`.)"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """HEAD's short hash, '+dirty' when tracked files differ from it; '?' outside git."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True, check=True).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--porcelain", "-uno") else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def save_raw(path: Path, doc: dict, indent: int | None = 1) -> Path:
    """Write a measurement's raw data; never over an earlier one: when `path` exists (a second run of the
    day), NAME-2.json, NAME-3.json, … (minutes of measuring were once lost to the name being taken)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 100):
        candidate = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            with open(candidate, "x") as f:
                json.dump(doc, f, indent=indent, separators=None if indent else (",", ":"))
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"{path} and 98 more names are taken")


def cli(doc: str | None, rounds: int) -> argparse.ArgumentParser:
    """The options every measuring script shares: -r/--rounds, --from RAW (the table again from committed raw
    data, nothing measured) and --write (the section into RESULTS.md). The script adds its own."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    ap.add_argument("-r", "--rounds", type=int, default=rounds)
    ap.add_argument("--from", dest="source", type=Path, help="re-make the table from this raw data file")
    ap.add_argument("--write", action="store_true", help="write the section into bench/RESULTS.md")
    return ap


def earlier(args: argparse.Namespace) -> dict | None:
    """The raw data --from names, or None: measure."""
    return json.loads(args.source.read_text()) if args.source else None


def keep(benchmark: str, data: Path, suffix: str = "", **fields) -> dict:
    """A measurement's raw document (what, when, at which commit, and `fields`), saved in `data` under today's
    date (+ `suffix`) by save_raw; where it went is printed on stderr."""
    doc = {"benchmark": benchmark, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
           "commit": commit(), **fields}
    path = save_raw(data / f"{_dt.date.today().isoformat()}{suffix}.json", doc)
    print(f"raw data: {path}", file=sys.stderr)
    return doc


# Build against build (--build NAME=COMMAND: anything that runs as `netprof`, another clone's .venv/bin/netprof):
# every load on every build in each round, the order rotated round by round so that a speed regime of the host
# falls on each alike (spread_pool.py, sockwait_edges.py).

def add_build_arguments(ap: argparse.ArgumentParser, duration: float) -> None:
    ap.add_argument("--build", action="append", default=[], metavar="NAME=COMMAND")
    ap.add_argument("-d", "--duration", type=float, default=duration)


def measure_builds(benchmark: str, data: Path, args: argparse.Namespace, loads, measure) -> dict:
    """`measure(command, load, duration)`'s row figures for each load on each build (this checkout's netprof
    without --build) in `args.rounds` rotated rounds, kept as the benchmark's raw data (keep)."""
    import rounds  # bench/ is sys.path[0]

    builds = dict(b.split("=", 1) for b in args.build) or {"this": str(ROOT / ".venv" / "bin" / "netprof")}
    pairs = [(b, load) for load in loads for b in builds]
    records = rounds.rotated_records(
        pairs, args.rounds, lambda p: [{"build": p[0], "load": p[1], **measure(builds[p[0]], p[1], args.duration)}])
    return keep(benchmark, data, builds=builds, rounds=args.rounds, duration=args.duration, records=records)


def builds_command(script: str, doc: dict) -> str:
    """How a build-against-build measurement was run, for its section."""
    return (f"`.venv/bin/python bench/{script} " + " ".join(f"--build {k}={v}" for k, v in doc["builds"].items())
            + f" -r {doc['rounds']}`")
