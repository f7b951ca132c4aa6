"""Fitted constants for the memory terms vLLM only measures.

Written by scripts/fit_memory.py on 2026-12-01 from ../shared/data/real/ (vllm_measured_memory_h100.tsv,
kv_capacity_cases.jsonl). Do not edit by hand: rerun the script. Residuals: docs/ledger.md.
"""

# forward peak = ACT_FWD_COEF × max_num_batched_tokens × ffn_width/TP × dtype bytes
ACT_FWD_COEF = 4.94
# the same for the v0 engine's profile run (one whole max_model_len prompt without chunked prefill)
ACT_FWD_COEF_V0 = 3.87
# dummy-sampler peak = K × min(max_num_seqs, max_num_batched_tokens) × vocab × 4 B (+ kept hidden rows)
SAMPLER_K_FULL = 9.581
SAMPLER_K_LIGHT = 3.716
# non-torch growth after the baseline snapshot, GiB, by era and parallel layout
NON_TORCH_GIB = {
    "v0-early": {"tp1": 0.35, "tp_multi": 0.545, "pp_only": 0.07, "tp_pcie": 0.3, "multi_node": 0.545},
    "v0": {"tp1": 0.04, "tp_pcie": 0.3, "tp_multi": 0.545, "pp_only": 0.07, "multi_node": 0.545},
    "v1-0.8": {"tp1": 0.35, "tp_multi": 0.545, "pp_only": 0.07, "tp_pcie": 0.3, "multi_node": 0.545},
    "v1-early": {"tp1": 0.13, "tp_multi": 0.545, "pp_only": 0.07, "tp_pcie": 0.3, "multi_node": 0.545},
    "v1-late": {"tp1": 0.25, "tp_multi": 2.1, "pp_only": 0.07, "tp_pcie": 0.3, "multi_node": 2.1},
}
# CUDA-graph pool estimate = C × capture sizes × layers on the rank × hidden size (bytes)
CUDAGRAPH_BYTES_PER_SIZE_LAYER_HIDDEN = 100.50827
