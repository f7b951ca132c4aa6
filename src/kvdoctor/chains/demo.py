"""The chapter's case study, end to end, on embedded data only (the README's main command).

A service replaced Llama-3.1-8B-Instruct by Qwen2.5-14B on one 48 GB-class GPU (L40S) keeping the
engine configuration (max-model-len 32K); under the same load test throughput nearly halved. kvdoctor
re-runs the case: both ledgers, the swap review, chain one (level 1 → 8K from the real length
distribution, then level 2 fp8 KV, checking SM89 support the way vLLM's backend selector does), the
simulated load test for each configuration, and the chapter's claims side by side with kvdoctor's
own numbers — saying where vLLM's paged KV changes the story.

Every number is computed here from the embedded catalog, the ledger and the simulator; nothing is
copied from the chapter except the claims being checked.
"""

from __future__ import annotations

from typing import Any

from kvdoctor.provenance import Figure

SCHEMA_VERSION = "kvdoctor.demo/1"

OLD_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NEW_MODEL = "Qwen/Qwen2.5-14B"
GPU = "L40S"
MAX_MODEL_LEN = 32768
# The embedded load test: open-loop Poisson arrivals, chat-like lognormal lengths (median prompt 1,500,
# median output 350 tokens, sigma 0.7 → p99 request ≈ 6.4K, i.e. the "real business maximum" is 8K),
# fixed seed so every run gives the same numbers. Its rate sits where the 8B model is comfortable.
WORKLOAD = {"rate": 1.5, "requests": 300, "lengths": "lognormal:1500:350:0.7", "seed": 7}


def _v(f: Figure | float | int) -> Any:  # untyped-ok: a Figure's value is whatever it measures
    return f.value if isinstance(f, Figure) else f


def run_demo(*, simulate: bool = True) -> dict[str, Any]:
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.chains.lengths import from_workload
    from kvdoctor.chains.plan import Target, make_plan
    from kvdoctor.chains.swap import review
    from kvdoctor.engine.config import EngineConfig

    old_shape, new_shape, gpu = lookup_model(OLD_MODEL), lookup_model(NEW_MODEL), lookup_gpu(GPU)
    cfg = EngineConfig(max_model_len=MAX_MODEL_LEN, origin="demo")
    workload = None
    lengths = None
    notes: list[str] = []
    try:
        from kvdoctor.sim.whatif import as_workload

        workload = as_workload(dict(WORKLOAD))
        lengths = from_workload(workload)
    except ImportError:
        simulate = False
        notes.append("the simulator is not in this build: latency/throughput claims are not checked")

    sw = review(old_shape, new_shape, gpu, cfg, lengths=lengths)
    old_conc = float(_v(sw.old.ledger.kv["max_concurrency"]))
    # The chapter's goal for level 1 is "the pool back to its pre-swap usable size": as a target, the
    # old model's max concurrency at its limit. The chapter then applied level 2 anyway (for the
    # preemptions), so the demo walks both levels instead of stopping at the first that is enough.
    target = Target(concurrency=max(1, int(old_conc)))
    p = make_plan(new_shape, gpu, cfg.with_changes(model=NEW_MODEL), lengths=lengths, target=target,
                  max_level=2, stop_when_enough=False)
    sims: dict[str, Any] = {}
    if simulate and workload is not None:
        from kvdoctor.sim.whatif import predict

        runs = [("before swap (8B, 32K)", old_shape, sw.old), ("after swap (14B, 32K)", new_shape, sw.new)]
        runs += [(f"level {lv.level} ({lv.flags})", new_shape, lv.state) for lv in p.levels if lv.applicable]
        rec = p.concurrency.get("recommended")
        if rec:
            # the advice is confirmed on the same load test, not asserted
            runs.append((f"result (+ --max-num-seqs {rec})", new_shape, p.final))
        for label, shape, st in runs:
            s = predict(shape, gpu, st.resolved, st.ledger.num_blocks, workload, seed=0)
            sims[label] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in s.as_dict().items()
                           if k in ("output_tokens_per_s", "preemptions", "tbt_p99_s", "ttft_p99_s", "rejected",
                                    "peak_kv_usage_pct", "completed")}
        for lv in p.levels:
            key = f"level {lv.level} ({lv.flags})"
            if key in sims:
                lv.predicted = sims[key]
        if rec:
            p.concurrency["predicted"] = sims.get(f"result (+ --max-num-seqs {rec})")
    claims = _claims(sw, p, gpu, sims, old_shape, new_shape)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "demo",
        "case": {"from": OLD_MODEL, "to": NEW_MODEL, "gpu": str(gpu.name), "max_model_len": MAX_MODEL_LEN,
                 "workload": dict(WORKLOAD), "lengths": lengths.describe() if lengths else None},
        "swap": sw.to_json(),
        "plan": p.to_json(),
        "levels": p.to_json()["levels"],
        "simulated": sims,
        "claims": claims,
        "notes": notes + ["All figures are predictions (source 'predicted') from the embedded catalog, the ledger "
                          "and the simulator; run kvdoctor swap / plan with --from-log on your own start-up log to "
                          "use measured figures."],
    }


