"""Names a package exports but imports only on first use (PEP 562): a package whose light half is wanted early
(a probe set's flags, to begin its compile before pandas is imported: profiler/entry.py) keeps its heavy half
(an instrument's row shaping, which imports pandas) behind its module `__getattr__`."""

from __future__ import annotations

import importlib
import sys
from typing import Any


def attr(package: str, where: dict[str, tuple[str, str]], name: str) -> Any:
    """`package`'s `name`, imported from where[name] = (module relative to the package, attribute) and kept in
    the package from then on. AttributeError for a name it does not export (as any module)."""
    if name not in where:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, attribute = where[name]
    value = getattr(importlib.import_module(module, package), attribute)
    setattr(sys.modules[package], name, value)
    return value
