"""The one way netprof starts an external process (backend, loader, perf, py-spy, bpftrace).

Every child gets: optional CPU pinning, its own session (so the whole process tree can be signalled),
stderr captured through a pipe whose last STDERR_CAP bytes netprof keeps in memory for failure reasons
(no file: one in a temp directory someone else controls could be swapped for a link, and a file grows
without bound), and a guaranteed stop — on normal exit, on an exception and on Ctrl-C — through
`ProcessGroup`. Short tools (perf script, ip, nm, pip) run through
`run()`. Both give every child a fixed working directory and an environment in which a Python child
imports nothing from the caller's directory or PYTHONPATH: netprof runs as root.

A netprof killed with SIGKILL runs no cleanup, so every child of both also dies with it by itself:
`PR_SET_PDEATHSIG(SIGKILL)` is set between fork and exec (it survives exec, so `ip netns exec CMD`,
which execs, passes it on to CMD). The kernel sends it when the *thread* that forked the child exits,
not the process: a child spawned from a worker thread (the flamegraph samplers) dies when that thread
ends, so such a thread must stop its children before it returns (the samplers do). What a killed run
leaves in the file system and in `ip netns` is removed by the watchdog (`start_watchdog`, started
with the first child: it waits for this process to die, then cleans up), by the next run and by
`netprof doctor` (`reap.reap_dead_runs`).

procs is part of the leaf core: it imports no other netprof module but the core's. What layers above it
add to a child's start (the flamegraph side's perf-map files) comes in through `add_spawn_hook`.
"""

from __future__ import annotations

import errno
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from netprof.profiler.core import rootenv
from netprof.profiler.core.errors import NetprofError
from netprof.profiler.core.safetext import clean_text


class ProcessError(NetprofError, RuntimeError):
    """A child did not start, did not become ready in time, or died. Exit code 3 (netprof's own error)
    unless a subclass says otherwise: callers that expect it (a cell's backend) catch it first."""


class LineTimeout(ProcessError):
    """No stdout line within the time given (the child may just be quiet: callers with a longer
    deadline of their own keep waiting)."""


# The longest stdout line kept whole: a longer one comes cut into pieces of this size, so what is
# buffered of a child's stdout never exceeds it.
LINE_CAP = 64 * 1024
# The bytes of a child's stderr kept (its last ones): enough for any failure reason.
STDERR_CAP = 64 * 1024


