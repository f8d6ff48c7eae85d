// netprof request breakdown (--breakdown): each request's time split into parts measured by the kernel.
// Pasted into probes/sockwait/sockwait.bpf.c when it is compiled with -DBREAKDOWN=1: the socket-wait
// set gives the request's edges (arrival in the server's socket queue A, the read that took it R, the
// first send after it S); this file follows the serving thread's state between them.
//
// Per thread of the tree (learned at its first syscall), a clock per state, always running in exactly
// one: on CPU in user space (USER) or in a syscall (SYS), runnable but not on a CPU (RUNQ: from
// sched_wakeup or a preemption to sched_switch in), or blocked, by the syscall it blocked in (FUTEX:
// futex, i.e. locks and the GIL; SLEEP: nanosleep/clock_nanosleep; IO: waiting on a file descriptor —
// read/recv/poll/select/epoll/accept/connect/write/send; OTHER: anything else, page faults included).
// A request's parts are differences of the serving thread's clocks, read at A, R and S, so they
// partition [A, S] by construction (docs/breakdown.md states the rule):
//   A → R (data unread): runnable → runqueue; on CPU for this request → on_cpu; blocked on a lock (futex:
//         a thread-per-connection server's thread waiting for the GIL) → off_cpu_futex; everything else (on
//         CPU for other requests, blocked in their handlers) → queue_wait.
//   R → S (read, not yet answered): on CPU for this request → on_cpu (user/sys); on CPU for others →
//         loop_wait; runnable → runqueue; blocked → off_cpu_{futex,sleep,io,other} (futex includes GIL,
//         a futex on a word inside the interpreter's _PyRuntime, counted apart as a detail: gil.py).
// CPU is given to a request by its connection's syscalls as markers: a read or send on a served socket
// claims the thread's CPU time since the thread's previous marker (the work that led to that syscall:
// the loop's dispatch before a read, the handler before a send), clipped to the request's arrival.
// Around S, from the kernel, not by remainder:
//   send: the send syscall's entry → the last packet handed to the device (net:net_dev_queue);
//   transit_out: that → the answer queued on the peer's socket (sk_data_ready, same syscall on loopback);
//   transit_in: the loader's send syscall entry → A (its sk_data_ready, in the loader's send on loopback);
//   loader_wait: the answer queued on the loader's socket → the loader's read of it.
// A request is measured when it arrives on an empty queue of a served socket (accepted on a port the
// tree listens on) with no request of that socket open (or with the open one read and its answer being sent:
// kept, bd_open_next), is read by the thread that last read that socket
// (or, for a connection's first request, by the thread that reads it), and is answered by that thread or
// by the one that answered the socket's previous request (handed: [A, R] on the reader's clocks, [R, S] on
// the answering thread's, taken at the read as bd_x); the others are counted by reason (bd_stats.skipped,
// bd_skip), never guessed.
//
// cflags (beside the socket-wait set's): -DOFF_TASK_PID -DOFF_TASK_TGID (bytes into struct task_struct).
// The states (BD_*) and a socket's request fields are in breakdown_state.bpf.h, pasted before struct sk_t.

// The parts (probes/breakdown/breakdown.py PARTS, same order): a histogram each.
#define P_QUEUE_WAIT 0
#define P_LOOP_WAIT 1
#define P_RUNQUEUE 2
#define P_ON_CPU 3
#define P_OFF_FUTEX 4
#define P_OFF_SLEEP 5
#define P_OFF_IO 6
#define P_OFF_OTHER 7
#define P_SEND 8
#define P_TRANSIT 9
#define P_LOADER_WAIT 10
#define NPART 11
// Sums only (DETAIL in breakdown.py): on_cpu and transit split, and two more.
#define D_ON_CPU_USER 0
#define D_ON_CPU_SYS 1
#define D_TRANSIT_IN 2
#define D_TRANSIT_OUT 3
#define D_SEND_CPU 4    // the serving thread's CPU in the answer's send syscall (entry → return): with on_cpu,
                        // the request's CPU (on loopback the send also delivers, so part of it is after
                        // the answer reached the loader, outside the request's time)
#define D_OFF_GIL 5     // of off_cpu_futex: on the interpreter's GIL (a futex inside _PyRuntime: gil.py)
#define D_OFF_TIMER 6   // of off_cpu_io: in readiness waits that ended on their timeout (BD_TIMER): an event loop
                        // that slept until a timer (an awaited asyncio.sleep, a call_later, a timeout)
#define NDETAIL 7
// Why a request was not measured (SKIPPED in breakdown.py, same order).
#define K_BUSY 0        // arrived while data was unread or a request of its socket was open (pipelining)
#define K_NO_READER 1   // read by a thread the breakdown had not seen (it learns threads at their syscalls)
#define K_OTHER_THREAD 2  // answered by a thread neither the reader nor the one whose clocks the read took
#define K_NO_SEND_EDGE 3  // the answer's send entry, device or delivery was not seen (not loopback?)
#define K_CLOCK 4       // a clock went backwards between the edges (a race with a state change: bd_enter_state)
#define NSKIP 5

