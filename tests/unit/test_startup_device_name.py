"""The GPU a start-up log names: the fused-MoE config path vLLM looks up (startup.R_DEVICE_NAME)."""

from __future__ import annotations


def test_the_gpu_is_read_from_the_fused_moe_config_path(tmp_path):
    # vLLM names the GPU only in the fused-MoE config file it looks up, found or not (device_name=<torch's name, spaces
    # as underscores>); a public 4xL4 DeepSeek-V2-Lite start-up is then predicted with that GPU
    from kvdoctor.evidence.logs import read_startup_facts

    p = tmp_path / "moe.log"
    p.write_text(
        "(Worker_TP0 pid=11) INFO 10-23 15:14:29 [fused_moe.py:720] Using configuration from /venv/lib/python3.12/"
        "site-packages/vllm/model_executor/layers/fused_moe/configs/E=512,N=256,device_name=NVIDIA_H200.json for MoE "
        "layer.\n"
        "(EngineCore_DP0 pid=10) INFO 10-23 15:14:30 [kv_cache_utils.py:1028] GPU KV cache size: 973,760 tokens\n")
    (f,) = read_startup_facts(str(p))
    assert f.gpu_name == "NVIDIA H200" and f.kv_cache_tokens == 973760
    q = tmp_path / "moe2.log"
    q.write_text("(Worker_TP3 pid=41702) WARNING 10-06 15:57:52 [fused_moe.py:798] Using default MoE config. Performance "
                 "might be sub-optimal! Config file not found at ['/x/configs/E=128,N=192,device_name=NVIDIA_GeForce_RTX_"
                 "3090.json']\n(EngineCore_DP0 pid=1) INFO 10-06 15:58:02 [kv_cache_utils.py:1087] GPU KV cache size: "
                 "100,752 tokens\n")
    (g,) = read_startup_facts(str(q))
    assert g.gpu_name == "NVIDIA GeForce RTX 3090"
    from kvdoctor.catalog.gpus import lookup_gpu

    assert lookup_gpu(g.gpu_name).name == "NVIDIA GeForce RTX 3090"
