"""One-off: cut profiler/ into the folders of its layers (issue 53) and rewrite every reference to a moved
module, across the repo. Run once from the repo root on a clean tree: `python3 scripts/move_layers.py`.
Kept as the record of the cut; it is not idempotent (`report` names both a module and its new package).

What it rewrites, in tracked text files:
- `from netprof.profiler import a, b` -> one `from netprof.profiler.<pkg> import ...` per new package;
- dotted names anywhere (`import netprof.profiler.x`, `-m netprof.profiler.x`, monkeypatch targets,
  mypy.ini sections): `netprof.profiler.x` -> `netprof.profiler.<pkg>.x`, and `profiler.x` in prose;
- file paths: `profiler/x.py`, `profiler/rules/`, `profiler/templates/`, `profiler/interp-requirements.txt`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LAYERS = {
    "core": "errors atomic paths procs runlock units rootenv redact cache canary remote_work symbols safetext",
    "model": "schema results stats paired hist",
    "run": "plan runner cell turns warm loader_client servers interpreters meta reap evidence doctor",
    "run/link": "netns sshlink agent loaderset",
    "analysis": "compare rules/",
    "report": "report plots plotset mpl tables compare_report ab_plot sockwait_report breakdown_report templates/",
}
FILES = {"run": ["interp-requirements.txt"]}  # data files that move with the module that reads them
LINE = 120  # ruff.toml's line-length

# old name (module or folder, relative to profiler/) -> new dotted package it lives in ("run.link")
WHERE: dict[str, str] = {}
for pkg, names in LAYERS.items():
    for name in names.split():
        WHERE[name.rstrip("/")] = pkg.replace("/", ".")


def moves() -> list[tuple[str, str]]:
    out = []
    for pkg, names in LAYERS.items():
        for name in names.split():
            src = f"profiler/{name.rstrip('/')}" + ("" if name.endswith("/") else ".py")
            out.append((src, f"profiler/{pkg}/{Path(src).name}"))
        out += [(f"profiler/{f}", f"profiler/{pkg}/{f}") for f in FILES.get(pkg, [])]
    return out


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def move_files() -> None:
    for pkg in LAYERS:
        init = Path("profiler", pkg, "__init__.py")
        init.parent.mkdir(parents=True, exist_ok=True)
        if not init.exists():
            init.write_text("")  # empty on purpose: importing a layer must not import its modules (start-up)
            git("add", str(init))
    for src, dst in moves():
        if Path(src).exists():
            git("mv", src, dst)


def _dotted(m: re.Match) -> str:
    parts = m.group(2).split(".")
    if parts[0] in WHERE:
        parts.insert(0, WHERE[parts[0]])
    return m.group(1) + ".".join(parts)


def _path(m: re.Match) -> str:
    name = m.group(2)
    stem = name[:-3] if name.endswith(".py") else name
    pkg = WHERE.get(stem) or next((p for p, fs in FILES.items() if name in fs), None)
    return f"{m.group(1)}profiler/{pkg.replace('.', '/')}/{name}" if pkg else m.group(0)


def _split_from(m: re.Match) -> str:
    indent, names, comment = m.group(1), m.group(2), (m.group(3) or "").strip()
    names = names.strip().strip("()")
    body_comments = re.findall(r"#[^\n]*", names)
    names = re.sub(r"#[^\n]*", "", names)
    groups: dict[str, list[str]] = {}
    for item in (n.strip() for n in names.replace("\n", " ").split(",")):
        if item:
            pkg = WHERE.get(item.split()[0])
            groups.setdefault(f"netprof.profiler.{pkg}" if pkg else "netprof.profiler", []).append(item)
    comment = " ".join([comment, *body_comments]).strip()
    lines = []
    for i, (mod, items) in enumerate(sorted(groups.items())):
        tail = f"  {comment}" if comment and i == 0 else ""
        one = f"{indent}from {mod} import {', '.join(items)}{tail}"
        if len(one) <= LINE:
            lines.append(one)
        else:
            lines.append(f"{indent}from {mod} import ({tail}\n"
                         + "".join(f"{indent}    {x},\n" for x in items) + f"{indent})")
    return "\n".join(lines)


MOVED = "|".join(sorted(map(re.escape, WHERE), key=len, reverse=True))
FROM = re.compile(r"^([ \t]*)from netprof\.profiler import (\([^)]*\)|[^\n#]*?)([ \t]*#[^\n]*)?$", re.M)
DOTTED = re.compile(rf"(netprof\.profiler\.)((?:{MOVED})\b(?!-)[\w.]*)")
PROSE = re.compile(rf"((?<![\w./])profiler\.)((?:{MOVED})\b(?![-/])(?!\.py)[\w.]*)")
PATH = re.compile(rf"((?<![\w.-]))profiler/((?:{MOVED})(?:\.py)?|interp-requirements\.txt)(?![\w-])")


def rewrite(text: str) -> str:
    text = DOTTED.sub(_dotted, text)
    text = PROSE.sub(_dotted, text)
    text = PATH.sub(_path, text)
    return FROM.sub(_split_from, text)  # last: what it writes names the new packages


def main() -> None:
    move_files()
    me = Path(__file__).resolve()
    changed = 0
    for name in git("ls-files").splitlines():
        path = Path(name)
        if path.resolve() == me or not path.is_file() or name.startswith("bench/reports/"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"{len(moves())} moves, {changed} files rewritten", file=sys.stderr)


if __name__ == "__main__":
    main()