struct bd_thr_t {
    u64 cum[BD_NS];        // ns in each state since first seen, but the current one's open interval
    u64 word;              // the current state and its start, in one word (bd_enter_state)
    s32 sc;                // syscall in progress (-1: none)
    u64 arg0;              // its first argument: the futex word of a futex, the descriptor of a read
    u64 mark_user, mark_sys;  // cum[USER], cum[SYS] (as of then) at the thread's last marker
    u64 enter_ts;          // entry of its last send-family syscall
    u64 enter_cum[BD_NS];  // its clocks then
    u64 io_enter;          // cum[BD_IO] at the entry of its readiness wait in progress (BD_TIMER)
};
BPF_HASH(bd_thr, u32, struct bd_thr_t, 16384);

// [lo, hi) of the target interpreter's _PyRuntime (written by Python at target(); 0, 0: not CPython).
struct bd_gil_t {
    u64 lo, hi;
};
BPF_ARRAY(bd_gil, struct bd_gil_t, 1);

// Per CPU: the last send-family syscall entered on it (any task) and, within it, the last packet
// handed to a device and the last arrival on the first foreign socket that became readable (the peer's,
// on loopback).
struct bd_pc_t {
    u64 send_pid;          // pid_tgid of the task that entered it
    u64 send_enter;
    u64 dev_last;          // the last packet handed to a device so far
    u64 dev_ts;            // the one that preceded the last peer arrival (not a later ACK's: a peer that
                           // quick-acks, as on a new connection, queues its ACK inside this syscall too)
    u64 peer_arr;
    u64 peer_sk;
};
BPF_PERCPU_ARRAY(bd_pc, struct bd_pc_t, 1);

struct bd_stats_t {
    u64 hist[NPART * NSLOTS];  // per part, log-linear slots (slot_of) of ns
    u64 sum_ns[NPART];
    u64 count[NPART];
    u64 detail_ns[NDETAIL];
    u64 tail_n[NSLOTS];        // requests by the slot of their total (all parts but loader_wait) ...
    u64 tail_ns[NPART * NSLOTS];  // ... and the sum of each part over them, by part: the composition of the slowest
    u64 skipped[NSKIP];
    u64 requests;              // measured requests
    u64 transit_in_unseen;     // ... of which the loader's send was not seen (another host's kernel, or a
                               // softirq run later): their transit is the way out only
};
BPF_ARRAY(bd_stats, struct bd_stats_t, 1);  // shared, atomic adds: too big for a per-CPU value

// A finished request's parts, handed from sock_send_length to bd_commit by a tail call: its histograms
// inlined into sock_send_length take the verifier past its limit of paths (BCC cannot make them real
// BPF-to-BPF calls), and a program of their own is verified alone.
struct bd_req_t {
    u64 v[NPART - 1];   // the parts but loader_wait
    u64 d[NDETAIL];     // its details (D_*); d[D_OFF_TIMER] of v[P_OFF_IO] for watch's routes too
    u64 at;             // when its answer reached the peer's socket (the loader counts it about then): the gate's time
    u32 unseen;         // its loader send was not seen (transit_in_unseen)
    u32 ready;
    u32 route;          // watch's (probes/watch/routes.bpf.h)
};
BPF_PERCPU_ARRAY(bd_scratch, struct bd_req_t, 1);
BPF_PROG_ARRAY(bd_progs, 1);  // [0]: bd_commit (breakdown.py loads it)

// The window the figures are counted over: the socket-wait set's gate (sockwait.bpf.c, window.lo/hi), on the
// answer's arrival at the loader (the loader counts it about then), so bd_stats holds that window's requests
// exactly however late netprof hears its marks; no gate: everything.
static __always_inline int bd_in_window(u64 t) {
    u32 zero = 0;
    struct window_t *w = window.lookup(&zero);
    return !w || in_gate(w, t);
}

// The tree's threads' waits blocked in fd syscalls, by process, syscall and first argument (the
// descriptor; an epoll_wait's is its epoll instance): ns. breakdown.py names the descriptors behind
// off_cpu_io from it (docs/breakdown.md, "Which descriptor").
struct bd_io_key_t {
    u32 tgid;
    s32 sc;
    u64 fd;
};
BPF_HASH(bd_iowait, struct bd_io_key_t, u64, 4096);

// Answers delivered to the loader's sockets, awaiting its read (loader_wait).
BPF_HASH(bd_peer, u64, u64, 65536);
BPF_ARRAY(bd_peer_bits, struct bits_t, 1);

#if WATCH
// probes/watch/routes.bpf.h, pasted after this file (it needs NPART)
static __always_inline void rt_enter(struct bpf_raw_tracepoint_args *ctx, s32 sc, u32 tid);
static __always_inline void rt_ring(u32 tid);
static __always_inline void rt_measured(u32 route, u64 *v, u64 timer);
#endif

