"""A file named on the command line (--body-file, --header-file, --env-file, `flamegraph diff`'s inputs): root
reads it on the caller's behalf and sends it on (to a server, perhaps the caller's own), so it must be a file the
caller could read. Light on purpose (no pandas): a refused file is refused in the CLI's first ~0.2 s."""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path

from netprof.profiler.core import paths
from netprof.profiler.core.errors import InputError

# How root opens what a caller names, here and in a results directory (results.open_input): never through a link;
# NONBLOCK, as a planted FIFO would hang the open.
READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
MAX_NAMED_FILE = 1 << 20


def read_named_file(path: str | os.PathLike, what: str, limit: int = MAX_NAMED_FILE) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes, not a link; under sudo, one the sudo
    caller may read. InputError (one line naming `what` and the path) otherwise."""
    shown = os.fspath(path)
    try:
        fd = os.open(shown, READ_FLAGS)
    except OSError as e:
        why = "is a symlink: name the file itself" if e.errno == errno.ELOOP else e.strerror
        raise InputError(f"{what} {shown}: {why}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {shown}: not a regular file")
        why = _unreadable_by_caller(shown, st)
        if why:
            raise InputError(f"{what} {shown}: {why}; netprof reads it as root for you, so it must be a file you "
                             "can read yourself")
        os.set_blocking(fd, True)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{what} {shown}: larger than {limit} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InputError(f"{what} {shown}: not UTF-8 text") from None


def _unreadable_by_caller(path: str, st: os.stat_result) -> str | None:
    """Why the sudo caller could not read `path` (stat: the opened file), or None (also: not under sudo).
    Mode bits only: an ACL that grants more is not consulted (refusing is the safe side)."""
    owner = paths.sudo_caller()
    if owner is None:
        return None
    uid, gid = owner
    try:
        entry = pwd.getpwuid(uid)
        gid = gid if gid >= 0 else entry.pw_gid
        groups = set(os.getgrouplist(entry.pw_name, gid))
    except KeyError:
        groups = {gid}

    def may(s: os.stat_result, bit: int) -> bool:
        shift = 6 if s.st_uid == uid else 3 if s.st_gid in groups else 0
        return bool(s.st_mode & (bit << shift))

    for d in reversed(Path(os.path.realpath(path)).parents):
        if not may(os.stat(d), 1):
            return f"uid {uid} may not enter {d}"
    return None if may(st, 4) else f"uid {uid} may not read it"
