"""Backends on any CPython: resolve `--python` specs, prepare a cached environment per interpreter,
and say what each one supports (mixed Python+kernel stacks need 3.13's -X perf_jit, or 3.12's
-X perf on a frame-pointer build).

An environment is a venv of that interpreter with the backends' third-party deps (uvloop, gevent,
pyzmq, trio, twisted, the HTTP servers, ...), installed from the lock file LOCK (exact versions,
hash-checked wheels), and a copy of netprof's pure-Python backends package; it is built once and
cached under $NETPROF_CACHE (default ~/.cache/netprof/interpreters), keyed by interpreter, netprof
version, lock and backends source (a changed lock builds a new one). Builds hold a lock on the cache
and happen in a temp directory renamed into place, so two runs never see a half-built env.
The C++ backends are compiled for netprof's own interpreter only.

Every netprof upgrade or backend change makes a new environment (~90 MB), so a build prunes: per
interpreter it keeps the KEEP_PER_INTERPRETER most recently used, and drops those whose interpreter is
gone. A run holds a shared flock on its environment's `.in-use` for its whole life, and the pruner
only removes an environment it can lock exclusively, so no run ever loses the Python it is running.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import netprof
from netprof.profiler.core import paths, procs
from netprof.profiler.core.errors import CapabilityError

# What the backends import beyond the standard library: exact versions and wheel hashes.
LOCK = Path(__file__).with_name("interp-requirements.txt")
LOCKED_PYTHONS = "CPython 3.11-3.13"
# Environments kept per interpreter (by last use): two, so alternating between two netprof versions
# does not rebuild on every run.
KEEP_PER_INTERPRETER = 2
IN_USE = ".in-use"
# Shared holds on the environments this process runs (closed, hence released, when it exits).
_HELD: list[int] = []

_PROBE = r"""
import json, platform, sys, sysconfig
cflags = (sysconfig.get_config_var("CFLAGS") or "") + " " + (sysconfig.get_config_var("PY_CFLAGS") or "")
print(json.dumps({
    "version": platform.python_version(),
    "implementation": sys.implementation.name,
    "executable": sys.executable,
    "config_args": sysconfig.get_config_var("CONFIG_ARGS") or "",
    "frame_pointers": "-fno-omit-frame-pointer" in cflags,
    "perf_trampoline": bool(sysconfig.get_config_var("PY_HAVE_PERF_TRAMPOLINE")),
    "debug": bool(sysconfig.get_config_var("Py_DEBUG")),
    "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
}))
"""


class InterpreterError(CapabilityError):
    """One line naming the fix."""


@dataclass
class Interpreter:
    spec: str
    base: str  # the interpreter the user named
    python: str  # the interpreter that runs backends (in its prepared environment)
    version: str
    implementation: str
    frame_pointers: bool
    perf_trampoline: bool
    config_args: str

    @property
    def label(self) -> str:
        return f"{self.implementation}-{self.version}"

    @property
    def build_flags(self) -> str:
        """The build properties that change what netprof can see, e.g. 'perf-trampoline'."""
        flags = [name for name, on in (("perf-trampoline", self.perf_trampoline),
                                       ("frame-pointers", self.frame_pointers)) if on]
        return "+".join(flags) or "plain"

    def mixed_stack_flag(self) -> tuple[str | None, str]:
        """(-X option for mixed Python+kernel stacks or None, the reason)."""
        major_minor = tuple(int(p) for p in self.version.split(".")[:2])
        if self.implementation != "cpython":
            return None, f"{self.label}: only CPython writes perf maps"
        if major_minor >= (3, 13) and self.perf_trampoline:
            return "perf_jit", "-X perf_jit (jitdump + DWARF unwinding): Python frames above the kernel's"
        if major_minor >= (3, 12) and self.perf_trampoline and self.frame_pointers:
            return "perf", "-X perf on a frame-pointer build"
        if major_minor >= (3, 12) and self.perf_trampoline:
            return None, (f"{self.label}: -X perf needs frame pointers, which this build lacks; CPython 3.13+ has "
                          "-X perf_jit")
        return None, f"{self.label}: perf trampolines arrived in CPython 3.12, -X perf_jit in 3.13"

    def describe(self) -> dict:
        flag, why = self.mixed_stack_flag()
        return asdict(self) | {"label": self.label, "mixed_stacks": flag, "mixed_stacks_note": why}


def pyenv_versions() -> list[str]:
    """pyenv's interpreters that root may run: $PYENV_ROOT only when it is trusted (InterpreterError
    otherwise), else ~/.pyenv only when that is (someone else's, as under `sudo -E`, counts as none);
    an interpreter under either that is not trusted is left out."""
    try:
        root = paths.env_path("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    except paths.UntrustedPathError as e:
        raise InterpreterError(str(e)) from None
    if paths.untrusted_reason(root):
        return []
    found = glob.glob(os.path.join(root, "versions", "*", "bin", "python3"))
    return sorted(p for p in found if paths.untrusted_reason(p) is None)


def resolve(spec: str) -> str:
    """'3.13' → pyenv's newest 3.13.x; a path → itself; 'python3.12' → PATH; '' → netprof's own."""
    if not spec:
        return sys.executable
    if os.sep in spec:
        if os.access(spec, os.X_OK):
            return spec
        raise InterpreterError(f"--python {spec}: not an executable file")
    if spec.replace(".", "").isdigit():
        matches = [p for p in pyenv_versions()
                   if Path(p).parents[1].name == spec or Path(p).parents[1].name.startswith(spec + ".")]
        if matches:
            return max(matches, key=lambda p: [int(x) for x in Path(p).parents[1].name.split(".") if x.isdigit()])
        found = paths.trusted_which(f"python{spec}")
        if found:
            return found
        raise InterpreterError(f"--python {spec}: no such interpreter (pyenv has "
                               f"{', '.join(Path(p).parents[1].name for p in pyenv_versions()) or 'none'}); "
                               f"install it (`pyenv install {spec}`) or give a path")
    found = paths.trusted_which(spec)
    if found:
        return found
    raise InterpreterError(f"--python {spec}: not found on PATH; give a version (3.13) or a path")


def inspect(python: str) -> dict:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        # netprof's own interpreter answers the probe in this process: no child to start on every run (~70 ms
        # here, of a short run's start-up, beside the BPF compile and the imports)
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            exec(_PROBE, {})  # our own constant text, the same the child runs
        return json.loads(said.getvalue())
    # -I: no user site-packages (a caller's ~/.local/.../*.pth would run as root), no PYTHON* variables.
    try:
        out = procs.run([python, "-I", "-c", _PROBE], timeout=60)
    except OSError as e:
        raise InterpreterError(f"{python}: cannot run it ({e.strerror})") from e
    if out.returncode != 0:
        raise InterpreterError(f"{python}: does not run ({out.stderr.strip().splitlines()[-1:]})")
    return json.loads(out.stdout)


def cache_root() -> Path:
    """Where prepared environments live: $NETPROF_CACHE or ~/.cache/netprof, only when trusted (root
    executes what is in there, so someone else's cache is never read): InterpreterError otherwise."""
    try:
        base = paths.env_path("NETPROF_CACHE") or os.path.expanduser("~/.cache/netprof")
    except paths.UntrustedPathError as e:
        raise InterpreterError(str(e)) from None
    root = Path(base) / "interpreters"
    why = paths.untrusted_reason(root)
    if why:
        raise InterpreterError(f"interpreter cache {root}: {why}; make it root's or set NETPROF_CACHE elsewhere")
    return root


def _backends_source() -> Path:
    import netprof.backends

    return Path(netprof.backends.__file__).parent


def locked_requirements() -> list[tuple[str, str, list[str]]]:
    """(name, version, [sha256 hashes]) of every requirement in LOCK."""
    text = LOCK.read_text().replace("\\\n", " ")
    reqs = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *opts = line.split()
        name, sep, version = spec.partition("==")
        hashes = [o.split(":", 1)[1] for o in opts if o.startswith("--hash=sha256:")]
        if not sep or not version or not hashes:
            raise ValueError(f"{LOCK.name}: {spec} is not pinned with == and hashed")
        reqs.append((name, version, hashes))
    return reqs


def _fingerprint(info: dict) -> str:
    h = hashlib.sha256(json.dumps([info["executable"], info["version"], netprof.__version__]).encode())
    h.update(LOCK.read_bytes())
    for f in sorted(_backends_source().glob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _run(cmd: list[str], what: str, fix: str) -> None:
    out = procs.run(cmd, timeout=900)
    if out.returncode != 0:
        last = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise InterpreterError(f"{what} failed ({last[0][:160]}); {fix}")


@contextlib.contextmanager
def _cache_lock(root: Path) -> Iterator[None]:
    """Exclusive hold on the interpreter cache (an flock; released when the process dies)."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    why = paths.untrusted_reason(root)  # again: cache_root() checked it before it existed
    if why:
        raise InterpreterError(f"interpreter cache {root}: {why}; make it root's or set NETPROF_CACHE elsewhere")
    try:
        fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise InterpreterError(f"interpreter cache lock {root / '.lock'}: {e.strerror}; remove it") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def prepare(spec: str) -> Interpreter:
    """Resolve `spec` and return an Interpreter whose `python` can run every Python backend."""
    base = resolve(spec)
    info = inspect(base)
    if os.path.realpath(base) == os.path.realpath(sys.executable):
        return _make(spec, base, sys.executable, info)  # netprof's own environment has everything
    root = cache_root()
    env = root / f"{info['implementation']}-{info['version']}-{_fingerprint(info)}"
    if not _hold_ready(env):
        with _cache_lock(root):
            if not _hold_ready(env):  # another run may have built it while we waited
                for stale in [*root.glob(".build-*"), *root.glob(".prune-*"), env]:  # dead runs' (we hold the lock)
                    shutil.rmtree(stale, ignore_errors=True)
                build = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
                try:
                    _build(base, info, build)
                    build.rename(env)
                except BaseException:
                    shutil.rmtree(build, ignore_errors=True)
                    raise
                if not _hold_ready(env):
                    raise InterpreterError(f"{env}: built but cannot be opened; remove {root} and run again")
                prune(root)
    return _make(spec, base, str(env / "bin" / "python"), info)


def _hold_ready(env: Path) -> bool:
    """Hold `env` shared for this process's life if it is ready (False, holding nothing, if not).
    The hold comes before the readiness check: an environment pruned in between has lost `.ready`.
    Ready means root's too: an environment, `.ready` or `bin/python` someone else could have planted
    or changed is not (the build replaces it)."""
    if paths.untrusted_reason(env):
        return False
    try:
        fd = os.open(env / IN_USE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise InterpreterError(f"{env / IN_USE}: {e.strerror}; remove {env}") from None
    fcntl.flock(fd, fcntl.LOCK_SH)
    if not (env / ".ready").exists() or any(paths.untrusted_reason(env / p) for p in (".ready", "bin/python")):
        os.close(fd)
        return False
    os.utime(fd)  # last use, which the pruner ranks by
    _HELD.append(fd)
    return True


def prune(root: Path) -> list[str]:
    """Remove the environments no run holds that are beyond KEEP_PER_INTERPRETER for their
    interpreter (by last use) or whose interpreter is gone. Call with the cache lock held.
    Returns the names removed."""
    by_interpreter: dict[str, list[tuple[float, Path]]] = {}
    for env in root.iterdir():
        if env.name.startswith(".") or not env.is_dir() or env.is_symlink():
            continue
        try:
            executable = json.loads((env / ".ready").read_text())["executable"]
            used = max(os.stat(env / name).st_mtime for name in (".ready", IN_USE) if (env / name).exists())
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not one of ours, or half-written: a build of a dead run is removed by prepare()
        gone = not os.access(executable, os.X_OK)
        by_interpreter.setdefault("" if gone else executable, []).append((used, env))
    removed = []
    for executable, envs in by_interpreter.items():
        envs.sort(reverse=True)
        for _, env in envs if not executable else envs[KEEP_PER_INTERPRETER:]:
            if _remove_unheld(env):
                removed.append(env.name)
    return removed


def cache_summary() -> str:
    """'3 in /root/.cache/netprof/interpreters, 270 MiB (...)': what doctor prints."""
    root = cache_root()
    envs = [e for e in root.iterdir() if (e / ".ready").is_file()] if root.is_dir() else []
    size = sum(os.lstat(os.path.join(d, f)).st_size for e in envs for d, _, files in os.walk(e) for f in files)
    return (f"{len(envs)} in {root}, {size / 2**20:.0f} MiB (a build keeps the {KEEP_PER_INTERPRETER} "
            "last used per interpreter)")


def _remove_unheld(env: Path) -> bool:
    """Delete `env` unless a run holds it: taken exclusively, renamed out of the way, then removed."""
    try:
        fd = os.open(env / IN_USE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a run is using it
        gone = env.with_name(f".prune-{env.name}")
        env.rename(gone)  # one step: a run that opens it later finds no `.ready` and rebuilds
        shutil.rmtree(gone, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def _build(base: str, info: dict, env: Path) -> None:
    """A venv of `base` at `env` with the locked deps and netprof's backends, marked `.ready`."""
    python = env / "bin" / "python"
    label = f"{info['implementation']}-{info['version']}"
    # -I throughout: nothing from the user site-packages or PYTHON* variables runs in root's build.
    _run([base, "-I", "-m", "venv", str(env)], f"creating a venv for {label}",
         "install its venv module (Debian: python3-venv) or pick another --python")
    _run([str(python), "-I", "-m", "pip", "install", "-q", "--require-hashes", "--only-binary=:all:", "--no-deps",
          "-r", str(LOCK)], f"installing the backends' locked dependencies for {label}",
         f"{LOCK.name} holds wheels for {LOCKED_PYTHONS}: pick one of those with --python")
    site = Path(procs.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          timeout=60, check=True).stdout.strip())
    pkg = site / "netprof"
    (pkg / "backends").mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(netprof.__file__), pkg / "__init__.py")
    for f in _backends_source().glob("*.py"):
        shutil.copy(f, pkg / "backends" / f.name)
    (env / ".ready").write_text(json.dumps(info))


def _make(spec: str, base: str, python: str, info: dict) -> Interpreter:
    return Interpreter(spec=spec, base=base, python=python, version=info["version"],
                       implementation=info["implementation"], frame_pointers=info["frame_pointers"],
                       perf_trampoline=info["perf_trampoline"], config_args=info["config_args"])


def available() -> list[Interpreter]:
    """Interpreters this machine offers (netprof's own, pyenv's), inspected but not prepared."""
    seen, found = set(), []
    try:
        pyenv = pyenv_versions()
    except InterpreterError:
        pyenv = []  # an untrusted PYENV_ROOT: doctor says so (check_interpreters)
    for path in [sys.executable, *pyenv]:
        try:
            info = inspect(path)
        except InterpreterError:
            continue
        if info["version"] in seen or info["version"].startswith("2."):
            continue
        seen.add(info["version"])
        found.append(_make(path, path, path, info))
    return sorted(found, key=lambda it: [int(p) for p in it.version.split(".") if p.isdigit()])
