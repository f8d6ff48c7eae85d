"""`python -m netprof.backends NAME --port P [--work MODEL] [--workers N] [--msize N]
[--framing message|stream]` and `--list`.

A backend serves until it is told to stop, by SIGTERM or SIGINT, never because its connections
came and went (any local process may connect and close right after `ready`); netprof stops it after
each cell and counts anything but a clean exit 0 as a failed cell.

Exit codes: 0 stopped by SIGTERM/SIGINT, cleanly (every process it started is gone); 1 runtime
failure; 2 bad arguments; 3 a missing optional dependency (the message names the fix).
"""

from __future__ import annotations

import importlib
import sys

from . import registry
from .common import BadWorkSpec, Options, WorkModel, build_parser, check_msize, die, listen_socket


def print_list() -> None:
    width = max(map(len, registry.BACKENDS))
    for b in registry.BACKENDS.values():
        print(f"{b.name:<{width}}  {b.family:<9}  {b.reads:<6}  {b.description}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # DESIGN.md spells it `backends serve NAME`; accept both
        argv = argv[1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print_list()
        return 0
    if not args.name:
        parser.error("a backend name is required (see --list)")
    try:
        info = registry.get(args.name)
        work = WorkModel.parse(args.work)
    except (registry.UnknownBackend, BadWorkSpec) as e:
        parser.error(str(e))
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    check_msize(parser, args.msize)

    missing = registry.missing_requirement(info)
    if missing:
        die(missing, 3)
    try:
        module = importlib.import_module(info.module)
    except ImportError as e:
        die(f"backend {info.name!r} cannot be loaded ({e}); fix: make setup", 3)

    opts = Options(args.host, args.port, work, args.workers, args.msize, args.framing)
    try:
        listener = listen_socket(opts.host, opts.port)
    except OSError as e:
        die(f"cannot listen on {opts.host}:{opts.port}: {e}")
    try:
        module.serve(info.name, listener, opts)
    except OSError as e:  # e.g. EMFILE at the fd limit: one line, not a traceback
        die(f"{info.name}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
