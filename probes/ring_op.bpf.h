// io_uring's request opcode, for the raw tracepoint io_uring_submit_req (TP_PROTO(struct io_kiocb *req): the
// program's ctx->args[0]). BCC compiles against Debian's 6.1 headers, whose struct io_kiocb is not the running
// kernel's, so the byte is read at the offset of `opcode` that Python found in the running kernel's BTF
// (probes/ring_ops.py opcode_offset()) and wrote into the set's config map: the including file's struct cfg_t
// has `s32 ring_opcode_off` (< 0: not found). Pasted in by netprof.probes.base.load() after struct cfg_t.

#define RING_OP_UNKNOWN 256  // not a u8: the opcode could not be read

static __always_inline u32 ring_opcode(struct cfg_t *c, u64 req) {
    s32 off = c->ring_opcode_off;
    u8 op = 0;
    if (off < 0 || bpf_probe_read_kernel(&op, sizeof(op), (void *)(req + off)))
        return RING_OP_UNKNOWN;
    return op;
}
