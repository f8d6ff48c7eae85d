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