static __always_inline u32 bd_cause(s32 sc) {
    switch (sc) {
    case 202: case 449:                      // futex, futex_waitv
        return BD_FUTEX;
    case 35: case 230: case 34:              // nanosleep, clock_nanosleep, pause
        return BD_SLEEP;
    case 0: case 1: case 7: case 17: case 19: case 20: case 23: case 42: case 43: case 44: case 45:
    case 46: case 47: case 232: case 270: case 271: case 281: case 288: case 299: case 307: case 426:
    case 441:  // read write poll pread readv writev select connect accept sendto recvfrom sendmsg recvmsg
               // epoll_wait pselect6 ppoll epoll_pwait accept4 recvmmsg sendmmsg io_uring_enter epoll_pwait2
        return BD_IO;
    }
    return BD_OTHER;
}

// epoll_wait epoll_pwait epoll_pwait2 poll ppoll select pselect6: an event loop waiting for its next turn
static __always_inline int bd_is_readiness(s32 sc) {
    return sc == 232 || sc == 281 || sc == 441 || sc == 7 || sc == 271 || sc == 23 || sc == 270;
}

static __always_inline int bd_is_send(s32 sc) {
    return sc == 1 || sc == 20 || sc == 44 || sc == 46 || sc == 307;
}

// A thread's state word: (start of the current state << BD_W_SHIFT) | its BD_*.
#define BD_W_SHIFT 4
static __always_inline u64 bd_since(u64 w) {
    return w >> BD_W_SHIFT;
}
static __always_inline u32 bd_state(u64 w) {
    return w & ((1 << BD_W_SHIFT) - 1);
}

// A thread changes state; returns when (its clock). A request's edges read the thread's clocks from other CPUs (an
// arrival, in its client's context: bd_now) while the thread's own programs change them, and this VM can hold a
// program for 13-43 µs at a timer tick. With cum[] added to before the state and its start were written (two
// fields), a reader in such a pause counted the closing interval twice (a part off by that whole interval); with
// the time read at the program's start, a pause anywhere before the write counted in the state the thread had
// left. Now the time is read just before the state and its start are written, as one word (bd_enter_state; but
// for sys_enter, whose time read first serves its send's entry too: a second read costs ~25 ns on every syscall),
// and cum[] is added to after: a pause after the write leaves a reader's clocks behind (the closing interval not
// yet in cum[]), never ahead. A pause between the clock read and the write remains, and every `clock` skip traced
// since was one (the thread's program held right after its clock read; 5-13 in a million requests of the
// thread backend at 100 connections, bench/RESULTS.md "The breakdown's clock skips"): the time must be read before
// it is written, and a reader cannot wait a pause out (one that spun on a mark set before the clock read cost the
// writer its cache lines: tried, up to 1 request in 200 skipped).
static __always_inline u64 bd_enter_state_at(struct bd_thr_t *t, u32 st, u64 now) {
    u64 w = LOAD_ONCE(t->word);
    STORE_ONCE(t->word, (now << BD_W_SHIFT) | st);
    barrier();
    u32 cur = bd_state(w);
    u64 since = bd_since(w);
    if (cur < BD_NS && now > since)
        t->cum[cur] += now - since;
    return now;
}

static __always_inline u64 bd_enter_state(struct bd_thr_t *t, u32 st) {
    return bd_enter_state_at(t, st, bpf_ktime_get_ns());
}

// A thread's clocks as of `now` (the open interval added to its current state) into `out`: a copy of cum[] counts
// with the open interval only if the state word was the same before and after it; a thread that changed state
// under two copies in a row gets the last without it (its clocks a little behind, never ahead).
static __always_inline void bd_now(struct bd_thr_t *t, u64 now, u64 *out) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        u64 w = LOAD_ONCE(t->word);
        barrier();
#pragma unroll
        for (int i = 0; i < BD_NS; i++)
            out[i] = t->cum[i];
        barrier();
        if (LOAD_ONCE(t->word) == w) {
            u32 st = bd_state(w);
            u64 since = bd_since(w);
            if (st < BD_NS && now > since)
                out[st] += now - since;
            return;
        }
    }
}

static __always_inline u32 task_field(u64 task, u64 off) {
    u32 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (void *)(task + off));
    return v;
}

// The thread's state clocks when `task` is a thread of the tree. The tree filter (an array read) comes
// before the hash lookup: most switches and wake-ups on the machine are other processes'.
static __always_inline struct bd_thr_t *tree_thread(u64 task) {
    if (!in_tree(task_field(task, OFF_TASK_TGID)))
        return 0;
    u32 pid = task_field(task, OFF_TASK_PID);
    return pid ? bd_thr.lookup(&pid) : 0;
}

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
RAW_TRACEPOINT_PROBE(sched_switch) {
    u64 state = ctx->args[3];
    struct bd_thr_t *t = tree_thread(ctx->args[1]);
    if (t) {
        // TASK_RUNNING (0), or preempted: still runnable; else blocked, by the syscall it is in
        u32 st = (state & 0xff) == 0 ? BD_RUNQ : bd_cause(t->sc);
        if (st == BD_FUTEX) {
            u32 zero = 0;
            struct bd_gil_t *g = bd_gil.lookup(&zero);
            if (g && t->arg0 >= g->lo && t->arg0 < g->hi)
                st = BD_GIL;
        }
        bd_enter_state(t, st);
    }
    t = tree_thread(ctx->args[2]);
    if (t)
        bd_enter_state(t, t->sc >= 0 ? BD_SYS : BD_USER);
    return 0;
}

