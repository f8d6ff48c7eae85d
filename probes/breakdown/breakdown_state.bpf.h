// netprof request breakdown, the part the socket-wait set's socket state needs (breakdown.bpf.h says
// what the clocks are): pasted into probes/sockwait/sockwait.bpf.c before its struct sk_t.

#define BD_USER 0
#define BD_SYS 1
#define BD_RUNQ 2
#define BD_FUTEX 3
#define BD_SLEEP 4
#define BD_IO 5
#define BD_OTHER 6
#define BD_GIL 7     // blocked in futex on an address inside the interpreter's _PyRuntime: the GIL (gil.py)
#define BD_TIMER 8   // not a state: of BD_IO's time, the readiness waits (epoll, poll, select) that ended on their
                     // timeout, added at the syscall's exit: the loop woke for a timer, not for a descriptor
#define BD_NS 9

// A served socket's request in progress (fields of sockwait.bpf.c's struct sk_t).
#define BD_SK_FIELDS                                                                                  \
    u32 served;        /* accepted on a port the tree listens on: its requests are broken down */  \
    u32 bd_phase;      /* 0: no request open; 1: arrived, unread; 2: read, not yet answered */      \
    u32 reader;        /* tid of the thread that last read it */                                     \
    u32 bd_tid;        /* the open request's serving thread */                                       \
    u64 bd_at, bd_tin; /* its arrival; the loader's send → arrival (transit_in) */                   \
    u64 bd_q0;         /* a first request's wait before any thread served its connection */        \
    u64 bd_a[BD_NS];   /* the serving thread's clocks at the arrival */                              \
    u64 bd_r[BD_NS];   /* ... at the read */                                                         \
    u64 own_u, own_s;  /* CPU claimed by this request so far, user and sys */                       \
    u64 pre_u, pre_s;  /* ... of which before its read */                                            \
    u32 ans_tid;       /* the thread that answered its last request */                               \
    u32 bd_xtid;       /* the thread whose clocks bd_x holds */                                      \
    u64 bd_x[BD_NS];   /* at the read, the clocks of the thread expected to answer (ans_tid): a     \
                          request handed to another thread is followed on its clocks after the read */ \
    u32 bd_next;       /* a next request arrived while this one was read and not yet answered ...  */ \
    u32 bd_ntid;       /* ... (its answer's send had reached the client, the send had not returned): */ \
    u64 bd_nat, bd_ntin; /* its arrival, transit_in and serving thread's clocks, opened at the answer */ \
    u64 bd_na[BD_NS];