class StderrTail:
    """Reads a child's stderr pipe in a daemon thread until EOF, keeping only the last STDERR_CAP
    bytes: the child never blocks on a full pipe and netprof's memory stays bounded. The thread owns
    the read end and closes it at EOF (when every process holding the write end is gone)."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        self._buf = bytearray()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, name=f"stderr-{name}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self._fd, 65536):
                with self._lock:
                    self._buf += chunk
                    del self._buf[:-STDERR_CAP]
        except OSError:
            pass
        finally:
            os.close(self._fd)

    def text(self, settle: float = 0.0) -> str:
        """What is kept, after waiting up to `settle` seconds for the pipe's EOF (a child that has
        exited may have written its last words just before)."""
        if settle > 0:
            self.thread.join(settle)
        with self._lock:
            return self._buf.decode(errors="replace")

    def __len__(self) -> int:
        with self._lock:
            return len(self._buf)


def parse_cpus(spec: str | Iterable[int] | None) -> list[int] | None:
    """'0', '1,2', '1-3' or a list → sorted CPU list; None/'' → no pinning."""
    if spec is None or spec == "":
        return None
    if not isinstance(spec, str):
        return sorted(set(int(c) for c in spec))
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        elif part:
            cpus.add(int(part))
    return sorted(cpus)


@dataclass
class ManagedProcess:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    _stderr: StderrTail = field(repr=False)
    cpus: list[int] | None = None
    _buf: bytes = field(default=b"", repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def returncode(self) -> int | None:
        return self.popen.poll()

    def readline(self, timeout: float) -> str | None:
        """One stdout line (without newline; one longer than LINE_CAP comes in pieces), or None on EOF.
        Raises LineTimeout when no line came within `timeout`."""
        assert self.popen.stdout is not None, f"{self.name}: stdout was not captured"
        fd = self.popen.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf and len(self._buf) < LINE_CAP:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LineTimeout(f"{self.name}: no output line within {timeout:.1f}s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, LINE_CAP - len(self._buf))  # never more than the cap buffered
            if not chunk:
                if self._buf:
                    line, self._buf = self._buf, b""
                    return line.decode(errors="replace")
                return None
            self._buf += chunk
        end = self._buf.find(b"\n", 0, LINE_CAP)
        line, self._buf = (self._buf[:LINE_CAP], self._buf[LINE_CAP:]) if end < 0 else \
            (self._buf[:end], self._buf[end + 1:])
        return line.decode(errors="replace")

    def drain_stdout(self) -> None:
        """Read and drop the rest of stdout in a daemon thread (after a ready line): a server that
        keeps printing must not block on a pipe nobody reads."""
        out = self.popen.stdout
        if out is None:
            return
        self._buf = b""
        threading.Thread(target=_drop_until_eof, args=(os.dup(out.fileno()),), name=f"stdout-{self.name}",
                         daemon=True).start()

    def wait_line(self, prefix: str, timeout: float) -> str:
        """Read stdout until a line starting with `prefix`; ProcessError if it exits or times out."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            line = self.readline(left)
            if line is None:
                self.popen.wait(timeout=5)
                raise ProcessError(
                    f"{self.name} exited with code {self.popen.returncode} before saying "
                    f"'{prefix}': {self.stderr_tail() or 'no stderr'}"
                )
            if line.startswith(prefix):
                return line

    def stderr_tail(self, max_chars: int = 400) -> str:
        """The last meaningful line(s) of stderr, for one-line failure reasons: without control characters
        (a child, or ssh relaying a remote host, may write terminal escapes: safetext.py)."""
        # A child that has exited: give the reader a moment for what it wrote last.
        text = self._stderr.text(settle=0.5 if self.popen.poll() is not None else 0.0)
        lines = [ln for raw in text.splitlines() if (ln := clean_text(raw, lines=False).strip())]
        return " | ".join(lines[-3:])[-max_chars:]

    def stderr_bytes(self) -> int:
        """How many bytes of stderr are kept (at most STDERR_CAP)."""
        return len(self._stderr)

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout: float = 3.0) -> int | None:
        """SIGTERM the whole process group, then SIGKILL what is left. Returns the exit code."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        # Kill stragglers of the group (fork/prefork children) even when the leader exited.
        self.signal_group(signal.SIGKILL)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        if self.popen.stdout:
            self.popen.stdout.close()
        return self.popen.returncode

    def discard(self) -> tuple[int | None, str]:
        """stop(); returns (exit code, last stderr lines) for messages."""
        rc = self.stop()
        return rc, self.stderr_tail()


def _drop_until_eof(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


# A child's working directory: nothing there is importable or writable by other users.
SAFE_CWD = "/"
# Variables that make a Python child import or run code from somewhere the caller chose.
UNSAFE_PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")
# stderr files of earlier netprof versions (now a pipe) were named for the netprof process that owned
# them, so a later run can tell stale ones and remove them.
_STDERR_NAME = re.compile(r"^netprof-(\d+)-.*\.stderr$")


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` when the caller gives one; else ours without UNSAFE_PYTHON_ENV and with PYTHONSAFEPATH=1
    (Python >= 3.11 then puts neither the cwd nor a script's directory on sys.path)."""
    if env is not None:
        return env
    clean = {k: v for k, v in os.environ.items() if k not in UNSAFE_PYTHON_ENV}
    clean["PYTHONSAFEPATH"] = "1"
    if private := rootenv.private_dir():  # root's children (pip, perf, ...) too: not in the caller's TMPDIR
        clean["TMPDIR"] = private
    return clean


def run(argv: Sequence[str], *, timeout: float, cwd: str | None = None, env: dict[str, str] | None = None,
        **kw) -> subprocess.CompletedProcess:
    """subprocess.run for short tools, output captured as text unless `kw` says otherwise, with the same
    working directory and environment rules as `spawn`."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    start_watchdog()
    return subprocess.run(list(argv), timeout=timeout, cwd=cwd or SAFE_CWD, env=child_env(env),
                          preexec_fn=die_with(os.getpid()), **kw)


PR_SET_PDEATHSIG = 1
_prctl = None


def _resolve_prctl():
    """libc's prctl, looked up in the parent: the child between fork and exec only calls it."""
    global _prctl
    if _prctl is None:
        import ctypes

        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _prctl


def die_with(parent: int):
    """preexec_fn: SIGKILL this child when the thread that forked it exits (PR_SET_PDEATHSIG). If
    `parent` (this process, as seen before the fork) is already gone, the child was re-parented
    before prctl() could arm the signal: it kills itself at once instead of living on as an orphan."""
    prctl = _resolve_prctl()

    def run() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return run


