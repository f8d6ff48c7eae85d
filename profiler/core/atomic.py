"""The one way netprof writes an output file, and the check that an output directory is safe for root.

Every file goes to a fresh temp name in its target directory (random name, O_EXCL | O_NOFOLLOW, so a
link planted there cannot redirect the write), then `os.replace` puts it in place: readers see the old
file or the new one, never half of one, and a symlink standing at the final name is replaced, not
followed. The directory is opened once, by `open_dir`, and everything happens relative to that fd: a
directory on the way swapped for a link after netprof checked or made it is never written through.

Results may hold what a run was given (request headers with --keep-secrets, stack frames): files are
0600 and directories 0700, and under sudo they belong to the user who ran `sudo netprof`, so they can
read their own results and nobody else can.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from netprof.profiler.core.errors import InputError
from netprof.profiler.core.paths import caller_uids, sudo_caller, untrusted_reason

# Pseudo-filesystems that hold no files of their own: `--out` there is always a mistake.
_PSEUDO_FS = ("/proc", "/sys", "/dev")


def _own(fd: int, mode: int) -> None:
    """`mode` (not the umask's: results are private) and, under sudo, the sudo caller as owner."""
    owner = sudo_caller()  # what we write under sudo is theirs
    if owner:
        os.fchown(fd, *owner)
    os.fchmod(fd, mode)


# An fd that names a file without opening it for I/O: path resolution needs search rights only (a
# non-root netprof may cross a directory it cannot list), and O_NOFOLLOW gives the link itself.
_AT = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # links followed in one walk, as the kernel allows in one lookup


def open_dir(path: str | os.PathLike) -> int:
    """An O_PATH fd of the directory `path` (relative: to the working directory), for *at calls.

    Why: under sudo the results directory and its subdirectories are the caller's, so while root writes
    they may swap any of them (or the results directory itself, in their own parent) for a link to /root
    or /etc, and a write by path resolves every component again. openat2's RESOLVE_NO_SYMLINKS would
    stop that, but Python does not expose it; this walk does the same from `/`, one component at a time
    opened with O_NOFOLLOW relative to its parent's fd, with one exception: a link owned by root or by
    netprof's own user is followed (nobody else can change it, e.g. root's /tmp/x -> /var/x). A link of
    anyone else's is refused (InputError naming it); more than MAX_LINKS links is ELOOP.
    """
    given = os.fspath(path)
    todo = os.path.abspath(given).split("/")[::-1]  # the next component is at the end
    fd, walked, links = os.open("/", _AT), "/", 0  # walked: the directory `fd` is, for messages
    try:
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            nxt = os.open(name, _AT, dir_fd=fd)
            st = os.fstat(nxt)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink("", dir_fd=nxt)  # the link we hold, not the name looked up again
                os.close(nxt)
                if st.st_uid not in (0, os.geteuid()):
                    raise InputError(f"{os.path.join(walked, name)} is a symlink owned by uid {st.st_uid}: netprof "
                                     "(root) follows only root's links (its owner could point it anywhere); name "
                                     "the real directory, or replace the link with it")
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), given)
                if target.startswith("/"):
                    os.close(fd)
                    fd, walked = os.open("/", _AT), "/"
                todo.extend(reversed(target.split("/")))
                continue
            os.close(fd)
            fd, walked = nxt, os.path.normpath(os.path.join(walked, name))
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), walked)
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike, mode: str = "w", **kw) -> Iterator[IO]:
    """`with open_atomic(p, "wb") as f:` writes a temp file beside `p`, then renames it onto `p`.

    On an exception the temp file is removed and `p` keeps its old content.
    """
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    dfd = open_dir(directory)
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            _own(fd, 0o600)
            with os.fdopen(fd, mode, **kw) as f:
                fd = -1
                yield f
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def write_text(path: str | os.PathLike, text: str) -> None:
    with open_atomic(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with open_atomic(path, "wb") as f:
        f.write(data)


def check_out_dir(path: str | os.PathLike, option: str = "--out") -> None:
    """InputError (a ValueError: one line naming the fix) unless `path` is a safe results directory for root.

    Refused: a path under /proc, /sys or /dev; an existing non-directory; a directory (or, while it
    does not exist yet, the directory it will be created in, or any directory above) owned by another
    user or writable by others — only a sticky directory above it (like /tmp) may be writable by others.
    `option`: what the message names (`flamegraph diff -o` checks its SVG's directory).
    """
    given = os.fspath(path)
    real = os.path.realpath(given)
    for top in _PSEUDO_FS:
        if real == top or real.startswith(top + "/"):
            raise InputError(f"{option} {given}: {top} holds no files of its own; choose a directory on disk "
                             "(e.g. runs/)")
    if os.path.exists(real) and not os.path.isdir(real):
        raise InputError(f"{option} {given}: is an existing file, not a directory; give a directory "
                         "(it is created when missing)")
    why = untrusted_reason(given, uids=caller_uids())
    if why:
        raise InputError(f"{option} {given}: {why}, so another user could replace what netprof (root) writes "
                         "there; choose a directory only root or you can write (e.g. runs/)")


def ensure_out_dir(path: str | os.PathLike) -> Path:
    """check_out_dir, create the directory (and missing parents: 0700, the sudo caller's), and check
    again what was created (closes the race with someone creating it first)."""
    check_out_dir(path)
    missing = []
    p = Path(os.path.abspath(os.fspath(path)))
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        create_dir(d)
    check_out_dir(path)
    try:
        os.close(open_dir(path))  # what every write will walk: a directory, through no link of another user's
    except (NotADirectoryError, FileNotFoundError):  # e.g. a dangling link stood there
        raise InputError(f"--out {os.fspath(path)}: not a directory; give a directory (it is created when "
                         "missing)") from None
    return Path(path)


def _mkdir_at(dfd: int, name: str) -> bool:
    """mkdir `name` in the directory `dfd`, 0700, the sudo caller's; False when something stands there."""
    try:
        os.mkdir(name, 0o700, dir_fd=dfd)
    except FileExistsError:
        return False
    # Through an fd opened without following: the parent may be the sudo caller's, who could swap
    # the new directory for a link before we chown it.
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        _own(fd, 0o700)
    finally:
        os.close(fd)
    return True


def create_dir(path: str | os.PathLike) -> bool:
    """mkdir 0700, the sudo caller's (a directory of results); False when something stands there already."""
    parent, name = os.path.split(os.path.abspath(os.fspath(path)))
    dfd = open_dir(parent)
    try:
        return _mkdir_at(dfd, name)
    finally:
        os.close(dfd)


def make_subdir(parent: str | os.PathLike, name: str) -> Path:
    """`parent/name` (e.g. "plots", "flamegraphs/<cell>") as a real directory, created like a results
    directory. A link standing at any part of `name` is refused (one line), never written through:
    whoever could plant it would choose where root writes."""
    path = Path(parent)
    fd = open_dir(parent)
    try:
        for part in Path(name).parts:
            path = path / part
            _mkdir_at(fd, part)
            nxt = os.open(part, _AT, dir_fd=fd)
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                raise InputError(f"{path} is a symlink: netprof (root) does not write through links; remove it, "
                                 "or give another directory with --out")
            if not stat.S_ISDIR(st.st_mode):
                raise InputError(f"{path} is not a directory: remove it, or give another directory with --out")
    finally:
        os.close(fd)
    return path
