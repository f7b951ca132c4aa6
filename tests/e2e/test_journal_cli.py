"""`kvdoctor journal` end to end: the one-variable refusal on real `vllm serve` lines (from public
issues, via ../shared/data/real/kv_capacity_cases.jsonl) and on YAML written for the same servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.errors import KvdoctorError

runner = CliRunner()


def kvd(*args: str) -> tuple[int, str]:
    """Invoke like the real entry point: KvdoctorError -> its exit code and one line."""
    res = runner.invoke(app, list(args))
    if isinstance(res.exception, KvdoctorError):
        return res.exception.exit_code, str(res.exception)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


def serve_line(shared_data: Path, case_id: str) -> str:
    for line in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["case_id"] == case_id:
            return case["extra"]["command"]
    raise AssertionError(f"{case_id} not in the shared data")


def steps(db: Path) -> list[dict]:
    code, out = kvd("journal", "show", "--db", str(db), "--json")
    assert code == 0, out
    return json.loads(out)["steps"]


# gpt-oss-20b as served in kv015 (github.com/vllm-project/vllm issue cited by the case), and the
# same server written as a vLLM --config YAML by its operator, context cut to 32k.
GPT_OSS_YAML_32K = textwrap.dedent("""\
    model: openai/gpt-oss-20b
    port: 10000
    max_model_len: 32768
    gpu-memory-utilization: 0.65
    trust-remote-code: true
