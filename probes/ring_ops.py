"""io_uring's operations by opcode: the names netprof shows them by (the kernel's IORING_OP_ names in lower
case without the prefix: `epoll_ctl`, `recv`, `send`, ...), one table for every instrument and report.

The order is the kernel's `enum io_uring_op` (include/uapi/linux/io_uring.h), which only grows at its end;
tests/test_ring.py checks it against the installed UAPI header (Debian 12's is 6.1's: the ops after
`uring_cmd`/`send_zc` come from the kernel's later headers). An opcode past the table (a newer kernel) reads
`op_<n>`.

The opcode itself is read by the probes from the request (`struct io_kiocb *`) that the raw tracepoint
io_uring_submit_req passes, at the offset of its `opcode` member in the running kernel (`opcode_offset()`, from
its BTF: BCC's headers are 6.1's, not this kernel's); ring_op.bpf.h is the BPF side. Where that offset cannot
be found, submissions are counted as `unknown` (UNKNOWN_OP) rather than under a guessed opcode.
"""

from __future__ import annotations

from .btf import member_offset

RING_OPS = (
    "nop", "readv", "writev", "fsync", "read_fixed", "write_fixed", "poll_add", "poll_remove",
    "sync_file_range", "sendmsg", "recvmsg", "timeout", "timeout_remove", "accept", "async_cancel",
    "link_timeout", "connect", "fallocate", "openat", "close", "files_update", "statx", "read", "write",
    "fadvise", "madvise", "send", "recv", "openat2", "epoll_ctl", "splice", "provide_buffers",
    "remove_buffers", "tee", "shutdown", "renameat", "unlinkat", "mkdirat", "symlinkat", "linkat", "msg_ring",
    "fsetxattr", "setxattr", "fgetxattr", "getxattr", "socket", "uring_cmd", "send_zc", "sendmsg_zc",
    "read_multishot", "waitid", "futex_wait", "futex_wake", "futex_waitv", "fixed_fd_install", "ftruncate",
    "bind", "listen", "recv_zc", "epoll_wait", "readv_fixed", "writev_fixed", "pipe",
)
# Slots of the counting set's per-opcode array (counting.bpf.c's NR_RING_OPS): the last one counts every
# opcode at or past it, which no kernel has yet.
NR_RING_OPS = 64
OTHER_OP = NR_RING_OPS - 1
# One more slot after them: submissions whose opcode could not be read (opcode_offset() is None).
UNKNOWN_OP = NR_RING_OPS
RING_SLOTS = NR_RING_OPS + 1
UNKNOWN = "unknown"
UNKNOWN_WHY = ("the running kernel's BTF (/sys/kernel/btf/vmlinux) gives no one-byte `opcode` member of struct "
               "io_kiocb: io_uring submissions are counted as `unknown`, not by operation, and the breakdown does "
               "not see io_uring sends")


def opcode_offset() -> int | None:
    """Byte offset of `opcode` (u8) in the running kernel's struct io_kiocb, the request io_uring_submit_req
    passes (64 on this 6.18 kernel), or None (UNKNOWN_WHY). Read once per process (btf.member_offset)."""
    return member_offset("io_kiocb", "opcode", size=1)


def ring_op_name(op: int) -> str:
    if op == UNKNOWN_OP:
        return UNKNOWN
    if op == OTHER_OP:
        return f"op_{op}+"
    return RING_OPS[op] if 0 <= op < len(RING_OPS) else f"op_{op}"