// The part of [a, b) inside the gate (bd_in_window's window; all of it without one).
static __always_inline u64 bd_gated_span(u64 a, u64 b) {
    u32 zero = 0;
    struct window_t *w = window.lookup(&zero);
    if (w && w->hi) {
        a = a > w->lo ? a : w->lo;
        b = b < w->hi ? b : w->hi;
    }
    return b > a ? b - a : 0;
}

static __always_inline void bd_woken(u64 task) {
    struct bd_thr_t *t = tree_thread(task);
    u64 w = t ? LOAD_ONCE(t->word) : 0;
    if (!t || bd_state(w) < BD_FUTEX)
        return;
    u64 now = bd_enter_state(t, BD_RUNQ);
    if (bd_state(w) == BD_IO && now > bd_since(w)) {  // what it waited on, for naming off_cpu_io's descriptor
        struct bd_io_key_t k = {};
        k.tgid = task_field(task, OFF_TASK_TGID);
        k.sc = t->sc;
        k.fd = t->arg0;
        // the part inside the gate; a wait outside it adds 0 but still makes its key, which netprof names at the
        // window's first mark (without it a descriptor first waited on in the warm-up went unnamed, and one that
        // closed as the load stopped, before the last mark's names, was "closed before the window's end")
        bd_iowait.increment(k, bd_gated_span(bd_since(w), now));
    }
}

// TP_PROTO(struct task_struct *p)
RAW_TRACEPOINT_PROBE(sched_wakeup) {
    bd_woken(ctx->args[0]);
    return 0;
}

RAW_TRACEPOINT_PROBE(sched_wakeup_new) {
    bd_woken(ctx->args[0]);
    return 0;
}

// A send-family entry on this CPU by task `id` at `now`: its device and peer edges are looked for from here.
static __always_inline void bd_send_entered(u64 id, u64 now) {
    u32 zero = 0;
    struct bd_pc_t *pc = bd_pc.lookup(&zero);
    if (pc) {
        pc->send_pid = id;
        pc->send_enter = now;
        pc->dev_ts = pc->dev_last = 0;
        pc->peer_arr = 0;
        pc->peer_sk = 0;
    }
}

// TP_PROTO(struct pt_regs *regs, long id): every task's send-family entries are noted per CPU (the
// loader's, for transit_in); the tree's threads are learned and their clocks move to SYS.
RAW_TRACEPOINT_PROBE(sys_enter) {
    s32 sc = (s32)ctx->args[1];
    u64 id = bpf_get_current_pid_tgid();
    u64 now = bpf_ktime_get_ns();
    int send = bd_is_send(sc);
    if (send)
        bd_send_entered(id, now);
    if (!in_tree(id >> 32))
        return 0;
    u32 tid = id;
    struct bd_thr_t *t = bd_thr.lookup(&tid);
    if (!t) {
        struct bd_thr_t fresh = {};
        fresh.word = (now << BD_W_SHIFT) | BD_USER;
        fresh.sc = -1;
        bd_thr.update(&tid, &fresh);
        t = bd_thr.lookup(&tid);
        if (!t)
            return 0;
    }
    bd_enter_state_at(t, BD_SYS, now);  // the time read above: a second clock read is ~25 ns on every syscall
    t->sc = sc;
    if (bd_is_readiness(sc))
        t->io_enter = t->cum[BD_IO];
#if WATCH
    rt_enter(ctx, sc, tid);
#endif
    if (bd_cause(sc) != BD_OTHER) {  // futex: which word (the GIL's?); fd syscalls: which descriptor
        struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
        u64 a0 = 0;
        bpf_probe_read_kernel(&a0, sizeof(a0), &regs->di);
        t->arg0 = a0;
    }
    if (send) {
        t->enter_ts = now;
#pragma unroll
        for (int i = 0; i < BD_NS; i++)
            t->enter_cum[i] = t->cum[i];
    }
    return 0;
}

// TP_PROTO(struct pt_regs *regs, long ret)
RAW_TRACEPOINT_PROBE(sys_exit) {
    u64 id = bpf_get_current_pid_tgid();
    if (!in_tree(id >> 32))
        return 0;
    u32 tid = id;
    struct bd_thr_t *t = bd_thr.lookup(&tid);
    if (t) {
        // a readiness wait that returned no event ended on its timeout: its blocked time was the loop's timer
        if (bd_is_readiness(t->sc) && (long)ctx->args[1] == 0 && t->cum[BD_IO] > t->io_enter)
            t->cum[BD_TIMER] += t->cum[BD_IO] - t->io_enter;
        bd_enter_state(t, BD_USER);
        t->sc = -1;
    }
    return 0;
}

