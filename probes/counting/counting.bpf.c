// netprof counting set: per-syscall counts and times, context switches, migrations and on-CPU time
// of one target process tree, and the kernel work it hands over without a syscall: io_uring submissions
// by opcode, their completions and the CPU of io_uring's own threads. Loaded by
// netprof.probes.CountingProbes (BCC).
//
// Cost model (bench/RESULTS.md has the numbers): sys_enter/sys_exit/sched_switch fire for every task
// on the machine (the loader's too), so each program first does the target test: one array-map slot
// compared with the current tgid; the children hash is read only when TRACK_CHILDREN is compiled in
// AND the tree has children. Counters are per-CPU arrays indexed by syscall number. Timing costs two
// clock reads and a task-local-storage lookup per syscall, so it is done for a random 1 in TIME_EVERY
// syscalls of the tree (1 = every syscall, exact; 0 = no timing and no sys_exit program at all).
//
// Attach/detach: the programs that fire per operation are raw tracepoints (sys_enter, sys_exit,
// sched_switch, io_uring_submit_req, io_uring_complete), which Python attaches and detaches per window in
// milliseconds, without recompiling: while detached they cost nothing, to the target or to anyone else.
// The rare events (task_newtask, sched_process_exit, sched_migrate_task) are tracepoints that stay attached
// until close (detaching one takes ~60 ms): they keep the tree right while the others are off
// (a fork backend forks during connection setup) and count only while `window.active`. So counters
// freeze while detached. State a thread or CPU recorded before the last attach (a timed syscall in
// flight, a CPU's last switch time) is stale and ignored: window.attach_ns marks the attach.
//
// io_uring: the submission tracepoint fires in the submitting task (io_uring_enter's caller, or the ring's
// SQPOLL thread, a thread of the same process), so the tree filter holds; a completion is counted when it
// is posted by a task of the tree (inline, task work, io-wq workers), not when another task's softirq posts
// it. io_uring's own threads (iou-wrk-*, iou-sqp-*) are threads of the server's process: their on-CPU time is
// in oncpu_ns as the kernel charges it, and also apart in ring_oncpu_ns. Both are raw tracepoints, not the
// io_uring:* trace events: a trace event formats its record (io_uring_submit_req copies the opcode's name
// string) for every ring operation on the machine, and as a perf-event tracepoint it would have to stay
// attached from load to close (bench/probe_overhead.py --micro-ring: ~180 ns per operation, detached too).
// The raw tracepoint gets the request itself; its opcode is read at the running kernel's offset (ring_op.bpf.h).
//
// cflags: -DTRACK_CHILDREN=0|1 -DNR_SLOTS=<n> -DTIME_EVERY=<0 or a power of two> -DNR_RING_OPS=<n>
#include <uapi/linux/ptrace.h>
// No <linux/sched.h>: nothing here uses it, and parsing it was 0.4 s of each compile (the bytecode is
// the same without it; bench/RESULTS.md, start-up).

struct cfg_t {
    u32 tgid;        // target tgid, 0 when untargeted
    u32 nchildren;   // live entries in `children`
    u32 gen;         // bumped on every re-target: per-thread registrations from before are stale
    s32 ring_opcode_off;  // struct io_kiocb's `opcode` in the running kernel (ring_op.bpf.h); -1: not found
};
#include "tree_filter.bpf.h"
#include "ring_op.bpf.h"

struct window_t {    // written by Python only (cfg.nchildren is BPF's too)
    u64 attach_ns;   // bpf_ktime_get_ns() when the hot programs were last attached
    u32 active;      // 1 from attach to detach
};
BPF_ARRAY(window, struct window_t, 1);
BPF_HASH(tids, u32, u8, 65536);      // thread ids of the tree seen so far (for sched_migrate_task)

