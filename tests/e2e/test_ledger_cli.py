"""``kvdoctor ledger`` end to end: figures with sources, --json schema, --from-log on real start-ups,
and one line + exit 2 for every kind of bad input."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.errors import KvdoctorError

runner = CliRunner()
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def invoke(*args: str):
    """Run the CLI in-process the way ``kvdoctor.cli.main`` does: KvdoctorError → its exit code + one line."""
    res = runner.invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        if isinstance(res.exception, KvdoctorError):
            return res.exception.exit_code, str(res.exception), res.output
        raise res.exception
    return res.exit_code, "", res.output


def ledger_json(*args: str) -> dict:
    code, err, out = invoke("ledger", *args, "--json")
    assert code == 0, err or out
    return json.loads(out)


def test_default_h100_ledger_text():
    code, err, out = invoke("ledger", "--model", LLAMA, "--gpu", "H100")
    assert code == 0, err
    for word in ("KV budget", "activation peak", "CUDA graphs", "predicted", "default", "Concurrency reconciliation"):
        assert word in out
    from kvdoctor.ledger import fitted

    assert f"{fitted.SAMPLER_K_FULL:g} × 1024 seqs × 128256 vocab" in out  # the derivation, numbers substituted


def test_json_schema_and_sources():
    j = ledger_json("--model", LLAMA, "--gpu", "H100", "--max-model-len", "8192", "--max-num-seqs", "32")
    assert j["schema_version"] == "kvdoctor.ledger/1"
    for k in ("total", "requested", "weights", "activation", "non_torch", "cudagraph", "kv_cache"):
        assert isinstance(j["memory"][f"{k}_bytes"], int)
        assert j["sources"][f"memory.{k}"] in ("measured", "given", "predicted", "default")
    for k in ("block_size", "page_bytes_per_layer", "bytes_per_block", "bytes_per_token", "num_blocks", "tokens",
              "max_concurrency"):
        assert k in j["kv_cache"]
    assert j["kv_cache"]["bytes_per_block"] == 2 * 2**20 and j["kv_cache"]["page_bytes_per_layer"] == 65536
    r = j["reconciliation"]
    assert r["worst_case_tokens"] == 32 * 8192 and r["verdict"] == "ok" and r["ratio"] < 1
    assert j["sources"]["engine.max_num_seqs"] == "given"
    assert j["ranks"] and j["figures"]["memory.kv_cache"]["how"]


def test_kv_cache_memory_bytes_given():
    j = ledger_json("--model", LLAMA, "--gpu", "H100", "--kv-cache-memory-bytes", "20G")
    assert j["memory"]["kv_cache_bytes"] == 20 * 2**30
    assert j["sources"]["memory.kv_cache"] == "given"
    assert j["kv_cache"]["num_blocks"] == 20 * 2**30 // (2 * 2**20)


def test_starved_and_does_not_fit_verdicts():
    j = ledger_json("--model", LLAMA, "--gpu", "H100")  # 1024 × 131072 tokens vs a ~50 GiB pool
    assert j["reconciliation"]["verdict"] == "starved" and j["reconciliation"]["ratio"] > 100
    j = ledger_json("--model", LLAMA, "--gpu", "24GiB", "--max-model-len", "131072")
    assert j["startup"]["fits"] is False
    assert j["reconciliation"]["verdict"] == "does-not-fit"
    assert j["startup"]["error"].startswith("To serve at least one request with the model's max seq len (131072)")
    assert 0 < j["startup"]["estimated_max_model_len"] < 131072


def test_tp_and_pp_ranks():
    j = ledger_json("--model", LLAMA, "--gpu", "H100", "-pp", "3")
    assert len(j["ranks"]) == 3  # stages own 11/11/10 layers: they differ
    assert [r["layers"] for r in j["ranks"]] == [[0, 11], [11, 22], [22, 32]]
    j = ledger_json("--model", LLAMA, "--gpu", "H100", "-tp", "2")
    assert j["memory"]["non_torch_bytes"] > 2**30  # custom all-reduce buffers at TP>1 (fitted)


def test_mla_and_fp8_kv():
    j = ledger_json("--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "-tp", "8", "--max-model-len", "16384")
    assert j["kv_cache"]["bytes_per_token"] == 70_272
    j = ledger_json("--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "-tp", "8", "--max-model-len", "16384",
                    "--kv-cache-dtype", "fp8")
    assert j["kv_cache"]["bytes_per_token"] == 35_136


# ------------------------------------------------------------------------------------------------
# --from-log on the real start-ups


def _case(shared_data, cid):
    for line in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines():
        c = json.loads(line)
        if c["case_id"] == cid:
            return c
    raise KeyError(cid)


def test_from_log_v0_case_measured_replaces_predicted(shared_data, tmp_path):
    c = _case(shared_data, "kv001")  # RTX 3090, v0 single-line profiling format
    log = tmp_path / "kv001.log"
    log.write_text(c["log_excerpt"] + "\nthis line is not from vLLM\n")
    j = ledger_json("--from-log", str(log), "--model", LLAMA, "--gpu", "RTX 3090", "--vllm-version", "0.6.3",
                    "--max-model-len", "20000")
    assert j["sources"]["memory.kv_cache"] == "measured"
    assert j["memory"]["kv_cache_bytes"] == round(3.81 * 2**30)
    assert j["figures"]["memory.kv_cache"]["predicted"] > 0  # the prediction is kept beside it
    assert j["kv_cache"]["num_blocks"] == 1952 and j["sources"]["kv_cache.num_blocks"] == "measured"
    assert j["log"]["foreign_lines"] >= 1 and j["log"]["engine_starts"] == 1


V033 = """(EngineCore pid={pid}) INFO 11-20 14:0{m}:31 [gpu_worker.py:513] Using V2 Model Runner
(EngineCore pid={pid}) INFO 11-20 14:0{m}:40 [model_runner.py:429] Model loading took 14.99 GiB memory and 5.312874 seconds
(EngineCore pid={pid}) INFO 11-20 14:0{m}:41 [gpu_worker.py:772] Available KV cache memory: {kv} GiB
(EngineCore pid={pid}) INFO 11-20 14:0{m}:42 [kv_cache_utils.py:1147] GPU KV cache size: 451,344 tokens, Maximum concurrency for 131,072 tokens per request: 3.44x
"""


def test_from_log_033_two_starts_uses_last(tmp_path):
    text = V033.format(pid=1, m=1, kv="50.0") + "garbage \x01 line\n" + V033.format(pid=2, m=5, kv="55.1")
    log = tmp_path / "two.log.gz"
    with gzip.open(log, "wt") as fh:
        fh.write(text)
    j = ledger_json("--from-log", str(log), "--model", LLAMA, "--gpu", "H100")
    assert j["log"]["engine_starts"] == 2
    assert any("this ledger is of the last one" in n for n in j["notes"])
    assert j["memory"]["kv_cache_bytes"] == round(55.1 * 2**30)
    assert j["kv_cache"]["tokens"] == 451_344 and j["sources"]["kv_cache.tokens"] == "measured"
    assert j["memory"]["weights_bytes"] == round(14.99 * 2**30)


def test_from_log_reads_the_file_once(tmp_path, monkeypatch):
    """ledger --from-log scans the log for its line counts and reuses those facts for the ledger."""
    import builtins

    log = tmp_path / "one.log"
    log.write_text(V033.format(pid=1, m=1, kv="55.1"))
    opened = []
    real_open = builtins.open

    def counting_open(file, mode="r", *a, **kw):
        if os.fspath(file) == str(log) and "b" in mode and "w" not in mode:
            opened.append(mode)
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr(builtins, "open", counting_open)
    j = ledger_json("--from-log", str(log), "--model", LLAMA, "--gpu", "H100")
    assert j["memory"]["kv_cache_bytes"] == round(55.1 * 2**30)
    # one look at the head (empty / binary check) and one full pass; the second parse is gone
    assert len(opened) == 2, opened
    assert "startup" not in j["log"]


def test_from_log_v0_without_version_applies_v0_rules(shared_data, tmp_path):
    """kv001 prints v0-engine lines and no version: v1 rules (null block, graphs in the budget) would be wrong."""
    log = tmp_path / "kv001.log"
    log.write_text(_case(shared_data, "kv001")["log_excerpt"])
    j = ledger_json("--from-log", str(log), "--model", LLAMA, "--max-model-len", "20000")
    assert j["vllm_version"] == "0.6.6" and any("v0-engine lines" in n for n in j["notes"])
    assert j["kv_cache"]["usable_blocks"] == j["kv_cache"]["num_blocks"] == 1952  # no null block in v0
    assert j["memory"]["cudagraph_bytes"] == 0
    assert j["kv_cache"]["tokens"] == 1952 * 16
    # its lines carry facts though they lack vLLM's "INFO ... [file.py:n]" prefix: not foreign
    assert j["log"]["foreign_lines"] == 0
    # without a model the log's own ledger: what vLLM measured, and why there are no predictions
    code, err, out = invoke("ledger", "--from-log", str(log))
    assert code == 0, err
    assert "does not name its model" in out and "the start-up log's own ledger" in out


def test_from_log_block_count_from_tokens_when_not_printed(shared_data, tmp_path):
    """kv049 (0.8-era, L40S) prints tokens and concurrency but no block count: invert the formula."""
    log = tmp_path / "kv049.log"
    log.write_text(_case(shared_data, "kv049")["log_excerpt"])
    j = ledger_json("--from-log", str(log), "--model", LLAMA, "--gpu", "L40S", "--max-model-len", "32768",
                    "--vllm-version", "0.8.4")
    f = j["figures"]["kv_cache.num_blocks"]
    assert j["kv_cache"]["num_blocks"] == 158_656 // 16 and f["source"] == "measured" and "inverted" in f["how"]
    assert f["predicted"] != 158_656 // 16  # the budget-derived prediction is kept beside it
    assert j["reconciliation"]["pool_tokens"] == (158_656 // 16 - 1) * 32768 // 2048
    # the measured tokens carry the budget-derived prediction, not the same formula re-run on the log
    assert j["figures"]["kv_cache.tokens"]["predicted"] == f["predicted"] * 16
    # 0.33 rules (no version given): same count through int(concurrency × length)
    j33 = ledger_json("--from-log", str(log), "--model", LLAMA, "--gpu", "L40S", "--max-model-len", "32768")
    assert j33["kv_cache"]["num_blocks"] == 9916
    assert any("shows no vLLM version" in n for n in j33["notes"])


# ------------------------------------------------------------------------------------------------
# bad input: one line, exit 2


@pytest.fixture
def bad_files(tmp_path):
    broken = tmp_path / "broken" / "config.json"
    broken.parent.mkdir()
    broken.write_text('{"model_type": "llama", "num_hidden_layers": 32, "hidden_')  # truncated JSON
    missing = tmp_path / "missing" / "config.json"
    missing.parent.mkdir()
    missing.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    mistyped = tmp_path / "mistyped" / "config.json"
    mistyped.parent.mkdir()
    mistyped.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                    "num_hidden_layers": "thirty-two", "hidden_size": 4096,
                                    "num_attention_heads": 32, "vocab_size": 128256, "intermediate_size": 14336}))
    binary = tmp_path / "binary.log"
    binary.write_bytes(bytes(range(256)) * 64)
    empty = tmp_path / "empty.log"
    empty.write_text("")
    nostart = tmp_path / "nostart.log"
    nostart.write_text("hello\nworld\n")
    nomodel = tmp_path / "nomodel.log"
    nomodel.write_text("Available KV cache memory: 36.56 GiB\n")
    return {"broken": str(broken), "missing": str(missing), "mistyped": str(mistyped), "binary": str(binary),
            "empty": str(empty), "nostart": str(nostart), "absent": str(tmp_path / "nope.log"), "nomodel": str(nomodel)}


BAD = [
    ("unknown model", ["--model", "no-such/model-xyz", "--gpu", "H100"]),
    ("unknown gpu", ["--model", LLAMA, "--gpu", "Z9000"]),
    ("truncated config.json", ["--model", "{broken}", "--gpu", "H100"]),
    ("config.json missing fields", ["--model", "{missing}", "--gpu", "H100"]),
    ("config.json mistyped field", ["--model", "{mistyped}", "--gpu", "H100"]),
    ("tp not dividing heads", ["--model", LLAMA, "--gpu", "H100", "-tp", "3"]),
    ("util above 1", ["--model", LLAMA, "--gpu", "H100", "--gpu-memory-utilization", "1.5"]),
    ("util zero", ["--model", LLAMA, "--gpu", "H100", "--gpu-memory-utilization", "0"]),
    ("negative length", ["--model", LLAMA, "--gpu", "H100", "--max-model-len", "-5"]),
    ("missing log", ["--from-log", "{absent}", "--model", LLAMA, "--gpu", "H100"]),
    ("binary log", ["--from-log", "{binary}", "--model", LLAMA, "--gpu", "H100"]),
    ("empty log", ["--from-log", "{empty}", "--model", LLAMA, "--gpu", "H100"]),
    ("log without a start-up", ["--from-log", "{nostart}", "--model", LLAMA, "--gpu", "H100"]),
    ("no gpu", ["--model", LLAMA]),
    ("negative gpu size", ["--model", LLAMA, "--gpu", "-5GiB"]),
    ("env var vLLM cannot read", ["--serve", f"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=yes vllm serve {LLAMA}",
                                  "--gpu", "H100"]),
]


def test_a_log_without_a_model_gives_the_logs_own_ledger(bad_files):
    """Once bad input (exit 2, "pass --model"): the log's figures need no model shape, so they are shown, measured,
    with why predictions are missing."""
    code, err, out = invoke("ledger", "--from-log", bad_files["nomodel"], "--gpu", "H100", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["schema_version"] == "kvdoctor.ledger-log/1" and j["mode"] == "log-only"
    assert j["figures"]["memory.kv_cache"] == {"value": round(36.56 * (1 << 30)), "source": "measured",
                                               "how": "36.56 GiB, printed by vLLM (line 1)"}
    assert "does not name its model" in j["why_no_model"] and j["reconciliation"]["verdict"] == "fits"


@pytest.mark.parametrize("label,args", BAD, ids=[b[0] for b in BAD])
def test_bad_input_one_line_exit_2(bad_files, label, args):
    args = [a.format(**bad_files) for a in args]
    code, err, out = invoke("ledger", *args)
    assert code == 2, (label, err, out)
    assert err and "\n" not in err.strip(), err


def test_bad_input_through_main_has_no_traceback(bad_files):
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("KVDOCTOR_DEBUG", None)
    p = subprocess.run([sys.executable, "-m", "kvdoctor", "ledger", "--model", LLAMA, "--gpu", "H100",
                        "--from-log", bad_files["binary"]], capture_output=True, text=True, env=env)
    assert p.returncode == 2
    assert p.stderr.startswith("kvdoctor: error:") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr


def _excerpt_cases(shared_data):
    rows = [json.loads(x) for x in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines() if x]
    return [r for r in rows if r.get("log_excerpt")]


def test_from_log_every_real_excerpt(shared_data, tmp_path):
    """Every real start-up excerpt (every era): exit 0 with the log's figures shown as measured, or — for
    excerpts that are hand-typed summaries without a vLLM start-up line, or whose recorded engine flags vLLM
    itself rejects — one line and exit 2. Never a crash. Llama-3.1-8B stands in for models outside the
    catalog (the measured figures must pass through whatever the model)."""
    ok = 0
    for c in _excerpt_cases(shared_data):
        log = tmp_path / f"{c['case_id']}.log"
        log.write_text(c["log_excerpt"])
        code, err, out = invoke("ledger", "--from-log", str(log), "--model", LLAMA, "--gpu", "H100", "--json")
        assert code in (0, 2), (c["case_id"], err)
        if code == 2:
            assert err and "\n" not in err.strip()
            continue
        ok += 1
        j = json.loads(out)
        if c["num_gpu_blocks"] and j["log"]["engine_starts"] == 1:
            assert j["sources"]["kv_cache.num_blocks"] == "measured", c["case_id"]
        if c["kv_cache_gib"] is not None and j["sources"]["memory.kv_cache"] == "measured" \
                and j["log"]["engine_starts"] == 1:
            assert abs(j["memory"]["kv_cache_bytes"] / 2**30 - c["kv_cache_gib"]) < 0.006, c["case_id"]
        if c["startup_failed"] and any(k in c["log_excerpt"] for k in ("To serve at least one request",
                                                                       "larger than the maximum number of tokens")):
            assert j["startup"]["fits"] is False and j["reconciliation"]["verdict"] == "does-not-fit", c["case_id"]
            assert j["startup"]["error"], c["case_id"]
    assert ok >= 25


# ------------------------------------------------------------------------------------------------
# text rendering: plain, aligned, coloured only on a terminal, and no rich on this path


class _Tty:
    def __init__(self):
        self.parts: list[str] = []

    def isatty(self):
        return True

    def write(self, s):
        self.parts.append(s)


def _rendered(monkeypatch, **env):
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.cli.ledger_cmd import render
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.engine.defaults import resolve
    from kvdoctor.ledger.build import build_ledger

    for k in ("NO_COLOR", "TERM", "COLUMNS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    shape, gpu = lookup_model(LLAMA), lookup_gpu("H100")
    led = build_ledger(shape, gpu, resolve(EngineConfig(pipeline_parallel_size=3), shape, gpu))
    tty = _Tty()
    render(led, stream=tty)
    return "".join(tty.parts)


def test_text_colour_only_on_a_terminal_without_no_color(monkeypatch):
    assert "\x1b[33mpredicted" in _rendered(monkeypatch, COLUMNS="120")
    plain = _rendered(monkeypatch, COLUMNS="120", NO_COLOR="1")
    assert "\x1b[" not in plain
    assert "\x1b[" not in _rendered(monkeypatch, COLUMNS="120", TERM="dumb")
    # every line fits the width; figures, sources and per-rank rows are all there
    assert max(len(ln) for ln in plain.splitlines()) <= 120
    for text in ("KV budget", "predicted", "Per GPU, GiB", "22–31", "Concurrency reconciliation: starved"):
        assert text in plain
    narrow = _rendered(monkeypatch, COLUMNS="80", NO_COLOR="1")
    table = narrow.split("Concurrency reconciliation")[0]
    assert max(len(ln) for ln in table.splitlines()) <= 80


def test_ledger_text_path_does_not_import_rich():
    # rich.console + rich.table cost 40-100 ms of the 0.3 s start-up budget (benchmarks/README.md).
    # Runs the real entry (python -m kvdoctor, whatever module it boots through) under -X importtime.
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvdoctor", "ledger", "--model", LLAMA, "--gpu", "H100"],
                       capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "KV budget" in p.stdout
    imported = [ln.rsplit("|", 1)[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")]
    assert "kvdoctor.ledger.build" in imported  # the instrumentation did see our modules
    assert not [m for m in imported if m == "rich" or m.startswith("rich.")], "rich imported on the ledger text path"


def test_dataclasses_on_the_ledger_path_have_docstrings():
    # @dataclass calls inspect.signature() to invent a docstring for a class without one (~0.5-3 ms
    # each for the 40-field ones); the ledger verb's start-up budget is 0.3 s.
    import dataclasses
    import importlib

    for mod in ("kvdoctor.ledger.kv", "kvdoctor.ledger.shape", "kvdoctor.ledger.memory", "kvdoctor.ledger.weights",
                "kvdoctor.ledger.build", "kvdoctor.engine.config", "kvdoctor.engine.defaults", "kvdoctor.engine.version",
                "kvdoctor.catalog.gpus", "kvdoctor.cli.common", "kvdoctor.provenance"):
        m = importlib.import_module(mod)
        for name, obj in vars(m).items():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == mod:
                assert obj.__doc__ and not obj.__doc__.startswith(f"{obj.__name__}("), f"{mod}.{name} has no docstring"


def test_ledger_html_writes_a_report_with_the_same_figures(tmp_path):
    out = tmp_path / "ledger.html"
    res = CliRunner().invoke(app, ["ledger", "--model", LLAMA, "--gpu", "H100", "--json", "--html", str(out)])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    page = out.read_text()
    assert "Memory per GPU" in page and "<script src=" not in page  # plotly inlined, nothing fetched
    # the report shows the ledger's own pool figure, not a recomputation
    assert f"{payload['kv_cache']['num_blocks']:,}" in page


def test_log_with_pool_but_no_budget_implies_the_budget(shared_data, tmp_path):
    # kv049 (vllm PR #17122, L40S): the log prints "GPU KV cache size: 158,656 tokens" and the concurrency, no
    # budget. The KV budget row must follow the measured pool (9,916 blocks × 2 MiB), not a prediction
    # that disagrees with the pool printed beside it.
    case = next(json.loads(l) for l in open(shared_data / "real" / "kv_capacity_cases.jsonl")
                if json.loads(l)["case_id"] == "kv049")
    log = tmp_path / "kv049.log"
    log.write_text(case["log_excerpt"])
    res = runner.invoke(app, ["ledger", "--from-log", str(log), "-m", case["model"], "--gpu", "L40S",
                              "--max-model-len", str(case["max_model_len"]), "--json"])
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    assert p["kv_cache"]["num_blocks"] == 158_656 // 16
    assert p["memory"]["kv_cache_bytes"] == 9_916 * 2_097_152
    assert p["sources"]["memory.kv_cache"] == "measured"
