// netprof evidence set: user-space stacks that issued chosen syscalls, counted per
// (process, syscall, stack). Opt-in: get_stackid walks the user stack on every chosen syscall.
// Loaded by netprof.probes.StackProbes. cflags: -DNR_SLOTS=<n> -DSTACK_ENTRIES=<n> -DTRACK_CHILDREN=0|1
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>

struct cfg_t {
    u32 tgid;        // 0: untargeted
    u32 nchildren;
};
#include "tree_filter.bpf.h"
BPF_ARRAY(wanted, u8, NR_SLOTS);     // 1 for the syscall numbers to collect stacks for
BPF_STACK_TRACE(stacks, STACK_ENTRIES);

struct key_t {
    u32 tgid;
    u32 nr;
    s32 stackid;     // < 0: the kernel could not walk the user stack (-errno)
};
BPF_HASH(counts, struct key_t, u64, 16384);

RAW_TRACEPOINT_PROBE(sys_enter) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!in_tree(tgid))
        return 0;
    u32 nr = ctx->args[1];
    u8 *w = wanted.lookup(&nr);
    if (!w || !*w)
        return 0;
    struct key_t key = {.tgid = tgid, .nr = nr};
    key.stackid = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    counts.increment(key);
    return 0;
}

TRACEPOINT_PROBE(task, task_newtask) {
    tree_fork(args->clone_flags, args->pid);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    struct cfg_t *c = in_tree(id >> 32);
    if (c)
        tree_exit(c, (u32)id, id >> 32);
    return 0;
}
