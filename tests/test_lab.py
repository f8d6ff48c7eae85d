"""scripts/lab.sh (issue 36): SSH "hosts" in network namespaces of this machine, each with a real sshd
(Debian's openssh-server), on a bridge in the root namespace; `up N` prints the ssh config to use.

Needs root and /usr/sbin/sshd: without them the tests skip, except where they must run (CI=true or
NETPROF_REQUIRE_BPF=1: CI runs as root after scripts/setup-system.sh), where they fail instead.
The lab is one per machine (/run/netprof-lab): a lab already up when a test starts is someone else's,
so the test fails saying so rather than take it down. ~6 s on the 2-core machine.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import psutil
import pytest

from helpers import REQUIRE_BPF, machine_lock, require

ROOT = Path(__file__).resolve().parents[1]
LAB_SH = ROOT / "scripts" / "lab.sh"
LAB_DIR = "/run/netprof-lab"
CONFIG = f"{LAB_DIR}/ssh_config"
SSHD = "/usr/sbin/sshd"

# Namespaces and real sshds: not the edit loop's fast tier (make test-fast), though no netprof run starts. Nothing
# here is timed, so the first pass runs it beside other tests; one lab per machine, so a test that brings one up
# holds _one_lab() (its tests on other workers wait their turn).
pytestmark = [pytest.mark.e2e, pytest.mark.concurrent]


def _lab(*args: str, timeout: float = 60, sudo: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """scripts/lab.sh as root itself (no SUDO_*, whatever this session got), or as through sudo (`sudo`: its
    SUDO_UID/SUDO_GID)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")} | (sudo or {})
    return subprocess.run(["bash", str(LAB_SH), *args], capture_output=True, text=True, timeout=timeout, env=env)


def _ssh(host: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", CONFIG, host, command], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def _require_lab_machine() -> None:
    why = None
    if os.geteuid() != 0:
        why = "not root (the lab makes network namespaces, a bridge and sshd processes)"
    elif not os.access(SSHD, os.X_OK):
        why = f"{SSHD} is missing (Debian's openssh-server; scripts/setup-system.sh installs it)"
    if why and REQUIRE_BPF:
        pytest.fail(f"NETPROF_REQUIRE_BPF=1 but {why}")
    require(why is None, why or "")  # skips, or fails under CI=true


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return [line.split()[0] for line in out.splitlines() if re.match(r"^nplab\d+\b", line)]


def _links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10).stdout
    names = [line.split(": ")[1].split("@")[0] for line in out.splitlines() if ": " in line]
    return [n for n in names if n == "nplab0" or re.fullmatch(r"nplabv\d+", n)]


def _lab_sshds() -> list[str]:
    """sshd processes started from a config under the lab directory (zombies have no command line)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "sshd" in cmd and f"{LAB_DIR}/" in cmd:
            found.append(f"{p.info['pid']}: {cmd[:120]}")
    return found


def _leftovers() -> list[str]:
    return _namespaces() + _links() + _lab_sshds() + ([LAB_DIR] if os.path.lexists(LAB_DIR) else [])


def _one_lab():
    """This module's tests one at a time on the machine's one lab. (xdist's --dist loadgroup would do this by
    worker, but pytest-xdist 3.8 does not group under pytest 9.2: the node ids it renames keep their names.)"""
    return machine_lock("lab")


@pytest.fixture
def lab():
    """`scripts/lab.sh up 2`'s result; `down` afterwards, whatever happened."""
    _require_lab_machine()
    with _one_lab():
        yield from _lab_up()


def _lab_up():
    left = _leftovers()
    if left:
        pytest.fail(f"a lab is already up ({', '.join(left)}): someone else's? run scripts/lab.sh down first")
    try:
        yield _lab("up", "2")
    finally:
        down = _lab("down")
        assert down.returncode == 0, down.stderr


