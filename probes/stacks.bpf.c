// netprof evidence set: user-space stacks that issued chosen syscalls, counted per
// (process, syscall, stack). Opt-in: get_stackid walks the user stack on every chosen syscall.
// Loaded by netprof.probes.StackProbes. cflags: -DNR_SLOTS=<n> -DSTACK_ENTRIES=<n> -DTRACK_CHILDREN=0|1
// -DPY_DEPTH=<n> (0: no Python frames) and, with n > 0, the PY_* offsets of probes/pyframes.py
#include <uapi/linux/ptrace.h>
// No <linux/sched.h>: nothing here uses it, and parsing it was 0.4 s of each compile (the bytecode is
// the same without it; bench/RESULTS.md, start-up).

struct cfg_t {
    u32 tgid;        // 0: untargeted
    u32 nchildren;
};
#define TREE_TRACEPOINTS
#include "tree_filter.bpf.h"
BPF_ARRAY(wanted, u8, NR_SLOTS);     // 1 for the syscall numbers to collect stacks for
BPF_STACK_TRACE(stacks, STACK_ENTRIES);

struct key_t {
    u32 tgid;
    u32 nr;
    s32 stackid;     // < 0: the kernel could not walk the user stack (-errno)
    u32 pad;
#if PY_DEPTH
    u64 py[PY_DEPTH];  // code objects of the Python frames, innermost first (0: no more)
#endif
};
BPF_HASH(counts, struct key_t, u64, 16384);
#if PY_DEPTH
// CPython 3.11's own frame stack (probes/pyframes.py measures the offsets): the frame-pointer walk
// cannot reach Python frames, they are not on the C stack. Python writes tid -> PyThreadState.
BPF_HASH(pythreads, u32, u64, 1024);

static __always_inline void python_frames(struct key_t *key, u32 tid) {
    u64 *ts = pythreads.lookup(&tid);
    if (!ts)
        return;
    u64 cframe = 0, frame = 0;
    bpf_probe_read_user(&cframe, sizeof(cframe), (void *)(*ts + PY_TSTATE_CFRAME));
    if (cframe)
        bpf_probe_read_user(&frame, sizeof(frame), (void *)(cframe + PY_CFRAME_CURRENT));
    // One read per frame covers f_code and previous (each user-memory read costs ~100 ns here).
#define PY_LO (PY_FRAME_CODE < PY_FRAME_PREVIOUS ? PY_FRAME_CODE : PY_FRAME_PREVIOUS)
#define PY_SPAN ((PY_FRAME_CODE < PY_FRAME_PREVIOUS ? PY_FRAME_PREVIOUS : PY_FRAME_CODE) - PY_LO + 8)
    u64 span[PY_SPAN / 8];
#pragma unroll
    for (int i = 0; i < PY_DEPTH; i++) {
        if (!frame)
            break;
        if (bpf_probe_read_user(span, sizeof(span), (void *)(frame + PY_LO)) != 0)
            break;
        key->py[i] = span[(PY_FRAME_CODE - PY_LO) / 8];
        frame = span[(PY_FRAME_PREVIOUS - PY_LO) / 8];
    }
}
#endif

RAW_TRACEPOINT_PROBE(sys_enter) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!in_tree(tgid))
        return 0;
    u32 nr = ctx->args[1];
    u8 *w = wanted.lookup(&nr);
    if (!w || !*w)
        return 0;
    struct key_t key;
    __builtin_memset(&key, 0, sizeof(key));  // the key is hashed whole: padding and unused frames too
    key.tgid = tgid;
    key.nr = nr;
    key.stackid = stacks.get_stackid(ctx, BPF_F_USER_STACK);
#if PY_DEPTH
    python_frames(&key, (u32)bpf_get_current_pid_tgid());
#endif
    counts.increment(key);
    return 0;
}
