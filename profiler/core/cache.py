"""netprof's own cache, /var/cache/netprof: what is slow to make and holds for longer than a run (the
probes' self-cost for a boot, a report's plots for their data), so a run or a report does not make it
again. Root's directory, 0700; an entry is used only when nobody but root (or netprof's own user)
could have written it, and anything unreadable is simply a miss: the caller makes the thing anew.
"""

from __future__ import annotations

import os
import stat

from netprof.profiler.core import atomic, paths

ROOT = "/var/cache/netprof"  # rootenv's MATPLOTLIB_DIR lives below it too
MAX_ENTRY = 64 << 20  # bytes read from one entry: a plot set is ~1 MB


def directory(*parts: str) -> str | None:
    """ROOT/parts… made 0700 where missing, or None when it cannot be made or is not trusted (a read-only
    /var, a directory of someone else's on the way) or NETPROF_NO_CACHE=1 (tests that must see the slow
    path; only ever turns the cache off, so the environment of a sudo caller cannot misuse it)."""
    if os.environ.get("NETPROF_NO_CACHE") == "1":
        return None
    path = ""
    for part in (ROOT, *parts):
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    return path if paths.untrusted_reason(path) is None else None


def read_bytes(path: str) -> bytes | None:
    """The entry's bytes, or None: missing, a link, or writable or owned by someone untrusted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if (not stat.S_ISREG(st.st_mode) or st.st_uid not in paths.trusted_uids()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            return None
        return f.read(MAX_ENTRY)


def write_bytes(path: str, data: bytes) -> bool:
    """Write an entry (atomic.py: a reader sees the old entry or the new one); False when it cannot be
    written, which only costs the next caller the time to make it again."""
    try:
        atomic.write_bytes(path, data)
        # atomic.py gives a file to the sudo caller; a cache entry stays netprof's own (its directory is root's)
        os.chown(path, os.geteuid(), os.getegid(), follow_symlinks=False)
    except (OSError, ValueError):  # ValueError: atomic's InputError (a link on the way)
        return False
    return True
