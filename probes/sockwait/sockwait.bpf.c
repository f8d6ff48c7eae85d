// netprof socket-wait set: where each message waits on the server side — unread in the socket's
// receive queue (queue wait) or being handled (read → answer) — per cell and per connection, from
// three socket tracepoints. Loaded by netprof.probes.SockWaitProbes (BCC).
//
// Mechanism (tracepoints only: no kprobes, no fentry on this kernel):
// - Server sockets are learned when a connection is established on a port the tree listens on
//   (sock:inet_sock_set_state; Python seeds the ports at target(), listen() in the tree adds more),
//   so a connection's first bytes are timed even if the server never reads them (starvation), and
//   from the tree's own reads and writes (sock:sock_recv_length / sock:sock_send_length run in the
//   reading/sending task: tree filter by tgid there) for any other socket it uses.
// - sock:sk_data_ready runs in the SENDER's context on loopback (softirq of the loader's send), so it
//   is filtered by socket: a bitmap of hashed socket addresses turns away the loader's sockets, then
//   a lookup in `socks`, the LRU hash of known server sockets.
// - Exact byte accounting with TCP sequence numbers read from the socket (offsets from the running
//   kernel's BTF, passed as -DOFF_*: BCC compiles against Debian's 6.1 headers, whose struct layouts
//   are not this kernel's). At each sk_data_ready the socket's rcv_nxt (end of the bytes received so
//   far) is appended with the time to a per-socket FIFO of (arrival time, end seq). At each read,
//   copied_seq (after the read) and the read's length give the bytes it took, [before, after): the
//   FIFO entries ending at or before `before` were consumed by earlier reads and are dropped; the
//   next entry holds the arrival of the oldest byte this read took: wait = read time − that arrival
//   (exact: the wait of the longest-waiting byte of the read). Entries ending at or before `after`
//   are then dropped. A full FIFO (more than FIFO separate arrivals unread) extends its newest entry
//   instead of appending (counted in fifo_merged): the later bytes then carry an earlier arrival, so
//   such a wait is an upper bound.
// - Per connection, the waits' sums (the mean: with K messages in flight a connection's mean wait is
//   about K over its rate, Little's law, so it repeats how much it was served) and a log2 histogram
//   of its waits (`wh`: its own wait, the p90 in sockwait.py — whether its data sits unread for the
//   loop — which the mean blurs when a well-served connection's thousands of short waits meet a few
//   long ones).
// - At each send: the handler time since the last read (answers the pending request), and the
//   server time since the arrival of the request's first byte (wait + handler of that request).
// - A connection that reaches TCP_CLOSE is marked: if its address is reused by a new connection
//   (other peer port), the entry starts afresh (counted in `reused`).
//
// Unmeasured, counted: reads of bytes that were already queued when the socket was learned or the
//   set attached (`unknown`: their arrival was not seen), reads with no recorded arrival
//   (`unmatched`). Sockets are evicted from the LRU hash only when more than MAX_SOCKETS are known:
//   Python counts evictions as learned − reused − present.
// The gate (window.lo/hi, sockwait.py's gate()): with the loader's window announced before it opens, reads and
//   answers count only inside it (by their time; a socket's FIFO and pending request are kept whatever the
//   time), so the figures are that window's however late netprof hears the marks; gmax holds its maxima.
// Attach/detach: the three socket programs are raw tracepoints (hot; attached per window). The tree
//   bookkeeping (task_newtask, sched_process_exit) and inet_sock_set_state stay attached from load
//   to close (closes and listen ports are tracked always; no connection is learned while detached).
//   A socket's FIFO recorded before the last attach is stale (arrivals were missed while detached):
//   it is reset at the socket's next arrival, read or write (window.attach_ns is the epoch); bytes
//   queued by then are `unknown`.
//
// cflags: -DTRACK_CHILDREN=0|1 -DMAX_SOCKETS=<n> -DFIFO=<power of two> -DNSLOTS=<power of two>
//         -DWH=<n> (per-connection log2 wait buckets: [2^i, 2^(i+1)) ns, the last one open)
//         -DOFF_FAMILY -DOFF_PROTOCOL -DOFF_PORTPAIR -DOFF_COPIED_SEQ -DOFF_RCV_NXT (bytes from struct sock *)
//         -DBREAKDOWN=0|1: also the request breakdown (probes/breakdown/, --breakdown), which follows each
//         request of a served socket through the serving thread's states (its own cflags there)
#include <uapi/linux/ptrace.h>
// No <linux/sched.h>: nothing here uses it, and parsing it was 0.4 s of each compile (the bytecode is
// the same without it; bench/RESULTS.md, start-up).

