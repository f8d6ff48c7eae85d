"""io_uring's operations by opcode: the names netprof shows them by (the kernel's IORING_OP_ names in lower
case without the prefix: `epoll_ctl`, `recv`, `send`, ...), one table for every instrument and report.

The order is the kernel's `enum io_uring_op` (include/uapi/linux/io_uring.h), which only grows at its end;
tests/test_ring.py checks it against the installed UAPI header (Debian 12's is 6.1's: the ops after
`uring_cmd`/`send_zc` come from the kernel's later headers). An opcode past the table (a newer kernel) reads
`op_<n>`.
"""

from __future__ import annotations

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


def ring_op_name(op: int) -> str:
    if op == OTHER_OP:
        return f"op_{op}+"
    return RING_OPS[op] if 0 <= op < len(RING_OPS) else f"op_{op}"
