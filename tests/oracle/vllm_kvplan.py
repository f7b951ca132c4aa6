"""vLLM 0.33's KV-cache planning on one generated case (runs inside the oracle env; see vllm_side.py).

A case: per-layer kinds (full / sliding / mla), total KV heads, head size, the TP and PP sizes, the
bytes each PP stage has for the KV cache, max_model_len, max_num_batched_tokens, async scheduling,
``num_gpu_blocks_override``. Heads per rank come from vLLM's own ``ModelConfig.get_num_kv_heads``;
groups, bytes per block, the null-block-aware one-request check and num_blocks from
``get_global_kv_cache_groups`` + ``get_kv_cache_configs``.
"""

from __future__ import annotations

import os

_BASE = {}
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_llama")


def base_config():
    from vllm.engine.arg_utils import EngineArgs

    if "vc" not in _BASE:
        _BASE["vc"] = EngineArgs(model=TINY, skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True,
                                 max_model_len=1024, max_num_batched_tokens=2048, block_size=16).create_engine_config()
    return _BASE["vc"]


def _config(case: dict):
    vc = base_config()  # reused: every field the planning reads is set below, case by case
    vc.model_config.max_model_len = case["max_model_len"]
    vc.model_config.original_max_model_len = case["max_model_len"]
    vc.scheduler_config.max_model_len = case["max_model_len"]
    vc.scheduler_config.max_num_batched_tokens = case["max_num_batched_tokens"]
    vc.scheduler_config.async_scheduling = case["async_scheduling"]
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False
    vc.cache_config.block_size = case["block_size"]
    vc.cache_config.num_gpu_blocks_override = case["override"]
    vc.parallel_config.tensor_parallel_size = case["tp"]
    vc.parallel_config.pipeline_parallel_size = case["pp"]
    vc.model_config.hf_text_config.num_key_value_heads = case["num_kv_heads"]
    vc.model_config.hf_text_config.num_attention_heads = case["num_attention_heads"]
    return vc


def plan(case: dict) -> dict:
    import torch

    from vllm.distributed.utils import get_pp_indices
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec

    vc = _config(case)
    dtype = {2: torch.bfloat16, 1: torch.uint8, 4: torch.float32}[case["dtype_bytes"]]
    # ModelConfig.get_num_kv_heads (config/model.py): MLA decodes as MQA (1); otherwise
    # max(1, total // tp): replicated when there are fewer KV heads than TP ranks
    heads = 1 if "mla" in case["kinds"] else max(1, case["num_kv_heads"] // case["tp"])
    bs = case["block_size"]
    L = len(case["kinds"])
    specs = []
    for rank in range(case["pp"]):
        lo, hi = get_pp_indices(L, rank, case["pp"])
        d = {}
        for i in range(lo, hi):
            k = case["kinds"][i]
            name = f"model.layers.{i}.self_attn.attn"
            if k == "mla":
                d[name] = MLAAttentionSpec(block_size=bs, num_kv_heads=1, head_size=case["head_size"], dtype=dtype)
            elif k == "sliding":
                d[name] = SlidingWindowSpec(block_size=bs, num_kv_heads=heads, head_size=case["head_size"],
                                            dtype=dtype, sliding_window=case["sliding_window"])
            else:
                d[name] = FullAttentionSpec(block_size=bs, num_kv_heads=heads, head_size=case["head_size"],
                                            dtype=dtype)
        specs.append(d)
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

    # mirror EngineCore._initialize_kv_caches before planning
    register_all_kvcache_specs(vc)
    resolve_kv_cache_layout(vc, [["LBHNC"]] * len(specs), [s for d in specs for s in d.values()])
    try:
        groups = get_global_kv_cache_groups(vc, specs)
        if hasattr(vc, "adjust_dcp_kv_cache_interleave_size"):
            vc.adjust_dcp_kv_cache_interleave_size(groups)
        kcs = get_kv_cache_configs(vc, specs, list(case["avail"]), groups)
    except ValueError as exc:
        return {"ok": False, "error": str(exc), "v2_runner": bool(vc.use_v2_model_runner)}

    def idx(n):
        return int(n.split(".")[2])

    return {
        "ok": True,
        "heads_per_rank": heads,
        "num_blocks": [kc.num_blocks for kc in kcs],
        "groups": [sorted(idx(n) for n in g.layer_names) for g in groups],
        "group_block_sizes": [g.kv_cache_spec.block_size for g in groups],
        "max_in_flight_tokens": vc.max_in_flight_tokens,
        # sliding-window pages count max_in_flight_tokens = batches in flight x max_num_batched_tokens,
        # and the number of batches depends on the model runner (V2 needs Triton: not on this CPU box)
        "v2_runner": bool(vc.use_v2_model_runner),
    }
