"""What the bench scripts share: the commit a measurement was made at, and raw data written once.
(Run as files from this folder, like results_md: `import lib`.)"""

from __future__ import annotations

import json
import subprocess
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
