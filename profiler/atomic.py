"""The one way netprof writes an output file, and the check that an output directory is safe for root.

Every file goes to a fresh temp name in its target directory (`mkstemp`: random name, O_EXCL |
O_NOFOLLOW, so a link planted there cannot redirect the write), then `os.replace` puts it in place:
readers see the old file or the new one, never half of one, and a symlink standing at the final name
is replaced, not followed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from netprof.profiler.errors import InputError
from netprof.profiler.paths import trusted_uids, untrusted_reason

# Pseudo-filesystems that hold no files of their own: `--out` there is always a mistake.
_PSEUDO_FS = ("/proc", "/sys", "/dev")


def _umask() -> int:
    """The process umask without changing it (os.umask would race with the sampling threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike, mode: str = "w", **kw) -> Iterator[IO]:
    """`with open_atomic(p, "wb") as f:` writes a temp file beside `p`, then renames it onto `p`.

    On an exception the temp file is removed and `p` keeps its old content.
    """
    path = os.path.abspath(os.fspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(path))
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **kw) as f:
            fd = -1
            yield f
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with open_atomic(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with open_atomic(path, "wb") as f:
        f.write(data)


def _out_uids() -> set[int]:
    """Owners an output directory may have: root, us, and the user who ran `sudo netprof`."""
    sudo = os.environ.get("SUDO_UID", "")
    return trusted_uids([int(sudo)] if sudo.isdigit() and os.geteuid() == 0 else [])


def check_out_dir(path: str | os.PathLike) -> None:
    """InputError (a ValueError: one line naming the fix) unless `path` is a safe results directory for root.

    Refused: a path under /proc, /sys or /dev; an existing non-directory; a directory (or, while it
    does not exist yet, the directory it will be created in, or any directory above) owned by another
    user or writable by others — only a sticky directory above it (like /tmp) may be writable by others.
    """
    given = os.fspath(path)
    real = os.path.realpath(given)
    for top in _PSEUDO_FS:
        if real == top or real.startswith(top + "/"):
            raise InputError(f"--out {given}: {top} holds no files of its own; choose a directory on disk "
                             "(e.g. runs/)")
    if os.path.exists(real) and not os.path.isdir(real):
        raise InputError(f"--out {given}: is an existing file, not a directory; give a directory "
                         "(it is created when missing)")
    why = untrusted_reason(given, uids=_out_uids())
    if why:
        raise InputError(f"--out {given}: {why}, so another user could replace what netprof (root) writes "
                         "there; choose a directory only root or you can write (e.g. runs/)")


def ensure_out_dir(path: str | os.PathLike) -> Path:
    """check_out_dir, create the directory, and check again what was created (closes the race with
    someone creating it first)."""
    check_out_dir(path)
    Path(path).mkdir(parents=True, exist_ok=True)
    check_out_dir(path)
    return Path(path)
