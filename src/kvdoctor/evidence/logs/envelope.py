"""The vLLM log-line envelope: process prefix, level, timestamp, file:line, message.

vLLM's format (``logger.py``) is ``(<proc> pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] message``; older
releases dropped the ``[`` and the process prefix, and operators' tooling adds its own prefixes
(docker/k8s ISO timestamps, Ray's ``(WorkerDict pid=N, ip=...)``, ANSI colours). The regex is
therefore *searched* (not anchored) so anything before the vLLM part is tolerated and kept as
``foreign`` — a container timestamp there carries the year vLLM's own timestamp lacks.

Pure, stdlib only: imported by the ledger's ``--from-log`` path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# The same codes as rsyslog escapes control characters (``#033[1;36m``, a trailing ``#015`` for the CR): the
# journald/rsyslog -> CloudWatch path of a SageMaker or EC2 container writes vLLM's coloured process prefix that way.
# A regex of its own: an alternation would cost the common raw-colour case its fast literal scan.
RSYSLOG = re.compile(r"#033\[[0-9;?]*[A-Za-z]|#015(?=[\r\n]|$)")
# And in caret notation (``^[[0;36m``), as ``cat -v``, ``less`` and some log viewers show ESC, pasted as text
# (vllm-ascend#5917's MinerU log).
CARET = re.compile(r"\^\[\[[0-9;?]*[A-Za-z]")

ENVELOPE = re.compile(
    r"(?:\(?(?P<proc>[A-Za-z_][\w.\-]*(?: rank=\d+)?)\s+pid=(?P<pid>\d+)(?:,\s*ip=[^)\s]*)?\)\s*)?"
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):?\s+"  # ":": a person's retyping ("INFO: 09-04 ...")
    r"(?:(?P<year>\d{4})-)?(?P<mon>\d\d)-(?P<day>\d\d)[ T](?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)(?P<frac>[.,]\d+)?\s+"
    r"\[?(?P<file>[^\]\s:]+):(?P<lineno>\d+)\]\s?(?P<msg>.*)"
)

# A foreign prefix that carries a full date (docker --timestamps, k8s, journald ISO).
FOREIGN_ISO = re.compile(r"(?P<year>\d{4})-(?P<mon>\d\d)-(?P<day>\d\d)[T ](?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)")

# Where a second envelope starts inside one physical line (lines glued together when newlines
# were lost in copy/paste or by a log shipper).
GLUE = re.compile(
    r"(?<=\S)(?=(?:\([A-Za-z_][\w.\-]*(?: rank=\d+)? pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d)"
)


# The envelope is found from its level + timestamp (cheap to search: a rare first letter), then the
# optional process prefix is matched backwards on the short text before it. One unanchored regex with
# the optional prefix first backtracks on every word of a long line.
LEVEL_TS = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):?\s+"  # ":": a person's retyping ("INFO: 09-04 ...")
    r"(?:(?P<year>\d{4})-)?(?P<mon>\d\d)-(?P<day>\d\d)[ T](?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)(?P<frac>[.,]\d+)?\s+"
    r"\[?(?P<file>[^\]\s:]+):(?P<lineno>\d+)\]\s?(?P<msg>.*)"
)
PROC_TAIL = re.compile(r"\(?(?P<proc>[A-Za-z_][\w.\-]*(?: rank=\d+)?)\s+pid=(?P<pid>\d+)(?:,\s*ip=[^)\s]*)?\)\s*$")
LEVEL_TS_B = re.compile(LEVEL_TS.pattern.encode())
PROC_TAIL_B = re.compile(PROC_TAIL.pattern.encode())

# An operator's own Python-logging formatter instead of vLLM's (``VLLM_CONFIGURE_LOGGING=0`` or
# ``VLLM_LOGGING_CONFIG_PATH`` with e.g. ``%(asctime)s - %(name)s - %(levelname)s - %(message)s``):
# ``2024-12-20 15:18:19[,123] - vllm.engine.metrics - INFO - Avg prompt ...`` (also ``|`` as the
# separator, the logger name optional). Same group names as LEVEL_TS (the logger name stands in
# for ``file``; no line number); tried only where LEVEL_TS finds nothing, so vLLM's own format
# always wins.
PYLOG = re.compile(
    r"(?P<year>\d{4})-(?P<mon>\d\d)-(?P<day>\d\d)[ T](?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)(?P<frac>[.,]\d+)?Z?"
    r"\s+[-|]\s+(?:(?P<file>[A-Za-z_][\w.\-]*)\s+[-|]\s+)?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
    r"\s+[-|:]\s+(?P<msg>.*)"
)
PYLOG_B = re.compile(PYLOG.pattern.encode())


class EnvMatch:
    """``re.Match``-like view of (level/timestamp match, process-prefix match)."""

    __slots__ = ("m", "p")

    def __init__(self, m: re.Match, p: re.Match | None):
        self.m, self.p = m, p

    def group(self, name: str):
        if name in ("proc", "pid"):
            return self.p.group(name) if self.p is not None else None
        return self.m.group(name)

    def start(self) -> int:
        return self.p.start() if self.p is not None else self.m.start()

    def level(self):
        """The record's level (b"DEBUG", b"INFO", ...), or None where the match holds none."""
        return self.m.groupdict().get("level")

    def source_file(self):
        """The logging call's file ("core.py"), or None where the format prints none."""
        return self.m.groupdict().get("file")


