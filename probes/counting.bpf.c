// netprof counting set: per-syscall counts and times, context switches, migrations and on-CPU time
// of one target process tree. Loaded by netprof.probes.CountingProbes (BCC).
//
// Cost model: sys_enter/sys_exit/sched_switch fire for every task on the machine (the loader's
// too), so the first thing each program does is the target test: one array-map slot, compared
// against the current tgid. The children hash is consulted only when TRACK_CHILDREN is compiled in
// AND the tree actually has children. Counters are per-CPU arrays indexed by syscall number; the
// only per-thread state (syscall enter time) lives in task-local storage, never in a hash.
//
// cflags: -DTRACK_CHILDREN=0|1 -DNR_SLOTS=<n> (slot NR_SLOTS-1 collects out-of-range numbers)
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>

#define CLONE_THREAD_FLAG 0x00010000ULL

struct cfg_t {
    u32 tgid;        // target tgid, 0 when untargeted (tgid 0 is the idle task: never a target)
    u32 nchildren;   // live entries in `children`
    u32 gen;         // bumped on every re-target: per-thread registrations from before are stale
};
BPF_ARRAY(cfg, struct cfg_t, 1);
BPF_HASH(children, u32, u8, 4096);   // tgids of processes forked (transitively) by the target
BPF_HASH(tids, u32, u8, 65536);      // thread ids of the tree seen so far (for sched_migrate_task)

struct sc_t {
    u64 count;       // sys_enter events
    u64 ns;          // enter -> exit wall time (blocking included)
    u64 oncpu_ns;    // the part of it the thread spent on a CPU
};
BPF_PERCPU_ARRAY(sc, struct sc_t, NR_SLOTS);

struct cpu_t {
    u64 vol, invol, migrations;  // counters of the tree
    u64 oncpu_ns;                // on-CPU time of the tree (accounted at sys_exit and switch-out)
    u64 mark_ns;                 // this CPU: last sched_switch, or last accounting point of the tree
    u64 forks, exits;            // processes added to / removed from the tree
};
BPF_PERCPU_ARRAY(cpu, struct cpu_t, 1);

struct task_t {
    u64 enter_ns;
    u32 nr;
    u32 in_sys;
    u32 gen;         // cfg.gen when this thread was put into `tids`
};
BPF_TASK_STORAGE(tasks, struct task_t);

static __always_inline struct cfg_t *in_tree(u32 tgid) {
    u32 zero = 0;
    struct cfg_t *c = cfg.lookup(&zero);
    if (!c)
        return 0;
    if (tgid == c->tgid)
        return tgid ? c : 0;
#if TRACK_CHILDREN
    if (c->nchildren && children.lookup(&tgid))
        return c;
#endif
    return 0;
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
    struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0,
                                              BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!t)
        return 0;
    t->nr = nr;
    t->in_sys = 1;
    if (t->gen != c->gen) {   // first syscall of this thread since targeting
        u32 tid = id;
        u8 one = 1;
        tids.update(&tid, &one);
        t->gen = c->gen;
    }
    t->enter_ns = bpf_ktime_get_ns();
    return 0;
}

RAW_TRACEPOINT_PROBE(sys_exit) {
    u64 now = bpf_ktime_get_ns();
    if (!in_tree(bpf_get_current_pid_tgid() >> 32))
        return 0;
    struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0, 0);
    u32 zero = 0;
    struct cpu_t *k = cpu.lookup(&zero);
    if (!t || !k || !t->in_sys)
        return 0;
    t->in_sys = 0;
    u32 nr = t->nr;
    struct sc_t *s = sc.lookup(&nr);
    if (s) {
        s->ns += now - t->enter_ns;
        // On this CPU since max(enter, last switch-in / accounting point).
        s->oncpu_ns += now - (k->mark_ns > t->enter_ns ? k->mark_ns : t->enter_ns);
    }
    k->oncpu_ns += now - k->mark_ns;
    k->mark_ns = now;
    return 0;
}

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
// Runs in prev's context, so `current` is prev: no task_struct field is read.
RAW_TRACEPOINT_PROBE(sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 zero = 0;
    struct cpu_t *k = cpu.lookup(&zero);
    if (!k)
        return 0;
    if (in_tree(bpf_get_current_pid_tgid() >> 32)) {
        // The kernel's own split (__schedule): voluntary = !preempt && prev_state != RUNNING.
        if (!ctx->args[0] && (u32)ctx->args[3])
            k->vol++;
        else
            k->invol++;
        k->oncpu_ns += now - k->mark_ns;
        struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0, 0);
        if (t && t->in_sys) {
            u32 nr = t->nr;
            struct sc_t *s = sc.lookup(&nr);
            if (s)
                s->oncpu_ns += now - (k->mark_ns > t->enter_ns ? k->mark_ns : t->enter_ns);
        }
    }
    k->mark_ns = now;
    return 0;
}

// The migrated task is usually not `current`; its tid is looked up in `tids`. Rare event.
TRACEPOINT_PROBE(sched, sched_migrate_task) {
    u32 tid = args->pid;
    if (!tids.lookup(&tid))
        return 0;
    u32 zero = 0;
    struct cpu_t *k = cpu.lookup(&zero);
    if (k)
        k->migrations++;
    return 0;
}

// task_newtask (not sched_process_fork) because it carries clone_flags: threads share the tgid and
// need no entry; a new process gets its pid (= its tgid) added to the tree. `current` is the parent.
TRACEPOINT_PROBE(task, task_newtask) {
#if TRACK_CHILDREN
    if (args->clone_flags & CLONE_THREAD_FLAG)
        return 0;
    struct cfg_t *c = in_tree(bpf_get_current_pid_tgid() >> 32);
    if (!c)
        return 0;
    u32 child = args->pid;
    u8 one = 1;
    if (children.insert(&child, &one) == 0) {
        __sync_fetch_and_add(&c->nchildren, 1);
        u32 zero = 0;
        struct cpu_t *k = cpu.lookup(&zero);
        if (k)
            k->forks++;
    }
#endif
    return 0;
}

// `current` is the exiting thread. The tgid leaves the tree when its leader exits.
RAW_TRACEPOINT_PROBE(sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = id, tgid = id >> 32;
    struct cfg_t *c = in_tree(tgid);
    if (!c)
        return 0;
    tids.delete(&tid);
#if TRACK_CHILDREN
    if (tid == tgid && children.delete(&tgid) == 0) {
        __sync_fetch_and_add(&c->nchildren, -1);
        u32 zero = 0;
        struct cpu_t *k = cpu.lookup(&zero);
        if (k)
            k->exits++;
    }
#endif
    return 0;
}
