// netprof watch (-DWATCH=1, with -DBREAKDOWN=1): the request's route, read by the kernel from the request's
// first bytes, and the figures kept per route. Pasted into probes/sockwait/sockwait.bpf.c; the socket-wait
// set gives the request's edges and the breakdown its parts (their files say how), this file names them.
//
// - A request starts at the first read of a served socket after its last answer (sockwait's `pending`). The
//   read's user buffer (its address noted at the syscall's entry: read, readv, recvfrom, recvmsg) holds the
//   request's first bytes: rt_parse, tail-called at the end of that read, takes up to RT_LEN of them.
// - An HTTP/1.x request line "METHOD SP target ..." gives the route "METHOD path": the method (capital letters,
//   3 to 8), then the target (beginning with '/', '*' or "h", or CONNECT's host) up to its query ('?'), fragment ('#'), or a byte that is not printable ASCII. Nothing past
//   it is read into a key (no query string, header or body leaves the kernel). A path segment of decimal
//   digits, or of at least 8 hex digits and dashes with a digit among them (ids, UUIDs, hashes) is folded
//   into "{id}" (docs/watch.md). Bytes that are not a request line: the route RT_NOT_HTTP (echo and line
//   protocols, a request's continuation). A target longer than the key holds: the key's last byte is 1.
// - Routes get an index in order of first sight, up to ROUTES; later new ones count as RT_OTHER. A request
//   read while the set is light (rt_light: watch's --max-overhead) is counted and timed as RT_UNSAMPLED.
// - Per route: answered requests, their server time (arrival of the first byte → the answer's send,
//   sockwait's) as a sum and a histogram, the breakdown's parts of those it measured (and of their off_cpu_io,
//   the readiness waits that ended on their timeout: the breakdown's D_OFF_TIMER), and the syscalls and
//   io_uring submissions of the threads serving it: a thread's syscalls count for the route of the last
//   request it read (an event loop's epoll_wait goes to the request read before it).
//
// cflags: -DROUTES=<n> (route slots, RT_OTHER and RT_NOT_HTTP included)

#define RT_LEN 128  // bytes of the request read, and of a route's key
#define RT_NOT_HTTP 0
#define RT_OTHER 1
#define RT_UNSAMPLED 2  // requests read while only the counting and timing hooks were attached (rt_light)
#define RT_FIRST 3

struct rt_key_t {
    char s[RT_LEN];
};
BPF_HASH(rt_index, struct rt_key_t, u32, ROUTES);
BPF_ARRAY(rt_next, u32, 1);  // the next index to give (Python starts it at RT_FIRST)
BPF_HASH(rt_claim, u32, u8, ROUTES);  // indexes given

struct rt_stat_t {
    u64 requests;          // answered (sockwait's answers)
    u64 timed;             // ... with a known arrival: their server time is in server_ns and hist
    u64 server_ns;
    u64 hist[NSLOTS];      // server time, slot_of(ns)
    u64 measured;          // broken down (bd_commit)
    u64 part_ns[NPART];    // the parts' sums over those
    u64 timer_ns;          // ... of part_ns[P_OFF_IO], the readiness waits that ended on their timeout
    u64 syscalls;          // of the threads serving it
    u64 ring_ops;          // io_uring submissions of those threads
};
BPF_ARRAY(rt_stats, struct rt_stat_t, ROUTES);

// Answered requests by process (a pre-fork server's workers; connections that closed are counted too).
BPF_HASH(rt_procs, u32, u64, 4096);

// 1 while watch's overhead cap has every hook detached but sock_recv_length and sock_send_length (Python:
// WatchProbes.lighten): requests are still counted, nothing is timed, read or broken down.
BPF_ARRAY(rt_light, u32, 1);

static __always_inline int rt_is_light(void) {
    u32 zero = 0;
    u32 *l = rt_light.lookup(&zero);
    return l && *l;
}

struct rt_thr_t {
    u64 buf;               // the user buffer of the receive in progress (0: none)
    s32 sc;                // its syscall
    u32 route;             // route + 1 of the last request the thread read (0: none yet)
};
BPF_HASH(rt_thr, u32, struct rt_thr_t, 16384);

// A request's first read, handed from sock_recv_length to rt_parse.
struct rt_scratch_t {
    u64 sk;
    u64 buf;
    s32 sc;
    u32 n;
    u32 tid;
};
BPF_PERCPU_ARRAY(rt_scratch, struct rt_scratch_t, 1);
BPF_PROG_ARRAY(rt_progs, 1);  // [0]: rt_parse (probes/watch/watch.py loads it)

static __always_inline struct rt_stat_t *rt_stat(u32 route) {
    return rt_stats.lookup(&route);
}