#define FIFO_MASK (FIFO - 1)
#define SUB_BITS 4                     // 16 linear sub-buckets per power of two: ≤ 6.25% bucket width
#define SUB (1 << SUB_BITS)
#define H_WAIT 0
#define H_HANDLER 1
#define H_SERVER 2
#define NHIST 3
#define MSG_PEEK_FLAG 2
#define IPPROTO_TCP_NR 6
#define AF_INET_NR 2
#define AF_INET6_NR 10
#define TCP_ESTABLISHED_NR 1
#define TCP_LISTEN_NR 10
#define TCP_CLOSE_NR 7
#ifndef barrier
#define barrier() asm volatile("" ::: "memory")
#endif
#define LOAD_ONCE(x) (*(volatile typeof(x) *)&(x))
#define STORE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))

struct cfg_t {
    u32 tgid;        // target tgid, 0 when untargeted
    u32 nchildren;   // live entries in `children`
    u32 gen;         // bumped on every re-target: sockets learned before are stale
    s32 ring_opcode_off;  // the breakdown's: struct io_kiocb's `opcode` (ring_op.bpf.h); -1: not found / unused
};
#define TREE_TRACEPOINTS
#include "tree_filter.bpf.h"
#if BREAKDOWN
#include "ring_op.bpf.h"
#endif

struct window_t {    // written by Python only
    u64 attach_ns;   // bpf_ktime_get_ns() at the last attach: FIFOs from before are stale
    u32 active;      // 1 from attach to detach
    u32 seq;         // bumped by each snapshot: which max slot is current
    // The counted window, [lo, hi) in ns of CLOCK_MONOTONIC (bpf_ktime_get_ns, the loader's clock on this host):
    // written by sockwait.py's gate() before the window opens, from the bounds the loader announces with
    // `connected`, so the figures are that window's however late netprof hears its marks. hi 0: no gate (watch, a
    // loader on another host, a cell before its window is known). `gate` numbers the gates (stats_t's gmax).
    u64 lo, hi;
    u32 gate, pad;
};
BPF_ARRAY(window, struct window_t, 1);

static __always_inline int in_gate(struct window_t *w, u64 t) {
    return !w->hi || (t >= w->lo && t < w->hi);
}

#if BREAKDOWN
#include "breakdown/breakdown_state.bpf.h"
#endif

struct sk_t {
    u64 at[FIFO];    // arrival time of each queued chunk (producer: sk_data_ready)
    u32 end[FIFO];   // rcv_nxt after that chunk
    u32 head;        // FIFO positions, free-running: head written by the reader only,
    u32 tail;        //   tail (and at/end/last_end) by sk_data_ready only
    u32 last_end;    // rcv_nxt at the last sk_data_ready
    u32 known_from;  // seq: bytes before it were queued before learning/attach (arrival unknown)
    u64 epoch;       // window.attach_ns when the FIFO was last reset
    u32 gen;         // cfg.gen when learned
    u32 ports;       // skc_portpair when learned: skc_dport (network order) | skc_num << 16
    u32 tgid;        // the tree process that learned the socket
    u32 tcp;         // 1: a TCP socket (measured); 0: another kind (ignored)
    u32 pending;     // a read since the last answer
    u32 closed;      // the connection reached TCP_CLOSE: the address may be reused next
    u64 last_read;   // time of the last read
    u64 req_arrival; // arrival of the oldest byte of the pending request (0: unknown)
    // The first read after the counted window (a gate's hi): the arrival of the oldest byte it took, which was the
    // oldest unread at the window's end if it came before it; `hi_gate` the gate it belongs to (window.gate).
    // sockwait.py ages a connection's unread data from it: the FIFO's head, read later, has moved on by then.
    u64 unread_at_hi;
    u32 hi_gate;
    u32 hi_pad;
    // per connection, cumulative since learned:
    u64 reads, bytes, waits, wait_ns, answers, handler_ns;
    u32 wh[WH];      // its waits by log2(ns)
#if BREAKDOWN
    BD_SK_FIELDS
#endif
#if WATCH
    u32 route;       // the route of its pending request (probes/watch/routes.bpf.h)
#endif
};
BPF_TABLE("lru_hash", u64, struct sk_t, socks, MAX_SOCKETS);
BPF_PERCPU_ARRAY(zero_sk, struct sk_t, 1);   // never written: the zeroed value new sockets start from

