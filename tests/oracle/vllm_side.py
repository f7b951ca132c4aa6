"""vLLM 0.33's own code as the oracle: run INSIDE the oracle venv (scripts/oracle_env.sh), never by
kvdoctor. Reads one JSON batch on stdin, writes one JSON answer on stdout.

    python vllm_side.py sched   < {"model": DIR, "cases": [...]}   -> {"traces": [[step, ...], ...]}
    python vllm_side.py kvplan  < {"model": DIR, "cases": [...]}   -> {"plans": [...]}

``sched``: vLLM's real ``Scheduler`` (or ``AsyncScheduler``) and ``KVCacheManager``, model-free:
mocked runner output (one sampled token per request whose prefill is complete), set up the way
``EngineCore._initialize_kv_caches`` does (learned from ../shared/real-vllm/drive_scheduler.py).
Requests are added before the step kvdoctor reports them reaching the engine at (its ``arrived``
list: the time model and the front end are not under test, the scheduler is).

``kvplan``: ``get_kv_cache_configs`` / ``get_global_kv_cache_groups`` on generated layer specs.

Batching many cases per call matters: importing vLLM takes several seconds.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("PYTHONHASHSEED", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

_CONFIGS: dict = {}


def _engine_config(model: str, c: dict):
    from vllm.engine.arg_utils import EngineArgs

    key = (model, json.dumps(c, sort_keys=True))
    if key not in _CONFIGS:
        ea = EngineArgs(
            model=model, skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True,
            max_model_len=c["max_model_len"], max_num_seqs=c["max_num_seqs"],
            max_num_batched_tokens=c["max_num_batched_tokens"], block_size=c["block_size"],
            enable_prefix_caching=c["enable_prefix_caching"], enable_chunked_prefill=c["enable_chunked_prefill"],
            long_prefill_token_threshold=c["long_prefill_token_threshold"],
            scheduling_policy=c["scheduling_policy"], num_gpu_blocks_override=c["num_blocks"],
            async_scheduling=bool(c.get("async_scheduling", False)),
        )
        _CONFIGS[key] = ea
    return _CONFIGS[key].create_engine_config()


def _scheduler(model: str, c: dict):
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (generate_scheduler_kv_cache_config, get_request_block_hasher,
                                             init_none_hash, resolve_kv_cache_block_sizes,
                                             update_kv_cache_capacity)
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.structured_output import StructuredOutputManager

    vc = _engine_config(model, c)
    mc = vc.model_config
    hf = mc.hf_config
    head = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    spec = FullAttentionSpec(block_size=c["block_size"], num_kv_heads=hf.num_key_value_heads, head_size=head,
                             dtype=mc.dtype)
    specs = [{f"model.layers.{i}.self_attn.attn": spec for i in range(hf.num_hidden_layers)}]
    avail = spec.page_size_bytes * hf.num_hidden_layers * (c["num_blocks"] + 10)
    register_all_kvcache_specs(vc)
    resolve_kv_cache_layout(vc, [["LBHNC"]], list(specs[0].values()))
    groups = get_global_kv_cache_groups(vc, specs)
    if hasattr(vc, "adjust_dcp_kv_cache_interleave_size"):
        vc.adjust_dcp_kv_cache_interleave_size(groups)
    kc = generate_scheduler_kv_cache_config(get_kv_cache_configs(vc, specs, [avail], groups))
    vc.cache_config.num_gpu_blocks = kc.num_blocks
    vc.cache_config.block_size = min(g.kv_cache_spec.block_size for g in kc.kv_cache_groups)
    update_kv_cache_capacity(vc, kc)
    sched_bs, hash_bs = resolve_kv_cache_block_sizes(kc, vc)
    kc.hash_block_size = hash_bs
    hash_fn = get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    cls = AsyncScheduler if c.get("async_scheduling") else Scheduler
    sched = cls(vllm_config=vc, kv_cache_config=kc, structured_output_manager=StructuredOutputManager(vc),
                block_size=sched_bs, hash_block_size=hash_bs, log_stats=True)
    return sched, get_request_block_hasher(hash_bs or sched_bs, hash_fn), kc.num_blocks


def _prompt(i: int, r: dict) -> list[int]:
    """Token ids: a prefix group's first prefix_len tokens are the group's; the rest are unique to
    the request (so only the shared prefix, or the request's own blocks after a preemption, can hit)."""
    n, plen = r["prompt"], r.get("prefix_len") or 0
    g = r.get("group")
    toks = []
    if g is not None:
        gh = sum(ord(ch) * 131 ** k for k, ch in enumerate(str(g))) % 100000
        toks = [200000 + (gh * 31 + j) % 100000 for j in range(min(plen, n))]
    toks += [100000 * (i + 1) + j for j in range(n - len(toks))]
    return toks


def _last_in_flight(q, max_model_len: int) -> bool:
    """AsyncScheduler skips q: the step in flight already samples its last token, by max_tokens or by
    max_model_len (the two skips of Scheduler.schedule's running loop)."""
    return (q.num_computed_tokens + 2 - q.num_output_placeholders >= q.num_prompt_tokens + q.max_tokens
            or q.num_computed_tokens >= max_model_len - 1)


def _run_sched(model: str, case: dict) -> list[dict]:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    c = case["cfg"]
    sched, hasher, num_blocks = _scheduler(model, c)
    pool = sched.kv_cache_manager.block_pool
    mml = c["max_model_len"]
    # a trace's arrivals count from its first request (kvdoctor's trace reader does the same)
    t0 = min((r["arrival"] for r in case["requests"]), default=0.0)
    reqs = sorted(((i, {**r, "arrival": r["arrival"] - t0}) for i, r in enumerate(case["requests"])),
                  key=lambda x: (x[1]["arrival"], x[0]))
    arrived = case["arrived"]  # per kvdoctor step: the ids that reached the engine before it was planned
    by_id = {r["id"]: (i, r) for i, r in reqs}
    # kvdoctor's engine was idle before step s (it planned s later than step s-1 ended)
    gap = [s > 0 and case["t"][s] > case["t_end"][s - 1] + 1e-9 for s in range(len(arrived))]
    trace: list[dict] = []
    inflight: list = []  # async: (scheduler output, its step record) not yet processed
    is_async = bool(c.get("async_scheduling"))
    replanned = case.get("replanned") or [None] * len(arrived)  # kvdoctor's records' "replanned"
    replanned_done: set[int] = set()
    step = 0

    added = set()

    def add(ids):
        for rid in ids:
            if rid in added:
                continue
            added.add(rid)
            i, r = by_id[rid]
            if not 1 <= r["prompt"] < mml:
                continue  # the frontend rejects it (kvdoctor counts it rejected)
            sp = SamplingParams(max_tokens=r["output"], ignore_eos=True, temperature=0.0)
            sched.add_request(Request(request_id=r["id"], prompt_token_ids=_prompt(i, r), sampling_params=sp,
                                      pooling_params=None, block_hasher=hasher, arrival_time=r["arrival"],
                                      priority=r.get("priority", 0)))

    def samples(so):
        # decided right after the plan (with async scheduling the next plan moves
        # num_computed_tokens on before this step's output is processed): a request samples
        # unless this step was a non-final prefill chunk
        return [[] if sched.requests[rid].is_prefill_chunk else [7] for rid in so.num_scheduled_tokens]

    def process(so, sampled, rec):
        ids = list(so.num_scheduled_tokens.keys())
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: k for k, r in enumerate(ids)},
                                sampled_token_ids=sampled)
        outs = sched.update_from_output(so, mro)
        rec["finished"] = sorted(o.request_id for eco in outs.values() for o in eco.outputs
                                 if o.finish_reason is not None)
        rec["kv_blocks_used"] = num_blocks - 1 - pool.get_num_free_blocks()
        st = sched.make_stats()
        rec["running"] = st.num_running_reqs
        rec["waiting"] = st.num_waiting_reqs
        trace.append(rec)

    guard = 0
    while True:
        guard += 1
        if guard > 200000:
            raise RuntimeError("oracle made no progress")
        if is_async and inflight and step < len(gap) and replanned[step] is not None and step not in replanned_done:
            replanned_done.add(step)
            # kvdoctor planned an empty batch before this step (every running request's last token in flight,
            # nothing waiting that fits) and processed the step in flight: the same here, with the requests that
            # reached its engine before that empty plan; the rest of the step's arrivals came after it
            add(replanned[step])
            so = sched.schedule()
            assert so.total_num_scheduled_tokens == 0
            process(*inflight.pop(0))
            continue
        if (is_async and inflight and step < len(gap) and gap[step] and not sched.waiting
                and all(_last_in_flight(q, mml) for q in sched.running)):
            # every running request's last token is in flight and kvdoctor's engine then idled before
            # its next step: vLLM plans an empty batch and processes the step in flight; the requests
            # listed for the next step came after that
            so = sched.schedule()
            assert so.total_num_scheduled_tokens == 0
            process(*inflight.pop(0))
            continue
        add(arrived[step] if step < len(arrived) else by_id)
        if not sched.has_requests() and not inflight:
            if len(added) >= len(by_id) or step >= len(arrived):
                break
            raise RuntimeError(f"idle before kvdoctor's step {step}, though requests remain")
        so = sched.schedule() if sched.has_requests() else None
        if so is not None and so.total_num_scheduled_tokens > 0:
            rec = {"step": step, "sched": dict(so.num_scheduled_tokens),
                   "preempted": sorted(so.preempted_req_ids or [])}
            step += 1
            if not is_async:
                process(so, samples(so), rec)
                continue
            inflight.append((so, samples(so), rec))
            if len(inflight) < 2:
                continue
        elif so is not None and not is_async:
            if so.preempted_req_ids:
                raise RuntimeError("a step preempted but scheduled nothing")
            # nothing fits an empty pool: kvdoctor rejects the head; vLLM would wait forever
            break
        if inflight:
            process(*inflight.pop(0))
        elif so is not None:
            break
    return trace


