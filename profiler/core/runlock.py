"""One netprof run at a time per machine, and an out directory no other run can share.

Two runs at once would pin their backends to the same CPU and measure each other; `run_lock` makes the
second one wait or refuse with one line. The lock is an flock on a file in a root-owned directory
(/run/netprof), so it is released by the kernel when a run dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from netprof.profiler.core.atomic import create_dir, ensure_out_dir
from netprof.profiler.core.errors import EXIT_BAD_INPUT, NetprofError
from netprof.profiler.core.paths import trusted_uids, untrusted_reason

LOCK_NAME = "run.lock"


class RunLockError(NetprofError):
    """Another run holds the lock, or the lock file is not safe to use (one line)."""

    exit_code = EXIT_BAD_INPUT


def lock_path() -> str:
    """/run/netprof/run.lock for root; a per-user runtime directory otherwise."""
    if os.geteuid() == 0:
        return os.path.join("/run/netprof", LOCK_NAME)
    runtime = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return os.path.join(runtime, f"netprof-{os.geteuid()}", LOCK_NAME)


def _open_lock(path: str) -> int:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    why = untrusted_reason(directory)
    if why:
        raise RunLockError(f"run lock {path}: {why}; remove {directory} (netprof recreates it)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunLockError(f"run lock {path} is a symlink; remove it") from None
        raise RunLockError(f"run lock {path}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in trusted_uids():
        os.close(fd)
        raise RunLockError(f"run lock {path} is not a regular file of root's; remove it")
    return fd


def _holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() else "?"


@contextlib.contextmanager
def run_lock(wait: bool, path: str | None = None) -> Iterator[None]:
    """Hold the machine's run lock for the `with` block; `wait=False` raises RunLockError at once
    when another run holds it, `wait=True` blocks until that run ends."""
    path = path or lock_path()
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise RunLockError(f"another netprof run (pid {_holder(fd)}) is running; wait for it to "
                                   "finish, or pass --wait to queue behind it") from None
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


def unique_out_dir(base: str | os.PathLike = "runs") -> Path:
    """A new directory `base/<YYYYmmdd-HHMMSS>-<random>`, created exclusively (never shared with
    another run started in the same second)."""
    base = ensure_out_dir(base)
    while True:
        path = base / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        if create_dir(path):  # 0700, the sudo caller's, like every results directory
            return path


@contextlib.contextmanager
def watch_lock(pid: int) -> Iterator[None]:
    """One `netprof watch` per watched process: two would each count every request (their probes both fire).
    An flock on watch-PID.lock beside the run lock, removed when the watch ends; a file removed by the holder
    while another watch opened it is locked again under its new inode."""
    path = os.path.join(os.path.dirname(lock_path()), f"watch-{pid}.lock")
    while True:
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunLockError(f"another netprof watch (pid {holder}) is watching pid {pid}; stop it first "
                               "(one watch per process)") from None
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed it as we opened it: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