// A send submitted through io_uring (IORING_OP_SEND, SENDMSG and their zero-copy forms: probes/ring_ops.py)
// is issued inline by the submitting task's io_uring_enter, on this CPU, right after this tracepoint: its
// submission is the send's entry, as a send syscall's is (a send that cannot go at once is issued later, from
// task work: its device edge is then not this entry's, and the request is skipped as no_send_edge). A raw
// tracepoint (TP_PROTO(struct io_kiocb *req)), attached with the set as its other hot programs are: the
// io_uring:io_uring_submit_req trace event would stay attached from load to close (a resident tracepoint__)
// and format a record for every ring operation on the machine. The opcode is read at the running kernel's
// offset (ring_op.bpf.h, the set's cfg); without one, no submission is taken for a send (no_send_edge).
RAW_TRACEPOINT_PROBE(io_uring_submit_req) {
    u32 zero = 0;
    struct cfg_t *c = cfg.lookup(&zero);
    if (!c)
        return 0;
    u32 op = ring_opcode(c, ctx->args[0]);
#if WATCH
    u64 who = bpf_get_current_pid_tgid();
    if (in_tree(who >> 32))
        rt_ring(who);
#endif
    if (op != 26 && op != 9 && op != 47 && op != 48)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    u64 now = bpf_ktime_get_ns();
    bd_send_entered(id, now);
    if (!in_tree(id >> 32))
        return 0;
    u32 tid = id;
    struct bd_thr_t *t = bd_thr.lookup(&tid);
    if (t) {
        t->enter_ts = now;
        bd_now(t, now, t->enter_cum);  // inside io_uring_enter: the thread's SYS clock runs
    }
    return 0;
}

// TP_PROTO(struct sk_buff *skb): a packet handed to a device, in the sending task's context.
RAW_TRACEPOINT_PROBE(net_dev_queue) {
    u32 zero = 0;
    struct bd_pc_t *pc = bd_pc.lookup(&zero);
    if (pc && pc->send_pid == bpf_get_current_pid_tgid())
        pc->dev_last = bpf_ktime_get_ns();
    return 0;
}

// sk_data_ready on a socket that is not a known server socket, inside a send syscall: where that send
// delivered (the peer's socket, on loopback). The first such socket is the peer; its last arrival is
// the answer's last packet (an answer sent as several packets arrives as several).
static __always_inline void bd_foreign_arrival(u64 sk) {
    u32 zero = 0;
    struct bd_pc_t *pc = bd_pc.lookup(&zero);
    if (pc && pc->send_pid == bpf_get_current_pid_tgid() && (!pc->peer_sk || pc->peer_sk == sk)) {
        pc->peer_arr = bpf_ktime_get_ns();
        pc->peer_sk = sk;
        pc->dev_ts = pc->dev_last;
    }
}

static __always_inline void bd_skip(int why) {
    u32 zero = 0;
    struct bd_stats_t *b = bd_stats.lookup(&zero);
    if (b && why < NSKIP && bd_in_window(bpf_ktime_get_ns()))
        __sync_fetch_and_add(&b->skipped[why], 1);
}

// The sending task's transit to an arrival at `now`: from its send's entry on this CPU, when the arrival is
// delivered inside that send (the client's, on loopback); 0 when not seen (counted at the answer:
// transit_in_unseen), as for bytes a server thread took off its socket's backlog in its own syscall.
static __always_inline u64 bd_transit_in(u64 now) {
    u32 zero = 0;
    struct bd_pc_t *pc = bd_pc.lookup(&zero);
    u64 id = bpf_get_current_pid_tgid();
    if (pc && pc->send_pid == id && !in_tree(id >> 32) && pc->send_enter && pc->send_enter <= now)
        return now - pc->send_enter;
    return 0;
}

// Opens a request on served socket `s`: arrived at `at` (its serving thread `tid`'s clocks then already in
// bd_a; 0: not known yet, adopted at the read), `tin` after its client's send.
static __always_inline void bd_open(struct sk_t *s, u32 tid, u64 at, u64 tin) {
    s->bd_tid = tid;
    s->bd_q0 = 0;
    s->bd_at = at;
    s->bd_tin = tin;
    s->own_u = s->own_s = s->pre_u = s->pre_s = 0;
    s->bd_phase = 1;
}

// New bytes queued on served socket `s` at `now` (loader's context on loopback); `was_empty`: nothing
// of it was unread before. Opens a request when none is open. A request that arrives while the socket's
// last one is read but not answered is the next one when its predecessor's answer has reached the client
// and the send has not yet returned (a fast client on another CPU turns around inside that send): it is
// kept (bd_next) and opened when that answer is taken (bd_open_next), as if it had arrived on an idle
// socket, its wait until then queue_wait. Anything else is pipelining: counted (busy), not followed.
static __always_inline void bd_arrival(struct sk_t *s, u64 now, int was_empty) {
    if (!s->served)
        return;
    if (s->bd_phase == 2 && was_empty && !s->bd_next) {
        u32 ntid = s->reader;
        struct bd_thr_t *n = ntid ? bd_thr.lookup(&ntid) : 0;
        if (n) {
            bd_now(n, now, s->bd_na);
            s->bd_ntid = ntid;
            s->bd_nat = now;
            s->bd_ntin = bd_transit_in(now);
            barrier();  // its fields before its flag: the serving thread's programs open it from them (bd_open_next)
            s->bd_next = 1;
            return;
        }
    }
    if (s->bd_phase || !was_empty) {
        if (s->bd_phase == 1) {  // a second arrival before the read: the open request is not one message
            s->bd_phase = 0;
            bd_skip(K_BUSY);
        }
        if (s->bd_next) {  // nor is a next one that was kept
            s->bd_next = 0;
            bd_skip(K_BUSY);
        }
        bd_skip(K_BUSY);  // and this one
        return;
    }
    u32 tid = s->reader;
    struct bd_thr_t *t = tid ? bd_thr.lookup(&tid) : 0;
    // A connection no thread has read yet (its first request): the thread that reads it is adopted at the
    // read, and the time until then is queue_wait (bd_q0), as no thread serves the connection yet.
    if (t)
        bd_now(t, now, s->bd_a);
    bd_open(s, t ? tid : 0, now, bd_transit_in(now));
}