def _run_kvplan(case: dict) -> dict:
    from vllm_kvplan import plan  # tests/oracle/vllm_kvplan.py, beside this file

    return plan(case)


def answer(cmd: str, batch: dict) -> dict:
    out: dict = {}
    if cmd == "sched":
        out["traces"] = []
        for case in batch["cases"]:
            try:
                out["traces"].append(_run_sched(batch["model"], case))
            except Exception as exc:  # one bad case must not hide the others
                out["traces"].append({"error": f"{type(exc).__name__}: {exc}"})
    elif cmd == "kvplan":
        out["plans"] = []
        for case in batch["cases"]:
            try:
                out["plans"].append(_run_kvplan(case))
            except Exception as exc:
                out["plans"].append({"error": f"{type(exc).__name__}: {exc}"})
    else:
        out["error"] = f"unknown command {cmd}"
    return out


def _warm() -> None:
    """Import what the first batch needs and build the shared base engine config before any request comes
    (the fixture starts this process early, so this overlaps other tests). Answers are unchanged: the same
    modules would be imported, and the same config built, by the first request."""
    try:
        import vllm.v1.core.sched.async_scheduler  # noqa: F401
        import vllm.v1.core.sched.scheduler  # noqa: F401
        from vllm_kvplan import base_config

        base_config()
    except Exception:  # noqa: BLE001 - a failure here is met again, and reported, by the first request
        pass


def main() -> None:
    """``serve``: one JSON request per stdin line ({"cmd": ..., ...batch}), one JSON answer per
    stdout line, until stdin closes (vLLM is imported once per test session). Otherwise
    ``vllm_side.py CMD < batch.json``."""
    import logging

    logging.disable(logging.WARNING)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1] != "serve":
        json.dump(answer(sys.argv[1], json.load(sys.stdin)), sys.stdout)
        return
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # whatever vLLM prints must not corrupt the answers
    if "--warm" in sys.argv:
        _warm()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        real_stdout.write(json.dumps(answer(req.pop("cmd"), req)) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
