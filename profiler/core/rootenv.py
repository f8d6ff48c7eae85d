"""What a netprof running as root takes from its caller's environment, decided once, before the CLI
parses anything (`setup()`, first thing in `entry.main()` and again, idempotent, in `cli.main()`).

Under `sudo -E` (or `env_keep`) HOME, TMPDIR and XDG_* are the caller's, and everything root would find
through them — pyenv's interpreters, the interpreter cache, ~/.cargo/bin, matplotlib's matplotlibrc and
caches, temporary files — would be the caller's to plant or swap. So, under euid 0:

- HOME is root's own (password database), and the XDG_*_HOME directories derived from it are dropped.
- Temporary files go to a private directory (mkdtemp: 0700, root's) in /tmp, or in a TMPDIR that root or
  the invoking user owns and nobody else can write (any other TMPDIR is ignored, with a warning).
  `tempfile.tempdir` points there and root's children get it as TMPDIR (`procs.child_env`); a child
  that runs as the user (--cmd) keeps the caller's own. It is named for this process
  (`netprof-PID-xxxxxxxx`), so after a SIGKILL the watchdog, the next run and `netprof doctor` remove
  it (`procs.cleanup_stale`); otherwise it goes at exit.
- matplotlib gets a persistent root-owned MPLCONFIGDIR, so its font cache is built once, not per run.
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import shutil
import sys
import tempfile

from netprof.profiler.core import paths
from netprof.profiler.core.errors import CapabilityError

# The private temp directory's name: mkdtemp's 8 random characters after netprof's pid.
PRIVATE_NAME = re.compile(r"^netprof-(\d+)-[a-z0-9_]{8}$")
DEFAULT_TMP = "/tmp"
MATPLOTLIB_DIR = "/var/cache/netprof/matplotlib"
# Where programs look instead of HOME when these are set: the caller's, under sudo -E. MATPLOTLIBRC
# names a matplotlibrc outright.
_CALLER_DIRS = ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "MATPLOTLIBRC")

_private: str | None = None
# What setup() changed in os.environ, as the caller had it (None: unset), for a child run as the caller.
_callers: dict[str, str | None] = {}


def setup() -> None:
    """Under euid 0: root's HOME, the private temp directory, MPLCONFIGDIR (see the module docstring).
    Nothing otherwise: a user's netprof may use that user's files. Runs once per process."""
    if os.geteuid() != 0 or _private is not None:
        return
    _callers.update({name: os.environ.get(name) for name in ("HOME", "MPLCONFIGDIR", *_CALLER_DIRS)})
    os.environ["HOME"] = _root_home()
    for name in _CALLER_DIRS:
        os.environ.pop(name, None)
    parent, warning = temp_parent()
    if warning:
        print(f"netprof: {warning}", file=sys.stderr)
    _make_private(parent)
    os.environ["MPLCONFIGDIR"] = _matplotlib_dir()


def as_the_caller_had(env: dict[str, str]) -> dict[str, str]:
    """`env` with what setup() changed put back as the caller had it: for a child that runs as the
    invoking user (--cmd), whose XDG_* and matplotlib settings are its own, not root's."""
    out = dict(env)
    for name, value in _callers.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def private_dir() -> str | None:
    """This process's private temp directory (None when not root, or before setup())."""
    return _private


def _root_home() -> str:
    try:
        return pwd.getpwuid(0).pw_dir or "/root"
    except KeyError:  # no passwd entry for uid 0 (a minimal container)
        return "/root"


def temp_parent() -> tuple[str, str | None]:
    """(where the private temp directory goes, why $TMPDIR was ignored or None): $TMPDIR when it is a
    directory that root or the invoking user owns and nobody else can write, else /tmp."""
    given = os.environ.get("TMPDIR")
    if not given or os.path.realpath(given) == DEFAULT_TMP:
        return DEFAULT_TMP, None
    if not os.path.isdir(given):
        why: str | None = "not a directory"
    else:
        # Asked as for the directory to be made in it, so a sticky TMPDIR (like /tmp itself) passes.
        why = paths.untrusted_reason(os.path.join(given, "netprof-PID"), uids=paths.caller_uids())
    if why:
        return DEFAULT_TMP, f"ignoring TMPDIR={given} ({why}); temporary files go to {DEFAULT_TMP}"
    return os.path.abspath(given), None


def _make_private(parent: str) -> None:
    global _private
    try:
        path = tempfile.mkdtemp(prefix=f"netprof-{os.getpid()}-", dir=parent)
    except OSError as e:
        raise CapabilityError(f"cannot make a private temp directory in {parent}: {e.strerror}; "
                              f"fix {parent} or set TMPDIR to a directory of root's") from None
    _private = tempfile.tempdir = path
    atexit.register(_remove_private, path, os.getpid())


def remove_private() -> None:
    """Remove the private temp directory now (for an exit that runs no exit handlers: entry.py)."""
    if _private is not None:
        _remove_private(_private, os.getpid())


def _remove_private(path: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child, which inherits the handler
        shutil.rmtree(path, ignore_errors=True)


def _matplotlib_dir() -> str:
    """A trusted MPLCONFIGDIR the caller gave, else MATPLOTLIB_DIR (made 0700), else, when that cannot
    be made or trusted (a read-only /var), one in the private temp directory (font cache per run)."""
    given = os.environ.get("MPLCONFIGDIR")
    if given and os.path.isdir(given) and paths.untrusted_reason(given) is None:
        return given
    for d in (os.path.dirname(MATPLOTLIB_DIR), MATPLOTLIB_DIR):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError:
            break
    if os.path.isdir(MATPLOTLIB_DIR) and paths.untrusted_reason(MATPLOTLIB_DIR) is None:
        return MATPLOTLIB_DIR
    assert _private is not None
    fallback = os.path.join(_private, "matplotlib")
    os.makedirs(fallback, mode=0o700, exist_ok=True)
    return fallback


def temp_dirs() -> list[str]:
    """Where temp entries of netprof runs (stderr files, scratch, private directories) may be: /tmp,
    an acceptable $TMPDIR, this process's temp directory, and — in a root child whose TMPDIR is its
    parent's private directory, like the watchdog — the directory that one was made in."""
    current = tempfile.gettempdir()
    found = [DEFAULT_TMP, temp_parent()[0], current]
    if PRIVATE_NAME.match(os.path.basename(current)):
        found.append(os.path.dirname(current))
    return list(dict.fromkeys(os.path.realpath(d) for d in found))
