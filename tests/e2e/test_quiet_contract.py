"""The terminal contract (docs/cli.md, "--quiet" and "Short options"), on EVERY verb.

- ``--quiet`` (``-q``) prints only what the verb exists to give: one line (the verdict, the serve
  line, the outcome), a list of names one per line, or nothing on success; nothing on stderr when
  the command succeeds. The cases below are looked up for every command in the CLI tree, so a new
  verb without a case fails this test.
- A short option means the same long option in every verb (``-q`` was ``--quantization`` on plan
  and ledger, ``--quiet`` elsewhere).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvdoctor.cli import app

M = ["-m", "Qwen/Qwen2.5-14B", "--gpu", "L40S", "--max-model-len", "32768"]
BENCH = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"  # frozen real CPU-engine runs
TINY = ["-m", str(BENCH / "tiny" / "config.json"), "--gpu", "L4", "--max-model-len", "512", "--max-num-seqs", "8",
        "--max-num-batched-tokens", "2048", "--block-size", "32", "--num-gpu-blocks-override", "256"]
SWAP = ["--from", "meta-llama/Llama-3.1-8B-Instruct", "--to", "Qwen/Qwen2.5-14B", "--gpu", "L40S",
        "--max-model-len", "32768"]


def _commands() -> dict[str, object]:
    out: dict[str, object] = {}

    def walk(c, path):
        if hasattr(c, "commands"):
            if path and any(getattr(p, "param_type_name", "") == "option" for p in c.params):
                out[" ".join(path)] = c  # a group that runs by itself (`experiment --set ...`) is a verb too
            for name, sub in c.commands.items():
                walk(sub, [*path, name])
        else:
            out[" ".join(path)] = c

    walk(typer.main.get_command(app), [])
    return out


def _run(args: list[str]):
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("quiet")
    log = d / "sim.log"
    r = _run(["simulate", *M, "--rate", "2", "--duration", "30", "--log-out", str(log), "--quiet"])
    assert r.exit_code == 0, r.output
    plan = d / "plan.json"
    r = _run(["plan", *M, "--json"])
    plan.write_text(r.stdout)
    db = d / "j.sqlite"
    assert _run(["journal", "start", "q", "--db", str(db), "-c", "vllm serve Qwen/Qwen2.5-14B"]).exit_code == 0
    assert _run(["journal", "record", "--db", str(db), "-c",
                 "vllm serve Qwen/Qwen2.5-14B --kv-cache-dtype fp8"]).exit_code == 0
    return {"log": str(log), "plan": str(plan), "db": str(db), "dir": str(d)}


# command -> (arguments, expected exit code, how many stdout lines --quiet may print, a text the
# answer must hold). lines: an int = exactly; "list" = one name per line (any number, at least one).
def _cases(f: dict[str, str]) -> dict[str, list[tuple[list[str], int, object, str]]]:
    db = ["--db", f["db"]]
    return {
        "demo": [([], 0, 1, "vllm serve")],
        "ledger": [(M, 0, 1, "starved: worst case ÷ KV pool 146×")],
        "plan": [(M, 0, 1, "vllm serve Qwen/Qwen2.5-14B")],
        "diagnose": [([f["log"]], 0, 1, ": ")],  # "<verdict>: <reason>"
        "swap": [(SWAP, 1, 1, "problem:")],
        "check": [(["-m", "Qwen/Qwen2.5-14B", "--gpu", "L40S", "--max-model-len", "8192", "--max-num-seqs", "6"], 0, 0, ""),
                  ([*M, "--max-ratio", "1"], 1, 1, "fail: worst case ÷ pool 146× > --max-ratio 1")],
        "simulate": [([*M, "--rate", "2", "--duration", "30"], 0, 1, "completed")],
        "evidence": [([f["log"]], 0, 1, "samples")],
        "rules": [([], 0, "list", "sched.preemption-persistent"),
                  (["sched.preemption-persistent"], 0, 1, "Persistent preemption")],
        "report": [([f["plan"], "-o", str(Path(f["dir"]) / "r.html")], 0, 0, "")],
        "journal start": [(["q2-@", *db, "-c", "vllm serve Qwen/Qwen2.5-14B"], 0, 0, "")],  # @: the flag
        "journal record": [([*db, "-j", "q", "-c", "vllm serve Qwen/Qwen2.5-14B --kv-cache-dtype fp8",
                             "--note", "again"], 0, 0, "")],
        "journal note": [(["1", "checked", *db, "-j", "q"], 0, 0, "")],
        "journal list": [(db, 0, "list", "q")],
        "journal show": [(["q", *db], 0, "list", "#1 kv_cache_dtype: unset → fp8")],
        "journal compare": [(["0", "1", *db, "-j", "q"], 0, 1, "#0 → #1")],
        "journal handbook": [(["q", *db, "-o", str(Path(f["dir"]) / "hb.md")], 0, 0, "")],
        "catalog models": [(["--filter", "qwen3"], 0, "list", "Qwen/Qwen3-8B")],
        "catalog gpus": [([], 0, "list", "NVIDIA H100")],
        "catalog show": [(["Qwen/Qwen2.5-14B"], 0, 1, "27.54 GiB"), (["H100"], 0, 1, "79.19 GiB")],
        "calibrate": [([*TINY, "--linear", str(BENCH / "s8_c4.json"), str(BENCH / "s8_c1.json"),
                        "-o", str(Path(f["dir"]) / "cal.json")], 0, 1, "held-out median |error|")],
    }


# verbs that need a real vLLM server to succeed: their --quiet line is checked on a failure here (stdout
# stays empty, one line on stderr) and on success in tests/realvllm/ (the experiment test bed)
NEEDS_A_SERVER = {"experiment", "experiment chain"}


def test_quiet_contract_on_every_verb(files):
    cases = _cases(files)
    commands = _commands()
    missing = set(commands) - set(cases) - NEEDS_A_SERVER
    assert not missing, f"verbs without a --quiet case: {missing}"
    for name, runs in cases.items():
        for args, code, lines, must in runs:
            for flag in ("--quiet", "-q"):
                res = _run([*name.split(), *[a.replace("@", flag.strip("-")) for a in args], flag])
                where = f"kvdoctor {name} {' '.join(args)} {flag}"
                assert res.exit_code == code, (where, res.output)
                out = res.stdout.splitlines()
                if lines == "list":
                    assert out and all(line.strip() and "│" not in line for line in out), (where, res.stdout)
                else:
                    assert len(out) == lines, (where, res.stdout)
                assert must in res.stdout, (where, res.stdout)
                assert res.stderr == "", (where, res.stderr)  # nothing but errors on stderr


def test_quiet_experiment_failure_is_one_line_on_stderr(tmp_path):
    """No vLLM to start: exit 2, nothing on stdout, one line on stderr, even with --quiet."""
    import subprocess
    import sys

    for verb in (["experiment"], ["experiment", "chain"]):
        args = [*verb, "--serve", "vllm serve fake-model --max-num-seqs 2", "--requests", "3",
                "--vllm-cmd", str(tmp_path / "no-such-vllm"), "--db", str(tmp_path / "j.sqlite"),
                "--out", str(tmp_path / "runs"), "-q"]
        if verb == ["experiment"]:
            args.insert(1, "--set")
            args.insert(2, "max-num-seqs=8")
        r = subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120,
                           env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
        assert r.returncode == 2, (verb, r.stderr)
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (verb, r.stdout, r.stderr)


def test_experiment_line():
    from kvdoctor.report.oneline import experiment_line

    assert experiment_line({"status": "failed", "reason": "vLLM died at start-up"}) == "failed: vLLM died at start-up"
    one = {"status": "complete", "steps": [{"verdict": "as predicted", "verdict_why": "preemptions 12 → 0"}]}
    assert experiment_line(one) == "as predicted: preemptions 12 → 0"
    chain = {"status": "complete", "verdict": "target met", "verdict_why": "level 2", "steps": [{}, {}]}
    assert experiment_line(chain) == "target met: level 2"


def test_quiet_with_json_prints_only_the_document(files):
    res = _run(["ledger", *M, "--json", "-q"])
    assert json.loads(res.stdout)["schema_version"] == "kvdoctor.ledger/1" and res.stderr == ""


def test_short_options_mean_one_thing_across_verbs():
    meaning: dict[str, tuple[str, str]] = {}
    for name, cmd in _commands().items():
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option":
                continue
            longs = [o for o in p.opts + p.secondary_opts if o.startswith("--")]
            for short in (o for o in p.opts if not o.startswith("--")):
                seen = meaning.setdefault(short, (longs[0], name))
                assert seen[0] == longs[0], f"{short} is {seen[0]} on `{seen[1]}` but {longs[0]} on `{name}`"
    assert meaning["-q"][0] == "--quiet"
    # every verb has --quiet, and -q for it
    for name, cmd in _commands().items():
        opts = [o for p in cmd.params if getattr(p, "param_type_name", "") == "option" for o in p.opts]
        assert "--quiet" in opts and "-q" in opts, name