def _claims(sw, p, gpu, sims, old_shape, new_shape) -> list[dict[str, Any]]:
    fo, fn = sw.old.figures(), sw.new.figures()
    lv = {x.level: x for x in p.levels}
    out: list[dict[str, Any]] = []

    def add(claim, zh, kv, verdict, note=""):
        out.append({"claim": claim, "book": zh, "kvdoctor": kv, "verdict": verdict, "note": note})

    wo, wn = int(_v(fo["weights_bytes"])), int(_v(fn["weights_bytes"]))
    add("the weights doubled", "新模型权重翻倍",
        f"weights {wo / 2**30:.2f} → {wn / 2**30:.2f} GiB (×{wn / wo:.2f})",
        "agrees" if 1.6 <= wn / wo <= 2.4 else "differs")
    po, pn = int(_v(fo["pool_tokens"])), int(_v(fn["pool_tokens"]))
    ko, kn = int(_v(fo["kv_cache_bytes"])), int(_v(fn["kv_cache_bytes"]))
    bo, bn = int(_v(fo["kv_bytes_per_token"])), int(_v(fn["kv_bytes_per_token"]))
    add("the pool shrank by almost half", "块池缩水近半",
        f"KV memory {ko / 2**30:.2f} → {kn / 2**30:.2f} GiB ({kn / ko - 1:+.0%}); pool {po:,} → {pn:,} tokens "
        f"({pn / po - 1:+.0%})",
        ("agrees" if 0.35 <= pn / po <= 0.65 else
         "agrees in GiB, worse in tokens" if 0.35 <= kn / ko <= 0.65 else "differs"),
        f"in tokens the pool shrinks more than the memory: one token costs {bo:,} → {bn:,} bytes "
        f"(more layers × KV heads × head size)")
    l1, l2 = lv.get(1), lv.get(2)
    if l1 is not None and l1.applicable:
        new_len = l1.flag_change["max_model_len"]
        add("32K → 8K cuts one request's peak KV to a quarter", "32K 降到 8K，单请求峰值缓存降到四分之一",
            f"worst-case KV of one request {MAX_MODEL_LEN * bn / 2**30:.2f} → {new_len * bn / 2**30:.2f} GiB "
            f"(×{new_len / MAX_MODEL_LEN:.2f}); limit {new_len:,} from the real p99 "
            f"{p.lengths.p99_total if p.lengths else '?'}",
            "agrees" if abs(new_len / MAX_MODEL_LEN - 0.25) < 0.01 else "differs")
        p1 = int(_v(l1.figures["pool_tokens"]))
        c1 = float(_v(l1.figures["max_concurrency"]))
        co = float(_v(fo["max_concurrency"]))
        add("level 1 brings the pool back to its pre-swap usable size", "块池恢复到换模型前的可用规模",
            f"pool {pn:,} → {p1:,} tokens (unchanged); vLLM's max concurrency at the limit {float(_v(fn['max_concurrency'])):.2f} "
            f"→ {c1:.2f} (pre-swap {co:.2f})",
            "refined by vLLM",
            "paged KV: vLLM never reserves max-model-len per request, so lowering it does not resize the pool; what "
            "returns is the number of worst-case requests the pool guarantees, and the worst-case reconciliation")
    thr = {k: v.get("output_tokens_per_s") for k, v in sims.items()}
    keys = list(sims)
    if len(keys) >= 3:
        t_old, t_new, t_l1 = thr[keys[0]], thr[keys[1]], thr[keys[2]]
        add("throughput nearly halved after the swap", "同等压测口径下吞吐接近腰斩",
            f"simulated output {t_old:.0f} → {t_new:.0f} tokens/s ({t_new / t_old:.0%})",
            # "nearly halved" (接近腰斩) is about -50 %: a third lower is not that, and saying "agrees"
            # there would claim a match the numbers do not show
            ("agrees" if 0.4 <= t_new / t_old <= 0.6 else "milder here" if t_new / t_old > 0.6 else "worse here"),
            f"embedded load test: {WORKLOAD['requests']} requests at {WORKLOAD['rate']}/s")
        add("after level 1, throughput back to ~90 %", "复测：吞吐恢复九成",
            f"simulated {t_l1:.0f} tokens/s after level 1 ({t_l1 / t_old:.0%} of before the swap); preemptions "
            f"{sims[keys[1]]['preemptions']} → {sims[keys[2]]['preemptions']}",
            "agrees" if t_l1 / t_old >= 0.85 else "differs (paged KV)",
            "with paged KV the load's real lengths, not the limit, set the KV demand; level 1 changes admission only "
            "for requests longer than the new limit")
    bw = float(gpu.hbm_bandwidth_gbps or 0) * 1e9
    if bw:
        so, sn = wo / bw * 1000, wn / bw * 1000
        extra = ""
        if len(keys) >= 2 and sims[keys[0]].get("tbt_p99_s") and sims[keys[1]].get("tbt_p99_s"):
            extra = (f"; simulated TBT p99 {sims[keys[0]]['tbt_p99_s'] * 1000:.0f} → "
                     f"{sims[keys[1]]['tbt_p99_s'] * 1000:.0f} ms")
        add("the rest of the gap is weight traffic per decode step (physics)", "剩余差距来自权重搬运变长（物理规律）",
            f"a decode step reads all weights: floor {so:.1f} → {sn:.1f} ms per step at "
            f"{bw / 1e9:.0f} GB/s (×{sn / so:.2f}){extra}", "agrees")
    if l2 is not None and l2.applicable:
        p1 = int(_v((l1.figures if l1 and l1.applicable else fn)["pool_tokens"]))
        p2 = int(_v(l2.figures["pool_tokens"]))
        add("level 2 (fp8 KV) doubles the pool again", "缓存降到 FP8，块池再宽一倍",
            f"pool {p1:,} → {p2:,} tokens (×{p2 / p1:.2f})", "agrees" if 1.8 <= p2 / p1 <= 2.2 else "differs")
        backend = l2.state.resolved.attention_backend
        add("fp8 KV on older GPUs may be unavailable / no speed-up", "老硬件无加速或直接不可用",
            f"{gpu.name} is SM{''.join(str(x) for x in gpu.compute_capability)}: vLLM's "
            f"FlashAttention-2 rejects fp8 KV and the selector falls back to {backend}; the gain is capacity only",
            "refined by vLLM")
        k2 = next((k for k in keys if k.startswith("level 2")), None)
        if k2 and len(keys) >= 2:
            s_old, s_new, s2 = sims[keys[0]], sims[keys[1]], sims[k2]
            add("preemptions to zero, P99 TBT stable", "抢占归零，P99 TBT 回稳",
                f"simulated preemptions {s_new['preemptions']} → {s2['preemptions']} (per {WORKLOAD['requests']} "
                f"requests), TBT p99 {s2['tbt_p99_s'] * 1000:.0f} ms, throughput {s2['output_tokens_per_s']:.0f} "
                f"tokens/s ({s2['output_tokens_per_s'] / s_old['output_tokens_per_s']:.0%} of before the swap)",
                "agrees" if s2["preemptions"] <= max(1, s_new["preemptions"] // 20) else "differs")
    # The lesson is checked, not asserted: run the CI gate on this very swap.
    from kvdoctor.chains.check import run_check
    from kvdoctor.deployment import configure

    chk = run_check(configure(new_shape, gpu, sw.new.config, version=p.vllm_version), previous_shape=old_shape)
    why = sorted({f.rule_id for f in chk.findings})
    add("lesson: every model change re-runs the ledger and the load-test baseline", "换模型必重跑显存对账与压测基线",
        (f"kvdoctor check --previous-model {old_shape.name} exits {0 if chk.ok else 1} on this swap"
         + (f" ({', '.join(why)})" if why else "")),
        "agrees" if not chk.ok else "differs")
    return out
