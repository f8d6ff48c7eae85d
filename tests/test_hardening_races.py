"""Swaps a second local user can make while root writes into their results directory (issue 31, review
of items 2 and 3). Under sudo the results directory and its subdirectories are the caller's, so they
may rename one (or the results directory itself, in their own parent) and put a symlink in its place
between netprof's mkdir and its write. These tests make the swap first, then let root write: the
outcome is what a lost race would give, without timing. Root's own links on the way are still followed.

In-process calls (atomic.*, render.*) run as root with SUDO_UID/SUDO_GID set, as under `sudo netprof`;
the CLI test runs the real `netprof` with the environment `sudo -E` leaves."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from helpers import require, require_tool, root_only_dir, run_netprof
from netprof.profiler.analysis import compare
from netprof.profiler.core import atomic
from netprof.profiler.core.errors import InputError

SECRET = "s3cr3t-ROOT-ONLY-race-5b9e"


@pytest.fixture
def as_sudo(local_user, monkeypatch):
    """This process as `sudo netprof` run by the second user: what atomic writes becomes theirs."""
    require(os.geteuid() == 0, "root")
    for k, v in local_user.sudo_env().items():
        monkeypatch.setenv(k, v)
    return local_user




def _users_run(user) -> Path:
    run = Path(user.home) / "run"
    user.must("mkdir", "-m", "0700", str(run))
    return run


def _root_link(target: Path) -> Path:
    """A symlink root made in /tmp (sticky, root-owned): links of root's are followed."""
    name = tempfile.mktemp(prefix="netprof-race-", dir="/tmp")
    os.symlink(target, name)
    return Path(name)


@pytest.mark.parametrize("sub", ["plots", "flamegraphs/cell", "stacks"])
def test_write_into_a_subdir_the_user_swapped_for_a_link_is_refused(as_sudo, tmp_path, sub):
    """plots/ (or flamegraphs/<cell>/, stacks/) made by root, then renamed by the user and replaced by
    a link to a root-only directory: root's next write there is refused and lands nowhere in the victim.
    The same results directory reached through a root-made link is written as before."""
    victim = root_only_dir(tmp_path)
    run = _users_run(as_sudo)
    via_root_link = _root_link(run)
    try:
        made = atomic.make_subdir(via_root_link, sub)
        atomic.write_text(made / "before.svg", "ok")  # through root's link: followed
        assert (run / sub / "before.svg").read_text() == "ok"
        assert (run / sub).stat().st_uid == as_sudo.uid

        as_sudo.must("mv", str(run / sub), str(run / f"{sub}.old"))
        as_sudo.must("ln", "-s", str(victim), str(run / sub))
        for base in (run, via_root_link):
            with pytest.raises(InputError, match=f"{sub}.*symlink"):
                atomic.write_text(base / sub / "x.svg", SECRET)
            with pytest.raises(InputError):
                atomic.write_bytes(base / sub / "y.svg", SECRET.encode())
        assert list(victim.iterdir()) == []
    finally:
        via_root_link.unlink()


def test_results_dir_swapped_for_a_link_in_the_users_parent_is_refused(as_sudo, tmp_path, monkeypatch):
    """--out ~/runs/x made by root (the user's), then the user puts `x -> /root/dir` in its place: no
    file, subdirectory or run directory of root's lands in the victim, by absolute or relative path."""
    victim = root_only_dir(tmp_path)
    runs = Path(as_sudo.home) / "runs"
    as_sudo.must("mkdir", str(runs))
    out = atomic.ensure_out_dir(runs / "x")
    assert out.stat().st_uid == as_sudo.uid

    as_sudo.must("mv", str(out), str(runs / "x.old"))
    as_sudo.must("ln", "-s", str(victim), str(out))
    with pytest.raises(InputError, match="x.*symlink"):
        atomic.write_text(out / "meta.json", SECRET)
    with pytest.raises(InputError):
        atomic.make_subdir(out, "plots")
    with pytest.raises(InputError):
        atomic.create_dir(out / "20250101-000000-abcdef")
    with pytest.raises(InputError):
        with atomic.open_atomic(out / "results.parquet", "wb") as f:
            f.write(SECRET.encode())
    monkeypatch.chdir(runs)
    with pytest.raises(InputError):
        atomic.write_text("x/summary.json", SECRET)
    assert list(victim.iterdir()) == []


def test_root_links_on_the_path_are_followed_and_users_links_inside_them_are_not(as_sudo, tmp_path):
    """A chain of root's links (absolute, relative, with `..`) is followed to the real directory; a
    link of the user's at its end is not."""
    real = Path(tempfile.mkdtemp(prefix="netprof-race-real-", dir="/tmp"))
    first = _root_link(Path("..") / "tmp" / real.name)  # relative, through /tmp/..
    second = _root_link(first)  # absolute, to a link
    try:
        atomic.write_text(second / "a.txt", "ok")
        assert (real / "a.txt").read_text() == "ok"
        os.chown(real, as_sudo.uid, as_sudo.gid)  # now the user's: they may plant a link inside
        victim = root_only_dir(tmp_path)
        as_sudo.must("ln", "-s", str(victim), str(real / "plots"))
        with pytest.raises(InputError, match="plots"):
            atomic.write_text(second / "plots" / "x.svg", SECRET)
        assert list(victim.iterdir()) == []
    finally:
        for link in (second, first):
            link.unlink()
        subprocess.run(["rm", "-rf", str(real)], check=True)


