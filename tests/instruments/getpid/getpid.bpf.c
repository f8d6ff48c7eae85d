// A throw-away instrument for tests/test_instrument.py: getpid() calls of the target process.
#include <uapi/linux/ptrace.h>

struct cfg_t {
    u32 tgid;       // target tgid, 0 when untargeted
    u32 nchildren;  // unused: built with TRACK_CHILDREN=0
};
#include "tree_filter.bpf.h"

BPF_PERCPU_ARRAY(calls, u64, 1);

TRACEPOINT_PROBE(syscalls, sys_enter_getpid) {
    if (!in_tree(bpf_get_current_pid_tgid() >> 32))
        return 0;
    u32 zero = 0;
    u64 *n = calls.lookup(&zero);
    if (n)
        (*n)++;
    return 0;
}
