"""The pre-scan worker: a forked child scans chunk i+1 of a big plain log while the reader commits chunk i.

Per chunk, in order, it sends what the fast path computes without reader state — the ``KV cache`` hit
lines' bounds and line numbers, the chunk's line count, the colour-stripped hit lines and the fast
regex's groups — and where the request lines' needles are (``requests.needle_hits``), as packed bytes through a
pipe (``prescan`` packs, ``take_prescan`` unpacks and checks the message is this chunk's). Used for plain files >= ``PARALLEL_MIN`` with 2+ CPUs, fork and no other
threads; anything out of step, a dead worker, gzip: the reader scans alone, with the same results.
"""

from __future__ import annotations

import os
import struct
from array import array
from itertools import chain

from kvdoctor.evidence.logs.chunks import spans
from kvdoctor.evidence.logs.clock import low_mask
from kvdoctor.evidence.logs.envelope import has_ansi_b, strip_ansi_b
from kvdoctor.evidence.logs.fastpath import FAST_ALL, hit_bounds
from kvdoctor.evidence.logs.limits import MAX_LINE
from kvdoctor.evidence.logs.requests import SCAN, needle_hits

PARALLEL_MIN = 256 << 20  # plain files from this size get a pre-scan worker process (when a 2nd CPU is free)
# len(work), its line count, hits, bytes of the hit lines, bytes of the groups, request needles, work's last 8 bytes
HDR = struct.Struct("<6q8s")
NGROUPS = FAST_ALL.groups
KIND_INDEX = {kind: i for i, (_, kind) in enumerate(SCAN)}


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def prescan(buf, a: int, b: int, bufs: list) -> bytes:
    """What ``_fast`` computes from ``work = buf[a:b]`` alone (no reader state), packed: the hit lines'
    bounds, their line numbers within ``work``, its line count, the hit lines (colour-stripped) and the
    fast regex's groups per line (joined by newlines: no group can hold one). ``buf``: bytes or the
    file's memory map (read in place: no copy of the chunk); the scan is ``_fast``'s, offsets shifted."""
    import numpy as np

    n = b - a
    find = buf.find
    starts, ends = hit_bounds(buf, a, b)
    n512 = n & ~511
    nwords = n512 >> 6
    if n512:
        if len(bufs[0]) < n512:
            bufs[0] = np.empty(n512, dtype=bool)
        eq = np.equal(np.frombuffer(buf, dtype=np.uint8, count=n512, offset=a), 10, out=bufs[0][:n512])
        words = np.packbits(eq, bitorder="little").view("<u8")
        cum0 = np.empty(nwords + 1, dtype=np.int64)
        cum0[0] = 0
        np.cumsum(np.bitwise_count(words), out=cum0[1:])
        nl_words = int(cum0[-1])
    else:
        nl_words = 0
    total = nl_words + buf[a + n512:b].count(b"\n")
    tail = buf[max(a, b - 8):b]  # (checked by the parent with the length: the same bytes, not just as many)
    req = _request_needles(buf[a:b] if a or b != len(buf) or not isinstance(buf, bytes) else buf)
    if not starts:
        return b"".join((HDR.pack(n, total, 0, 0, 0, len(req) // 2, tail), req.tobytes()))
    ls = np.array(starts, dtype=np.int64)
    rel = np.empty(len(starts), dtype=np.int64)
    inner = ls < nwords << 6
    if inner.any():
        wk = ls[inner] >> 6
        rel[inner] = cum0[wk] + np.bitwise_count(words[wk] & low_mask()[ls[inner] & 63])
    for k in np.flatnonzero(~inner).tolist():
        rel[k] = nl_words + buf[a + n512:a + starts[k]].count(b"\n")
    lines = [buf[a + x:a + y] for x, y in zip(starts, ends)]
    if has_ansi_b(buf, a, b):
        lines = [strip_ansi_b(ln) for ln in lines]
    blob = b"\n".join(lines)
    flat = b"\n".join(chain.from_iterable(FAST_ALL.findall(b"\n" + blob)))
    return b"".join((HDR.pack(n, total, len(starts), len(blob), len(flat), len(req) // 2, tail),
                     array("q", starts).tobytes(), array("q", ends).tobytes(), rel.tobytes(), blob, flat, req.tobytes()))


def _request_needles(work: bytes) -> array:
    """``requests.needle_hits`` of ``work`` as (offset, index in ``requests.SCAN``) pairs, flat."""
    out = array("q")
    for p, kind, _ in needle_hits(work):
        out.extend((p, KIND_INDEX[kind]))
    return out


def prescan_worker(path: str, chunk_size: int, wfd: int) -> None:
    """The child: every ``work`` of the file, in order — the same as ``chunks.works(chunks.file_chunks(...))`` in the
    parent: a mapped chunk that ends with a newline and has no carry before it is read in place."""
    import mmap

    import numpy as np

    code = 1
    out = None
    try:
        out = os.fdopen(wfd, "wb", buffering=1 << 20)
        bufs = [np.empty(chunk_size + MAX_LINE + 1, dtype=bool)]  # the newline bitmap's reused buffer
        fh = open(path, "rb")  # kept open: its size is checked before each chunk (chunks.spans, FileShrank)
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        carry = b""
        for s, e in spans(mm, chunk_size, fh.fileno()):
            if not carry and mm[e - 1] == 10:
                out.write(prescan(mm, s, e, bufs))
                continue
            buf = carry + mm[s:e]  # _works' steps
            cut = buf.rfind(b"\n")
            if cut == -1:
                carry = buf[:MAX_LINE + 1]
                continue
            carry = buf[cut + 1:]
            out.write(prescan(buf, 0, cut + 1, bufs))
        if carry:
            carry += b"\n"
            out.write(prescan(carry, 0, len(carry), bufs))
        out.flush()
        code = 0
    except BaseException:  # the parent stopped reading (broken pipe) or anything else: end here;
        try:  # what was scanned still goes out (the parent reads the rest alone)
            if out is not None:
                out.flush()
        except BaseException:
            pass
    finally:
        os._exit(code)


def start_prescan(path: str, chunk_size: int):
    """Fork the pre-scan worker for a big plain file when a second CPU is free: the per-byte scans of
    chunk i+1 run there while this process commits chunk i. None (read alone) for gzip, small files,
    one CPU, no fork, or other threads in this process (forking them is unsafe)."""
    import threading

    try:
        if (not hasattr(os, "fork") or cpus() < 2 or threading.active_count() > 1
                or os.path.getsize(path) < PARALLEL_MIN):
            return None
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return None
        rfd, wfd = os.pipe()
    except OSError:
        return None
    try:
        import fcntl

        fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, 1 << 20)  # the worker may run a few chunks ahead
    except (ImportError, AttributeError, OSError):
        pass
    import warnings

    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns on fork in a process with OS threads (numpy's BLAS pool starts some);
            # the child runs only the scan (no BLAS, no locks of other threads) and os._exit()s
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        os.close(rfd)
        os.close(wfd)
        return None
    if pid == 0:  # the child: never returns (os._exit)
        try:
            os.close(rfd)
        finally:
            prescan_worker(path, chunk_size, wfd)
    os.close(wfd)
    return pid, os.fdopen(rfd, "rb", buffering=1 << 20)


def take_prescan(rd, work: bytes) -> tuple[tuple, list] | None:
    """The worker's next message, unpacked to ``_fast``'s inputs and ``RequestLog.scan``'s needle hits; None if it
    is not this ``work``'s."""
    hdr = rd.read(HDR.size)
    if len(hdr) != HDR.size:
        return None
    nw, total, nh, nb, nf, nr, tail = HDR.unpack(hdr)
    size = 24 * nh + nb + nf + 16 * nr
    body = rd.read(size)
    if nw != len(work) or len(body) != size or tail.rstrip(b"\x00") != work[-8:].rstrip(b"\x00"):
        return None
    pairs = memoryview(body)[size - 16 * nr:].cast("q").tolist()
    hits = [(p, SCAN[k][1], len(SCAN[k][0])) for p, k in zip(pairs[::2], pairs[1::2])]
    if not nh:
        return ([], [], [], [], [], total), hits
    mv = memoryview(body)
    q = mv[: 24 * nh].cast("q")
    a = 24 * nh
    flat = body[a + nb:size - 16 * nr].split(b"\n")
    return (q[:nh].tolist(), q[nh:2 * nh].tolist(), body[a:a + nb].split(b"\n"),
            list(zip(*[iter(flat)] * NGROUPS)), q[2 * nh:].tolist(), total), hits