struct sc_t {
    u64 count;       // sys_enter events: exact
    u64 timed;       // how many of them were timed (all of them when TIME_EVERY == 1)
    u64 ns;          // enter -> exit wall time of the timed ones (blocking included)
    u64 oncpu_ns;    // the part of it spent on a CPU
};
BPF_PERCPU_ARRAY(sc, struct sc_t, NR_SLOTS);

struct cpu_t {
    u64 vol, invol, migrations;  // counters of the tree
    u64 oncpu_ns;                // on-CPU time of the tree (accounted at switch-out and timed sys_exit)
    u64 mark_ns;                 // this CPU: last sched_switch, or last accounting point of the tree
    u64 forks, exits;            // processes added to / removed from the tree
    u64 ring_done;               // io_uring completions posted by the tree's tasks
    u64 ring_oncpu_ns;           // on-CPU time of the tree's io_uring threads (iou-wrk-*, iou-sqp-*)
};
BPF_PERCPU_ARRAY(cpu, struct cpu_t, 1);

struct task_t {
    u64 enter_ns;
    u32 nr;
    u32 timing;      // a timed syscall is in flight
    u32 gen;         // cfg.gen when this thread was put into `tids`
};
BPF_TASK_STORAGE(tasks, struct task_t);

// io_uring submissions of the tree by opcode: NR_RING_OPS - 1 counts that opcode and any past it; NR_RING_OPS
// those whose opcode could not be read (no offset from the kernel's BTF)
BPF_PERCPU_ARRAY(ring, u64, NR_RING_OPS + 1);

// An io_uring thread of the kernel's (io-wq worker or SQPOLL): named "iou-wrk-<pid>" / "iou-sqp-<pid>".
static __always_inline int ring_thread(void) {
    char comm[8] = {};
    bpf_get_current_comm(&comm, sizeof(comm));
    return comm[0] == 'i' && comm[1] == 'o' && comm[2] == 'u' && comm[3] == '-';
}

RAW_TRACEPOINT_PROBE(sys_enter) {
    u64 id = bpf_get_current_pid_tgid();
    struct cfg_t *c = in_tree(id >> 32);
    if (!c)
        return 0;
    u32 nr = ctx->args[1];
    if (nr >= NR_SLOTS)
        nr = NR_SLOTS - 1;
    struct sc_t *s = sc.lookup(&nr);
    if (s)
        s->count++;
#if TIME_EVERY
#if TIME_EVERY > 1
    if (bpf_get_prandom_u32() & (TIME_EVERY - 1))
        return 0;
#endif
    struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0,
                                              BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!t)
        return 0;
    if (t->gen != c->gen) {   // first timed syscall of this thread since targeting
        u32 tid = id;
        u8 one = 1;
        tids.update(&tid, &one);
        t->gen = c->gen;
    }
    t->nr = nr;
    t->timing = 1;
    t->enter_ns = bpf_ktime_get_ns();
#endif
    return 0;
}

