// netprof evidence set: user-space stacks that issued chosen syscalls, counted per
// (process, syscall, stack). Opt-in: get_stackid walks the user stack on every chosen syscall.
// Loaded by netprof.probes.StackProbes. cflags: -DNR_SLOTS=<n> -DSTACK_ENTRIES=<n>
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>

#define CLONE_THREAD_FLAG 0x00010000ULL

struct cfg_t {
    u32 tgid;        // 0: untargeted
    u32 nchildren;
};
BPF_ARRAY(cfg, struct cfg_t, 1);
BPF_HASH(children, u32, u8, 4096);
BPF_ARRAY(wanted, u8, NR_SLOTS);     // 1 for the syscall numbers to collect stacks for
BPF_STACK_TRACE(stacks, STACK_ENTRIES);

struct key_t {
    u32 tgid;
    u32 nr;
    s32 stackid;     // < 0: the kernel could not walk the user stack (-errno)
};
BPF_HASH(counts, struct key_t, u64, 16384);

static __always_inline struct cfg_t *in_tree(u32 tgid) {
    u32 zero = 0;
    struct cfg_t *c = cfg.lookup(&zero);
    if (!c)
        return 0;
    if (tgid == c->tgid)
        return tgid ? c : 0;
    if (c->nchildren && children.lookup(&tgid))
        return c;
    return 0;
}

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
    if (args->clone_flags & CLONE_THREAD_FLAG)
        return 0;
    struct cfg_t *c = in_tree(bpf_get_current_pid_tgid() >> 32);
    if (!c)
        return 0;
    u32 child = args->pid;
    u8 one = 1;
    if (children.insert(&child, &one) == 0)
        __sync_fetch_and_add(&c->nchildren, 1);
    return 0;
}
