"""bench/RESULTS.md: replace (or append) one benchmark's `## heading` section. Shared by the bench
scripts, which run as files from this folder (so `import results_md` finds it)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = "# Benchmark results\n\nMeasured figures; each section names the script and command that produced it.\n"


def write_section(heading: str, body: str) -> None:
    """Replace the section headed `## heading` (up to the next `## `) with `body`, or append it."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    section = f"## {heading}\n\n{body.strip()}\n"
    start = text.find(f"## {heading}\n")
    if start >= 0:
        # up to the next section or topic heading (RESULTS.md groups sections under `# topic`)
        ends = [e for e in (text.find("\n## ", start + 1), text.find("\n# ", start + 1)) if e >= 0]
        end = min(ends) if ends else -1
        text = text[:start] + section + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)
    print(f"wrote {RESULTS}", file=sys.stderr)


def command() -> str:
    """'`.venv/bin/python bench/x.py ARGS`': how this benchmark was run, for its section."""
    args = " ".join(shlex.quote(a) for a in [f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    return f"`.venv/bin/python {args}`"


def publish(heading: str, intro: str, body: str, write: bool) -> None:
    """Print the section; with --write also put it into RESULTS.md."""
    print(f"## {heading}\n\n{intro}\n\n{body}\n")
    if write:
        write_section(heading, f"{intro}\n\n{body}")