def search_envelope(line: str) -> EnvMatch | None:
    m = LEVEL_TS.search(line)
    if m is None:
        m = PYLOG.search(line) if "- " in line or "| " in line else None
        return None if m is None else EnvMatch(m, None)
    p = PROC_TAIL.search(line, max(0, m.start() - 120), m.start()) if m.start() else None
    return EnvMatch(m, p)


# A container/k8s timestamp leading a line that has no envelope of its own (a fork or a custom
# handler printing the bare message): ``2024-05-12T08:01:39.331095044Z Engine 000: Avg prompt ...``.
ISO_LEAD_B = re.compile(
    rb"\s*(?P<year>\d{4})-(?P<mon>\d\d)-(?P<day>\d\d)[T ](?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)(?P<frac>[.,]\d+)?"
    rb"(?:Z|[+-]\d\d:?\d\d)?\s"
)


def leading_timestamp_b(line: bytes) -> EnvMatch | None:
    """The time of a bare record from the container timestamp in front of it (no process, no level)."""
    m = ISO_LEAD_B.match(line)
    return None if m is None else EnvMatch(m, None)


# A structured (JSON) log line whose message is the bare record and whose time is a key of its own (a JSON
# formatter via VLLM_LOGGING_CONFIG_PATH, a log shipper's export): ``{"time": "2026-12-01T10:00:00.123Z", "levelname":
# "INFO", "message": "Engine 000: Avg prompt throughput: ..."}``.
JSON_TIME_B = re.compile(
    rb'"(?:@timestamp|timestamp|time|asctime|ts|datetime)"\s*:\s*"(?P<year>\d{4})-(?P<mon>\d\d)-(?P<day>\d\d)[T ]'
    rb"(?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)(?P<frac>[.,]\d+)?"
)


def json_timestamp_b(line: bytes) -> EnvMatch | None:
    """The time of a bare record from its structured log line's timestamp key."""
    if not line.lstrip().startswith(b"{"):
        return None
    m = JSON_TIME_B.search(line)
    return None if m is None else EnvMatch(m, None)


def search_envelope_b(line: bytes) -> EnvMatch | None:
    m = LEVEL_TS_B.search(line)
    if m is None:
        m = PYLOG_B.search(line) if b"- " in line or b"| " in line else None
        return None if m is None else EnvMatch(m, None)
    p = PROC_TAIL_B.search(line, max(0, m.start() - 120), m.start()) if m.start() else None
    return EnvMatch(m, p)


@dataclass(slots=True)
class Envelope:
    proc: str | None
    pid: int | None
    level: str
    year: int | None  # from a 4-digit vLLM timestamp or an ISO foreign prefix
    mon: int
    day: int
    hh: int
    mi: int
    ss: float
    file: str
    msg: str
    foreign: str  # text before the vLLM envelope (container timestamp, tool prefixes)

    @property
    def process_key(self) -> str:
        """Keeps interleaved processes apart: name + pid (pid alone repeats across containers)."""
        if self.proc is None:
            return "main"
        return f"{self.proc} pid={self.pid}"

    def sort_key(self) -> tuple:
        return (self.year or 0, self.mon, self.day, self.hh, self.mi, self.ss)


def strip_ansi(line: str) -> str:
    if "\x1b" in line:
        line = ANSI.sub("", line)
    if "^[[" in line:
        line = CARET.sub("", line)
    if "\\]" in line:  # Markdown's escapes (strip_ansi_b)
        line = line.replace("\\[", "[").replace("\\]", "]").replace("\\_", "_")
    return RSYSLOG.sub("", line) if ("#0" in line and ("#033[" in line or "#015" in line)) else line