// The request kept by bd_arrival while its predecessor's answer was being sent, opened once that answer is
// taken (its predecessor closed: bd_phase 0), with the clocks and times of its arrival; or at its read, when
// its flag was set on the client's CPU after the answer's program had looked (bd_read).
static __always_inline void bd_open_next(struct sk_t *s) {
    if (!s->bd_next || s->bd_phase)
        return;
    s->bd_next = 0;
#pragma unroll
    for (int i = 0; i < BD_NS; i++)
        s->bd_a[i] = s->bd_na[i];
    bd_open(s, s->bd_ntid, s->bd_nat, s->bd_ntin);
}

// A read or send of served socket `s` by thread `t` at `now`: the thread's CPU since its previous
// marker (clipped to the open request's arrival) is this socket's open request's; `cpu_u`/`cpu_s` are
// the thread's user/sys clocks where the claim ends.
static __always_inline void bd_claim(struct sk_t *s, struct bd_thr_t *t, u32 tid, u64 cpu_u, u64 cpu_s) {
    u64 from_u = t->mark_user, from_s = t->mark_sys;
    int open = s->bd_phase && s->bd_tid == tid;
    if (open) {
        if (s->bd_a[BD_USER] > from_u)
            from_u = s->bd_a[BD_USER];
        if (s->bd_a[BD_SYS] > from_s)
            from_s = s->bd_a[BD_SYS];
        if (cpu_u > from_u)
            s->own_u += cpu_u - from_u;
        if (cpu_s > from_s)
            s->own_s += cpu_s - from_s;
    }
}

static __always_inline void bd_record(struct bd_stats_t *b, u32 part, u64 v) {
    u32 i = part * NSLOTS + (slot_of(v) & (NSLOTS - 1));
    __sync_fetch_and_add(&b->hist[i], 1);
    __sync_fetch_and_add(&b->sum_ns[part], v);
    __sync_fetch_and_add(&b->count[part], 1);
}

// Tail-called by sock_send_length with a finished request in bd_scratch: each part's histogram, and the
// parts by the slot of the request's total (the composition of the slowest: breakdown.py tail_us).
int bd_commit(struct bpf_raw_tracepoint_args *ctx) {
    u32 zero = 0;
    struct bd_req_t *q = bd_scratch.lookup(&zero);
    struct bd_stats_t *b = bd_stats.lookup(&zero);
    if (!q || !b || !q->ready)
        return 0;
    q->ready = 0;
    if (!bd_in_window(q->at))
        return 0;
#pragma unroll
    for (int i = 0; i < NDETAIL; i++)
        __sync_fetch_and_add(&b->detail_ns[i], q->d[i]);
    if (q->unseen)
        __sync_fetch_and_add(&b->transit_in_unseen, 1);
    u64 total = 0;
#pragma unroll
    for (int i = 0; i < NPART - 1; i++) {
        bd_record(b, i, q->v[i]);
#if WATCH
        if (i == P_TRANSIT)  // watch's total is the server's time: the client's network is not in it
            continue;
#endif
        total += q->v[i];
    }
    u32 k = slot_of(total) & (NSLOTS - 1);
    __sync_fetch_and_add(&b->tail_n[k], 1);
#pragma unroll
    for (int i = 0; i < NPART - 1; i++)
        __sync_fetch_and_add(&b->tail_ns[i * NSLOTS + k], q->v[i]);
    __sync_fetch_and_add(&b->requests, 1);
#if WATCH
    rt_measured(q->route, q->v, q->d[D_OFF_TIMER]);
#endif
    return 0;
}