# ------------------------------------------------------------------------------------------------
# Files root hands to inferno


def _secret_folded(tmp_path: Path) -> Path:
    """A root-only file whose lines inferno would draw (folded format)."""
    d = tmp_path / "secret"
    d.mkdir(mode=0o700)
    f = d / "oncpu.folded"
    f.write_text(f"main;{SECRET} 7\n")
    f.chmod(0o600)
    return f


def _all_bytes(d: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("swap", ["file", "cell dir"])
def test_render_refuses_a_folded_file_swapped_for_a_link_to_a_root_only_file(as_sudo, tmp_path, swap):
    """flamegraphs/<cell>/oncpu.folded (or the cell directory) in the user's results directory swapped
    for a link to a root-only folded file (or its directory): no SVG, and the secret is in none."""
    require_tool("inferno-flamegraph")
    from netprof.flamegraphs import render

    secret = _secret_folded(tmp_path)
    run = _users_run(as_sudo)
    cell = atomic.make_subdir(run, "flamegraphs/cell")
    atomic.write_text(cell / "oncpu.folded", "main;work 10\n")
    render.render(str(cell / "oncpu.folded"), str(cell / "oncpu.svg"), view="oncpu", title="t")  # works
    assert b"work" in (cell / "oncpu.svg").read_bytes()

    if swap == "file":
        as_sudo.must("rm", str(cell / "oncpu.folded"))
        as_sudo.must("ln", "-s", str(secret), str(cell / "oncpu.folded"))
        svg = cell / "oncpu.svg"
    else:
        as_sudo.must("mv", str(cell), str(run / "flamegraphs" / "old"))
        as_sudo.must("ln", "-s", str(secret.parent), str(cell))
        svg = run / "flamegraphs" / "new.svg"  # the SVG's own directory is not the swapped one
    with pytest.raises(InputError, match="oncpu.folded|cell"):
        render.render(str(cell / "oncpu.folded"), str(svg), view="oncpu", title="t")
    assert SECRET.encode() not in _all_bytes(run)
    assert [p.name for p in secret.parent.iterdir()] == ["oncpu.folded"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
    env.update(extra)
    return env


def test_flamegraph_diff_reads_only_files_the_sudo_caller_could_read(local_user, tmp_path):
    """`sudo netprof flamegraph diff A B`: A a link the user made to a root-only folded file, or that
    file named directly: refused with one line, no SVG, the secret nowhere. The user's own files work."""
    require(os.geteuid() == 0, "root")
    require_tool("inferno-flamegraph")
    secret = _secret_folded(tmp_path)
    home = Path(local_user.home)
    own = home / "b.folded"
    local_user.must("sh", "-c", f"printf 'main;work 10\\n' > {own}")
    link = home / "a.folded"
    local_user.must("ln", "-s", str(secret), str(link))
    env = _env(**local_user.sudo_env())
    for a in (link, secret):
        svg = home / "d.svg"
        res = run_netprof("flamegraph", "diff", str(a), str(own), "-o", str(svg), env=env)
        assert res.returncode == 2, res.stdout + res.stderr
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and str(a) in lines[0], res.stderr
        assert not svg.exists()
        assert SECRET not in res.stdout + res.stderr
    res = run_netprof("flamegraph", "diff", str(own), str(own), "-o", str(home / "ok.svg"), env=env)
    assert res.returncode == 0, res.stderr
    st = (home / "ok.svg").lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == local_user.uid


def test_compare_gives_inferno_the_folded_stacks_it_read_not_a_path_in_a_run(tmp_path):
    """compare's differential flamegraph reads each run's .folded through results.open_input (no link)
    and hands inferno private copies (render.diff_stacks): a .folded swapped for a link is refused, and
    the real pair renders, its subtitle naming the two runs. The Run records are built here (a changed
    cell needs two 3-round runs with --flamegraph, ~40 s); the files and inferno are real."""
    require_tool("inferno-diff-folded")
    row = {"backend": "selector", "interpreter": "", "framing": "message", "protocol": "echo", "connections": 2,
           "pipeline": 1, "pinned": True}
    runs = []
    for name, stacks in (("base", "main;recv 10\nmain;send 10\n"), ("new", "main;recv 10\nmain;send 30\n")):
        cell_dir = tmp_path / name / "flamegraphs" / compare.schema.cell_slug(row)
        cell_dir.mkdir(parents=True)
        (cell_dir / "oncpu.folded").write_text(stacks)
        runs.append(compare.Run(given=name, dir=tmp_path / name, name=name, df=pd.DataFrame(), meta={}))
    changed = {"label": "selector c=2", "metrics": {"msgs_per_sec": {"verdict": "slower", "delta": -0.5}}}
    out = tmp_path / "cmp"
    out.mkdir()
    found = compare._flame_diff(runs[0], runs[1], row, row, changed, out, 1)
    svg = (out / found["oncpu"]["svg"]).read_text()
    assert "B = new oncpu vs A = base oncpu" in svg and "send" in svg

    secret = root_only_dir(tmp_path) / "secret.folded"
    secret.write_text("ROOT-ONLY-SECRET 1\n")
    folded = runs[1].dir / "flamegraphs" / compare.schema.cell_slug(row) / "oncpu.folded"
    folded.unlink()
    folded.symlink_to(secret)
    with pytest.raises(InputError):
        compare._flame_diff(runs[0], runs[1], row, row, changed, out, 2)
