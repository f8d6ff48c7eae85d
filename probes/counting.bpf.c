// netprof counting set: per-syscall counts and times, context switches, migrations and on-CPU time
// of one target process tree. Loaded by netprof.probes.CountingProbes (BCC).
//
// Cost model (bench/RESULTS.md has the numbers): sys_enter/sys_exit/sched_switch fire for every task
// on the machine (the loader's too), so each program first does the target test: one array-map slot
// compared with the current tgid; the children hash is read only when TRACK_CHILDREN is compiled in
// AND the tree has children. Counters are per-CPU arrays indexed by syscall number. Timing costs two
// clock reads and a task-local-storage lookup per syscall, so it is done for a random 1 in TIME_EVERY
// syscalls of the tree (1 = every syscall, exact; 0 = no timing and no sys_exit program at all).
//
// cflags: -DTRACK_CHILDREN=0|1 -DNR_SLOTS=<n> -DTIME_EVERY=<0 or a power of two>
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
};
BPF_PERCPU_ARRAY(cpu, struct cpu_t, 1);

struct task_t {
    u64 enter_ns;
    u32 nr;
    u32 timing;      // a timed syscall is in flight
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
    if (!in_tree(bpf_get_current_pid_tgid() >> 32))
        return 0;
    struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0, 0);
    if (!t || !t->timing)
        return 0;
    t->timing = 0;
    u64 now = bpf_ktime_get_ns();
    u32 zero = 0, nr = t->nr;
    struct cpu_t *k = cpu.lookup(&zero);
    struct sc_t *s = sc.lookup(&nr);
    if (!k || !s)
        return 0;
    s->timed++;
    s->ns += now - t->enter_ns;
    // On this CPU since max(enter, last switch-in / accounting point).
    s->oncpu_ns += now - (k->mark_ns > t->enter_ns ? k->mark_ns : t->enter_ns);
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
    if (c) {
        // The kernel's own split (__schedule): voluntary = !preempt && prev_state != RUNNING.
        if (!ctx->args[0] && (u32)ctx->args[3])
            k->vol++;
        else
            k->invol++;
        k->oncpu_ns += now - k->mark_ns;
        struct task_t *t = tasks.task_storage_get(bpf_get_current_task_btf(), 0,
                                                  BPF_LOCAL_STORAGE_GET_F_CREATE);
        if (t) {
            if (t->gen != c->gen) {
                u32 tid = id;
                u8 one = 1;
                tids.update(&tid, &one);
                t->gen = c->gen;
            }
            if (t->timing) {
                u32 nr = t->nr;
                struct sc_t *s = sc.lookup(&nr);
                if (s)
                    s->oncpu_ns += now - (k->mark_ns > t->enter_ns ? k->mark_ns : t->enter_ns);
            }
        }
    }
    k->mark_ns = now;
    return 0;
}

// The migrated task is usually not `current`; its tid is looked up in `tids` (threads of the tree
// that have been switched out or timed once since targeting). Rare event.
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
