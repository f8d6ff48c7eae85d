"""Results directories against a second local user (issue 31, items 2, 3, 5 and 9): `netprof report`
writes in place only into a directory root or the sudo caller owns and nobody else may write, reads
no planted link; results are private (0700/0600, or the sudo caller's) and carry no secret; text
from a results directory reaches no terminal with its control characters; `flamegraph diff -o` follows
the rules of `--out`. Every test plants what the second user could and runs the real CLI as root."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from helpers import require, require_tool, root_only_dir, run_netprof

SECRET = "s3cr3t-ROOT-ONLY-7f1e"
pytestmark = pytest.mark.concurrent  # files, modes, owners and refusals; no probes, runs pass --wait
TOKEN = "T0ken" + "x" * 27  # 32 characters
API_KEY = "k3y-VALUE-9d2a"
BODY = "body-SECRET-payload-41c7"
ESC = "\x1b"


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """One small real run, shared by the module (each test copies it)."""
    require(os.geteuid() == 0, "root (the tests are about what root reads and writes for a second user)")
    out = tmp_path_factory.mktemp("base") / "run"
    res = run_netprof("run", "selector", "-c", "2", "-d", "0.3", "-r", "1", "--warmup", "0", "--no-probes",
                      "--out", str(out), "--wait")
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def _copy_to_user(base_run: Path, user, name: str = "run") -> Path:
    """A copy of the run in the user's home, owned by the user (what they could have made themselves)."""
    dst = Path(user.home) / name
    shutil.copytree(base_run, dst)
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(dst)], check=True)
    return dst




def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
    env.update(extra)
    return env


def _one_line_error(res: subprocess.CompletedProcess) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def _all_bytes(d: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and not p.is_symlink())


# ------------------------------------------------------------------------------------------------
# Item 2: `netprof report DIR` on a directory another user controls


def test_report_in_place_of_a_users_dir_writes_nothing_through_a_planted_plots_link(base_run, local_user, tmp_path):
    """The user's copy of a run with `plots -> /root/somedir`: run by root (no sudo), the report is
    refused in place (the directory is someone else's); run via that user's sudo, the link is
    refused. Either way nothing lands in the victim directory."""
    run, victim = _copy_to_user(base_run, local_user), root_only_dir(tmp_path)
    shutil.rmtree(run / "plots")
    local_user.must("ln", "-s", str(victim), str(run / "plots"))
    res = run_netprof("report", str(run), env=_env())
    assert res.returncode == 2
    assert "--out" in _one_line_error(res)
    res = run_netprof("report", str(run), env=_env(**local_user.sudo_env()))
    assert res.returncode == 2
    assert "plots" in _one_line_error(res)
    assert list(victim.iterdir()) == []


def test_report_in_place_of_a_group_writable_dir_is_refused(base_run, local_user):
    """A run directory of the sudo caller that others may write into: in place is refused with one
    line naming --out, and nothing is (re)written there."""
    run = _copy_to_user(base_run, local_user)
    (run / "report.md").unlink()
    local_user.must("chmod", "0777", str(run))
    res = run_netprof("report", str(run), env=_env(**local_user.sudo_env()))
    assert res.returncode == 2
    assert "--out" in _one_line_error(res)
    assert not (run / "report.md").exists()


@pytest.mark.parametrize("planted", ["meta.json", "flamegraphs", "stacks"])
def test_report_refuses_a_planted_input_link(base_run, local_user, tmp_path, planted):
    """`meta.json -> /root/secret.json`, or `flamegraphs/` or `stacks/` linked to a root-only directory:
    refused with one line naming it, with and without --out, and the secret is in no output."""
    run = _copy_to_user(base_run, local_user)
    victim = root_only_dir(tmp_path)
    (victim / "secret.json").write_text(json.dumps({"cpu_model": SECRET, "kernel": SECRET}))
    (victim / "cell").mkdir()
    (victim / "cell" / "oncpu.svg").write_text("<svg/>")
    (victim / "index.json").write_text(json.dumps([{"dir": "flamegraphs/cell", "notes": [SECRET]}]))
    (victim / f"{SECRET}.json").write_text("{}")
    target = victim / "secret.json" if planted == "meta.json" else victim
    if planted == "meta.json":
        (run / "meta.json").unlink()
    local_user.must("ln", "-s", str(target), str(run / planted))
    out = tmp_path / "report"
    for env in (_env(), _env(**local_user.sudo_env())):  # root alone refuses the user's files already
        res = run_netprof("report", str(run), "--out", str(out), env=env)
        assert res.returncode == 2, res.stdout + res.stderr
        assert ("SUDO_UID" not in env or planted in _one_line_error(res)) and _one_line_error(res)
        assert SECRET not in res.stdout + res.stderr
    res = run_netprof("report", str(run), env=_env(**local_user.sudo_env()))  # in place: the same
    assert res.returncode == 2 and planted in _one_line_error(res)
    assert SECRET.encode() not in _all_bytes(run) + (_all_bytes(out) if out.exists() else b"")


