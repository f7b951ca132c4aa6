"""Hostile input and destructive output: the limits kvdoctor keeps, in one place.

Every reader of a user-named file or a server reply goes through these helpers, so a FIFO, a
device, a gzip bomb, a YAML alias bomb, JSON nested 100,000 deep, a credential in a URL or an
escape sequence in a server's message becomes one clear line (exit 2) instead of a hang, a
traceback or a leak. docs/cli.md "Limits and hostile input" lists the limits; change them here.

Invariants:
* An input path is a regular file (or ``-`` for stdin where a reader takes streams); FIFOs, sockets
  and devices are refused before anything is read, so nothing blocks or reads forever.
* Whole-document reads are capped (``MAX_DOCUMENT_BYTES``); streams (logs, traces) are read in
  bounded chunks; decompression never inflates more than ``GZIP_CHUNK`` bytes per step.
* An output path that exists and is not a regular file is written *through* (devices, FIFOs) and a
  symlink is followed to its target; only a regular file is replaced, atomically.
* Text from outside (server messages, file content echoed in errors) reaches the terminal with
  credentials redacted, control characters and escape sequences removed, on one line.

Stdlib only: imported by the CLI at start-up.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable

from kvdoctor.errors import InputError

MiB = 1 << 20
MAX_DOCUMENT_BYTES = 256 * MiB  # one JSON / metrics document read whole (reports, bench results, dumps)
MAX_CONFIG_BYTES = 4 * MiB  # a YAML engine config or a model's config.json
MAX_YAML_NODES = 100_000  # values in a YAML config after alias expansion (a vLLM config has tens to hundreds)
MAX_RESPONSE_BYTES = 64 * MiB  # one Prometheus API reply (a 1 h window of every vllm:* series is ~1-5 MB)
PROMETHEUS_DEADLINE_S = 60.0  # total time for one Prometheus query, retries included
GZIP_CHUNK = 1 * MiB  # most bytes one decompression step may produce
MAX_TRACE_ROWS = 1_000_000  # request rows in one trace: ~200-400 MB held at the limit
MAX_INT = 2**53  # integers past this lose precision as floats (JSON, numpy)


# --- input files -------------------------------------------------------------------------------
def file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def check_input_file(path: str | os.PathLike, what: str = "input", *, allow_dir: bool = False) -> Path:
    """A user-named input must be an existing regular file (or a folder when ``allow_dir``).

    FIFOs, process substitution (``<(...)`` is a pipe), sockets and devices (``/dev/zero``) are
    refused before any byte is read: they cannot be sniffed and read again, and may never end."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"no such file: {p}") from None
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    if stat.S_ISREG(st.st_mode) or (allow_dir and stat.S_ISDIR(st.st_mode)):
        return p
    raise InputError(f"{what} {p} is {file_kind(st.st_mode)}, not a regular file; save it to a file first")