// A bit per hash of the socket address, set when a socket is learned (cleared by target()):
// sk_data_ready fires for every socket on the machine (the loader's too); the bit test (an inlined
// array access) turns away almost all of them before the hash lookup.
#define BITS_WORDS 1024
struct bits_t {
    u64 w[BITS_WORDS];
};
BPF_ARRAY(known_bits, struct bits_t, 1);

static __always_inline u32 sk_bit(u64 sk) {
    return ((sk >> 6) ^ (sk >> 17)) & (BITS_WORDS * 64 - 1);
}

struct stats_t {
    u64 hist[NHIST * NSLOTS];  // log-linear histograms (ns): wait, handler, server
    u64 sum_ns[NHIST];
    u64 learned;               // sockets (re)initialised in this target
    u64 reused;                // ... of which in place of a current entry (address reused)
    u64 fifo_merged;           // arrivals merged into a full FIFO's newest entry (waits are bounds)
    u64 unknown;               // reads of bytes queued before learning/attach (not measured)
    u64 unmatched;             // reads with no recorded arrival (not measured)
    u64 insert_failed;         // a socket could not be added
    // Maxima per window between snapshots: slot p = window.seq & 1 holds window `tag[p]`'s; Python
    // bumps seq and then reads the other slot, which BPF no longer writes.
    u64 tag[2];
    u64 max[2 * NHIST];
    // Maxima over the gated window (window.hi set): gmax belongs to gate `gtag`, whatever the snapshots read.
    u64 gtag;
    u64 gmax[NHIST];
};
BPF_PERCPU_ARRAY(stats, struct stats_t, 1);

