"""probes/btf.py: member offsets of the running kernel's structs from its BTF, against bpftool's own reading of
the same file (an independent parser: `bpftool btf dump file ... format raw`)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from helpers import require_tool
from netprof.probes.btf import BTF_PATH, Btf, member_offset
from netprof.probes.ring_ops import opcode_offset


@pytest.fixture(scope="module")
def bpftool_dump() -> str:
    if not os.path.exists(BTF_PATH):
        pytest.skip(f"this kernel has no BTF at {BTF_PATH}")
    return subprocess.run([require_tool("bpftool"), "btf", "dump", "file", BTF_PATH, "format", "raw"],
                          capture_output=True, text=True, timeout=60, check=True).stdout


def bpftool_offset(dump: str, struct_name: str, member: str) -> int:
    """Byte offset of a direct member, as bpftool prints it (`'opcode' type_id=29 bits_offset=512`)."""
    m = re.search(rf"^\[\d+\] STRUCT '{struct_name}' size=\d+ vlen=(\d+)\n((?:\t.*\n)*)", dump, re.M)
    assert m, f"bpftool shows no struct {struct_name}"
    (bits,) = re.findall(rf"^\t'{member}' type_id=\d+ bits_offset=(\d+)", m.group(2), re.M)
    assert int(bits) % 8 == 0
    return int(bits) // 8


def test_io_kiocb_opcode_offset_agrees_with_bpftool(bpftool_dump):
    truth = bpftool_offset(bpftool_dump, "io_kiocb", "opcode")
    assert member_offset("io_kiocb", "opcode") == truth
    assert member_offset("io_kiocb", "opcode", size=1) == truth == opcode_offset()  # a u8
    # and others the probes read, found as far into the type section
    for struct_name, member in (("task_struct", "pid"), ("task_struct", "tgid"), ("tcp_sock", "rcv_nxt")):
        assert member_offset(struct_name, member) == bpftool_offset(bpftool_dump, struct_name, member), member


def test_what_is_not_there_is_none(tmp_path):
    if not os.path.exists(BTF_PATH):
        pytest.skip(f"this kernel has no BTF at {BTF_PATH}")
    assert member_offset("netprof_no_such_struct", "opcode") is None  # no such name at all
    assert member_offset("io_kiocb", "netprof_no_such_member") is None
    assert member_offset("io_kiocb", "opcode", size=2) is None  # not the size the reader expects
    assert member_offset("btf_trace_io_uring_submit_req", "x") is None  # a name, but a typedef's, not a struct's
    junk = tmp_path / "junk"
    junk.write_bytes(b"\0" * 64)
    assert member_offset("io_kiocb", "opcode", path=str(junk)) is None  # not BTF
    assert member_offset("io_kiocb", "opcode", path=str(tmp_path / "absent")) is None  # no BTF file


def test_nested_paths_through_anonymous_members():
    """Btf.offset follows a dotted path and looks through anonymous structs and unions (the socket-wait set's
    offsets): struct tcp_sock begins with the struct sock it extends."""
    if not os.path.exists(BTF_PATH):
        pytest.skip(f"this kernel has no BTF at {BTF_PATH}")
    btf = Btf()
    family = btf.offset("sock", "__sk_common.skc_family", 2)
    assert btf.offset("tcp_sock", "inet_conn.icsk_inet.sk.__sk_common.skc_family", 2) == family
    with pytest.raises(ValueError):
        btf.offset("sock", "__sk_common.skc_family", 4)
    with pytest.raises(KeyError):
        btf.offset("netprof_no_such_struct", "x")
