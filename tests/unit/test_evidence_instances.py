"""One server is one instance: a log and the /metrics scrapes of the same server merge (engine index,
model, pool size, time — the log's assumed year corrected from the scrapes' epochs); anything that
disagrees stays apart with a note; no figure of one engine is shown for another; windows are stated
one way (last − first + one interval) in ``evidence`` and ``diagnose``."""

from __future__ import annotations

import json

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.prometheus import load_metrics
from kvdoctor.evidence.summarize import covered_window, summary

LINE = ("(APIServer pid=7) INFO 11-30 00:00:{s:02d} [loggers.py:335] Engine {eng:03d}: Avg prompt throughput: 900.0 "
        "tokens/s, Avg generation throughput: 400.0 tokens/s, Running: 24 reqs, Waiting: 9 reqs, GPU KV cache usage: "
        "98.5%, Prefix cache hit rate: 0.0%")
T0 = 1764460800  # 2025-11-30 00:00:00 UTC


def _log(tmp_path, eng=0, model="Qwen/Qwen2.5-14B", blocks=None):
    head = f"(APIServer pid=7) INFO 11-30 00:00:00 [api_server.py:1] non-default args: {{'model': '{model}'}}\n"
    if blocks:
        head += f"(EngineCore_DP0 pid=9) INFO 11-30 00:00:01 [kv_cache_utils.py:1] GPU KV cache size: {blocks * 16:,} tokens\n"
    p = tmp_path / "server.log"
    p.write_text(head + "\n".join(LINE.format(s=s, eng=eng) for s in range(5, 60, 10)) + "\n")
    return p


def _metrics(tmp_path, eng="0", model="Qwen/Qwen2.5-14B", t0=T0, blocks=None, name="server.metrics"):
    lab = f'{{engine="{eng}",model_name="{model}"}}'
    rows = []
    for k in range(4):
        ms = (t0 + k * 15) * 1000
        rows.append(f"vllm:num_requests_running{lab} 24.0 {ms}\nvllm:num_requests_waiting{lab} 9.0 {ms}\n"
                    f"vllm:kv_cache_usage_perc{lab} 0.985 {ms}\nvllm:num_preemptions_total{lab} {5 * k}.0 {ms}")
    if blocks:
        rows.append(f'vllm:cache_config_info{{block_size="16",engine="{eng}",num_gpu_blocks="{blocks}"}} 1.0 {ms}')
    p = tmp_path / name
    p.write_text("\n".join(rows) + "\n")
    return p


def test_log_and_metrics_of_one_server_are_one_instance(tmp_path):
    ev = load_evidence([_log(tmp_path), _metrics(tmp_path)])
    assert len(ev.segments) == 1
    d = diagnose(ev)
    inst = d.instances[0]
    # the counter of the scrapes now counts preemptions for the log's instance: 15 in 60 s
    assert inst.preemption_basis == "counter" and d.verdict == "capacity-short" and inst.confidence == "high"
    assert any(n.startswith("one instance") and "year" in n for n in d.notes)
    assert inst.window["samples"] == 10


def test_other_engine_model_or_pool_stays_apart(tmp_path):
    for kw, why in (({"eng": "1"}, "engine 0 vs 1"), ({"model": "meta-llama/Llama-3.1-8B-Instruct"}, "model"),
                    ({"t0": T0 + 7 * 86400}, "no time overlap")):
        d = tmp_path / why.replace(" ", "_")
        d.mkdir()
        ev = load_evidence([_log(d), _metrics(d, **kw)])
        assert len(ev.segments) == 2, why
        assert any("kept apart" in n and why in n for n in ev.notes), (why, ev.notes)
    d = tmp_path / "pool"
    d.mkdir()
    ev = load_evidence([_log(d, blocks=3580), _metrics(d, blocks=9000)])
    assert len(ev.segments) == 2 and any("pool" in n for n in ev.notes)


def test_no_pool_figure_leaks_between_models_of_a_folder(tmp_path):
    folder = tmp_path / "scrapes"
    folder.mkdir()
    for k in range(3):
        ms = (T0 + k * 15) * 1000
        text = ""
        for eng, model, blocks in (("0", "Qwen/Qwen2.5-14B", 3580), ("1", "meta-llama/Llama-3.1-8B-Instruct", 12192)):
            lab = f'{{engine="{eng}",model_name="{model}"}}'
            text += (f"vllm:num_requests_running{lab} 4.0 {ms}\nvllm:num_requests_waiting{lab} 0.0 {ms}\n"
                     f"vllm:kv_cache_usage_perc{lab} 0.5 {ms}\n"
                     f'vllm:cache_config_info{{block_size="16",engine="{eng}",num_gpu_blocks="{blocks}"}} 1.0 {ms}\n')
        (folder / f"{k:03d}.prom").write_text(text)
    segs = {s.engine: s for s in load_metrics(folder)}
    assert segs["Qwen/Qwen2.5-14B engine 0"].startup.num_gpu_blocks == 3580
    assert segs["meta-llama/Llama-3.1-8B-Instruct engine 1"].startup.num_gpu_blocks == 12192
    # an unlabelled cache_config_info in a dump of two servers' series is nobody's in particular
    (folder / "003.prom").write_text((folder / "000.prom").read_text().replace(',engine="0"', "")
                                     .replace(',engine="1"', "").replace(str(T0 * 1000), str((T0 + 45) * 1000)))
    for s in load_metrics(folder):
        assert s.startup is None or s.startup.num_gpu_blocks in (3580, 12192)


def test_windows_are_measured_one_way(tmp_path):
    p = _log(tmp_path)
    ev = load_evidence([p])
    s = summary(ev)
    d = diagnose(ev).instances[0].window
    assert (s["span_seconds"], s["interval_s"]) == (60.0, 10.0) == (d["seconds"], d["interval_s"])
    assert covered_window([0.0, 10.0, 20.0]) == (3, 30.0, 10.0) and covered_window([5.0]) == (1, 0.0, None)


def test_a_startup_log_of_another_model_is_called_out(tmp_path):
    from tests.e2e.test_rules_cli import invoke

    p = _log(tmp_path, model="Qwen/Qwen2.5-14B")
    code, err, out = invoke("diagnose", str(p), "-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L40S", "--json")
    assert code == 0, err
    notes = json.loads(out)["instances"][0]["notes"]
    assert any("start-up log is of Qwen/Qwen2.5-14B, not of --model meta-llama/Llama-3.1-8B-Instruct" in n
               for n in notes), notes