#if TIME_EVERY
RAW_TRACEPOINT_PROBE(sys_exit) {
    struct cfg_t *c = in_tree(bpf_get_current_pid_tgid() >> 32);
    if (!c)
        return 0;
    struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0, 0);
    if (!t || !t->timing)
        return 0;
    t->timing = 0;
    u64 now = bpf_ktime_get_ns();
    u32 zero = 0, nr = t->nr;
    struct window_t *w = window.lookup(&zero);
    struct cpu_t *k = cpu.lookup(&zero);
    struct sc_t *s = sc.lookup(&nr);
    if (!w || !k || !s || t->enter_ns < w->attach_ns)  // entered before a detach: stale
        return 0;
    s->timed++;
    s->ns += now - t->enter_ns;
    // On this CPU since max(enter, last switch-in / accounting point).
    s->oncpu_ns += now - (k->mark_ns > t->enter_ns ? k->mark_ns : t->enter_ns);
    if (k->mark_ns >= w->attach_ns)
        k->oncpu_ns += now - k->mark_ns;
    k->mark_ns = now;
    return 0;
}
#endif

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
// Runs in prev's context, so `current` is prev: no task_struct field is read.
RAW_TRACEPOINT_PROBE(sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 zero = 0;
    struct cpu_t *k = cpu.lookup(&zero);
    if (!k)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    struct cfg_t *c = in_tree(id >> 32);
    struct window_t *w = c ? window.lookup(&zero) : 0;
    if (c && w) {
        // The kernel's own split (__schedule): voluntary = !preempt && prev_state != RUNNING.
        if (!ctx->args[0] && (u32)ctx->args[3])
            k->vol++;
        else
            k->invol++;
        // A mark from before the attach is stale: this CPU's first slice after it goes unaccounted.
        if (k->mark_ns >= w->attach_ns) {
            k->oncpu_ns += now - k->mark_ns;
            if (ring_thread())
                k->ring_oncpu_ns += now - k->mark_ns;
        }
        struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0,
                                                  BPF_LOCAL_STORAGE_GET_F_CREATE);
        if (t) {
            if (t->gen != c->gen) {
                u32 tid = id;
                u8 one = 1;
                tids.update(&tid, &one);
                t->gen = c->gen;
            }
#if TIME_EVERY
            if (t->timing && t->enter_ns >= w->attach_ns) {
                u32 nr = t->nr;
                struct sc_t *s = sc.lookup(&nr);
                if (s)
                    s->oncpu_ns += now - (k->mark_ns > t->enter_ns ? k->mark_ns : t->enter_ns);
            }
#endif
        }
    }
    k->mark_ns = now;
    return 0;
}

static __always_inline struct cpu_t *counting(void) {
    u32 zero = 0;
    struct window_t *w = window.lookup(&zero);
    return w && w->active ? cpu.lookup(&zero) : 0;
}

// The migrated task is usually not `current`; its tid is looked up in `tids` (threads of the tree
// that have been switched out or timed once since targeting). Rare event.
TRACEPOINT_PROBE(sched, sched_migrate_task) {
    u32 tid = args->pid;
    if (!tids.lookup(&tid))
        return 0;
    struct cpu_t *k = counting();
    if (k)
        k->migrations++;
    return 0;
}

TRACEPOINT_PROBE(task, task_newtask) {
    if (tree_fork(args->clone_flags, args->pid)) {
        struct cpu_t *k = counting();
        if (k)
            k->forks++;
    }
    return 0;
}

// `current` is the exiting thread.
TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = id, tgid = id >> 32;
    struct cfg_t *c = in_tree(tgid);
    if (!c)
        return 0;
    tids.delete(&tid);
    if (tree_exit(c, tid, tgid)) {
        struct cpu_t *k = counting();
        if (k)
            k->exits++;
    }
    return 0;
}

// TP_PROTO(struct io_kiocb *req): a request taken from a submission queue, in the submitting task.
RAW_TRACEPOINT_PROBE(io_uring_submit_req) {
    struct cfg_t *c = in_tree(bpf_get_current_pid_tgid() >> 32);
    if (!c || !counting())
        return 0;
    u32 op = ring_opcode(c, ctx->args[0]);
    if (op == RING_OP_UNKNOWN)
        op = NR_RING_OPS;
    else if (op >= NR_RING_OPS)
        op = NR_RING_OPS - 1;
    u64 *n = ring.lookup(&op);
    if (n)
        (*n)++;
    return 0;
}

// TP_PROTO(struct io_ring_ctx *ctx, void *req, struct io_uring_cqe *cqe) on 6.18 (it has changed over versions:
// no argument is read). A completion posted to a ring: counted when a task of the tree posts it.
RAW_TRACEPOINT_PROBE(io_uring_complete) {
    if (!in_tree(bpf_get_current_pid_tgid() >> 32))
        return 0;
    struct cpu_t *k = counting();
    if (k)
        k->ring_done++;
    return 0;
}
