"""Driver input: a log file as chunks of whole lines (plain files from a memory map, gzip streamed).

``file_chunks`` yields raw chunks (gunzipped, concatenated members too); ``works`` cuts them at the last
newline (the lines each chunk completes), the unit every reading strategy takes. A truncated or corrupt
gzip stream yields what decompressed and is counted as ``truncated-input``.
"""

from __future__ import annotations

from kvdoctor.errors import InputError
from kvdoctor.evidence.logs.limits import MAX_LINE
from kvdoctor.evidence.model import SkipReport


class FileShrank(Exception):
    """The file got shorter than its map while it was read (``logrotate``'s copytruncate, a writer that truncates):
    touching a page past the new end would kill the process with SIGBUS, so reading stops before it."""

    def __init__(self, offset: int):
        super().__init__(offset)
        self.offset = offset


def shrank_note(exc: FileShrank) -> str:
    return (f"the file was truncated while it was read (a log rotation's copytruncate?): read up to byte "
            f"{exc.offset:,}")


def mapped_chunks(fh, chunk_size: int, skip: SkipReport | None = None):
    """The same chunks as the read() loop below (``chunk_size`` bytes, completed to the end of their
    last line by at most MAX_LINE + 1 bytes), sliced from a memory map: one copy out of the page cache
    instead of a read() copy plus the copy that appends the line's rest. Pages already sliced are
    dropped from the mapping (MADV_DONTNEED), so the resident size stays that of a chunk or two. None
    when the file cannot be mapped (empty, a pipe, no mmap): the caller reads instead."""
    import mmap

    try:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (ValueError, OSError, AttributeError):
        return None

    fd = fh.fileno()

    def gen():
        with mm:
            try:
                for s, e in spans(mm, chunk_size, fd):
                    yield mm[s:e], e - s
            except FileShrank as exc:
                if skip is not None:
                    skip.reasons["truncated-input"] += 1
                    skip.examples.setdefault("truncated-input", shrank_note(exc))

    return gen()


def spans(mm, chunk_size: int, fd: int | None = None):
    """``mapped_chunks``' chunk bounds ``(start, end)`` in the map ``mm``; pages before the chunk
    before last are dropped from the mapping (8 MiB runs) as the chunks are taken. With the file's ``fd``, its size
    is checked before each chunk is touched: :class:`FileShrank` when it got shorter than the map."""
    import mmap
    import os

    size = len(mm)
    s = dropped = 0
    step = 8 << 20  # drop sliced pages in 8 MiB runs (the chunks are copies: nothing re-reads them)
    can_drop = hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED")
    while s < size:
        if fd is not None and os.fstat(fd).st_size < size:
            raise FileShrank(s)
        e = s + chunk_size
        if e >= size:
            e = size
        elif mm[e - 1] != 10:
            cap = min(size, e + MAX_LINE + 1)  # readline(MAX_LINE + 1)
            q = mm.find(b"\n", e, cap)
            e = cap if q == -1 else q + 1
        yield s, e
        s = e
        if can_drop and s - dropped > 2 * step:
            upto = (s - step) & ~(mmap.PAGESIZE - 1)
            mm.madvise(mmap.MADV_DONTNEED, dropped, upto - dropped)
            dropped = upto


def file_chunks(path: str, chunk_size: int, skip: SkipReport):
    """Raw file chunks, gunzipped when the file is gzip (also concatenated members). A truncated or
    corrupt gzip stream yields what decompressed and is counted as ``truncated-input``."""
    import zlib

    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read log {path}: {exc.strerror or exc}") from None
    with fh:
        head = fh.read(2)
        fh.seek(0)
        if head != b"\x1f\x8b":
            mapped = mapped_chunks(fh, chunk_size, skip)
            if mapped is not None:
                yield from mapped
                return
            while True:
                chunk = fh.read(chunk_size)
                if not chunk:
                    return
                n = len(chunk)
                if chunk[-1:] != b"\n":
                    # complete the last line here (one copy) instead of carrying it to the next chunk
                    rest = fh.readline(MAX_LINE + 1)
                    n += len(rest)
                    chunk += rest
                yield chunk, n
        d = zlib.decompressobj(wbits=31)
        consumed_left = 0
        while True:
            raw = fh.read(1 << 20)
            if not raw:
                break
            consumed, buf = consumed_left + len(raw), raw
            try:
                # at most chunk_size bytes out per step: 1 MiB of a gzip bomb (200 MB of newlines
                # packs ~1000:1) streams through in pieces instead of inflating at once
                while True:
                    out = d.decompress(buf, chunk_size)
                    buf = d.unconsumed_tail
                    if out:
                        yield out, consumed
                        consumed = 0
                    if not buf:
                        if d.eof and d.unused_data:  # concatenated members
                            buf = d.unused_data
                            d = zlib.decompressobj(wbits=31)
                            continue
                        if len(out) < chunk_size:  # else output may still be pending: drain it
                            break
            except zlib.error as exc:
                skip.reasons["truncated-input"] += 1
                skip.examples.setdefault("truncated-input", f"corrupt gzip: {exc}"[:160])
                return
            consumed_left = consumed  # input that produced no output yet: counted with the next piece
        if not d.eof:
            skip.reasons["truncated-input"] += 1
            skip.examples.setdefault("truncated-input", "gzip stream ends before its end marker")


def works(chunks):
    """``(consumed, work)`` per chunk: ``work`` = the lines it completes (None: no newline yet, a huge
    line); last ``(None, tail + b"\\n")`` for a final line without newline (a truncated file)."""
    carry = b""
    for chunk, consumed in chunks:
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n")
        if cut == -1:
            # no newline in a whole chunk: a huge line; keep only its head
            carry = buf[:MAX_LINE + 1]
            yield consumed, None
            continue
        work, carry = buf[: cut + 1], buf[cut + 1:]
        yield consumed, work
    if carry:
        yield None, carry + b"\n"