// sys_enter of a tree thread: its syscall counts for its route; a receive's buffer is noted for rt_parse.
static __always_inline void rt_enter(struct bpf_raw_tracepoint_args *ctx, s32 sc, u32 tid) {
    struct rt_thr_t *r = rt_thr.lookup(&tid);
    if (!r) {
        struct rt_thr_t fresh = {};
        rt_thr.update(&tid, &fresh);
        r = rt_thr.lookup(&tid);
        if (!r)
            return;
    }
    if (r->route) {
        struct rt_stat_t *st = rt_stat(r->route - 1);
        if (st)
            __sync_fetch_and_add(&st->syscalls, 1);
    }
    r->buf = 0;
    if (sc == 0 || sc == 19 || sc == 45 || sc == 47) {  // read readv recvfrom recvmsg
        struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
        u64 a1 = 0;
        bpf_probe_read_kernel(&a1, sizeof(a1), &regs->si);
        r->buf = a1;
        r->sc = sc;
    }
}

// An io_uring submission by a tree thread.
static __always_inline void rt_ring(u32 tid) {
    struct rt_thr_t *r = rt_thr.lookup(&tid);
    if (r && r->route) {
        struct rt_stat_t *st = rt_stat(r->route - 1);
        if (st)
            __sync_fetch_and_add(&st->ring_ops, 1);
    }
}

// The first read of a request on socket `sk` (`n` bytes): returns 1 when rt_parse has what it needs.
static __always_inline int rt_first_read(u64 sk, int n) {
    u32 tid = bpf_get_current_pid_tgid(), zero = 0;
    struct rt_thr_t *r = rt_thr.lookup(&tid);
    struct rt_scratch_t *q = rt_scratch.lookup(&zero);
    if (!q)
        return 0;
    q->sk = sk;
    q->buf = r ? r->buf : 0;
    q->sc = r ? r->sc : -1;
    q->n = n;
    q->tid = tid;
    return 1;
}

// The answer to a request of route `route`: `server_ns` its server time (0: arrival unknown).
static __always_inline void rt_answered(u32 route, u64 server_ns) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    rt_procs.increment(tgid);
    struct rt_stat_t *st = rt_stat(route);
    if (!st)
        return;
    __sync_fetch_and_add(&st->requests, 1);
    if (server_ns) {
        __sync_fetch_and_add(&st->timed, 1);
        __sync_fetch_and_add(&st->server_ns, server_ns);
        __sync_fetch_and_add(&st->hist[slot_of(server_ns) & (NSLOTS - 1)], 1);
    }
}

// A request of route `route` broken down: its parts (NPART - 1 of them: loader_wait is not the server's).
static __always_inline void rt_measured(u32 route, u64 *v, u64 timer) {
    struct rt_stat_t *st = rt_stat(route);
    if (!st)
        return;
    __sync_fetch_and_add(&st->measured, 1);
#pragma unroll
    for (int i = 0; i < NPART - 1; i++)
        __sync_fetch_and_add(&st->part_ns[i], v[i]);
    __sync_fetch_and_add(&st->timer_ns, timer);
}

static __always_inline int rt_is_digit(char c) {
    return c >= '0' && c <= '9';
}

static __always_inline int rt_is_hex(char c) {
    return rt_is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-';
}

// The parser's state, in map memory rather than registers: the verifier then sees one state per loop
// iteration instead of one per path through the iterations before it (which it refuses as too complex).
struct rt_parse_t {
    char in[RT_LEN];
    struct rt_key_t k;
    u32 j, m, state, ok, seg, len, dig, hex, has_dig;
};
BPF_PERCPU_ARRAY(rt_ps, struct rt_parse_t, 1);
#define RT_V(x) (*(volatile u32 *)&ps->x)

