"""The experiment's readout on frozen runs of the real CPU engine (tests/fixtures/realvllm/, see its README):
the figures come from vLLM's own files, with their provenance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvdoctor.experiment.measure import RunResult
from kvdoctor.experiment.readout import cache_config_info, read_run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "realvllm"


def _run(name):
    d = FIX / name
    if not (d / "bench.json").exists():
        pytest.fail(f"frozen real-vLLM run missing: {d}")
    return RunResult.from_dir(d)


def test_config_starved_run():
    m = read_run(_run("config_starved"))
    assert m["completed"]["value"] == 40 and m["failed"]["value"] == 0
    assert m["running_peak"]["value"] == 2  # --max-num-seqs 2
    assert m["waiting_peak"]["value"] >= 20  # 40 requests at 20/s behind 2 running
    assert m["kv_usage_peak_pct"]["value"] < 5  # 400 blocks, 2 sequences of ≤ 6 blocks
    assert m["preemptions"]["value"] == 0
    assert m["pool_blocks"]["value"] == 400 and m["pool_tokens"]["value"] == 12800
    assert m["generation_tokens"]["value"] == 40 * 64  # --ignore-eos: every output is exactly 64 tokens
    assert m["output_tps"]["how"].startswith("vllm bench serve result bench.json: output_throughput")
    assert 0 < m["ttft_p50_s"]["value"] < m["ttft_p99_s"]["value"]


def test_capacity_short_run():
    m = read_run(_run("capacity_short"))
    assert m["preemptions"]["value"] > 0
    assert "vllm:num_preemptions_total after − before" in m["preemptions"]["how"]
    assert m["waiting_peak"]["value"] > 0 and m["kv_usage_peak_pct"]["value"] > 80
    assert m["pool_tokens"]["value"] == 640 and m["max_concurrency"]["value"] == 1.25


def test_cache_config_info_labels():
    info = cache_config_info((FIX / "capacity_short" / "metrics_after.txt").read_text())
    assert info["block_size"] == "32" and info["num_gpu_blocks"] == "20"


def _with_window(tmp_path, name, samples_kept):
    """A copy of a frozen run whose run.json records the load's window in serve.log (runs made before the window
    was recorded have none) and whose /metrics samples are cut to ``samples_kept`` (a starved sampler)."""
    import json
    import shutil

    d = tmp_path / name
    shutil.copytree(FIX / name, d)
    log = (d / "serve.log").read_bytes()
    start = log.index(b"Avg prompt throughput")  # the first stats line: the engine is up and the load begins
    start = log.rindex(b"\n", 0, start) + 1
    meta = json.loads((d / "run.json").read_text())
    meta["serve_log_load_span"] = [start, len(log)]
    (d / "run.json").write_text(json.dumps(meta))
    rows = (d / "metrics_samples.jsonl").read_text().splitlines()[:samples_kept]
    (d / "metrics_samples.jsonl").write_text("".join(r + "\n" for r in rows))
    return RunResult.from_dir(d)


def test_the_servers_stats_lines_hold_the_peaks_a_starved_sampler_missed(tmp_path):
    import re

    from kvdoctor.experiment.readout import log_stats_during_load

    run = _with_window(tmp_path, "capacity_short", samples_kept=3)  # three idle samples: the sampler saw no load
    assert not any(s["running"] for s in run.samples)
    logged = log_stats_during_load(run)
    text = (FIX / "capacity_short" / "serve.log").read_text()
    kv = [float(v) for v in re.findall(r"CPU KV cache usage: ([\d.]+)%", text)]
    waiting = [int(v) for v in re.findall(r"Waiting: (\d+) reqs", text)]
    assert len(logged) == len(kv) == 16
    m = read_run(run)
    assert m["kv_usage_peak_pct"]["value"] == max(kv) == 94.7
    assert m["waiting_peak"]["value"] == max(waiting)
    assert "stats lines" in m["kv_usage_peak_pct"]["how"] and "3 /metrics samples" in m["kv_usage_peak_pct"]["how"]
    busy = [v for v, w, r in zip(kv, waiting, re.findall(r"Running: (\d+) reqs", text)) if w or int(r)]
    assert m["kv_usage_mean_pct"]["value"] == round(sum(busy) / len(busy), 2)
    assert "no /metrics sample saw the load" in m["kv_usage_mean_pct"]["how"]


def test_with_both_sources_the_peak_is_the_larger_and_the_mean_stays_on_the_samples(tmp_path):
    whole = read_run(_run("capacity_short"))  # no window recorded: /metrics samples only, as before
    assert "stats lines" not in whole["kv_usage_peak_pct"]["how"]
    both = read_run(_with_window(tmp_path, "capacity_short", samples_kept=10_000))
    assert both["kv_usage_peak_pct"]["value"] == max(whole["kv_usage_peak_pct"]["value"], 94.7)
    assert both["kv_usage_mean_pct"] == whole["kv_usage_mean_pct"]
    assert both["waiting_peak"]["value"] >= whole["waiting_peak"]["value"]


def test_peaks_seen_only_on_idle_snapshots_are_not_reported(tmp_path):
    # a load that fell between every snapshot (a fresh-clone CI run: a ~2 s closed loop, 12 /metrics samples and 3
    # stats lines, all idle): the readout gives no KV, running or waiting peak rather than a measured 0; the run's
    # other figures stay, and a waiting-peak target reads "not measured" rather than "met"
    run = _with_window(tmp_path, "capacity_short", samples_kept=3)
    log = (run.directory / "serve.log").read_bytes()
    start, end = run.log_span
    idle = re.sub(rb"Running: \d+ reqs, Waiting: \d+ reqs, CPU KV cache usage: [\d.]+%",
                  b"Running: 0 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.0%", log[start:end])
    (run.directory / "serve.log").write_bytes(log[:start] + idle)
    meta = json.loads((run.directory / "run.json").read_text())
    meta["serve_log_load_span"] = [start, start + len(idle)]
    (run.directory / "run.json").write_text(json.dumps(meta))
    m = read_run(RunResult.from_dir(run.directory))
    assert "kv_usage_peak_pct" not in m and "kv_usage_mean_pct" not in m
    assert not {"running_peak", "waiting_peak", "waiting_mean"} & set(m)
    assert m["completed"]["value"] == 40 and m["output_tps"]["value"] > 0
    from kvdoctor.experiment.core import Targets

    assert Targets(max_preemptions=None, max_waiting_peak=0).check(m)[0]["met"] is None


def test_last_error_line_reads_through_vllms_log_prefix(tmp_path):
    """A worker's traceback lines carry vLLM's prefix; the operator's one line is the exception, not the wrapper."""
    from kvdoctor.experiment.server import last_error_line

    log = tmp_path / "serve.log"
    log.write_text(
        "(VllmWorker-0 pid=2) ERROR 12-03 13:54:36 [multiproc_executor.py:953]     raise ValueError(\n"
        "(VllmWorker-0 pid=2) ERROR 12-03 13:54:36 [multiproc_executor.py:953] ValueError: Available memory on node 0 "
        "(10.39/11.71 GiB) on startup is less than desired CPU memory utilization (0.99, 11.6 GiB).\n"
        "    raise RuntimeError(\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert last_error_line(log).startswith("ValueError: Available memory on node 0 (10.39/11.71 GiB)")
    plain = tmp_path / "plain.log"
    plain.write_text("ValueError: To serve at least one request\nRuntimeError: Engine core initialization failed. See "
                     "root cause above.\n")
    assert last_error_line(plain) == "ValueError: To serve at least one request"


def test_last_error_line_and_the_log_reader_skip_the_same_wrappers(tmp_path):
    """One list of wrapper exceptions serves both readers: a death's EngineDeadError after the CUDA fault is not the
    reason shown, and the reader's engine death quotes the same line."""
    from kvdoctor.evidence.load import load_evidence
    from kvdoctor.experiment.server import last_error_line

    log = tmp_path / "serve.log"
    log.write_text(
        "(EngineCore_DP0 pid=7) ERROR 12-03 13:54:36 [core.py:710] EngineCore encountered a fatal error.\n"
        "(EngineCore_DP0 pid=7) ERROR 12-03 13:54:36 [core.py:710] torch.AcceleratorError: CUDA error: an illegal "
        "memory access was encountered\n"
        "(APIServer pid=1) ERROR 12-03 13:54:36 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n")
    assert last_error_line(log).startswith("torch.AcceleratorError: CUDA error: an illegal memory access")
    quoted = [e.data.get("exception") for e in load_evidence([str(log)]).segments[0].events if e.data.get("exception")]
    assert quoted and quoted[-1].startswith("torch.AcceleratorError: CUDA error")


def test_queue_time_comes_from_vllms_own_histogram_and_is_part_of_ttft():
    # config_starved: vllm:request_queue_time_seconds_sum went 0 -> 283.12 s over the 40 requests
    m = read_run(_run("config_starved"))
    assert m["queue_time_total_s"]["value"] == pytest.approx(283.119705, abs=1e-6)
    assert m["queue_time_mean_s"]["value"] == pytest.approx(283.119705 / 40, abs=1e-6)
    assert "vllm:request_queue_time_seconds_count after − before (40)" in m["queue_time_mean_s"]["how"]
    # the queue is the engine's share of the first token's wait: under the bench's mean TTFT (7.35 s), and the
    # 1 Hz samples of the waiting gauge (Σ waiting × 1 s) measure about the same area
    assert 0.9 * m["ttft_mean_s"]["value"] < m["queue_time_mean_s"]["value"] < m["ttft_mean_s"]["value"]
    sampled = sum(s.get("waiting", 0.0) for s in _run("config_starved").samples)
    assert sampled == pytest.approx(m["queue_time_total_s"]["value"], rel=0.2)


def test_no_queue_time_without_the_histogram_in_both_scrapes(tmp_path):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(FIX / "config_starved", d)
    before = d / "metrics_before.txt"
    before.write_text("".join(x for x in before.read_text().splitlines(keepends=True)
                              if "request_queue_time_seconds" not in x))
    m = read_run(RunResult.from_dir(d))
    assert "queue_time_total_s" not in m and "queue_time_mean_s" not in m
    assert m["completed"]["value"] == 40  # the rest is read as before


def test_a_nan_counter_in_a_scrape_is_left_out_not_a_traceback(tmp_path):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(FIX / "config_starved", d)
    after = d / "metrics_after.txt"
    after.write_text(re.sub(r"^(vllm:(?:num_preemptions_total|request_queue_time_seconds_sum)\{[^}]*\}) \S+",
                            r"\1 NaN", after.read_text(), flags=re.M))
    m = read_run(RunResult.from_dir(d))
    assert "preemptions" not in m and "queue_time_total_s" not in m and "queue_time_mean_s" not in m
    assert m["generation_tokens"]["value"] == 40 * 64  # the finite counters are still read


def test_the_prefix_cache_hit_share_of_the_timed_load_and_the_warm_cache_note(tmp_path):
    # the real engine's run: counters in prompt tokens, after − before
    m = read_run(_run("config_starved"))
    hp = m["prefix_cache_hit_pct"]
    assert hp["source"] == "measured" and "after − before" in hp["how"] and 0.0 <= hp["value"] <= 100.0
    from kvdoctor.experiment.core import cached_load_note
    from kvdoctor.experiment.load import LoadSpec

    # vllm#54227: a repeat with the same --seed finds its prompts cached; a random load with no shared prefix should not
    note = cached_load_note({"prefix_cache_hit_pct": {"value": 87.5}}, LoadSpec(seed=7))
    assert note is not None and "87.5 %" in note and "--seed 7" in note
    assert cached_load_note({"prefix_cache_hit_pct": {"value": 3.0}}, LoadSpec()) is None
    # a shared prefix of 512 before 128-token prompts explains 80 % of hits
    assert cached_load_note({"prefix_cache_hit_pct": {"value": 85.0}}, LoadSpec(prefix_len=512)) is None