""")


def test_serve_line_then_yaml_one_variable(tmp_path, shared_data):
    db = tmp_path / "j.sqlite"
    line = serve_line(shared_data, "kv015")
    code, out = kvd("journal", "start", "gptoss", "--config", line, "--db", str(db), "--note", "as reported")
    assert code == 0, out
    yaml32 = tmp_path / "gptoss-32k.yaml"
    yaml32.write_text(GPT_OSS_YAML_32K)
    code, out = kvd("journal", "record", "--config", str(yaml32), "--db", str(db), "--note", "business max is 32k")
    assert code == 0, out
    s = steps(db)
    # snake/kebab keys, `true` vs a bare flag, YAML vs serve line: only the context limit differs
    assert s[1]["changes"] == [{"field": "max_model_len", "before": 131072, "after": 32768}]
    assert s[1]["multi"] is False
    assert s[1]["config_text"] == GPT_OSS_YAML_32K  # what the user wrote, verbatim
    assert s[0]["config_text"] == line

    # the same YAML again: a re-measure, accepted with no change
    code, out = kvd("journal", "record", "--config", str(yaml32), "--db", str(db))
    assert code == 0, out
    assert steps(db)[2]["changes"] == []


def test_two_variables_refused_then_forced(tmp_path, shared_data):
    db = tmp_path / "j.sqlite"
    yaml32 = tmp_path / "gptoss-32k.yaml"
    yaml32.write_text(GPT_OSS_YAML_32K)
    assert kvd("journal", "start", "gptoss", "--config", str(yaml32), "--db", str(db))[0] == 0
    # the chapter's levels 1 and 2 at once: context to 16k AND fp8 KV, written as a serve line
    both = serve_line(shared_data, "kv015").replace("131072", "16384") + " --kv-cache-dtype fp8"
    code, msg = kvd("journal", "record", "--config", both, "--db", str(db))
    assert code == 1
    assert "2 variables changed since step #0" in msg
    assert "max_model_len (32768 -> 16384)" in msg and "kv_cache_dtype (unset -> fp8)" in msg
    assert "--force-multi" in msg
    assert len(steps(db)) == 1  # nothing written

    code, out = kvd("journal", "record", "--config", both, "--db", str(db), "--force-multi")
    assert code == 0, out
    s = steps(db)
    assert s[1]["multi"] is True
    assert {c["field"] for c in s[1]["changes"]} == {"max_model_len", "kv_cache_dtype"}

    code, md = kvd("journal", "handbook", "--db", str(db))
    assert code == 0
    assert "Several variables changed in this step (forced)" in md
    assert "only changed together with other variables" in md


@pytest.mark.parametrize("case_id", ["kv003", "kv005", "kv016", "kv041"])
def test_refusal_on_real_serve_lines(tmp_path, shared_data, case_id):
    db = tmp_path / "j.sqlite"
    base = serve_line(shared_data, case_id)
    assert kvd("journal", "start", case_id, "--config", base, "--db", str(db))[0] == 0
    one = base + " --max-num-seqs 64"
    code, out = kvd("journal", "record", "--config", one, "--db", str(db))
    assert code == 0, out
    assert [c["field"] for c in steps(db)[1]["changes"]] == ["max_num_seqs"]
    two = base + " --max-num-seqs 32 --gpu-memory-utilization 0.85"
    code, msg = kvd("journal", "record", "--config", two, "--db", str(db))
    import re

    m = re.search(r"--gpu-memory-utilization[ =]([0-9.]+)", base)  # kv016/kv041 set it already
    assert code == 1 and f"gpu_memory_utilization ({m.group(1) if m else 'unset'} -> 0.85)" in msg
    assert "max_num_seqs (64 -> 32)" in msg
    assert len(steps(db)) == 2


def test_prediction_sits_beside_the_outcome(tmp_path):
    db = tmp_path / "j.sqlite"
    assert kvd("journal", "start", "p", "--config", "vllm serve m --max-model-len 32768", "--db", str(db))[0] == 0
    plan = {"schema_version": "kvdoctor.plan/1", "levels": [
        {"level": 1, "action": "lower the context limit", "flag_change": "--max-model-len 8192",
         "pool_tokens": 100000, "enough": True,
         "predicted": {"output_tps": {"value": 1450.0, "source": "predicted", "how": "sim, 200 s of trace"},
                       "preemptions_per_min": 0.0}},
        {"level": 2, "action": "fp8 KV", "flag_change": "--kv-cache-dtype fp8", "pool_tokens": 200000,
         "predicted": {"output_tps": 9999.0}}]}
    pf = tmp_path / "plan.json"
    pf.write_text(json.dumps(plan))
    code, out = kvd("journal", "record", "--config", "vllm serve m --max-model-len 8192", "--prediction", str(pf),
                    "--db", str(db))
    assert code == 0, out
    s = steps(db)[1]
    assert s["predicted"]["output_tps"] == {"value": 1450.0, "source": "predicted", "how": "sim, 200 s of trace"}
    assert s["predicted"]["preemptions_per_min"]["value"] == 0.0
    assert s["prediction_kind"] == "kvdoctor.plan/1"


def test_bad_inputs_exit_2(tmp_path):
    db = tmp_path / "j.sqlite"
    assert kvd("journal", "record", "--config", "vllm serve m", "--db", str(db))[0] == 2  # no journal file
    assert kvd("journal", "start", "x", "--config", str(tmp_path / "nope.yaml"), "--db", str(db))[0] == 2
    assert kvd("journal", "start", "x", "--config", "vllm serve m --max-num-seqs lots", "--db", str(db))[0] == 2
    assert kvd("journal", "start", "x", "--config", "vllm serve m", "--db", str(db))[0] == 0
    assert kvd("journal", "start", "x", "--config", "vllm serve m", "--db", str(db))[0] == 2  # never overwritten
    assert kvd("journal", "compare", "0", "5", "--db", str(db))[0] == 2
    bad = tmp_path / "pred.json"
    bad.write_text('{"not": "a payload"}')
    assert kvd("journal", "record", "--prediction", str(bad), "--db", str(db))[0] == 2


def test_real_process_exit_code_and_env_db(tmp_path):
    """The installed entry point: exit 1 and one stderr line, $KVDOCTOR_JOURNAL picks the file."""
    env = {**os.environ, "KVDOCTOR_JOURNAL": str(tmp_path / "env.sqlite"), "NO_COLOR": "1"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "kvdoctor", *a], env=env, cwd=tmp_path,  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    assert run("journal", "start", "e", "--config", "vllm serve m --max-model-len 8192").returncode == 0
    r = run("journal", "record", "--config", "vllm serve m --max-model-len 4096 --max-num-seqs 8")
    assert r.returncode == 1
    assert r.stderr.startswith("kvdoctor: error: 2 variables changed") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr
    assert (tmp_path / "env.sqlite").exists() and not (tmp_path / "kvdoctor-journal.sqlite").exists()


def test_saved_serve_script_and_remeasure_without_config(tmp_path):
    """--config also takes a saved launch script (backslash continuations); no --config = same config."""
    db = tmp_path / "j.sqlite"
    script = tmp_path / "serve.sh"
    script.write_text("VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n  --max-model-len 16384 \\\n"
                      "  --gpu-memory-utilization 0.9\n")
    assert kvd("journal", "start", "s", "--config", str(script), "--db", str(db))[0] == 0
    code, out = kvd("journal", "record", "--db", str(db), "--note", "re-run the load test")
    assert code == 0, out
    s = steps(db)
    assert s[0]["config_given"]["max_model_len"] == 16384 and s[0]["config_given"]["env.VLLM_USE_V1"] == "1"
    assert s[1]["changes"] == [] and s[1]["config_origin"] == "same as step #0"
    code, out = kvd("journal", "note", "1", "p99 was noisy: rerun tomorrow", "--db", str(db))
    assert code == 0
    assert [n["text"] for n in steps(db)[1]["notes"]] == ["p99 was noisy: rerun tomorrow"]


def _write_real(shared_data: Path, tmp: Path) -> dict[str, Path]:
    """Real evidence from public threads: a v1 stats-line log and two `vllm bench serve` outputs."""
    out: dict[str, Path] = {}
    for line in (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["log_id"] == "rt013":
            out["log"] = tmp / "rt013.log"
            out["log"].write_text(d["excerpt"])
    for line in (shared_data / "real" / "bench_outputs.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["bench_id"] in ("bo001", "bo002"):
            out[d["bench_id"]] = tmp / f"{d['bench_id']}.txt"
            out[d["bench_id"]].write_text(d["output"] if isinstance(d["output"], str) else json.dumps(d["output"]))
    return out


def test_steps_keep_measured_figures_from_real_evidence(tmp_path, shared_data):
    files = _write_real(shared_data, tmp_path)
    db = tmp_path / "j.sqlite"
    base = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768"
    code, out = kvd("journal", "start", "real", "--config", base, "--evidence", str(files["log"]), "--db", str(db))
    assert code == 0, out
    code, out = kvd("journal", "record", "--config", base.replace("32768", "8192"), "--bench", str(files["bo002"]),
                    "--db", str(db))
    assert code == 0, out
    code, out = kvd("journal", "record", "--config", base.replace("32768", "8192") + " --kv-cache-dtype fp8",
                    "--bench", str(files["bo001"]), "--db", str(db))
    assert code == 0, out
    s = steps(db)
    log_figs = s[0]["figures"]
    assert log_figs["kv_usage_peak_pct"]["source"] == "measured" and 0 < log_figs["kv_usage_peak_pct"]["value"] <= 100
    assert "output_tps" in log_figs and s[0]["evidence"]["kinds"] == ["log"]
    # the first bench step is compared with a log: flagged; bench -> bench is like for like
    assert "not like for like" in s[1]["evidence"]["mismatch"]
    assert "mismatch" not in s[2]["evidence"]
    assert s[2]["before"] == s[1]["figures"]
    assert s[2]["figures"]["ttft_p99_s"]["value"] > 0 and s[2]["figures"]["output_tps"]["value"] > 0
    code, md = kvd("journal", "handbook", "--db", str(db))
    assert "## `kv_cache_dtype`" in md and "Caution: before measured from log" in md


def test_startup_log_as_config_matches_its_serve_line(tmp_path, shared_data):
    """kv015: the operator's start-up log and the command they said they ran are the same config."""
    case = next(json.loads(x) for x in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines()
                if json.loads(x)["case_id"] == "kv015")
    log = tmp_path / "kv015.log"
    log.write_text(case["log_excerpt"])
    db = tmp_path / "j.sqlite"
    code, out = kvd("journal", "start", "from-log", "--config", str(log), "--db", str(db))
    assert code == 0, out
    s0 = steps(db)[0]
    assert s0["config_origin"] == f"log:{log}"
    assert s0["config_given"]["max_model_len"] == 131072 and s0["config_given"]["gpu_memory_utilization"] == 0.65
    code, out = kvd("journal", "record", "--config", case["extra"]["command"], "--db", str(db))
    assert code == 0, out
    assert steps(db)[1]["changes"] == []  # the log's non-default args == the serve line
    yaml32 = tmp_path / "32k.yaml"
    yaml32.write_text(GPT_OSS_YAML_32K)
    code, out = kvd("journal", "record", "--config", str(yaml32), "--db", str(db))
    assert code == 0, out
    assert [c["field"] for c in steps(db)[2]["changes"]] == ["max_model_len"]
