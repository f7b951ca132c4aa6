"""A start-up excerpt without the engine's config line still shows how many TP ranks printed: vLLM 0.10.2 on 8x L40S
(tests/fixtures/startup_logs/l40s8-qwen3-235b-fp8-tp8ep-excerpt-v0102.log, verbatim public text), whose workers print
as Worker_TP0_EP0 ... Worker_TP7_EP7. Without the ranks kvdoctor took TP 1 and predicted 220 GiB of weights per GPU
against the 27.72 GiB the log measured."""

from __future__ import annotations

from pathlib import Path

from kvdoctor.cli import common
from kvdoctor.evidence.logs import read_startup_facts
from kvdoctor.ledger.build import build_ledger

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs" / "l40s8-qwen3-235b-fp8-tp8ep-excerpt-v0102.log"


def _ledger(path: Path, **kw):
    inputs = common.resolve_inputs(common.ConfigOptions(from_log=str(path), **kw))
    return build_ledger(inputs.shape, inputs.gpu, inputs.resolved, startup=inputs.startup), inputs


def test_the_worker_prefixes_give_the_tp_size_and_the_ledger_then_matches_the_log():
    (facts,) = read_startup_facts(LOG)
    assert facts.tensor_parallel_size is None and facts.engine_config["tp_ranks_seen"] == 8
    led, inp = _ledger(LOG, model="Qwen/Qwen3-235B-A22B-FP8")
    assert inp.resolved.tensor_parallel_size == 8
    assert any("taken from the log's worker prefixes (a worker up to TP rank 7" in n for n in inp.notes)
    w = led.memory["weights"]
    assert w.source == "measured" and abs(w.predicted / w.value - 1) < 0.01  # 27.66 vs 27.72 GiB
    tok = led.kv["tokens"]
    # the engine printed each rank's pool (237,344-238,256 tokens) and cut every rank to the fewest blocks: 14,834 x 16
    # = 237,344 is the pool; the ledger predicts rank 0's (10.68 GiB: 238,272), the ranks with 10.64 GiB hold less
    assert tok.value == 237344 == facts.num_gpu_blocks * 16 and abs(tok.predicted / tok.value - 1) < 0.005
    assert not any("does not match" in x for x in led.warnings)


def test_a_stated_tp_wins_over_the_prefixes_and_a_k_fold_weights_gap_is_named(tmp_path):
    # the operator says TP 1 (wrongly): the prefixes do not override it, and the mismatch names the likely split
    led, inp = _ledger(LOG, model="Qwen/Qwen3-235B-A22B-FP8", tensor_parallel_size=1)
    assert inp.resolved.tensor_parallel_size == 1
    (warn,) = [x for x in led.warnings if "does not match --model" in x]
    assert "or the server ran with 8× this tensor-parallel size" in warn
    # a plain EngineCore log (no worker ranks) learns nothing from prefixes
    one = tmp_path / "one.log"
    one.write_text("(EngineCore_DP0 pid=1) INFO 09-24 20:46:30 [gpu_worker.py:298] Available KV cache memory: 10.68 GiB\n")
    (facts,) = read_startup_facts(one)
    assert "tp_ranks_seen" not in facts.engine_config
