"""Speculative decoding's interval lines ("SpecDecoding metrics", vLLM 0.9-0.33's v1/spec_decode/metrics.py) are read and
summed into a note: a deployment whose drafter accepts ~nothing read as plain "healthy" before (sweep 44 of 2026-12-05:
four public MTP / EAGLE-3 deployments at 0.3-1.2 % acceptance)."""

from __future__ import annotations

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.evidence.load import load_evidence

# vllm#41789 (2026-05): gemma-4-31B AWQ on one RTX 5090, MTP with 4 drafted per step, vLLM 0.20.2rc1; its lines as printed
GEMMA4_MTP = (
    "(APIServer pid=1) INFO 05-06 06:11:23 [loggers.py:271] Engine 000: Avg prompt throughput: 1436.3 tokens/s, Avg "
    "generation throughput: 93.9 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 36.1%, Prefix cache hit "
    "rate: 27.4%\n"
    "(APIServer pid=1) INFO 05-06 06:11:23 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 1.03, Accepted "
    "throughput: 2.50 tokens/s, Drafted throughput: 365.14 tokens/s, Accepted: 25 tokens, Drafted: 3652 tokens, "
    "Per-position acceptance rate: 0.027, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.7%\n"
    "(APIServer pid=1) INFO 05-06 06:11:33 [loggers.py:271] Engine 000: Avg prompt throughput: 1401.3 tokens/s, Avg "
    "generation throughput: 44.7 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.5%, Prefix cache hit "
    "rate: 20.5%\n"
    "(APIServer pid=1) INFO 05-06 06:11:33 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 1.03, Accepted "
    "throughput: 1.50 tokens/s, Drafted throughput: 172.41 tokens/s, Accepted: 15 tokens, Drafted: 1724 tokens, "
    "Per-position acceptance rate: 0.035, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.9%\n")


def _instance(tmp_path, text: str):
    p = tmp_path / "serve.log"
    p.write_text(text)
    (inst,) = diagnose(load_evidence([str(p)])).instances
    return inst


def test_the_interval_lines_are_read_and_summed(tmp_path):
    from kvdoctor.evidence.logs.reader import read_log

    p = tmp_path / "serve.log"
    p.write_text(GEMMA4_MTP)
    r = read_log(p)
    evs = [e for s in r.segments for e in s.events if e.kind == "spec-decode"]
    assert [(e.data["accepted"], e.data["drafted"], e.data["k"], e.data["mean_len"]) for e in evs] == [
        (25, 3652, 4, 1.03), (15, 1724, 4, 1.03)]
    assert r.skipped.parsed_lines == 4


def test_a_drafter_that_accepts_almost_nothing_is_the_change_to_make(tmp_path):
    inst = _instance(tmp_path, GEMMA4_MTP)
    assert inst.verdict == "healthy"  # the scheduler and the pool are fine
    note = next(n for n in inst.notes if n.startswith("speculative decoding"))
    assert "accepted 40 of 5,376 drafted tokens (0.7%, 4 drafted per step" in note and "gains nothing" in note
    assert inst.action.startswith("turn speculative decoding off") and "make that one change" in inst.next_step


def test_a_working_drafter_is_said_not_blamed(tmp_path):
    # the same lines at the acceptance a public Qwen3.6-35B-A3B MTP deployment showed (~57 %, 3 per step)
    text = (GEMMA4_MTP.replace("Accepted: 25 tokens, Drafted: 3652", "Accepted: 2100 tokens, Drafted: 3652")
            .replace("Accepted: 15 tokens, Drafted: 1724", "Accepted: 980 tokens, Drafted: 1724"))
    inst = _instance(tmp_path, text)
    note = next(n for n in inst.notes if n.startswith("speculative decoding"))
    assert "(57.3%" in note and "gains nothing" not in note
    assert inst.action in (None, "none") and inst.next_step.startswith("nothing to change")