def test_up_two_hosts_reachable_over_ssh_and_each_other(lab):
    assert lab.returncode == 0, lab.stderr + lab.stdout
    assert lab.stdout.splitlines()[-1] == CONFIG and lab.stdout.endswith(CONFIG + "\n"), lab.stdout

    st = os.lstat(LAB_DIR)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700

    config = Path(CONFIG).read_text()
    hosts = re.findall(r"(?m)^\s*Host\s+(.+?)\s*$", config)
    assert hosts == ["lab1", "lab2"], config
    assert "*" not in config and "Match" not in config, config
    for key in ("BatchMode yes", "StrictHostKeyChecking yes", "IdentitiesOnly yes", "User root"):
        assert config.count(key) == 2, (key, config)

    for i in (1, 2):
        res = _ssh(f"lab{i}", "ip -4 -o addr show")
        assert res.returncode == 0, res.stderr
        assert f"inet 10.213.0.{i}/24" in res.stdout, res.stdout
        assert "10.213.0.254" not in res.stdout  # the bridge's address is the root namespace's

    # From lab1's shell, lab2's sshd answers over the bridge.
    res = _ssh("lab1", "bash -c 'exec 3<>/dev/tcp/10.213.0.2/22 && head -c 7 <&3'")
    assert res.returncode == 0 and res.stdout == "SSH-2.0", (res.stdout, res.stderr)

    # Each sshd listens on its host's address only; nothing (the system's sshd) on the root namespace's 22.
    listening = subprocess.run(["ss", "-Htln", "sport = :22"], capture_output=True, text=True, timeout=10)
    assert listening.returncode == 0 and listening.stdout.strip() == "", listening.stdout
    res = _ssh("lab2", "ss -Htln 'sport = :22'")
    assert res.stdout.split()[3:4] == ["10.213.0.2:22"] and len(res.stdout.splitlines()) == 1, res.stdout


def test_down_removes_everything_and_twice_is_fine(lab):
    assert lab.returncode == 0, lab.stderr + lab.stdout
    assert sorted(_namespaces()) == ["nplab1", "nplab2"]
    assert len(_lab_sshds()) == 2, _lab_sshds()

    first = _lab("down")
    assert first.returncode == 0, first.stderr
    assert _namespaces() == []
    assert _links() == []
    assert subprocess.run(["ip", "link", "show", "nplab0"], capture_output=True, timeout=10).returncode != 0
    assert _lab_sshds() == []
    assert not os.path.lexists(LAB_DIR)

    second = _lab("down")
    assert second.returncode == 0, second.stderr
    assert _leftovers() == []


def test_up_again_is_refused_while_a_lab_is_up(lab):
    assert lab.returncode == 0, lab.stderr + lab.stdout
    again = _lab("up", "1")
    assert again.returncode == 1 and "down first" in again.stderr, again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert _ssh("lab2", "true").returncode == 0  # the refusal left the lab as it was


@pytest.mark.parametrize("count", ["0", "17", "x"])
def test_bad_host_count_is_one_line_exit_2(count):
    res = _lab("up", count)
    assert res.returncode == 2, res
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1 and "1 to 16" in res.stderr, res.stderr


def test_up_through_sudo_gives_the_caller_a_key_of_their_own_that_down_removes(local_user):
    """netprof runs ssh as the sudo caller, who cannot read root's /run/netprof-lab: `up` through sudo copies the
    client key and known_hosts into /run/netprof-lab.UID (the caller's, 0700) with an ssh config naming them, and
    prints that config. The caller reaches the lab with it; another user cannot read the key (it is root on this
    machine: the lab's hosts are namespaces of it); `down` removes the copy."""
    _require_lab_machine()
    with _one_lab():
        _up_through_sudo(local_user)


def _up_through_sudo(local_user) -> None:
    left = _leftovers()
    if left:
        pytest.fail(f"a lab is already up ({', '.join(left)}): someone else's? run scripts/lab.sh down first")
    mine = f"{LAB_DIR}.{local_user.uid}"
    try:
        up = _lab("up", "1", sudo={"SUDO_UID": str(local_user.uid), "SUDO_GID": str(local_user.gid)})
        assert up.returncode == 0, up.stderr + up.stdout
        assert up.stdout.splitlines()[-1] == f"{mine}/ssh_config", up.stdout
        st = os.lstat(mine)
        assert stat.S_ISDIR(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (local_user.uid, 0o700)
        key = os.lstat(f"{mine}/id_ed25519")
        assert (key.st_uid, stat.S_IMODE(key.st_mode)) == (local_user.uid, 0o600)
        assert f"IdentityFile {mine}/id_ed25519" in Path(f"{mine}/ssh_config").read_text()
        res = local_user.run(["ssh", "-F", f"{mine}/ssh_config", "lab1", "hostname"], stdin=subprocess.DEVNULL)
        assert res.returncode == 0 and res.stdout.strip() == "lab1", res.stderr
        other = subprocess.run(["cat", f"{mine}/id_ed25519"], user=65534, group=65534, extra_groups=[],
                               capture_output=True, timeout=10)
        assert other.returncode != 0 and not other.stdout  # nobody: permission denied
    finally:
        down = _lab("down")
    assert down.returncode == 0, down.stderr
    assert not os.path.lexists(mine) and _leftovers() == []
