"""Where netprof's own executables live (one place, so tests and runs agree), and whether a path named
by the environment may be trusted by a process that runs as root."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Iterable

from netprof.profiler.core.errors import CapabilityError

# Mode bits that let someone other than the owner change a directory's entries or a file's content.
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class UntrustedPathError(CapabilityError):
    """A path root would execute or write through is controlled by someone else (one line, with the fix)."""


def trusted_uids(extra: Iterable[int] = ()) -> set[int]:
    """root, the effective user, and `extra` (e.g. the sudo caller for directories of results)."""
    return {0, os.geteuid(), *extra}


def _prefixes(path: str) -> list[str]:
    """'/a/b/c' → ['/', '/a', '/a/b', '/a/b/c']."""
    out, cur = ["/"], "/"
    for part in [p for p in path.split("/") if p]:
        cur = os.path.join(cur, part)
        out.append(cur)
    return out


def untrusted_reason(path: str | os.PathLike, *, uids: set[int] | None = None) -> str | None:
    """Why `path` should not be trusted by root, or None.

    Trusted means: `path` (or, while it does not exist yet, the first existing directory above it,
    where it will be created) is owned by a trusted user and writable by nobody else; every directory
    above it is owned by a trusted user and writable by nobody else, or sticky like /tmp; and every
    symlink on the way is owned by a trusted user. Otherwise someone else could swap what it names.
    """
    uids = trusted_uids() if uids is None else uids
    given = os.path.abspath(os.fspath(path))
    real = os.path.realpath(given)
    existing = real
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    seen: set[str] = set()
    for p in _prefixes(given) + _prefixes(existing):
        if p in seen or not os.path.lexists(p):
            continue
        seen.add(p)
        try:
            lst, st = os.lstat(p), os.stat(p)
        except OSError as e:
            return f"{p} cannot be checked ({e.strerror})"
        if stat.S_ISLNK(lst.st_mode) and lst.st_uid not in uids:
            return f"{p} is a symlink owned by uid {lst.st_uid}"
        if st.st_uid not in uids:
            return f"{p} is owned by uid {st.st_uid}"
        # Writable by others is fine only for a sticky directory above the target (like /tmp).
        sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if st.st_mode & _WRITABLE_BY_OTHERS and (not sticky_dir or os.path.realpath(p) == real):
            return f"{p} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def sudo_caller() -> tuple[int, int] | None:
    """(uid, gid) of the user who ran `sudo netprof` (SUDO_UID/SUDO_GID) when netprof runs as root,
    else None: whose results these are, and as whom the --cmd server runs."""
    uid, gid = os.environ.get("SUDO_UID", ""), os.environ.get("SUDO_GID", "")
    if os.geteuid() != 0 or not uid.isdigit() or int(uid) == 0 or not gid.isdigit():
        return None
    return int(uid), int(gid)


def caller_uids() -> set[int]:
    """trusted_uids() plus, under root, the user who ran `sudo netprof` (SUDO_UID): who may own a
    directory root writes its own files into (results, the private temp directory)."""
    caller = sudo_caller()
    return trusted_uids([caller[0]] if caller else [])


def trusted_which(name: str) -> str | None:
    """shutil.which(name), skipping hits that fail untrusted_reason: a PATH entry another user
    controls (sudo -E keeps the caller's PATH) must not supply what root executes. Empty and relative
    entries (the working directory) are skipped too."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which(name, path=d) if os.path.isabs(d) else None
        if found and untrusted_reason(found) is None:
            return found
    return None


def check_trusted(path: str | os.PathLike, what: str) -> str:
    """`path` itself when root may use it; else UntrustedPathError naming `what` and the fix."""
    why = untrusted_reason(path)
    if why:
        raise UntrustedPathError(f"{what}={path} is not trusted: {why}; make it owned by root and not "
                                 "writable by others, or unset it")
    return os.fspath(path)


def env_path(name: str) -> str | None:
    """$`name` when set and trusted (UntrustedPathError otherwise), else None."""
    value = os.environ.get(name)
    return check_trusted(value, name) if value else None


class LoaderMissingError(CapabilityError):
    """No usable netprof-loader binary (one line, with the fix)."""


def loader_binary() -> str:
    """The `netprof-loader` binary: $NETPROF_LOADER, else next to this interpreter, else a trusted
    PATH entry (sudo -E keeps the caller's PATH)."""
    env = env_path("NETPROF_LOADER")
    if env:
        if not os.access(env, os.X_OK):
            raise LoaderMissingError(f"NETPROF_LOADER={env}: not an executable file; fix it or unset it")
        return env
    beside = os.path.join(os.path.dirname(sys.executable), "netprof-loader")
    if os.access(beside, os.X_OK):
        return beside
    found = trusted_which("netprof-loader")
    if found:
        return found
    raise LoaderMissingError("netprof-loader not found: run `make setup` (it builds and installs it)")