def fork_child(work: Callable[[int], None]) -> tuple[int, int] | None:
    """Fork a child (no exec) that runs `work(w)`, `w` the write end of a pipe, and then leaves without
    the parent's exit handlers (they remove its temp directories): exit code 0, or 1 if `work` raised.
    It dies with the thread that forked it. Returns (its pid, the pipe's read end), or None when the
    fork was refused. Only for short pure computations on what the parent already holds (drawing plots,
    naming addresses): a forked child of a threaded process must not wait on the parent's locks."""
    die_with_parent = die_with(os.getpid())
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:
        code = 1
        try:
            die_with_parent()
            os.close(r)
            work(w)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def io_uring_denied():
    """A seccomp filter (libseccomp's Python binding, Debian's python3-seccomp) under which io_uring_setup fails
    with ENOSYS and every other syscall is allowed: what a container runtime's default profile does to a server,
    whose loop (libuv's, for one) then does its ring work with plain syscalls. Built here, loaded in the child
    (`spawn(deny_io_uring=True)`); it also sets no_new_privs, which a filter needs without CAP_SYS_ADMIN."""
    import seccomp

    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "io_uring_setup")
    return f


def _preexec(cpus: list[int] | None, reservations: Sequence[Reservation], deny_io_uring: bool = False):
    """`reservations`: (function, path templates) creating the files a child writes under its own pid,
    before exec. `deny_io_uring`: the child and everything it starts run under io_uring_denied()."""
    die_with_parent = die_with(os.getpid())
    ring_filter = io_uring_denied() if deny_io_uring else None  # built before the fork: no import in the child

    def run() -> None:
        die_with_parent()
        # Children must not inherit the profiler's SIGINT handling: Ctrl-C is ours to handle.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if cpus:
            os.sched_setaffinity(0, cpus)
        if ring_filter is not None:
            ring_filter.load()
        pid = os.getpid()  # exec keeps it: the files are the child's own
        for create, templates in reservations:
            try:
                for template in templates:
                    create(template.format(pid=pid))
            except OSError as e:
                os.write(2, f"{e}\n".encode(errors="replace"))
                raise

    return run


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat's starttime), or None when it is gone: with
    the pid, the process's identity (a pid the kernel reused has another). Not psutil's create_time(): that adds
    the boot time as the wall clock gives it now (/proc/stat's btime), which moves when the clock is adjusted;
    on this VM it moved within a knee run, and the warm server it had started was taken for a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22; fields 3.. follow the comm's ")"
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """True when `pid` runs (a zombie — killed, not yet reaped — counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def remove_stale(pattern: re.Pattern, directory: str | None = None) -> list[str]:
    """Remove entries of `directory` (by default each of `rootenv.temp_dirs()`: /tmp, not only this
    process's private temp directory) whose name matches `pattern`, whose first group is the pid of a
    netprof process that is gone, and which are ours (not links). Returns the removed paths."""
    if directory is None:
        return [path for d in rootenv.temp_dirs() for path in remove_stale(pattern, d)]
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = pattern.match(name)
        if not m or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode):
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def cleanup_stale(directory: str | None = None) -> list[str]:
    """stderr files and private temp directories (rootenv) of netprof runs that died without cleaning
    up (e.g. SIGKILL)."""
    return remove_stale(_STDERR_NAME, directory) + remove_stale(rootenv.PRIVATE_NAME, directory)


# The watchdog: the one child that must outlive us. Its stdin is a pipe whose write end only this
# process holds (O_CLOEXEC, never passed on); EOF means we are gone, however we died.
WATCHDOG_GRACE_S = 10.0  # how long the watchdog waits for a dying parent to be gone
# The module the watchdog runs (`python -m WATCHDOG_MODULE watchdog PID`). Named, not imported: after we
# die it runs the reapers of the layers above procs (namespaces, sampling scratch), which procs must not
# import; reap.py imports them all.
WATCHDOG_MODULE = "netprof.profiler.run.reap"
_watchdog: subprocess.Popen | None = None
_watchdog_lock = threading.Lock()
_is_watchdog = False  # the watchdog itself starts none (its cleanup runs `ip` through run())


def start_watchdog() -> subprocess.Popen | None:
    """Start (once per process) `python -m WATCHDOG_MODULE watchdog PID`, which sleeps until this
    process exits and then runs every reaper (`reap.reap_dead_runs()`): a netprof killed with SIGKILL
    leaves no stderr files, scratch or namespaces even if netprof never runs again. None when it cannot
    start (the next run and `netprof doctor` clean up then)."""
    global _watchdog
    if _is_watchdog:
        return None
    with _watchdog_lock:
        if _watchdog is not None and _watchdog.poll() is None:
            return _watchdog
        try:
            _watchdog = subprocess.Popen(
                [sys.executable, "-m", WATCHDOG_MODULE, "watchdog", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=SAFE_CWD,
                env=child_env(), start_new_session=True)  # no PDEATHSIG: it is meant to outlive us
        except OSError:
            _watchdog = None
        return _watchdog


def wait_for_parent_exit(parent: int) -> bool:
    """The watchdog's wait: until stdin's EOF (`parent` is gone or going), then until `parent` has
    exited (up to WATCHDOG_GRACE_S). True when it is gone; the caller then reaps."""
    global _is_watchdog
    _is_watchdog = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while os.read(0, 4096):  # nothing is ever written: this returns at EOF, when the parent is gone
        pass
    deadline = time.monotonic() + WATCHDOG_GRACE_S
    while pid_alive(parent) and time.monotonic() < deadline:  # EOF comes before the exit completes
        time.sleep(0.05)
    return not pid_alive(parent)


# What a child needs created before exec, under its own pid: (create(path), path templates with {pid}).
Reservation = tuple[Callable[[str], None], Sequence[str]]
# A spawn hook: given the child's argv and environment, its reservation or None. Layers above procs
# register theirs (flamegraphs/jitdump.py: CPython's perf-map files) at import.
SpawnHook = Callable[[Sequence[str], Mapping[str, str]], Reservation | None]
_spawn_hooks: list[SpawnHook] = []


def add_spawn_hook(hook: SpawnHook) -> None:
    """Have every later `spawn` ask `hook` what to create for the child before it execs (once per hook)."""
    if hook not in _spawn_hooks:
        _spawn_hooks.append(hook)


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    cpus: Iterable[int] | str | None = None,
    env: dict[str, str] | None = None,
    capture_stdout: bool = True,
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
    user: int | None = None,
    group: int | None = None,
    stdio: int | None = None,
    deny_io_uring: bool = False,
) -> ManagedProcess:
    """Start `argv` (as uid `user`/gid `group` when given, with no supplementary groups) in its own
    session, pinned to `cpus`, stderr to a pipe netprof reads (StderrTail), in SAFE_CWD (or `cwd`) with
    `child_env(env)`, inheriting no descriptor but `pass_fds`, killed when the calling thread exits
    (PR_SET_PDEATHSIG, armed after the uid change, which would clear it: call spawn from a thread that
    outlives the child). `stdio`: a descriptor (a socket) that is the child's stdin and stdout both (an ssh
    session carrying a private stream: sshlink.py). `deny_io_uring`: io_uring_setup fails with ENOSYS in the
    child and its descendants (io_uring_denied). A CPython child asked to write
    perf maps (-X perf / perf_jit) gets its /tmp/perf-PID.map and /tmp/jit-PID.dump created for it
    first (jitdump's spawn hook), so no planted link is followed."""
    start_watchdog()

    cpu_list = parse_cpus(cpus) if isinstance(cpus, (str, type(None))) else parse_cpus(list(cpus))
    env = child_env(env)
    reservations = [r for hook in _spawn_hooks if (r := hook(argv, env))]
    err_r, err_w = os.pipe()  # both close-on-exec: only the child's fd 2 (a dup) holds the write end
    try:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL if stdio is None else stdio,
            stdout=stdio if stdio is not None else subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
            stderr=err_w,
            env=env,
            cwd=cwd or SAFE_CWD,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            preexec_fn=_preexec(cpu_list, reservations, deny_io_uring),
            user=user, group=group, extra_groups=[] if user is not None else None,
        )
    except OSError as e:
        os.close(err_w)
        os.close(err_r)
        raise ProcessError(f"cannot start {name} ({argv[0]}): {e.strerror}") from e
    except subprocess.SubprocessError as e:  # _preexec refused (its line is on the pipe)
        os.close(err_w)
        why = StderrTail(err_r, name).text(settle=2.0).strip().splitlines()[-1:] or [str(e)]
        raise ProcessError(f"cannot start {name}: {why[0]}") from None
    os.close(err_w)
    return ManagedProcess(name=name, argv=list(argv), popen=popen, _stderr=StderrTail(err_r, name), cpus=cpu_list)


class ProcessGroup:
    """Owns every child of one scope; `with ProcessGroup() as pg:` stops them all on exit."""

    def __init__(self) -> None:
        self.procs: list[ManagedProcess] = []

    def spawn(self, name: str, argv: Sequence[str], **kw) -> ManagedProcess:
        proc = spawn(name, argv, **kw)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        # Reverse order: the loader (started last) goes before the backend it talks to.
        for proc in reversed(self.procs):
            proc.discard()
        self.procs.clear()

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

