"""A hostile Prometheus server (issue 14): a tiny threaded ``http.server`` on 127.0.0.1 per test.

It trickles bytes, sends a reply far over the size limit, answers JSON of the wrong shape, puts
newlines and terminal escapes in its ``error`` string, and is reached through a URL carrying
credentials. kvdoctor must give up in bounded time and memory, say so in one clean line, and never
print or store the password. Runs are bounded by time-outs that only catch hangs.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import run_kvdoctor

PEAK_MIB = 500
SECRET = "s3cretPW"


@contextmanager
def serve(handler_body, tls: tuple[str, str] | None = None):
    """Run ``handler_body(handler)`` for every GET on a loopback server; yields the base URL. ``tls``: (certificate,
    key) files to serve HTTPS with."""

    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            try:
                handler_body(self)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):  # quiet
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    if tls is not None:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _json(handler, doc, status=200):
    body = json.dumps(doc).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _good(handler):
    now = time.time()
    series = [{"metric": {"__name__": name, "instance": "a:8000", "model_name": "m"},
               "values": [[now - 60 + 15 * i, str(v + i)] for i in range(4)]}
              for name, v in (("vllm:num_requests_running", 3), ("vllm:num_requests_waiting", 1))]
    _json(handler, {"status": "success", "data": {"resultType": "matrix", "result": series}})


def check(run, allowed=(0, 1, 2)):
    assert not run.timed_out, f"hung: {run!r}"
    assert run.rc in allowed, run
    assert "Traceback" not in run.err and "\x1b" not in run.err and "internal error" not in run.err, run
    if run.rc == 2:
        assert run.one_line_error(), run
    assert run.peak_mib < PEAK_MIB, run
    return run


def test_trickling_server_is_given_up_on_by_a_total_deadline():
    def trickle(h):
        # status line, headers and body one byte at a time, each well inside the per-read time-out
        raw = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n' + b"{" * 60
        for b in raw:
            h.wfile.write(bytes([b]))
            h.wfile.flush()
            time.sleep(0.5)

    with serve(trickle) as url:
        run = check(run_kvdoctor("evidence", "--prometheus", url, "--window", "1h",
                                 env={"KVDOCTOR_PROMETHEUS_DEADLINE": "3"}, timeout=120), allowed=(2,))
    assert "giving up" in run.err and "3 s" in run.err, run


def test_huge_reply_is_cut_at_the_size_limit_while_streaming():
    def huge(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()  # no length: streamed until the client stops reading
        h.wfile.write(b'{"status":"success","data":{"resultType":"matrix","result":[')
        item = json.dumps({"metric": {"__name__": "vllm:num_requests_running"},
                           "values": [[1.7e9 + i, "1"] for i in range(2000)]}).encode()
        for i in range(4000):  # ~160 MB, generated as it goes
            h.wfile.write((b"," if i else b"") + item)
        h.wfile.write(b"]}}")

    with serve(huge) as url:
        run = check(run_kvdoctor("evidence", "--prometheus", url, "--window", "1h", timeout=300), allowed=(2,))
    assert "larger than" in run.err and "MiB" in run.err, run


@pytest.mark.parametrize("doc", [
    [],
    "text",
    {"status": "success"},
    {"status": "success", "data": [1, 2]},
    {"status": "success", "data": {"result": {"a": 1}}},
    {"status": "success", "data": {"result": [5, "x", {"metric": 5, "values": "x"},
                                              {"metric": {"__name__": "vllm:num_requests_running"},
                                               "values": [[1, 2, 3], ["a", "b"], [1e20, "1"], None, [1.7e9, {}]]}]}},
], ids=["list", "string", "no-data", "data-list", "result-dict", "bad-series"])
def test_reply_of_the_wrong_shape_is_one_line(doc):
    with serve(lambda h: _json(h, doc)) as url:
        check(run_kvdoctor("evidence", "--prometheus", url, "--window", "1h", timeout=120), allowed=(2,))


def test_server_error_text_is_sanitised():
    evil = "bad query\nkvdoctor: fake second line\x1b]0;pwned\x07\x1b[31mred\x1b[0m\rend\x00"
    with serve(lambda h: _json(h, {"status": "error", "errorType": "bad_data", "error": evil}, 400)) as url:
        run = check(run_kvdoctor("diagnose", "--prometheus", url, "--window", "1h", timeout=120), allowed=(2,))
    assert "fake second line" in run.err and "pwned" not in run.err.split("fake second line")[0]
    assert not any(c in run.err.rstrip("\n") for c in "\x1b\x07\r\x00\n"), repr(run.err)


def test_credentials_never_printed_or_stored(tmp_path):
    # unreachable with credentials: the error line
    run = check(run_kvdoctor("evidence", "--prometheus", f"http://user:{SECRET}@127.0.0.1:9", "--window", "1h",
                             timeout=120), allowed=(2,))
    assert SECRET not in run.err and "***@" in run.err, run
    run = check(run_kvdoctor("diagnose", "--prometheus", f"http://user:{SECRET}@[::1", timeout=60), allowed=(2,))
    assert SECRET not in run.err, run
    with serve(_good) as url:
        authed = url.replace("http://", f"http://user:{SECRET}@")
        for args in (["evidence", "--prometheus", authed, "--window", "5m"],
                     ["evidence", "--prometheus", authed, "--window", "5m", "--json"],
                     ["diagnose", "--prometheus", authed, "--window", "5m", "--json"]):
            run = check(run_kvdoctor(*args, timeout=120))
            assert SECRET not in run.out + run.err, (args, run)
        db = tmp_path / "j.sqlite"
        run = check(run_kvdoctor("journal", "start", "t", "--config", "vllm serve meta-llama/Llama-3.1-8B-Instruct",
                                 "--prometheus", authed, "--window", "5m", "--note", f"from {authed}",
                                 "--db", str(db), timeout=120), allowed=(0,))
        assert SECRET not in run.out + run.err
    assert SECRET.encode() not in db.read_bytes()
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or SECRET.encode() not in wal.read_bytes()
    for args in (["journal", "show", "--db", str(db), "--json"],
                 ["journal", "show", "--db", str(db), "--html", str(tmp_path / "j.html")],
                 ["journal", "show", "--db", str(db)]):
        run = check(run_kvdoctor(*args, timeout=120), allowed=(0,))
        assert SECRET not in run.out + run.err, (args, run)
    assert SECRET not in (tmp_path / "j.html").read_text()


def test_busy_server_is_retried_with_back_off_then_given_up_on():
    """A 503/429 reply is retried like a refused connection (0.5 s, then 1 s): one busy reply and the query
    still succeeds; a server that stays busy ends in one error naming the tries and the last status."""
    from kvdoctor.errors import InputError
    from kvdoctor.evidence.prometheus import PrometheusClient

    seen = []

    def busy_once(h):
        seen.append(h.path)
        if len(seen) == 1:
            _json(h, {"status": "error", "error": "busy"}, status=503)
        else:
            _good(h)

    with serve(busy_once) as url:
        result = PrometheusClient(url, timeout=5, retries=2, deadline=30).query_range("up", 0.0, 60.0, 15.0)
    assert len(seen) == 2 and len(result) == 2

    def always_busy(h):
        seen.append(h.path)
        _json(h, {"status": "error", "error": "slow down"}, status=429)

    seen.clear()
    with serve(always_busy) as url, pytest.raises(InputError, match=r"unreachable after 3 tries: InputError: HTTP 429"):
        PrometheusClient(url, timeout=5, retries=2, deadline=30).query_range("up", 0.0, 60.0, 15.0)
    assert len(seen) == 3


TOKEN = "tok3nSECRET"


def test_a_gateway_wanting_a_bearer_token_and_a_tenant(tmp_path):
    """OpenShift's thanos-querier, Grafana Cloud, Mimir: credentials come from the environment (never the command
    line, the journal or a report); without them the 401 is one line saying what to set."""
    def gateway(h):
        if h.headers.get("Authorization") != f"Bearer {TOKEN}" or h.headers.get("X-Scope-OrgID") != "team-a":
            _json(h, {"status": "error", "error": "unauthorized"}, status=401)
        else:
            _good(h)

    with serve(gateway) as url:
        run = check(run_kvdoctor("evidence", "--prometheus", url, "--window", "5m", timeout=120), allowed=(2,))
        assert "HTTP 401" in run.err and "KVDOCTOR_PROMETHEUS_TOKEN" in run.err, run
        env = {"KVDOCTOR_PROMETHEUS_TOKEN": TOKEN, "KVDOCTOR_PROMETHEUS_HEADERS": "X-Scope-OrgID: team-a"}
        run = check(run_kvdoctor("evidence", "--prometheus", url, "--window", "5m", "--json", env=env, timeout=120),
                    allowed=(0,))
        assert json.loads(run.out)["summary"]["max_running"] == 6.0 and TOKEN not in run.out + run.err
        db = tmp_path / "j.sqlite"
        check(run_kvdoctor("journal", "start", "t", "--config", "vllm serve meta-llama/Llama-3.1-8B-Instruct",
                           "--prometheus", url, "--window", "5m", "--db", str(db), env=env, timeout=120), allowed=(0,))
        assert TOKEN.encode() not in db.read_bytes()
        bad = check(run_kvdoctor("evidence", "--prometheus", url, "--window", "5m",
                                 env={"KVDOCTOR_PROMETHEUS_HEADERS": "no colon here"}, timeout=60), allowed=(2,))
        assert "Name: value" in bad.err


def test_a_certificate_the_machine_does_not_trust(tmp_path):
    """A cluster-signed certificate (an OpenShift route): one line naming the way out; with the CA bundle, or with
    verification off (curl -k), the query goes through."""
    import shutil
    import subprocess

    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    with serve(_good, tls=(str(cert), str(key))) as url:
        run = check(run_kvdoctor("evidence", "--prometheus", url, "--window", "5m", timeout=120), allowed=(2,))
        assert "KVDOCTOR_PROMETHEUS_CA" in run.err, run
        for env in ({"KVDOCTOR_PROMETHEUS_CA": str(cert)}, {"KVDOCTOR_PROMETHEUS_INSECURE": "1"}):
            check(run_kvdoctor("evidence", "--prometheus", url, "--window", "5m", env=env, timeout=120), allowed=(0,))
        run = check(run_kvdoctor("evidence", "--prometheus", url, "--window", "5m",
                                 env={"KVDOCTOR_PROMETHEUS_CA": str(tmp_path / "absent.pem")}, timeout=60), allowed=(2,))
        assert "is not a file" in run.err
