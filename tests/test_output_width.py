"""Off a terminal (a pipe, a CI log) netprof's tables keep every cell whole: rich lays a table out in
80 columns when it has no terminal, which cut backend names to `uvloop_s…` in `make run`'s output."""

from __future__ import annotations

import os
import re

import pytest

from helpers import run_netprof
from netprof.backends import registry

pytestmark = pytest.mark.concurrent  # layout of piped output; its run passes --wait

ELLIPSIS = "…"


def _piped_env() -> dict[str, str]:
    """The environment of a pipe: no COLUMNS telling rich a width."""
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def test_list_piped_keeps_every_row_whole():
    done = run_netprof("list", "--all", timeout=60, env=_piped_env())
    assert done.returncode == 0, done.stderr
    assert ELLIPSIS not in done.stdout
    lines = done.stdout.splitlines()
    for name in registry.names(include_test_only=True):
        info = registry.get(name)
        # name, family, reads and the whole description on one line: nothing cut, nothing wrapped
        row = [ln for ln in lines if ln.split()[:1] == [name]]
        assert len(row) == 1, f"{name}: {row}"
        assert info.description in row[0], f"{name}'s description cut or wrapped: {row[0]!r}"
        assert re.search(rf"\b{re.escape(info.family)}\b", row[0])
    assert max(len(ln) for ln in lines) > 80  # the descriptions need more than rich's default 80 columns


def test_run_piped_keeps_backend_names_whole(tmp_path):
    names = ("asyncio_proto", "selector")  # asyncio_proto: the longest name of the always-installed backends
    done = run_netprof("run", *names, "-c", "10", "-d", "0.5", "-r", "1", "--warmup", "0.2", "--no-probes",
                       "--wait", "--out", str(tmp_path / "out"), timeout=120, env=_piped_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert ELLIPSIS not in done.stdout, done.stdout
    assert ELLIPSIS not in done.stderr, done.stderr
    # the headline table names each backend whole, in a table row (a line with the table's rule │)
    table_rows = [ln for ln in done.stdout.splitlines() if "│" in ln]
    assert table_rows, done.stdout
    for name in names:
        assert any(re.search(rf"(^|[\s│]){name}([\s│]|$)", ln) for ln in table_rows), (name, table_rows)
