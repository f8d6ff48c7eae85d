// The process-tree filter shared by netprof's probe sets: is the current task part of the target's
// tree? The tree is one target tgid (written by Python into `cfg`) plus, with TRACK_CHILDREN, the
// tgids of processes it forked (transitively; Python seeds the ones that already exist).
//
// netprof.probes.base.load() pastes this file in place of its #include line: BCC rewrites map calls
// (`children.lookup(...)`) only in the main source, so a header BCC opened itself could declare the
// maps but not use them.
//
// The including file defines `struct cfg_t` first, with at least `u32 tgid; u32 nchildren;`, and
// TREE_TRACEPOINTS when the tree's fork/exit bookkeeping needs nothing of its own (a set that counts
// forks and exits, like counting.bpf.c, writes these two tracepoints itself around tree_fork/tree_exit).
// cflags: -DTRACK_CHILDREN=0|1

#define CLONE_THREAD_FLAG 0x00010000ULL

BPF_ARRAY(cfg, struct cfg_t, 1);    // cfg.tgid == 0: untargeted (tgid 0 is the idle task: never a target)
BPF_HASH(children, u32, u8, 4096);  // tgids of processes forked (transitively) by the target

static __always_inline struct cfg_t *in_tree(u32 tgid) {
    u32 zero = 0;
    struct cfg_t *c = cfg.lookup(&zero);
    if (!c)
        return 0;
    if (tgid == c->tgid)
        return tgid ? c : 0;
#if TRACK_CHILDREN
    // The hash is read only when the tree has children: most targets have none.
    if (c->nchildren && children.lookup(&tgid))
        return c;
#endif
    return 0;
}

// From task, task_newtask (it carries clone_flags, which sched_process_fork does not; `current` is
// the parent): a new process of the tree joins it; threads share their tgid and need no entry.
// Returns 1 when a process was added.
static __always_inline int tree_fork(u64 clone_flags, u32 pid) {
#if TRACK_CHILDREN
    if (clone_flags & CLONE_THREAD_FLAG)
        return 0;
    struct cfg_t *c = in_tree(bpf_get_current_pid_tgid() >> 32);
    if (!c)
        return 0;
    u8 one = 1;
    if (children.insert(&pid, &one) != 0)
        return 0;
    __sync_fetch_and_add(&c->nchildren, 1);
    return 1;
#else
    return 0;
#endif
}

// From sched_process_exit (`current` is the exiting thread, `c` its tree): a child process leaves
// the tree when its leader exits. Returns 1 when a process was removed.
static __always_inline int tree_exit(struct cfg_t *c, u32 tid, u32 tgid) {
#if TRACK_CHILDREN
    if (tid != tgid || children.delete(&tgid) != 0)
        return 0;
    __sync_fetch_and_add(&c->nchildren, -1);
    return 1;
#else
    return 0;
#endif
}

#ifdef TREE_TRACEPOINTS
TRACEPOINT_PROBE(task, task_newtask) {
    tree_fork(args->clone_flags, args->pid);
    return 0;
}

// `current` is the exiting thread.
TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = id, tgid = id >> 32;
    struct cfg_t *c = in_tree(tgid);
    if (c)
        tree_exit(c, tid, tgid);
    return 0;
}
#endif