// The read that took served socket `s`'s bytes (`now`: after it copied them).
static __always_inline void bd_read(struct sk_t *s, u64 now) {
    if (!s->served)
        return;
    bd_open_next(s);
    if (s->bd_next && s->bd_phase == 2) {  // a kept next request read before its predecessor was answered (by
        s->bd_next = 0;                    // another thread): not one request at a time
        bd_skip(K_BUSY);
    }
    u32 tid = bpf_get_current_pid_tgid();
    struct bd_thr_t *t = bd_thr.lookup(&tid);
    s->reader = tid;
    if (!t) {
        if (s->bd_phase == 1) {
            s->bd_phase = 0;
            bd_skip(K_NO_READER);
        }
        return;
    }
    u64 c[BD_NS];
    bd_now(t, now, c);
    if (s->bd_phase == 1 && !s->bd_tid) {  // adopted (bd_arrival): its clocks start here
#pragma unroll
        for (int i = 0; i < BD_NS; i++)
            s->bd_a[i] = c[i];
        s->bd_tid = tid;
        s->bd_q0 = now > s->bd_at ? now - s->bd_at : 0;
    }
    if (s->bd_phase == 1 && s->bd_tid != tid) {
        s->bd_phase = 0;
        bd_skip(K_OTHER_THREAD);
    }
    bd_claim(s, t, tid, c[BD_USER], c[BD_SYS]);
    t->mark_user = c[BD_USER];
    t->mark_sys = c[BD_SYS];
    if (s->bd_phase == 1) {  // the read R: what came before it is the unread phase
        s->pre_u = s->own_u;
        s->pre_s = s->own_s;
#pragma unroll
        for (int i = 0; i < BD_NS; i++)
            s->bd_r[i] = c[i];
        s->bd_phase = 2;
        // A server that hands requests to other threads (a reader and a pool of senders) answers this
        // socket's requests from the thread that answered its last one: that thread's clocks now, so the
        // request can be followed on them after the read (bd_answer). A first request, or an answerer the
        // breakdown has not seen, cannot be (skipped: other_thread).
        u32 ans = s->ans_tid;
        struct bd_thr_t *x = ans && ans != tid ? bd_thr.lookup(&ans) : 0;
        if (x) {
            bd_now(x, now, s->bd_x);
            s->bd_xtid = ans;
        } else {
            s->bd_xtid = tid;
        }
    }
}

// Blocked, but not on a lock: in the unread phase this is queue_wait (the thread blocked in other
// requests' handlers); a lock wait is off_cpu_futex in either phase.
static __always_inline u64 bd_blocked_not_lock(u64 *c) {
    return c[BD_SLEEP] + c[BD_IO] + c[BD_OTHER];
}

// Ends `s`'s answered request, after its fields were read: from here an arrival opens the next one (bd_arrival).
// Not before: the client, on another CPU, has the answer and may send its next request while this program runs
// (it did when a timer interrupt held the program for ~15 µs), and an arrival that found the socket free reset
// the fields this request's parts are made of to the next one's, later than this one's read: its queue_wait came
// out negative (skipped as `clock`: bench/RESULTS.md "The breakdown's clock skips"). Until here such an arrival
// is kept (bd_next) and opened after (bd_open_next). Returns 0 (no request for bd_commit), for bd_answer's early exits.
static __always_inline int bd_answered(struct sk_t *s) {
    barrier();
    STORE_ONCE(s->bd_phase, 0);
    return 0;
}