def test_report_of_a_bracketed_name_is_one_line_exit_2():
    """rich markup in an error message (the path) is text, not a MarkupError traceback."""
    res = run_netprof("report", "[/x]")
    assert res.returncode == 2
    assert "[/x]" in _one_line_error(res)


# ------------------------------------------------------------------------------------------------
# Item 3: results are private, and carry no secret


@pytest.fixture
def shared_parent():
    """A root-owned directory every user may enter (results go in it; the user tries to read them)."""
    d = Path(tempfile.mkdtemp(prefix="netprof-test-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _http_run(out: Path, body_file: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_netprof("run", "http_asyncio", "-c", "2", "-d", "0.3", "-r", "1", "--warmup", "0", "--no-probes",
                       "--wait", "--out", str(out), "--header", f"Authorization: Bearer {TOKEN}",
                       "--header", f"X-Api-Key: {API_KEY}", "--body-file", str(body_file), *extra,
                       env=env or _env())


def _modes(d: Path) -> set[tuple[str, int]]:
    return {("d" if p.is_dir() else "f", stat.S_IMODE(p.lstat().st_mode)) for p in [d, *d.rglob("*")]}


def test_http_secrets_are_redacted_and_results_are_the_sudo_callers(local_user, shared_parent):
    """A run via the user's sudo with an Authorization header, an API key and a body file: no file of
    the results directory (parquet included) holds a secret; the redacted forms keep the scheme and
    the length; everything is 0700/0600 and the user's, who can read it."""
    body = shared_parent / "body.txt"
    body.write_text(BODY)
    out = shared_parent / "run"
    res = _http_run(out, body, env=_env(**local_user.sudo_env()))
    assert res.returncode == 0, res.stderr[-2000:]
    data = _all_bytes(out)
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    for secret in (TOKEN, API_KEY, BODY):
        assert secret.encode() not in data, secret
    meta = json.loads((out / "meta.json").read_text())
    assert "Authorization: Bearer <redacted, 32 chars>" in meta["config"]["headers"]
    assert meta["config"]["body"].startswith(f"<redacted body, {len(BODY)} bytes, sha256:")
    assert "<redacted" in meta["command"]
    assert _modes(out) <= {("d", 0o700), ("f", 0o600)}, _modes(out)
    for p in [out, *out.rglob("*")]:
        assert (p.lstat().st_uid, p.lstat().st_gid) == (local_user.uid, local_user.gid), p
    read = local_user.run(["cat", str(out / "meta.json")])
    assert read.returncode == 0 and "redacted" in read.stdout


def test_results_of_a_root_run_are_private_and_keep_secrets_keeps_them(local_user, shared_parent):
    """Run by root itself: 0700/0600, root's, unreadable by the other user; --keep-secrets writes them."""
    body = shared_parent / "body.txt"
    body.write_text(BODY)
    out = shared_parent / "run"
    res = _http_run(out, body, "--keep-secrets")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _modes(out) <= {("d", 0o700), ("f", 0o600)}, _modes(out)
    assert all(p.lstat().st_uid == 0 for p in [out, *out.rglob("*")])
    read = local_user.run(["cat", str(out / "meta.json")])
    assert read.returncode != 0 and TOKEN not in read.stdout
    meta = (out / "meta.json").read_text()
    assert TOKEN in meta and API_KEY in meta and BODY in meta


def test_header_file_headers_are_sent_redacted_and_its_rules(local_user, shared_parent, tmp_path):
    """--header-file: its headers are used (and redacted in what is written); a bad line is one line
    naming its number (not its content); a link planted in its place, or a root-only file named via
    the user's sudo, is refused (root would send it to the user's server)."""
    hfile = shared_parent / "headers.txt"
    hfile.write_text(f"# comment\n\nX-Auth-Token: {TOKEN}\n")
    out = shared_parent / "run"
    res = run_netprof("run", "http_asyncio", "-c", "2", "-d", "0.3", "-r", "1", "--warmup", "0", "--no-probes",
                      "--wait", "--out", str(out), "--header-file", str(hfile))
    assert res.returncode == 0, res.stderr[-2000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["headers"] == ["X-Auth-Token: <redacted, 32 chars>"]
    assert TOKEN.encode() not in _all_bytes(out)

    hfile.write_text(f"X-Ok: 1\nnot a header {SECRET}\n")
    res = run_netprof("run", "http_asyncio", "--header-file", str(hfile), "-c", "2")
    assert res.returncode == 2 and "line 2" in _one_line_error(res) and SECRET not in res.stderr

    root_only = root_only_dir(tmp_path) / "secret.txt"
    root_only.write_text(f"X-Secret: {SECRET}\n")
    link = Path(local_user.home) / "h.txt"
    local_user.must("ln", "-s", str(root_only), str(link))
    for named, env in ((link, _env()), (root_only, _env(**local_user.sudo_env()))):
        res = run_netprof("run", "http_asyncio", "--header-file", str(named), "-c", "2", env=env)
        assert res.returncode == 2, res.stdout + res.stderr
        assert str(named) in _one_line_error(res) and SECRET not in res.stderr


def test_header_help_says_the_command_line_is_public():
    res = run_netprof("run", "--help", env=_env(COLUMNS="200"))
    assert "/proc" in res.stdout and "--header-file" in res.stdout and "--keep-secrets" in res.stdout


# ------------------------------------------------------------------------------------------------
# Item 5: control characters of a crafted run reach no terminal and no report


def test_control_characters_of_a_crafted_run_reach_no_output(base_run, tmp_path):
    """A run whose backend name and meta carry ESC and CSI sequences: `compare` and `report` print
    none, and the report files hold none."""
    crafted = tmp_path / "crafted"
    shutil.copytree(base_run, crafted)
    evil = f"sel{ESC}[31mector\x9b2J"
    for name in ("results.parquet", "per_conn.parquet"):
        df = pd.read_parquet(crafted / name)
        df["backend"] = evil
        df.to_parquet(crafted / name, index=False)
    meta = json.loads((crafted / "meta.json").read_text())
    meta["cpu_model"] = f"{ESC}]0;owned{ESC}\\CPU"
    meta["command"] = f"netprof run {ESC}[2J"
    (crafted / "meta.json").write_text(json.dumps(meta))
    res = run_netprof("compare", str(base_run), str(crafted), "--out", str(tmp_path / "cmp"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "sel[31mector" in res.stdout  # the text is kept, the control characters are not
    res2 = run_netprof("report", str(crafted), "--out", str(tmp_path / "rep"))
    assert res2.returncode == 0, res2.stderr[-2000:]
    for text in (res.stdout, res.stderr, res2.stdout, res2.stderr):
        assert ESC not in text and "\x9b" not in text
    for d in (tmp_path / "cmp", tmp_path / "rep"):
        data = _all_bytes(d).decode("utf-8", "replace")
        assert ESC not in data and "\x9b" not in data and "\\u001b" not in data


# ------------------------------------------------------------------------------------------------
# Item 9: `flamegraph diff -o` follows the rules of --out


@pytest.fixture
def folded(tmp_path) -> tuple[Path, Path]:
    require_tool("inferno-flamegraph")
    a, b = tmp_path / "a.folded", tmp_path / "b.folded"
    a.write_text("main;work 10\nmain;idle 5\n")
    b.write_text("main;work 20\nmain;idle 5\n")
    return a, b


def test_flamegraph_diff_refuses_an_out_dir_another_user_may_write(folded, local_user):
    """-o into the user's directory, root not run via that user's sudo: refused, nothing written."""
    target = Path(local_user.home) / "out"
    local_user.must("mkdir", str(target))
    res = run_netprof("flamegraph", "diff", str(folded[0]), str(folded[1]), "-o", str(target / "x.svg"), env=_env())
    assert res.returncode == 2
    assert "-o" in _one_line_error(res)
    assert list(target.iterdir()) == []


def test_flamegraph_diff_does_not_follow_a_link_at_the_out_path(folded, local_user, tmp_path):
    """Via the user's sudo, -o names a link the user planted to a root-only file: the file keeps its
    content, and the SVG is a new file, the user's."""
    victim = root_only_dir(tmp_path) / "keep.svg"
    victim.write_text("root's")
    target = Path(local_user.home) / "x.svg"
    local_user.must("ln", "-s", str(victim), str(target))
    inputs = [shutil.copy(f, local_user.home) for f in folded]  # files the caller can read (read_named_file)
    res = run_netprof("flamegraph", "diff", *inputs, "-o", str(target), env=_env(**local_user.sudo_env()))
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == "root's"
    st = target.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == local_user.uid and stat.S_IMODE(st.st_mode) == 0o600
