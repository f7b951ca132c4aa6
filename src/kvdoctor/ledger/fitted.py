"""Fitted constants for the memory terms vLLM only measures (written by scripts/fit_memory.py).

PLACEHOLDER values until the fit script is run; see docs/ledger.md for the residuals.
"""

ACT_FWD_COEF = 5.0
SAMPLER_K_FULL = 9.7
SAMPLER_K_LIGHT = 3.8
NON_TORCH_GIB = {
    "v0": {"tp1": 0.16, "tp_multi": 0.55, "pp_only": 0.07},
    "v1-early": {"tp1": 0.135, "tp_multi": 0.545, "pp_only": 0.07},
    "v1-late": {"tp1": 0.245, "tp_multi": 2.09, "pp_only": 0.07},
}
CUDAGRAPH_MIB_PER_SIZE_LAYER = 0.4
