// Off-CPU time of the target processes, by user+kernel stack, from the sched:sched_switch tracepoint.
//
// bcc's offcputime.py hooks finish_task_switch with a kprobe; this kernel has no kprobes, so both
// halves happen in sched_switch, which runs in the context of the task being switched OUT:
//  - switch-out (prev is a target): remember when, and capture prev's stacks now (it is `current`);
//  - switch-in  (next has a remembered switch-out): add the elapsed time to that stack's total.
// Targets are tgids written by Python into `targets` (re-targeting needs no recompile); an empty map
// records nothing, which is how Python opens and closes the sampling window.

#include <uapi/linux/ptrace.h>
// No <linux/sched.h>: nothing here uses it, and parsing it was 0.4 s of each compile (the bytecode is
// the same without it; bench/RESULTS.md, start-up).

#define TASK_COMM_LEN_ 16

struct off_key {
    u32 tgid;
    u32 state;           // prev_state as the tracepoint reports it (0 / preempt bit = still runnable)
    s32 user_stack_id;
    s32 kernel_stack_id;
    char comm[TASK_COMM_LEN_];
};

struct off_val {
    u64 us;              // microseconds off CPU
    u64 n;               // number of switch-outs
};

struct start_t {
    u64 ts;
    struct off_key key;
};

BPF_HASH(targets, u32, u8, 1024);
BPF_HASH(start, u32, struct start_t, 65536);        // by thread id; thread-per-connection backends have many
BPF_HASH(offcpu, struct off_key, struct off_val, 16384);
BPF_STACK_TRACE(stacks, 16384);

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();

    // Switch-out: `current` is prev.
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (targets.lookup(&tgid)) {
        struct start_t s = {};
        s.ts = now;
        s.key.tgid = tgid;
        s.key.state = args->prev_state;
        s.key.user_stack_id = stacks.get_stackid(args, BPF_F_USER_STACK);
        s.key.kernel_stack_id = stacks.get_stackid(args, 0);
        bpf_get_current_comm(&s.key.comm, sizeof(s.key.comm));
        u32 tid = args->prev_pid;
        start.update(&tid, &s);
    }

    // Switch-in: charge the time `next` spent off CPU to the stack it left with.
    u32 next = args->next_pid;
    struct start_t *sp = start.lookup(&next);
    if (!sp)
        return 0;
    u64 delta = now - sp->ts;
    struct off_key key = sp->key;
    start.delete(&next);
    struct off_val zero = {};
    struct off_val *v = offcpu.lookup_or_try_init(&key, &zero);
    if (v) {
        __sync_fetch_and_add(&v->us, delta / 1000);
        __sync_fetch_and_add(&v->n, 1);
    }
    return 0;
}