// The key of an HTTP request line in ps->in (n bytes): "METHOD path", ids folded. 0: not a request line.
static __always_inline int rt_line(struct rt_parse_t *ps, u32 n) {
    RT_V(dig) = RT_V(hex) = 1;
    for (int i = 0; i < RT_LEN; i++) {
        u32 j = RT_V(j);
        if (i >= n || j > RT_LEN - 6)
            break;
        char c = ps->in[i];
        if (RT_V(state) == 0) {  // the method
            u32 m = RT_V(m);
            if (c == ' ' && m >= 3) {  // GET and PUT are the shortest
                ps->k.s[j & (RT_LEN - 1)] = ' ';
                RT_V(j) = j + 1;
                RT_V(seg) = j + 1;
                RT_V(state) = 1;
                continue;
            }
            if (c < 'A' || c > 'Z' || m >= 8)
                return 0;
            ps->k.s[j & (RT_LEN - 1)] = c;
            RT_V(j) = j + 1;
            RT_V(m) = m + 1;
            continue;
        }
        // a request target begins with '/' (origin-form), '*' (OPTIONS *) or "http" (absolute-form), or is
        // CONNECT's host:port: anything else is not a request line (binary or echoed bytes that happen to open
        // with capitals and a space: netprof's own random payload did, ~30 a second at 190k messages/s)
        if (j == RT_V(m) + 1 && c != '/' && c != '*' && c != 'h' && !(RT_V(m) == 7 && ps->k.s[0] == 'C'))
            return 0;
        // the target ends at its query, its fragment, or any byte that is not printable ASCII (a space, the
        // line's end; nothing a terminal would take as a control sequence gets into a route's name)
        int end = c <= ' ' || c > '~' || c == '?' || c == '#';
        if (end || c == '/') {
            u32 len = RT_V(len);
            if (len > 0 && (RT_V(dig) || (RT_V(hex) && RT_V(has_dig) && len >= 8))) {  // an id just ended
                j = RT_V(seg);
                ps->k.s[j & (RT_LEN - 1)] = '{';
                ps->k.s[(j + 1) & (RT_LEN - 1)] = 'i';
                ps->k.s[(j + 2) & (RT_LEN - 1)] = 'd';
                ps->k.s[(j + 3) & (RT_LEN - 1)] = '}';
                j += 4;
                RT_V(j) = j;
            }
            if (end) {
                RT_V(ok) = 1;
                break;
            }
            ps->k.s[j & (RT_LEN - 1)] = '/';
            RT_V(j) = j + 1;
            RT_V(seg) = j + 1;
            RT_V(len) = RT_V(has_dig) = 0;
            RT_V(dig) = RT_V(hex) = 1;
            continue;
        }
        ps->k.s[j & (RT_LEN - 1)] = c;
        RT_V(j) = j + 1;
        RT_V(len) = RT_V(len) + 1;
        if (rt_is_digit(c))
            RT_V(has_dig) = 1;
        else
            RT_V(dig) = 0;
        if (!rt_is_hex(c))
            RT_V(hex) = 0;
    }
    u32 j = RT_V(j);
    if (RT_V(state) != 1 || j <= RT_V(m) + 1)
        return 0;  // no target
    // a folded id leaves the longer segment's bytes behind it: the key is what was written up to j
    for (int i = 0; i < RT_LEN; i++)
        if (i >= j)
            ps->k.s[i] = 0;
    if (!RT_V(ok))  // the target goes on past what the key holds (or past this read): marked
        ps->k.s[RT_LEN - 1] = 1;
    return 1;
}

static __always_inline u32 rt_new(struct rt_key_t *k);

// The route's index: known, or new.
static __always_inline u32 rt_route(struct rt_key_t *k) {
    u32 *idx = rt_index.lookup(k);
    return idx ? *idx : rt_new(k);
}

// A new route's index: the first free one from rt_next, claimed by an insert into rt_claim (atomic: BCC's
// LLVM cannot use an atomic add's result); RT_OTHER when the table is full.
static __always_inline u32 rt_new(struct rt_key_t *k) {
    u32 zero = 0;
    u32 *next = rt_next.lookup(&zero);
    if (!next)
        return RT_OTHER;
    u32 cand = *next;
    u8 one = 1;
    for (int i = 0; i < 4; i++) {  // another CPU may claim the same index at once: the next one then
        if (cand >= ROUTES)
            return RT_OTHER;
        if (rt_claim.insert(&cand, &one) == 0) {
            *next = cand + 1;
            if (rt_index.insert(k, &cand) == 0)
                return cand;
            u32 *idx = rt_index.lookup(k);  // another CPU gave this route an index first
            return idx ? *idx : RT_OTHER;
        }
        cand++;
    }
    return RT_OTHER;
}

// Tail-called by sock_recv_length after a request's first read (rt_scratch): the route's index, kept on
// the socket (for its answer) and on the thread (for its syscalls).
int rt_parse(struct bpf_raw_tracepoint_args *ctx) {
    u32 zero = 0;
    struct rt_scratch_t *q = rt_scratch.lookup(&zero);
    if (!q || !q->sk)
        return 0;
    u64 sk = q->sk;
    q->sk = 0;
    u64 p = q->buf;
    if (q->sc == 47) {  // recvmsg: msghdr.msg_iov (offset 16) → iov[0].iov_base
        u64 iov = 0;
        bpf_probe_read_user(&iov, sizeof(iov), (void *)(p + 16));
        p = 0;
        if (iov)
            bpf_probe_read_user(&p, sizeof(p), (void *)iov);
    } else if (q->sc == 19) {  // readv: iov[0].iov_base
        u64 base = 0;
        bpf_probe_read_user(&base, sizeof(base), (void *)p);
        p = base;
    }
    u32 n = q->n;
    if (n > RT_LEN)
        n = RT_LEN;
    u32 route = RT_NOT_HTTP;
    struct rt_parse_t *ps = rt_ps.lookup(&zero);
    if (ps && p && n > 0) {
        __builtin_memset(ps, 0, sizeof(*ps));
        if (bpf_probe_read_user(ps->in, n, (void *)p) == 0 && rt_line(ps, n))
            route = rt_route(&ps->k);
    }
    struct sk_t *s = socks.lookup(&sk);
    if (s)
        s->route = route;
    u32 tid = q->tid;
    struct rt_thr_t *r = rt_thr.lookup(&tid);
    if (r)
        r->route = route + 1;
    return 0;
}