// The first send on served socket `s` after its read (`now`: after the send returned): the request's
// parts, from the clocks at A, R and the send's entry, and the send's edges on this CPU, into bd_scratch.
// Returns 1 when a request is there for bd_commit.
static __always_inline int bd_answer(struct sk_t *s, u64 now) {
    if (!s->served)
        return 0;
    u32 tid = bpf_get_current_pid_tgid();
    struct bd_thr_t *t = bd_thr.lookup(&tid);
    if (!t)
        return 0;
    u32 zero = 0;
    struct bd_pc_t *pc = bd_pc.lookup(&zero);
    int mine = pc && pc->send_pid == bpf_get_current_pid_tgid() && t->enter_ts == pc->send_enter;
    u64 *e = t->enter_cum;  // the thread's clocks at the send's entry
    u64 e_u = e[BD_USER], e_s = e[BD_SYS];
    int phase = s->bd_phase;
    // handed: read by one thread, answered by another, whose clocks were taken at the read (bd_read)
    int handed = phase == 2 && s->bd_tid != tid && s->bd_xtid == tid;
    s->ans_tid = tid;
    if (phase == 2 && s->bd_tid != tid && !handed) {
        bd_skip(K_OTHER_THREAD);
        phase = 0;
    }
    // the clocks at the read of the thread that answers: the reader's, or the handed-to thread's
    u64 *x = handed ? s->bd_x : s->bd_r;
    if (phase == 2 && mine && !handed) {  // the send's entry ends the claim (its own CPU is the `send` part)
        bd_claim(s, t, tid, e_u, e_s);
    } else if (phase == 2 && mine) {
        // handed: the answering thread's CPU since its previous marker, but not before the read
        u64 from_u = t->mark_user > x[BD_USER] ? t->mark_user : x[BD_USER];
        u64 from_s = t->mark_sys > x[BD_SYS] ? t->mark_sys : x[BD_SYS];
        if (e_u > from_u)
            s->own_u += e_u - from_u;
        if (e_s > from_s)
            s->own_s += e_s - from_s;
    }
    u64 c[BD_NS];
    bd_now(t, now, c);
    t->mark_user = c[BD_USER];
    t->mark_sys = c[BD_SYS];
    if (phase != 2)
        return bd_answered(s);
#if WATCH
    // a client on another host: no arrival on this machine; the send ends at its last packet handed to the
    // device, and transit_out is not seen (0)
    if (mine && !pc->peer_arr && pc->dev_last >= t->enter_ts && pc->dev_last) {
        pc->dev_ts = pc->dev_last;
        pc->peer_arr = pc->dev_last;
    }
#endif
    if (!mine || !pc->dev_ts || !pc->peer_arr || pc->dev_ts < t->enter_ts || pc->peer_arr < pc->dev_ts) {
        bd_skip(K_NO_SEND_EDGE);
        return bd_answered(s);
    }
    u64 *a = s->bd_a, *r = s->bd_r;
    // [A, R] on the reader's clocks (a → r), [R, S] on the answering thread's (x → e; x = r when the reader
    // answers). Every difference must be ≥ 0: the clocks only grow (a race with a state change could break it)
    s64 qw = (s64)(r[BD_USER] + r[BD_SYS] - a[BD_USER] - a[BD_SYS]) - (s64)(s->pre_u + s->pre_s)
             + (s64)(bd_blocked_not_lock(r) - bd_blocked_not_lock(a)) + (s64)s->bd_q0;
    s64 lw = (s64)(e_u + e_s - x[BD_USER] - x[BD_SYS]) - (s64)(s->own_u + s->own_s - s->pre_u - s->pre_s);
    s64 rq = (s64)(r[BD_RUNQ] - a[BD_RUNQ]) + (s64)(e[BD_RUNQ] - x[BD_RUNQ]);
    // lock waits from the arrival on: before the read too
    s64 gil = (s64)(r[BD_GIL] - a[BD_GIL]) + (s64)(e[BD_GIL] - x[BD_GIL]);
    s64 fu = (s64)(r[BD_FUTEX] - a[BD_FUTEX]) + (s64)(e[BD_FUTEX] - x[BD_FUTEX]) + gil;
    s64 sl = (s64)(e[BD_SLEEP] - x[BD_SLEEP]), io = (s64)(e[BD_IO] - x[BD_IO]), ot = (s64)(e[BD_OTHER] - x[BD_OTHER]);
    if (qw < 0 || lw < 0 || rq < 0 || fu < 0 || sl < 0 || io < 0 || ot < 0 || gil < 0) {
        bd_skip(K_CLOCK);
        return bd_answered(s);
    }
    // of io, the readiness waits that timed out; a wait in progress at the read (a handed request's answering
    // thread) is added whole at its exit: at most io
    s64 tm = (s64)(e[BD_TIMER] - x[BD_TIMER]);
    tm = tm < 0 ? 0 : tm > io ? io : tm;
    u64 on = s->own_u + s->own_s;
    u64 snd = pc->dev_ts - t->enter_ts, tout = pc->peer_arr - pc->dev_ts, tin = s->bd_tin;
    struct bd_req_t *q = bd_scratch.lookup(&zero);
    if (!q)
        return bd_answered(s);
    q->v[P_QUEUE_WAIT] = qw;
    q->v[P_LOOP_WAIT] = lw;
    q->v[P_RUNQUEUE] = rq;
    q->v[P_ON_CPU] = on;
    q->v[P_OFF_FUTEX] = fu;
    q->v[P_OFF_SLEEP] = sl;
    q->v[P_OFF_IO] = io;
    q->v[P_OFF_OTHER] = ot;
    q->v[P_SEND] = snd;
    q->v[P_TRANSIT] = tin + tout;
    q->d[D_ON_CPU_USER] = s->own_u;
    q->d[D_ON_CPU_SYS] = s->own_s;
    q->d[D_TRANSIT_IN] = tin;
    q->d[D_TRANSIT_OUT] = tout;
    q->d[D_OFF_GIL] = gil;
    q->d[D_OFF_TIMER] = tm;
    u64 c_end = c[BD_USER] + c[BD_SYS];
    q->d[D_SEND_CPU] = c_end > e_u + e_s ? c_end - e_u - e_s : 0;
    q->unseen = !tin;
    q->at = pc->peer_arr;
    q->ready = 1;
#if WATCH
    q->route = s->route;
#endif
    bd_answered(s);
    // the answer now waits on the loader's socket until its read
    u64 psk = pc->peer_sk, arr = pc->peer_arr;
    if (!psk)  // not delivered on this machine (watch: a remote client)
        return 1;
    bd_peer.update(&psk, &arr);
    u32 bit = sk_bit(psk);
    struct bits_t *pb = bd_peer_bits.lookup(&zero);
    if (pb)
        __sync_fetch_and_or(&pb->w[(bit >> 6) & (BITS_WORDS - 1)], 1ULL << (bit & 63));
    return 1;
}

// A read by a task outside the tree: the loader taking an answer we saw delivered (loader_wait).
static __always_inline void bd_loader_read(u64 sk, u64 now) {
    u32 zero = 0, bit = sk_bit(sk);
    struct bits_t *pb = bd_peer_bits.lookup(&zero);
    if (!pb || !(pb->w[(bit >> 6) & (BITS_WORDS - 1)] & (1ULL << (bit & 63))))
        return;
    u64 *arr = bd_peer.lookup(&sk);
    if (!arr)
        return;
    u64 at = *arr;
    bd_peer.delete(&sk);
    struct bd_stats_t *b = bd_stats.lookup(&zero);
    if (b && at && at <= now && bd_in_window(at))  // gated as its request's other parts were (bd_commit)
        bd_record(b, P_LOADER_WAIT, now - at);
}