static __always_inline u32 read_u32(u64 addr) {
    u32 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline u16 read_u16(u64 addr) {
    u16 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline u32 log2_u64(u64 v) {
    u32 r = 0;
    if (v >> 32) { v >>= 32; r += 32; }
    if (v >> 16) { v >>= 16; r += 16; }
    if (v >> 8) { v >>= 8; r += 8; }
    if (v >> 4) { v >>= 4; r += 4; }
    if (v >> 2) { v >>= 2; r += 2; }
    if (v >> 1) { r += 1; }
    return r;
}

// v < SUB: slot v; else slot (e - SUB_BITS + 1) * SUB + the SUB_BITS bits below the top one.
static __always_inline u32 slot_of(u64 v) {
    if (v < SUB)
        return v;
    u32 e = log2_u64(v);
    u32 i = (e - SUB_BITS + 1) * SUB + ((v >> (e - SUB_BITS)) & (SUB - 1));
    return i < NSLOTS ? i : NSLOTS - 1;
}

static __always_inline void record(struct stats_t *st, struct window_t *w, int kind, u64 v) {
    u32 i = kind * NSLOTS + slot_of(v);
    if (i < NHIST * NSLOTS)
        st->hist[i]++;
    st->sum_ns[kind & 3] += v;
    struct stats_t *m = st;
    u32 p = w->seq & 1;
    if (m->tag[p] != w->seq) {
        m->tag[p] = w->seq;
        m->max[p * NHIST + 0] = 0;
        m->max[p * NHIST + 1] = 0;
        m->max[p * NHIST + 2] = 0;
    }
    u32 j = p * NHIST + kind;
    if (j < 2 * NHIST && v > m->max[j])
        m->max[j] = v;
    if (w->hi) {  // recorded inside the gate (the callers' in_gate)
        if (m->gtag != w->gate) {
            m->gtag = w->gate;
            m->gmax[0] = m->gmax[1] = m->gmax[2] = 0;
        }
        if (v > m->gmax[kind & 3])
            m->gmax[kind & 3] = v;
    }
}

#if BREAKDOWN
#include "breakdown/breakdown.bpf.h"
#endif
#if WATCH
#include "watch/routes.bpf.h"
#endif

// Listening ports of the tree (host order; Python seeds those that exist at target()).
BPF_HASH(lports, u16, u8, 256);

// Reset a known socket's FIFO: bytes queued now (up to rcv_nxt) have an unknown arrival.
static __always_inline void reset_fifo(struct sk_t *s, u64 sk, struct window_t *w) {
    s->known_from = s->last_end = read_u32(sk + OFF_RCV_NXT);
    s->head = LOAD_ONCE(s->tail);
    s->pending = 0;
    s->epoch = w->attach_ns;
#if WATCH
    s->bd_phase = s->bd_next = 0;  // a request from before watch's re-attach (--max-overhead) is not followed: its edges
                                   // were missed
#endif
}

// The known state of a server socket, (re)initialised when new to this target, or when its address
// was reused by another connection (other ports); its FIFO is reset when from before the last
// attach. `tgid` 0: learned outside the tree's context (connection setup). Returns 0 for sockets
// that are not TCP (asyncio's self-pipe, unix sockets) and on failure.
static __always_inline struct sk_t *learn(u64 sk, u32 tgid, struct cfg_t *c, struct window_t *w,
                                          struct stats_t *st) {
    struct sk_t *s = socks.lookup(&sk);
    u32 ports = 0;
    if (s && s->gen == c->gen) {
        // A closed connection's address may belong to a new one now: same connection only with the
        // same peer port (reads of what was queued before a reset come after the close, and the
        // local port is zeroed by then).
        if (s->closed)
            ports = read_u32(sk + OFF_PORTPAIR);
        if (!s->closed || (u16)s->ports == (u16)ports) {
            if (!s->tcp)
                return 0;
            if (!s->tgid)
                s->tgid = tgid;
            if (s->epoch != w->attach_ns)
                reset_fifo(s, sk, w);
            return s;
        }
    } else {
        ports = read_u32(sk + OFF_PORTPAIR);
    }
    u16 family = read_u16(sk + OFF_FAMILY);
    u16 proto = read_u16(sk + OFF_PROTOCOL);
    u32 tcp = (family == AF_INET_NR || family == AF_INET6_NR) && proto == IPPROTO_TCP_NR;
    if (s && s->gen == c->gen)
        st->reused++;
    if (!s) {
        u32 zero = 0;
        struct sk_t *z = zero_sk.lookup(&zero);
        if (!z || socks.update(&sk, z) != 0) {
            st->insert_failed++;
            return 0;
        }
        s = socks.lookup(&sk);
        if (!s) {
            st->insert_failed++;
            return 0;
        }
    } else {
        s->gen = 0;  // invisible to sk_data_ready while being reset
        barrier();
        s->reads = s->bytes = s->waits = s->wait_ns = s->answers = s->handler_ns = 0;
        __builtin_memset(s->wh, 0, sizeof(s->wh));
        s->last_read = s->req_arrival = s->unread_at_hi = 0;
        s->hi_gate = 0;
        s->closed = 0;
#if BREAKDOWN
        s->served = s->bd_phase = s->reader = 0;
#endif
    }
    st->learned++;
    u32 zero = 0, bit = sk_bit(sk);
    struct bits_t *b = known_bits.lookup(&zero);
    if (b)
        __sync_fetch_and_or(&b->w[(bit >> 6) & (BITS_WORDS - 1)], 1ULL << (bit & 63));
    s->ports = ports;
    s->tgid = tgid;
    s->tcp = tcp;
#if WATCH
    // watch attaches to a server whose connections are already open: one the tree reads on a port it listens
    // on is served (a run learns them at their setup: inet_sock_set_state)
    u16 lport = ports >> 16;
    if (tgid && tcp && lports.lookup(&lport))
        s->served = 1;
#endif
    if (tcp)
        reset_fifo(s, sk, w);
    barrier();
    s->gen = c->gen;
    return tcp ? s : 0;
}

#if BREAKDOWN
#if WATCH
// watch's light set keeps this hook for the requests' server time, not the breakdown's state
#define BD_FOLLOWS() (!rt_is_light())
#else
#define BD_FOLLOWS() 1
#endif
#endif

// Data became readable on a socket: runs in the sender's context (loopback softirq), or in the
// reader's when it processes its backlog. Filtered by socket.
RAW_TRACEPOINT_PROBE(sk_data_ready) {
    u64 sk = ctx->args[0];
    u32 zero = 0, bit = sk_bit(sk);
    struct bits_t *b = known_bits.lookup(&zero);
    struct sk_t *s = 0;
    if (b && (b->w[(bit >> 6) & (BITS_WORDS - 1)] & (1ULL << (bit & 63))))
        s = socks.lookup(&sk);
    if (!s) {
#if BREAKDOWN
        if (BD_FOLLOWS())
            bd_foreign_arrival(sk);
#endif
        return 0;
    }
    struct cfg_t *c = cfg.lookup(&zero);
    struct window_t *w = window.lookup(&zero);
    if (!c || !w || !w->active || !c->tgid || s->gen != c->gen || !s->tcp || s->closed) {
#if BREAKDOWN
        // not a live server socket: a closed one's address reused (the kernel's slab hands a freed socket's
        // memory to the next one, often the loader's reconnecting socket)
        if (BD_FOLLOWS())
            bd_foreign_arrival(sk);
#endif
        return 0;
    }
    if (s->epoch != w->attach_ns) {  // first arrival since an attach: earlier ones were missed
        reset_fifo(s, sk, w);
        return 0;
    }
    u32 nxt = read_u32(sk + OFF_RCV_NXT);
    if (nxt == s->last_end || (s32)(nxt - s->known_from) <= 0)
        return 0;  // no new bytes (a FIN, a wake-up without data)
    s->last_end = nxt;
    u64 now = bpf_ktime_get_ns();
    u32 t = s->tail;
    u32 h = LOAD_ONCE(s->head);
    if (t - h >= FIFO) {  // full: the newest entry absorbs these bytes (their wait becomes a bound)
        s->end[(t - 1) & FIFO_MASK] = nxt;
        struct stats_t *st = stats.lookup(&zero);
        if (st && in_gate(w, now))
            st->fifo_merged++;
#if BREAKDOWN
        if (BD_FOLLOWS())
            bd_arrival(s, now, 0);
#endif
        return 0;
    }
    s->at[t & FIFO_MASK] = now;
    s->end[t & FIFO_MASK] = nxt;
    barrier();
    STORE_ONCE(s->tail, t + 1);
#if BREAKDOWN
    if (BD_FOLLOWS())
        bd_arrival(s, now, t == h);
#endif
    return 0;
}

// The socket a task of the tree just read from or wrote to (learned if new), with the window and
// stats it counts into; null outside the tree or while the set is detached.
static __always_inline struct sk_t *own_socket(u64 sk, struct window_t **wp, struct stats_t **stp) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct cfg_t *c = in_tree(tgid);
    if (!c)
        return 0;
    u32 zero = 0;
    struct window_t *w = window.lookup(&zero);
    struct stats_t *st = stats.lookup(&zero);
    if (!w || !w->active || !st)
        return 0;
    *wp = w;
    *stp = st;
    return learn(sk, tgid, c, w, st);
}

// The arrival of the first chunk a read of `ret` bytes took (0: unknown, counted in `st` if `counted`: inside the
// gate), and the chunks the read consumed dropped from the socket's FIFO.
static __always_inline u64 consume(struct sk_t *s, u64 sk, int ret, struct stats_t *st, int counted) {
    u32 after = read_u32(sk + OFF_COPIED_SEQ);
    u32 before = after - (u32)ret;
    u32 h = s->head;
    u32 t = LOAD_ONCE(s->tail);
    barrier();
    for (int i = 0; i < FIFO; i++) {   // chunks consumed by earlier reads
        if (h == t || (s32)(s->end[h & FIFO_MASK] - before) > 0)
            break;
        h++;
    }
    u64 arrival = 0;
    if ((s32)(before - s->known_from) < 0)
        st->unknown += counted;
    else if (h == t)
        st->unmatched += counted;
    else
        arrival = s->at[h & FIFO_MASK];
    for (int i = 0; i < FIFO; i++) {   // chunks this read consumed entirely
        if (h == t || (s32)(s->end[h & FIFO_MASK] - after) > 0)
            break;
        h++;
    }
    s->head = h;
    return arrival;
}

// TP_PROTO(struct sock *sk, int ret, int flags): after a receive on a socket, in the reader's task.
RAW_TRACEPOINT_PROBE(sock_recv_length) {
    int ret = (int)ctx->args[1];
    int flags = (int)ctx->args[2];
    if (ret <= 0 || (flags & MSG_PEEK_FLAG))
        return 0;
    u64 now = bpf_ktime_get_ns();
    u64 sk = ctx->args[0];
    struct window_t *w;
    struct stats_t *st;
    struct sk_t *s = own_socket(sk, &w, &st);
    if (!s) {
#if BREAKDOWN
        bd_loader_read(sk, now);
#endif
        return 0;
    }
#if WATCH
    // light (watch's --max-overhead): sk_data_ready stays attached, so the request is timed (its server time);
    // its route, parts and syscalls are not read (the hooks they need are detached)
    if (rt_is_light()) {
        u64 arrival = consume(s, sk, ret, st, 1);
        if (!s->pending) {
            s->pending = 1;
            s->req_arrival = arrival;
            s->route = RT_UNSAMPLED;
        }
        s->last_read = now;
        return 0;
    }
#endif
    int counted = in_gate(w, now);  // the read's figures; the socket's state is kept whatever the time
    u64 arrival = consume(s, sk, ret, st, counted);
    if (w->hi && now >= w->hi && s->hi_gate != w->gate) {
        s->unread_at_hi = arrival;
        s->hi_gate = w->gate;
    }
    if (counted) {
        s->reads++;
        s->bytes += ret;
    }
    if (counted && arrival && arrival <= now) {
        u64 wait = now - arrival;
        s->waits++;
        s->wait_ns += wait;
        u32 b = log2_u64(wait);
        s->wh[b < WH ? b : WH - 1]++;
        record(st, w, H_WAIT, wait);
    }
    int first = !s->pending;  // a request's first read
    if (first) {
        s->pending = 1;
        s->req_arrival = arrival;
    }
    s->last_read = now;
#if BREAKDOWN
    bd_read(s, now);
#endif
#if WATCH
    if (first && s->served && rt_first_read(sk, ret))
        rt_progs.call(ctx, 0);  // its route (a tail call does not return)
#else
    (void)first;
#endif
    return 0;
}

// TP_PROTO(struct sock *sk, int ret, int flags): after a send on a socket, in the sender's task.
// The first send after a read answers the request that read completed.
RAW_TRACEPOINT_PROBE(sock_send_length) {
    int ret = (int)ctx->args[1];
    if (ret <= 0)
        return 0;
    struct window_t *w;
    struct stats_t *st;
    struct sk_t *s = own_socket(ctx->args[0], &w, &st);
    if (!s || !s->pending)
        return 0;
    s->pending = 0;
    u64 now = bpf_ktime_get_ns();
#if WATCH
    if (rt_is_light()) {
        if (s->served)
            rt_answered(s->route, s->req_arrival && s->req_arrival <= now ? now - s->req_arrival : 0);
        return 0;
    }
#endif
#if BREAKDOWN
    // a finished request's histograms: bd_commit, tail-called on the way out (a tail call does not return)
    int answered = bd_answer(s, now);
    bd_open_next(s);  // a request that arrived during this answer's send: its turn now
#endif
    if (s->last_read < w->attach_ns || s->last_read > now) {
#if BREAKDOWN
        if (answered)
            bd_progs.call(ctx, 0);
#endif
        return 0;
    }
    if (in_gate(w, now)) {
        u64 handler = now - s->last_read;
        s->answers++;
        s->handler_ns += handler;
        record(st, w, H_HANDLER, handler);
        if (s->req_arrival && s->req_arrival <= now)
            record(st, w, H_SERVER, now - s->req_arrival);
    }
#if WATCH
    if (s->served)  // a request the server answered (not a reply to one of its own calls to another service)
        rt_answered(s->route, s->req_arrival && s->req_arrival <= now ? now - s->req_arrival : 0);
#endif
#if BREAKDOWN
    if (answered)
        bd_progs.call(ctx, 0);
#endif
    return 0;
}

// TCP state changes (connection setup and teardown only). listen() in the tree adds its port; a
// connection established on one of those ports is learned at once (softirq context), so its first
// bytes' arrival is seen even when the server does not read it for a long time (starvation).
// A tracepoint that stays attached: it learns only while the set is attached.
TRACEPOINT_PROBE(sock, inet_sock_set_state) {
    if (args->protocol != IPPROTO_TCP_NR)
        return 0;
    if (args->newstate == TCP_CLOSE_NR) {
        u64 sk = (u64)args->skaddr;
        struct sk_t *s = socks.lookup(&sk);
        if (s)
            s->closed = 1;
        return 0;
    }
    u16 sport = args->sport;
    if (args->newstate == TCP_LISTEN_NR) {
        if (in_tree(bpf_get_current_pid_tgid() >> 32)) {
            u8 one = 1;
            lports.update(&sport, &one);
        }
        return 0;
    }
    if (args->newstate != TCP_ESTABLISHED_NR || !lports.lookup(&sport))
        return 0;
    u32 zero = 0;
    struct cfg_t *c = cfg.lookup(&zero);
    struct window_t *w = window.lookup(&zero);
    struct stats_t *st = stats.lookup(&zero);
    if (!c || !c->tgid || !w || !w->active || !st)
        return 0;
    struct sk_t *s = learn((u64)args->skaddr, 0, c, w, st);
#if BREAKDOWN
    if (s)
        s->served = 1;
#else
    (void)s;
#endif
    return 0;
}
