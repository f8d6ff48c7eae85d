"""Member offsets of the running kernel's structs, from its BTF (/sys/kernel/btf/vmlinux).

BCC compiles the probes against Debian's generic 6.1 headers, whose struct layouts are not the running
kernel's (docs/facts.md): a program that reads a kernel struct field gets its offset from here, at run time,
as a compile flag or through its set's config map.

    member_offset("io_kiocb", "opcode", size=1)   # 64 on this 6.18 kernel; None when it cannot be found
    Btf().offset("sock", "__sk_common.skc_family", 2)   # a path through nested members; raises

Why a parser of our own rather than bpftool's text dump: `bpftool btf dump file ... format raw` prints 12 MB
for this kernel and takes ~0.35 s per call, and every probe set that reads a struct needs it at start-up. The
binary format is simple (linux/btf.h: a header, then type records of 12 bytes plus a tail whose size follows
from the kind, then the strings). This reader finds the struct's name in the string section first (one
bytes.find) and walks the type records only as far as it needs (the struct and the types of its members, which
come early for the structs the probes read: io_kiocb is type 10546 of ~126,000): ~15-30 ms a lookup here
(read the 5.5 MB file ~9 ms, the walk the rest), against ~130 ms for indexing every type. A name that is in no
string at all costs the read and the find only. tests/test_btf.py checks it against bpftool's own output.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator

BTF_PATH = "/sys/kernel/btf/vmlinux"

_MODIFIERS = {8, 9, 10, 11, 18}  # typedef, volatile, const, restrict, type_tag: resolve through them
_STRUCT, _UNION = 4, 5
_EXTRA = {1: 4, 3: 12, 14: 4, 17: 4}                   # bytes after the record: int, array, var, decl_tag
_PER_VLEN = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}  # ... per vlen: members, enum, params, datasec, enum64


class Btf:
    """The few bits of a BTF file needed to find member offsets (struct/union layouts). Raises OSError when
    the file cannot be read, ValueError when it is not BTF."""

    def __init__(self, path: str = BTF_PATH) -> None:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 24:
            raise ValueError(f"{path} is not BTF")
        magic, _ver, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<HBBIIIII", data, 0)
        if magic != 0xEB9F:
            raise ValueError(f"{path} is not BTF")
        self.data = data
        self.sbase, self.send = hdr_len + str_off, hdr_len + str_off + str_len
        # Type id -> (kind, name_off, info, size/type, position of its tail), filled as far as a lookup walks.
        self.types: list[tuple[int, int, int, int, int]] = [(0, 0, 0, 0, 0)]  # id 0: void
        self._walk = self._records(hdr_len + type_off, hdr_len + type_off + type_len)

    def _records(self, pos: int, end: int) -> Iterator[int]:
        data, unpack, types = self.data, struct.unpack_from, self.types
        while pos < end:
            name_off, info, size = unpack("<III", data, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            pos += 12
            types.append((kind, name_off, info, size, pos))
            pos += _EXTRA.get(kind, 0) + _PER_VLEN.get(kind, 0) * vlen
            yield len(types) - 1

    def _type(self, tid: int) -> tuple[int, int, int, int, int]:
        if tid >= len(self.types):
            for last in self._walk:
                if last == tid:
                    break
        if tid >= len(self.types):
            raise KeyError(f"type id {tid}")
        return self.types[tid]

    def name(self, off: int) -> str:
        end = self.data.index(b"\0", self.sbase + off)
        return self.data[self.sbase + off:end].decode()

    def _name_offs(self, name: str) -> set[int]:
        """Offsets in the string section of the string `name` (one in a deduplicated vmlinux BTF)."""
        pat, offs = b"\0" + name.encode() + b"\0", set()
        i = self.data.find(pat, self.sbase, self.send)
        while i >= 0:
            offs.add(i + 1 - self.sbase)
            i = self.data.find(pat, i + 1, self.send)
        return offs

    def struct_id(self, name: str) -> int:
        offs = self._name_offs(name)
        if offs:
            for i, (kind, name_off, *_rest) in enumerate(self.types):
                if kind == _STRUCT and name_off in offs:
                    return i
            for i in self._walk:
                kind, name_off, *_rest = self.types[i]
                if kind == _STRUCT and name_off in offs:
                    return i
        raise KeyError(f"struct {name}")

    def resolve(self, tid: int) -> int:
        while self._type(tid)[0] in _MODIFIERS:
            tid = self.types[tid][3]
        return tid

    def size(self, tid: int) -> int:
        return self._type(self.resolve(tid))[3]

    def members(self, tid: int) -> Iterator[tuple[str, int, int, int]]:
        """(name, type id, bit offset, bit size or 0) of a struct's or union's members."""
        kind, _n, info, _s, pos = self._type(self.resolve(tid))
        if kind not in (_STRUCT, _UNION):
            return
        bitfields = bool(info >> 31)
        for k in range(info & 0xFFFF):
            name_off, mtype, off = struct.unpack_from("<III", self.data, pos + 12 * k)
            bit_size = off >> 24 if bitfields else 0
            yield (self.name(name_off) if name_off else ""), mtype, (off & 0xFFFFFF if bitfields else off), bit_size

    def member(self, tid: int, name: str) -> tuple[int, int] | None:
        """(bit offset, type id) of member `name`, looking through anonymous structs/unions."""
        for mname, mtype, boff, bit_size in self.members(tid):
            if mname == name:
                if bit_size:
                    raise ValueError(f"{name} is a bitfield")
                return boff, mtype
            if not mname:
                inner = self.member(mtype, name)
                if inner is not None:
                    return boff + inner[0], inner[1]
        return None

    def offset(self, struct_name: str, path: str, size: int | None = None) -> int:
        """Byte offset of `path` (members joined by dots) in struct `struct_name`; its size must be `size`
        bytes (when given). Raises KeyError (no such struct or member) or ValueError (a bitfield, not
        byte-aligned, another size)."""
        tid, bits = self.struct_id(struct_name), 0
        for part in path.split("."):
            found = self.member(tid, part)
            if found is None:
                raise KeyError(f"{struct_name}.{path}")
            bits, tid = bits + found[0], found[1]
        if bits % 8 or (size is not None and self.size(tid) != size):
            raise ValueError(f"{struct_name}.{path}: bit offset {bits}, size {self.size(tid)} (expected {size})")
        return bits // 8


@functools.cache
def member_offset(struct_name: str, member: str, size: int | None = None, path: str = BTF_PATH) -> int | None:
    """Byte offset of `member` (a dotted path for nested members) in the running kernel's struct `struct_name`,
    from its BTF, or None when it cannot be found: no BTF, no such struct or member, a bitfield, a member of
    another size than `size` bytes (when given). Computed once per process and arguments."""
    try:
        return Btf(path).offset(struct_name, member, size)
    except (OSError, KeyError, ValueError, struct.error):
        return None
