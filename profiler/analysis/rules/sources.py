"""Source lines quoted as evidence: where in the stdlib (of the interpreter running the report) or in
an installed package the behaviour a rule explains is written."""

from __future__ import annotations

import functools
import inspect
import platform
from pathlib import Path


@functools.cache
def source_line(obj_path: str, needle: str) -> str | None:
    """'asyncio/selector_events.py:368' for the first line containing `needle` in `obj_path`
    ('module:Class.attr'), from this interpreter's stdlib; None when it is not there."""
    import importlib

    mod_name, _, attr = obj_path.partition(":")
    try:
        obj = importlib.import_module(mod_name)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        lines, start = inspect.getsourcelines(obj)
    except (ImportError, AttributeError, OSError, TypeError):
        return None
    start = max(start, 1)
    for i, line in enumerate(lines):
        if needle in line:
            return f"{mod_name.replace('.', '/')}.py:{start + i} (CPython {platform.python_version()}): {line.strip()}"
    return None


@functools.cache
def package_line(package: str, file: str, needle: str, after: str = "") -> str | None:
    """'uvloop/loop.pyx:805 (uvloop 0.23.0): poll._close()': the first line containing `needle` (past
    the first line containing `after`) in a file an installed package ships (uvloop ships its .pyx);
    None when it is not there."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
        roots = list(spec.submodule_search_locations or []) if spec else []
        lines = (Path(roots[0]) / file).read_text().splitlines() if roots else []
        version = importlib.metadata.version(package)
    except (ImportError, ValueError, OSError, importlib.metadata.PackageNotFoundError):
        return None
    start = next((i for i, line in enumerate(lines) if after in line), 0) if after else 0
    for i in range(start, len(lines)):
        if needle in lines[i]:
            return f"{package}/{file}:{i + 1} ({package} {version}): {lines[i].strip()}"
    return None
