#pragma once
// The bytes the loader sends, shared by the TCP and ZeroMQ engines: message `seq` of connection
// `conn` is a shared random template XOR an 8-byte key derived from (conn, seq). Every byte depends on
// both, so an echo of another message or of another connection's message mismatches. A fixed head (ZMTP
// mode: the frame header) may precede every message's body.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace netprof {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Payload {
  std::vector<uint8_t> head;  // the same bytes before every message's body (ZMTP: the frame header), or none
  std::vector<uint8_t> tmpl;
  explicit Payload(int msize, std::vector<uint8_t> head_bytes = {}) : head(std::move(head_bytes)), tmpl(size_t(msize)) {
    uint64_t s = 0x6e657470726f66ULL;  // fixed: runs are reproducible
    for (auto& b : tmpl) b = uint8_t(s = splitmix64(s));
  }
  size_t size() const { return head.size() + tmpl.size(); }
  static uint64_t key(uint32_t conn, uint64_t seq) { return splitmix64((uint64_t(conn) << 40) ^ seq); }
  // Bytes [off, off+len) of message (conn, seq) into `out`.
  void fill(uint32_t conn, uint64_t seq, size_t off, size_t len, uint8_t* out) const {
    const size_t h = head_part(off, len);
    if (h) memcpy(out, head.data() + off, h);
    uint8_t k[8];
    uint64_t kv = key(conn, seq);
    memcpy(k, &kv, 8);
    for (size_t i = h, b = off + h - head.size(); i < len; i++, b++) out[i] = tmpl[b] ^ k[b & 7];
  }
  // Number of bytes in `data` that differ from message (conn, seq) at offset `off`.
  size_t diff(uint32_t conn, uint64_t seq, size_t off, const uint8_t* data, size_t len) const {
    const size_t h = head_part(off, len);
    size_t bad = 0;
    for (size_t i = 0; i < h; i++) bad += data[i] != head[off + i];
    uint8_t k[8];
    uint64_t kv = key(conn, seq);
    memcpy(k, &kv, 8);
    for (size_t i = h, b = off + h - head.size(); i < len; i++, b++) bad += data[i] != (tmpl[b] ^ k[b & 7]);
    return bad;
  }
  // Wrong bytes in a whole-message echo (ZeroMQ frames): differing bytes plus the length difference.
  size_t diff_whole(uint32_t conn, uint64_t seq, const uint8_t* data, size_t len) const {
    size_t n = std::min(len, size());
    return (std::max(len, size()) - n) + diff(conn, seq, 0, data, n);
  }

 private:
  // How many of bytes [off, off+len) fall in the head.
  size_t head_part(size_t off, size_t len) const { return off < head.size() ? std::min(len, head.size() - off) : 0; }
};

}  // namespace netprof