def parse_envelope(line: str) -> Envelope | None:
    """Parse one physical line; ``None`` when no vLLM envelope is present (bare message)."""
    m = search_envelope(line)
    if m is None:
        return None
    g = m.group
    year = g("year")
    foreign = line[: m.start()]
    if year is None and foreign:
        fm = FOREIGN_ISO.search(foreign)
        if fm is not None:
            year = fm.group("year")
    ss = float(g("ss") + (g("frac") or "").replace(",", ".")) if g("frac") else float(g("ss"))
    pid = g("pid")
    level = g("level")
    return Envelope(
        proc=g("proc"),
        pid=int(pid) if pid else None,
        level="WARNING" if level == "WARN" else level,
        year=int(year) if year else None,
        mon=int(g("mon")),
        day=int(g("day")),
        hh=int(g("hh")),
        mi=int(g("mi")),
        ss=ss,
        file=g("file") or "",
        msg=g("msg"),
        foreign=foreign,
    )


def split_glued(line: str) -> list[str]:
    """Split a physical line holding several log records (lost newlines) into records."""
    parts = GLUE.split(line)
    return [p for p in parts if p] if len(parts) > 1 else [line]


_RANK_PART = re.compile(r"(?:DP|PP|PCP|TP|DCP|EP)(\d+)")
_RANK_EQ = re.compile(r"rank=(\d+)")


def worker_rank(proc: str | None) -> int:
    """0 for the process whose figures vLLM treats as authoritative (rank 0 / driver / engine core).

    ``info_once`` lines come from the local first rank; with several workers the others print
    their own numbers under ``Worker_TPn`` / ``VllmWorker rank=n`` / ``VllmWorkerProcess``.
    """
    if not proc:
        return 0
    m = _RANK_EQ.search(proc)
    if m:
        return int(m.group(1))
    if proc.startswith("VllmWorkerProcess"):
        return 1  # v0 multiproc workers; the driver printed without a prefix
    parts = _RANK_PART.findall(proc)
    return sum(int(p) for p in parts) if parts else 0


# A line holding several stats records: also split where a record ends in its "%" (v1) or "%." (v0) and ONE space
# comes before the next envelope (newlines turned into spaces by a web copy, a chat tool, `echo $(cat log)`). Only for
# lines with more than one stats record: a lone record's foreign prefix (a k8s ISO time, a docker name) stays on it.
GLUE_STATS = re.compile(GLUE.pattern + r"|(?:(?<=%)|(?<=%\.)) (?=" + GLUE.pattern.split("(?=", 1)[1])

# Bytes twins for the streaming reader (it decodes only the lines it needs).
ENVELOPE_B = re.compile(ENVELOPE.pattern.encode())
FOREIGN_ISO_B = re.compile(FOREIGN_ISO.pattern.encode())
GLUE_B = re.compile(GLUE.pattern.encode())
GLUE_STATS_B = re.compile(GLUE_STATS.pattern.encode())
ANSI_B = re.compile(ANSI.pattern.encode())
RSYSLOG_B = re.compile(RSYSLOG.pattern.encode())
CARET_B = re.compile(CARET.pattern.encode())


def has_ansi_b(buf: bytes, lo: int = 0, hi: int | None = None) -> bool:
    """Whether ``buf[lo:hi]`` may hold a colour code, raw or rsyslog-escaped. Single-byte scans first (memchr):
    a multi-byte find runs several times slower, and most chunks hold no '#' at all."""
    hi = len(buf) if hi is None else hi
    if buf.find(b"\x1b", lo, hi) != -1 or buf.find(b"^[[", lo, hi) != -1:
        return True
    h = buf.find(b"#", lo, hi)
    return (h != -1 and (buf.find(b"#033[", h, hi) != -1 or buf.find(b"#015", h, hi) != -1)) or \
        buf.find(b"\\]", lo, hi) != -1


def strip_ansi_b(buf: bytes) -> bytes:
    if b"\x1b" in buf:
        buf = ANSI_B.sub(b"", buf)
    if b"^[[" in buf:
        buf = CARET_B.sub(b"", buf)
    if b"\\]" in buf:
        # Markdown's escapes, as a forum post keeps them ("\[gpu_worker.py:436\]", "max\_num\_seqs": sweep 118 item 03)
        buf = buf.replace(b"\\[", b"[").replace(b"\\]", b"]").replace(b"\\_", b"_")
    return RSYSLOG_B.sub(b"", buf) if (b"#" in buf and (b"#033[" in buf or b"#015" in buf)) else buf
