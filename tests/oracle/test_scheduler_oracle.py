"""``kvdoctor simulate --steps-out`` against vLLM 0.33's real Scheduler, step for step.

Each seeded random mix (a trace file and a ``vllm serve`` line) goes through the CLI path — trace
reading, configuration resolving, the run loop with its bulk decode jump — and the resulting step
trace is replayed on vLLM's ``Scheduler`` / ``AsyncScheduler`` with mocked runner output
(tests/oracle/vllm_side.py). Every step must agree: tokens scheduled per request, preempted and
finished ids, KV blocks used, running and waiting.

The mixes cover chunked prefill on/off, prefix caching on/off (with shared-prefix groups),
FCFS and priority policies, ``long_prefill_token_threshold``, pools from barely one
max-length request to roomy, bursts and spread arrivals, prompts vLLM rejects, and async
scheduling.
"""

from __future__ import annotations

import csv
import json
import random

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app
from tests.oracle.conftest import TINY_MODEL

pytestmark = pytest.mark.oracle

N_SYNC = 200
N_ASYNC = 100


def make_mix(seed: int, is_async: bool) -> dict:
    rng = random.Random(seed)
    bs = rng.choice([16, 16, 32])
    mml = rng.choice([128, 256, 512])
    chunked = rng.random() < 0.75
    mnbt = rng.choice([32, 64, 128, 256, 1024]) if chunked else rng.choice([mml, 2 * mml])
    mns = rng.choice([2, 4, 8, 16])
    mnbt = max(mnbt, mns)
    min_blocks = -(-mml // bs) + 1  # one max-length request plus the null block
    pool = rng.choice(["tight", "tight", "medium", "roomy"])
    num_blocks = {"tight": min_blocks + rng.randint(0, 3), "medium": min_blocks * 2 + rng.randint(0, 8),
                  "roomy": min_blocks * 6}[pool]
    cfg = dict(block_size=bs, max_model_len=mml, max_num_seqs=mns, max_num_batched_tokens=mnbt,
               enable_prefix_caching=rng.random() < 0.6, enable_chunked_prefill=chunked,
               long_prefill_token_threshold=rng.choice([0, 0, 0, 16, 40]) if chunked else 0,
               scheduling_policy="priority" if rng.random() < 0.3 else "fcfs", num_blocks=num_blocks,
               async_scheduling=is_async)
    n = rng.randint(3, 28)
    burst = rng.random() < 0.4
    t = 0.0
    groups = rng.random() < 0.35
    plen = rng.choice([16, 40, 64]) if groups else 0
    reqs = []
    for i in range(n):
        t += rng.uniform(0, 1e-5) + 1e-7 if burst else rng.expovariate(1 / 0.004)
        prompt = rng.randint(1, mml - 1) if rng.random() < 0.25 else rng.randint(1, max(2, mml // 3))
        if rng.random() < 0.04:
            prompt = mml + rng.randint(0, 10)  # vLLM's frontend rejects it; kvdoctor counts it rejected
        g = rng.choice(["a", "b", None]) if groups else None
        if g is not None:
            prompt = max(prompt, plen + 1)
        reqs.append(dict(id=f"r{i}", arrival=round(t, 7), prompt=prompt, output=rng.randint(1, 90), group=g,
                         prefix_len=plen if g is not None else 0, priority=rng.randint(0, 3)))
    return dict(cfg=cfg, requests=reqs, ids=rng.random() < 0.7)


def serve_line(cfg: dict) -> str:
    c = cfg
    return " ".join([
        "vllm serve", str(TINY_MODEL), "--max-model-len", str(c["max_model_len"]), "--block-size", str(c["block_size"]),
        "--max-num-seqs", str(c["max_num_seqs"]), "--max-num-batched-tokens", str(c["max_num_batched_tokens"]),
        "--num-gpu-blocks-override", str(c["num_blocks"]),
        "--enable-prefix-caching" if c["enable_prefix_caching"] else "--no-enable-prefix-caching",
        "--enable-chunked-prefill" if c["enable_chunked_prefill"] else "--no-enable-chunked-prefill",
        "--long-prefill-token-threshold", str(c["long_prefill_token_threshold"]),
        "--scheduling-policy", c["scheduling_policy"],
        "--async-scheduling" if c["async_scheduling"] else "--no-async-scheduling",
    ])


def kvdoctor_trace(mix: dict, tmp_path, k: int) -> list[dict]:
    trace = tmp_path / f"mix{k}.csv"
    cols = (["request_id"] if mix["ids"] else []) + ["arrival_s", "prompt_tokens", "output_tokens", "prefix_group",
                                                     "prefix_len", "priority"]
    with trace.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in mix["requests"]:
            row = [r["arrival"], r["prompt"], r["output"], r["group"] or "", r["prefix_len"], r["priority"]]
            w.writerow(([r["id"]] if mix["ids"] else []) + row)
    if not mix["ids"]:  # ids are then the row index, as strings
        for i, r in enumerate(mix["requests"]):
            r["id"] = str(i)
    steps = tmp_path / f"mix{k}.steps.jsonl"
    res = CliRunner().invoke(app, ["simulate", "--serve", serve_line(mix["cfg"]), "--gpu", "H100", "--trace", str(trace),
                                   "--steps-out", str(steps), "--quiet"])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in steps.read_text().splitlines()]


def _norm(rec: dict) -> tuple:
    return (rec["step"], rec["sched"], sorted(rec["preempted"]), sorted(rec["finished"]), rec["kv_blocks_used"],
            rec["running"], rec["waiting"])


def first_difference(ours: list[dict], theirs) -> str | None:
    if isinstance(theirs, dict):
        return f"vLLM side failed: {theirs['error']}"
    for a, b in zip(ours, theirs):
        if _norm(a) != _norm(b):
            return f"step {a['step']}:\n  kvdoctor {_norm(a)}\n  vLLM     {_norm(b)}"
    if len(ours) != len(theirs):
        return f"kvdoctor ran {len(ours)} steps, vLLM {len(theirs)}"
    return None


# Known divergences: none on these seeds. One class is understood and can still occur (it did on 2
# of 200 synchronous mixes before the front-end model changed their arrival times): prefix-cache
# hits of a shared-prefix group after a preemption, where vLLM caches a prefix block that a second
# request recomputed even when the group has a cached copy (blocks with equal hashes coexist), so a
# resumed request can hit one or two blocks more than kvdoctor's run-based pool model gives it.
KNOWN_SYNC: set[int] = set()
KNOWN_ASYNC: set[int] = set()


def _differential(oracle, tmp_path, seeds, is_async):
    mixes = [make_mix(s, is_async) for s in seeds]
    ours = [kvdoctor_trace(m, tmp_path, k) for k, m in enumerate(mixes)]
    # the oracle queues what kvdoctor says reached the engine before each step (front-end timing is
    # not under test) and needs to know where kvdoctor's engine idled between steps
    cases = [dict(cfg=m["cfg"], requests=m["requests"], arrived=[r["arrived"] for r in tr], t=[r["t"] for r in tr],
                  t_end=[r["t_end"] for r in tr], replanned=[r.get("replanned") for r in tr])
             for m, tr in zip(mixes, ours)]
    theirs = oracle.call("sched", {"model": str(TINY_MODEL), "cases": cases})["traces"]
    bad = {}
    for seed, m, a, b in zip(seeds, mixes, ours, theirs):
        d = first_difference(a, b)
        if d:
            bad[seed] = f"seed {seed} cfg {m['cfg']}: {d}"
    total_steps = sum(len(t) for t in ours)
    preempt = sum(len(r["preempted"]) for t in ours for r in t)
    assert total_steps > 20 * len(seeds) and preempt > 0, "the mixes do not exercise the scheduler"
    return bad


def test_steps_match_vllm_scheduler(oracle, tmp_path):
    bad = _differential(oracle, tmp_path, list(range(N_SYNC)), is_async=False)
    new = set(bad) - KNOWN_SYNC
    assert not new, f"{len(new)} of {N_SYNC} mixes newly differ from vLLM 0.33:\n" + "\n".join(bad[s] for s in sorted(new)[:5])
    assert set(bad) == KNOWN_SYNC, f"known divergences now match vLLM: {sorted(KNOWN_SYNC - set(bad))} (shrink KNOWN_SYNC)"


def test_steps_match_vllm_async_scheduler(oracle, tmp_path):
    bad = _differential(oracle, tmp_path, list(range(1000, 1000 + N_ASYNC)), is_async=True)
    new = set(bad) - KNOWN_ASYNC
    assert not new, f"{len(new)} of {N_ASYNC} mixes newly differ from vLLM 0.33 (async):\n{sorted(bad)}\n" + \
        "\n".join(bad[s] for s in sorted(new)[:5])
    assert set(bad) == KNOWN_ASYNC, f"known divergences now match vLLM: {sorted(KNOWN_ASYNC - set(bad))} (shrink KNOWN_ASYNC)"