def read_document(path: str | os.PathLike, what: str = "input", *, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """A whole small file (gunzipped when gzip), refusing non-regular files and anything over ``limit``."""
    p = check_input_file(path, what)
    try:
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{what} {p} is larger than {limit // MiB} MiB, the limit for a file read whole")
    if data[:2] == b"\x1f\x8b":
        data = gunzip_bounded(data, limit, f"{what} {p}")
    return data


def gunzip_bounded(data: bytes, limit: int, what: str) -> bytes:
    """Decompress gzip (concatenated members too), refusing to produce more than ``limit`` bytes."""
    import zlib

    out = bytearray()
    d = zlib.decompressobj(wbits=31)
    buf = data
    try:
        while True:
            chunk = d.decompress(buf, GZIP_CHUNK)
            out += chunk
            if len(out) > limit:
                raise InputError(f"{what} decompresses to more than {limit // MiB} MiB, the limit for a file read whole")
            buf = d.unconsumed_tail
            if not buf:
                if d.eof and d.unused_data:  # concatenated members
                    buf = d.unused_data
                    d = zlib.decompressobj(wbits=31)
                elif len(chunk) < GZIP_CHUNK:  # else output may still be pending: drain it
                    break
    except zlib.error as exc:
        raise InputError(f"{what}: corrupt gzip ({exc})") from None
    if not d.eof:
        raise InputError(f"{what}: corrupt gzip (the stream ends before its end marker)")
    return bytes(out)


def head_bytes(path: str | os.PathLike, n: int = 65536) -> bytes:
    """The first ``n`` bytes of a regular file, gunzipped (bounded) when it is gzip."""
    import zlib

    p = check_input_file(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read(n)
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = zlib.decompressobj(wbits=31).decompress(data, n)
        except zlib.error:
            return b""
    return data


_BINARY_CTRL = re.compile(r"[\x01-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")


def more_lines_than(path: str | os.PathLike, limit: int) -> bool:
    """Whether the file (gunzipped when gzip) has more than ``limit`` lines. Reads only until the
    answer is known, in bounded chunks: a 10M-row trace is refused after ~limit lines' worth of bytes,
    before any row is parsed."""
    import zlib

    n = 0
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        d = zlib.decompressobj(wbits=31) if gz else None
        while True:
            raw = fh.read(GZIP_CHUNK)
            if not raw:
                return False
            if d is None:
                n += raw.count(b"\n")
            else:
                buf = raw
                try:
                    while True:
                        out = d.decompress(buf, GZIP_CHUNK)
                        n += out.count(b"\n")
                        if n > limit:
                            return True
                        buf = d.unconsumed_tail
                        if not buf:
                            if d.eof and d.unused_data:
                                buf, d = d.unused_data, zlib.decompressobj(wbits=31)
                            elif len(out) < GZIP_CHUNK:
                                break
                except zlib.error:
                    return False  # the reader reports the damage itself
            if n > limit:
                return True


def bounded_lines(fh: Any, cap: int = 1 << 16):
    """The lines of a binary file object, each at most ``cap`` bytes (a longer line keeps its head
    and ends with a newline; the rest is skipped in ``cap``-sized reads). ``for line in fh`` holds a
    whole line in memory, and a gzip of one endless line would be read into it."""
    while True:
        line = fh.readline(cap)
        if not line:
            return
        if not line.endswith(b"\n"):
            while True:  # skip the rest of an over-long line
                rest = fh.readline(cap)
                if not rest or rest.endswith(b"\n"):
                    break
            line += b"\n"
        yield line


def binary_reason(head: bytes) -> str | None:
    """Why these first bytes are not a text file (None: text). The one binary check of kvdoctor.

    A real log may carry a stray non-UTF-8 byte (an echoed prompt): the readers skip that line. So
    only NUL bytes (no text log holds them) or a head that is mostly undecodable count as binary."""
    if not head:
        return None
    if b"\x00" in head:
        return "NUL bytes"
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if bad > max(4, len(head) // 10):
        return f"{bad} of the first {len(head):,} bytes are not UTF-8"
    # control characters other than tab, newlines, form feed and ESC (colour codes in logs)
    ctrl = len(_BINARY_CTRL.findall(text))
    if ctrl > max(4, len(head) // 10):
        return f"{ctrl} of the first {len(head):,} bytes are control characters"
    return None


def refuse_non_text(path: str | os.PathLike, what: str = "evidence") -> None:
    """An empty, binary or non-regular evidence file is bad input (exit 2), not "insufficient evidence".

    The log reader skips undecodable lines one by one, so a PNG or a core dump given by mistake
    came back as a verdict with a list of evidence to collect. A vLLM log that kvdoctor merely does
    not understand (a patched scheduler's messages) still passes: it is text. gzip passes (the
    readers inflate it, bounded); folders and missing files get the loaders' own messages."""
    p = Path(path)
    if not p.exists() or p.is_dir():
        return
    check_input_file(p, what)  # a FIFO or device: refused before it is read
    try:
        with open(p, "rb") as fh:
            head = fh.read(8192)
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    if not head:
        raise InputError(f"{path}: empty file (give a vLLM log, /metrics dump, benchmark result or request trace)")
    if head[:2] == b"\x1f\x8b":
        return
    why = binary_reason(head)
    if why:
        raise InputError(f"{path}: a binary file, not text ({why}); give a vLLM log, /metrics dump, benchmark "
                         "result or request trace")


# --- structured documents ------------------------------------------------------------------------
def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def loads_json(text: str | bytes, what: str, *, strict_numbers: bool = False) -> Any:
    """``json.loads`` that turns hostile nesting (``'[' * 100000``) into InputError.

    ``strict_numbers``: NaN, Infinity and numbers that overflow a float are refused too (a model's
    config.json, where they would poison every figure)."""
    import json

    kw: dict[str, Any] = {}
    if strict_numbers:
        def _float(s: str) -> float:
            v = float(s)
            if not math.isfinite(v):
                raise ValueError(f"{s} overflows a float")
            return v

        kw = {"parse_constant": _reject_constant, "parse_float": _float}
    try:
        return json.loads(text, **kw)
    except RecursionError:
        raise InputError(f"{what}: JSON nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError; so are the strict-number refusals
        line = f" (line {exc.lineno}: {exc.msg})" if hasattr(exc, "lineno") else f" ({exc})"
        raise InputError(f"{what} is not valid JSON{line}") from None


def json_in_text(text: str, starts: Any, take: Callable[[Any], bool], *, max_tries: int,
                 budget: int | None = None) -> str | None:
    """JSON documents inside other text (a terminal capture, a ticket, another tool's record): each candidate
    position of ``starts`` (ascending) is decoded; ``take(doc)`` says whether the document is what the caller wants,
    and then the candidates inside it are passed over (else they are tried too: a wanted object may sit inside an
    unwanted one). A candidate that does not decode (cut, not JSON, nested past the interpreter's depth) is skipped.
    Bounded: at most ``max_tries`` decodes, and, with ``budget``, at most that many characters read by failed ones (a
    cut document is read to its cut, and nested cut ones would make the scan quadratic). Returns the first decode
    error's message, or None."""
    import json

    dec = json.JSONDecoder()
    resume = tried = wasted = 0
    first: str | None = None
    for i in starts:
        if i < resume:
            continue
        if tried >= max_tries or (budget is not None and wasted > budget):
            break
        tried += 1
        try:
            doc, end = dec.raw_decode(text, i)
        except RecursionError:
            first = first or "JSON nested too deeply to read"
            wasted += len(text) - i
            continue
        except json.JSONDecodeError as exc:
            first = first or f"line {exc.lineno}: {exc.msg}"
            wasted += exc.pos - i
            continue
        if take(doc):
            resume = end
    return first


def printed_number(cell: object) -> float | None:
    """A number as a tool printed or exported it (a table cell, a CSV cell): spaces and thousands separators dropped;
    None when it is not one, or not finite (a figure is never NaN or infinite)."""
    try:
        v = float(str(cell).strip().replace(",", ""))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


MAX_CSV_FIELD = 64 << 20  # one cell of an exported CSV (GuideLLM writes its arguments' JSON into one)


def csv_rows(text: str, what: str):
    """The rows of an exported CSV (a BOM dropped, any newline convention), each a list of cells; a malformed one is
    one line naming the CSV line, not a traceback. Python's default 128 KiB cell limit is raised to
    ``MAX_CSV_FIELD``."""
    import csv
    import io

    csv.field_size_limit(max(csv.field_size_limit(), MAX_CSV_FIELD))
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")))
    try:
        yield from reader
    except csv.Error as exc:
        raise InputError(f"{what}: not a well-formed CSV (line {reader.line_num}: {exc})") from None


def read_json_file(path: Path, *, missing: str, unreadable: Callable[[BaseException], str]) -> Any:
    """A small JSON file read whole: InputError(``missing``) when it is absent, InputError(``unreadable(exc)``)
    when it cannot be read or parsed (nesting too deep to parse included: a one-line error, never a traceback)."""
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(missing) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError(unreadable(exc)) from None


def load_yaml_text(text: str, what: str) -> Any:
    """One YAML document (``load_yaml_documents``'s bounds); None when the text holds none, one line when it holds
    several."""
    docs = load_yaml_documents(text, what)
    if len(docs) > 1:
        raise InputError(f"{what}: {len(docs)} YAML documents where one was expected")
    return docs[0] if docs else None


def load_yaml_documents(text: str, what: str) -> list[Any]:
    """Every document of a YAML stream (a Kubernetes manifest's ``---``-separated resources), with anchors and aliases
    (``&base`` / ``*base`` / ``<<: *base``, as real vLLM configs use them) expanded within a bound: each document's
    size *after* alias expansion is counted on the composed node graph (shared nodes counted once per reference, in
    linear time) before anything is built, so an alias bomb (nested anchors referencing each other, 9 levels of 9 →
    387 M values) is refused with one line instead of being walked. A self-referencing alias is refused too.

    Invariant: each value returned is a plain tree (no object reachable twice); the stream holds at most
    ``MAX_YAML_NODES`` nodes in all."""
    import yaml

    if len(text) > MAX_CONFIG_BYTES:
        raise InputError(f"{what} is larger than {MAX_CONFIG_BYTES // MiB} MiB, the limit for a config file")
    loader = yaml.SafeLoader(text)
    docs: list[Any] = []
    left = MAX_YAML_NODES
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            left -= _check_yaml_expansion(node, what, limit=left)
            docs.append(_unshared(loader.construct_document(node)))
    except RecursionError:
        raise InputError(f"{what}: YAML nested too deeply to read") from None
    finally:
        loader.dispose()
    return docs


def _check_yaml_expansion(root: Any, what: str, limit: int = MAX_YAML_NODES) -> int:
    """Expanded node count of a composed YAML graph (an alias is the anchored node itself, shared), memoised
    per node, iteratively (a deep document must not hit Python's recursion limit here); cycles refused. Returns it;
    more than ``limit`` is refused."""
    import yaml

    def children(n: Any) -> list[Any]:
        if isinstance(n, yaml.SequenceNode):
            return list(n.value)
        if isinstance(n, yaml.MappingNode):
            return [x for kv in n.value for x in kv]
        return []

    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        n, done = stack.pop()
        if done:
            on_path.discard(id(n))
            total = 1 + sum(size[id(c)] for c in children(n))
            if total > limit:
                raise InputError(f"{what}: YAML aliases expand to more than {MAX_YAML_NODES:,} values (an alias "
                                 f"bomb?; line {n.start_mark.line + 1}); write the values out")
            size[id(n)] = total
            continue
        if id(n) in size:
            continue
        if id(n) in on_path:
            raise InputError(f"{what}: a YAML alias refers to the node that contains it (line "
                             f"{n.start_mark.line + 1}); a config cannot be recursive")
        on_path.add(id(n))
        stack.append((n, True))
        stack.extend((c, False) for c in children(n) if id(c) not in size)
    return size.get(id(root), 1)


def _unshared(v: Any) -> Any:
    """A copy in which no list or dict is reachable twice (PyYAML hands every alias the same object, and a
    caller editing one key's list must not edit another's). Bounded by MAX_YAML_NODES."""
    if isinstance(v, dict):
        return {k: _unshared(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_unshared(x) for x in v]
    return v


# --- numbers ---------------------------------------------------------------------------------------
def finite(value: Any, what: str, *, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False) -> float:
    """A finite float within [lo, hi] (``lo_open``: strictly above lo), else InputError."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{what}: {value!r} is not a number") from None
    if not math.isfinite(v):
        raise InputError(f"{what}: {value!r} is not a finite number")
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise InputError(f"{what}: {value!r} must be {'>' if lo_open else '>='} {lo:g}")
    if hi is not None and v > hi:
        raise InputError(f"{what}: {value!r} must be <= {hi:g}")
    return v


def check_magnitudes(obj: Any, what: str, limit: float = MAX_INT, _key: str = "") -> None:
    """Refuse any number past ``limit`` in a JSON document (a model config's ``hidden_size: 1e308``):
    no real size, count or constant is that large, and such a number overflows the arithmetic."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        if abs(obj) > limit:
            raise InputError(f"{what}: {_key or 'a value'} = {obj!r:.40} is out of range (|x| > {limit:g})")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_magnitudes(v, what, limit, f"{_key}.{k}" if _key else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            check_magnitudes(v, what, limit, f"{_key}[{i}]")


# --- text from outside -------------------------------------------------------------------------------
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#]*@")  # up to the last @ of the authority
# CSI (ESC [ ...), OSC (ESC ] ... BEL|ST), other two-byte escapes, then any remaining C0/C1 control
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def redact_url(url: str) -> str:
    """``http://user:pw@host/x`` → ``http://***@host/x``: credentials never printed or stored."""
    return _USERINFO.sub(r"\1***@", url)


def redact(obj: Any) -> Any:
    """``redact_url`` over every string in a JSON-like value (journal rows, evidence headers)."""
    if isinstance(obj, str):
        return redact_url(obj) if "@" in obj else obj
    if isinstance(obj, dict):
        return {redact(k) if isinstance(k, str) else k: redact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    return obj


def one_line(text: Any, limit: int = 2000) -> str:
    """Terminal-safe, single-line text: credentials redacted, escape sequences and control characters
    removed, newlines and tabs folded to spaces, cut at ``limit`` characters."""
    s = str(text)
    s = _ESCAPES.sub("", s)
    s = s.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")
    s = _CONTROL.sub("", s)
    s = redact_url(s)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


# --- output files -------------------------------------------------------------------------------------
def write_text_safely(path: str | os.PathLike, text: str, *, what: str = "output") -> Path:
    """Write ``text`` to ``path`` without ever replacing something that is not a regular file.

    * a symlink is followed: its target is written (atomically when a regular file), the link stays;
    * a device or FIFO (``/dev/null``, ``/dev/stdout``, ``>(gzip)``) is written through, in place;
    * a regular file (or a new path) is written to a temporary file beside it and renamed over it,
      so a half-written file never replaces a good one. Errors → InputError (one line)."""
    import secrets

    p = Path(path)
    target = Path(os.path.realpath(p)) if p.is_symlink() else p
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"cannot write {p}: {exc.strerror or exc}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p} is a directory; give a file name for the {what}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise InputError(f"cannot write {p}: {exc.strerror or exc}") from None
        return p
    if not target.parent.exists():
        raise InputError(f"cannot write {p}: directory {target.parent} does not exist")
    tmp = target.with_name(f".{target.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        if st is not None:
            try:
                os.chmod(tmp, stat.S_IMODE(st.st_mode))  # keep the replaced file's permissions
            except OSError:
                pass
        os.replace(tmp, target)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise InputError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p


def shipped_table(path: Path, key: str, what: str) -> Any:  # untyped-ok: the table's JSON, as the builder wrote it
    """``key`` of a JSON table shipped inside the package; a missing or broken one is a broken install, not user input."""
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))[key]
    except (OSError, ValueError, KeyError) as exc:
        raise RuntimeError(f"{what} {path} is unreadable: {exc}") from exc

