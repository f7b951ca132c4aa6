"""What sweeps 80-87 (public material read blind, 2026-12-06; docs/evidence.md "Sweeps 80-87") showed kvdoctor getting
wrong, each pinned on a minimal excerpt of the public text that showed it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.e2e.test_ledger_cli import invoke


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def _diagnosed_log(log: Path) -> dict:
    """``kvdoctor diagnose LOG --json``'s first instance."""
    code, err, out = invoke("diagnose", str(log), "--json")
    return json.loads(out)["instances"][0]


def _diagnosed(tmp_path: Path, text: str) -> dict:
    """The first instance ``kvdoctor diagnose`` gives on an excerpt, as written."""
    log = tmp_path / "excerpt.log"
    log.write_text(text)
    return _diagnosed_log(log)


def _diagnosed_notes(tmp_path: Path, text: str) -> str:
    """The notes of that first instance, as one text."""
    return " ".join(_diagnosed(tmp_path, text)["notes"])


# ---- a quantized copy of a catalog model, named by its publisher's convention -------------------------------------

@pytest.mark.parametrize("name, base, method", [
    ("Qwen/Qwen3-8B-FP8", "Qwen/Qwen3-8B", "fp8"),
    ("RedHatAI/Qwen3-8B-FP8-dynamic", "Qwen/Qwen3-8B", "fp8"),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct", "awq"),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-7B-Instruct", "gptq"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "meta-llama/Llama-3.1-8B-Instruct", "gptq"),
    ("RedHatAI/Qwen3.6-35B-A3B-NVFP4", "Qwen/Qwen3.6-35B-A3B", "compressed-tensors"),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", "meta-llama/Llama-3.1-70B-Instruct", "fp8"),
])
def test_a_quantized_copy_reads_as_its_base_with_the_names_format(name, base, method):
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model(name)
    assert s.name == base and s.quant is not None and s.quant.method == method and s.quant.assumed


def test_a_name_without_a_known_base_or_suffix_stays_unknown():
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.errors import UnknownModelError

    for name in ("someorg/NotAModel-7B-AWQ", "Qwen/Qwen3-8B-Turbo"):
        with pytest.raises(UnknownModelError):
            lookup_model(name)
    assert lookup_model("Qwen/Qwen3-30B-A3B-FP8").quant.assumed is False  # the catalog's own FP8 entry


def test_the_flag_names_the_format_a_name_only_guessed():
    # sweep 82 item 02: /models/cyankiwi/Qwen3.5-35B-A3B-AWQ-4bit loaded as compressed-tensors (WNA16 Marlin): the
    # name's AWQ guess yields to the method vLLM names, and its KV figures are predicted as printed
    code, err, out = invoke("ledger", "-m", "cyankiwi/Qwen3.5-35B-A3B-AWQ-4bit", "--gpu", "H100",
                            "--quantization", "compressed-tensors", "--json")
    assert code == 0, err
    w = json.loads(out)["figures"]["memory.weights"]
    assert "compressed-tensors" in w["how"]


def test_a_hybrid_copy_predicts_the_printed_pool(tmp_path):
    # sweep 82 item 02 (vLLM 0.17.1, fp8 KV, prefix caching): the pool vLLM printed, predicted from the base's shape
    log = _write(tmp_path, "q35.log", """
        (APIServer pid=1) INFO 03-20 10:18:01 [utils.py:287] non-default args: {'model_tag': '/models/cyankiwi/Qwen3.5-35B-A3B-AWQ-4bit', 'max_model_len': 32768, 'gpu_memory_utilization': 0.67, 'kv_cache_dtype': 'fp8', 'enforce_eager': True, 'max_num_seqs': 3, 'max_num_batched_tokens': 8192, 'enable_prefix_caching': True}
        (EngineCore pid=164) INFO 03-20 10:18:30 [interface.py:573] Setting attention block size to 2096 tokens to ensure that attention page size is >= mamba page size.
        (EngineCore pid=164) INFO 03-20 10:19:40 [gpu_model_runner.py:4487] Model loading took 22.05 GiB memory and 60.0 seconds
        (EngineCore pid=164) INFO 03-20 10:20:32 [gpu_worker.py:452] Available KV cache memory: 5.69 GiB
        (EngineCore pid=164) INFO 03-20 10:20:32 [kv_cache_utils.py:1316] GPU KV cache size: 148,816 tokens
        (EngineCore pid=164) INFO 03-20 10:20:32 [kv_cache_utils.py:1321] Maximum concurrency for 32,768 tokens per request: 12.91x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--vllm-version", "0.17.1", "--json")
    assert code == 0, err
    j = json.loads(out)
    f = j["figures"]
    assert f["kv_cache.tokens"]["predicted"] == 148816 and f["kv_cache.max_concurrency"]["predicted"] == pytest.approx(12.91, abs=0.005)
    assert any("quantized copy of the catalog's Qwen/Qwen3.5-35B-A3B" in n for n in j["notes"])


def test_qwen36_27b_reprints_its_public_log(tmp_path):
    # sweep 83 item 03 (nvidia/Qwen3.6-27B-NVFP4 on a GB10, vLLM 0.23.1 dev): block 1,568 tokens, 1,505,068 tokens
    log = _write(tmp_path, "q36.log", """
        (APIServer pid=1) INFO 07-02 21:28:00 [utils.py:299] non-default args: {'model_tag': 'nvidia/Qwen3.6-27B-NVFP4', 'max_model_len': 262144, 'gpu_memory_utilization': 0.7, 'kv_cache_dtype': 'fp8', 'max_num_seqs': 8, 'max_num_batched_tokens': 65536, 'enable_prefix_caching': True}
        (EngineCore pid=134) INFO 07-02 21:30:03 [interface.py:773] Setting attention block size to 1568 tokens to ensure that attention page size is >= mamba page size.
        (EngineCore pid=134) INFO 07-02 21:33:32 [gpu_worker.py:515] Available KV cache memory: 47.84 GiB
        (EngineCore pid=134) INFO 07-02 21:33:32 [kv_cache_utils.py:2146] GPU KV cache size: 1,505,068 tokens
        (EngineCore pid=134) INFO 07-02 21:33:32 [kv_cache_utils.py:2147] Maximum concurrency for 262,144 tokens per request: 5.74x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--vllm-version", "0.23.1", "--gpu", "121.63GiB", "--json")
    assert code == 0, err
    f = json.loads(out)["figures"]
    assert f["kv_cache.tokens"]["predicted"] == 1505068
    assert json.loads(out)["model"] == "Qwen/Qwen3.6-27B"  # its own config now (scripts/models_extra)


# ---- a GPU the log does not name, or one the catalog lacks: the log's own ledger, not a refusal -----------------

def test_an_unknown_device_gives_the_logs_own_ledger(tmp_path):
    # sweep 82 item 07's shape (a device named only by the MoE config file vLLM looked for, no device total printed),
    # on a device the catalog lacks (the GB10 of that log is in it now)
    log = _write(tmp_path, "gb10.log", """
        (APIServer pid=1) INFO 05-30 09:11:50 [utils.py:299] non-default args: {'model_tag': 'Qwen/Qwen3.5-35B-A3B-FP8', 'gpu_memory_utilization': 0.8}
        (EngineCore pid=97) WARNING 05-30 09:30:29 [fused_moe.py:1090] Using default MoE config. Performance might be sub-optimal! Config file not found at /usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs/E=256,N=512,device_name=NVIDIA_Jetson_AGX_Thor,dtype=fp8_w8a8,block_shape=[128,128].json
        (EngineCore pid=97) INFO 05-30 09:31:40 [gpu_model_runner.py:4561] Model loading took 34.22 GiB memory and 1175.06 seconds
        (EngineCore pid=97) INFO 05-30 09:33:01 [gpu_worker.py:436] Available KV cache memory: 55.72 GiB
        (EngineCore pid=97) INFO 05-30 09:33:01 [kv_cache_utils.py:1319] GPU KV cache size: 729,696 tokens
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["mode"] == "log-only" and "Thor" in j["why_no_model"]
    assert j["figures"]["kv_cache.tokens"]["value"] == 729696


def test_a_log_that_deducted_the_graph_estimate_is_read_so_whatever_its_release(tmp_path):
    # sweep 83 item 05 / heldout3: a 0.20.0 build printing "CUDA graph memory profiling is enabled": the CUDA graphs row
    # is the estimate the budget withheld, with what the capture then took
    log = _write(tmp_path, "wsl.log", """
        (APIServer pid=1) INFO 05-01 20:44:00 [utils.py:299] non-default args: {'model_tag': 'RedHatAI/Qwen3.6-35B-A3B-NVFP4', 'max_model_len': 65536, 'kv_cache_dtype': 'fp8_e4m3', 'max_num_seqs': 1}
        (EngineCore pid=187) INFO 05-01 20:44:10 [__init__.py:1] Initializing a V1 LLM engine (v0.20.0) with config: model='RedHatAI/Qwen3.6-35B-A3B-NVFP4'
        (EngineCore pid=187) INFO 05-01 20:45:40 [gpu_model_runner.py:4820] Model loading took 21.86 GiB memory and 30.0 seconds
        (EngineCore pid=187) INFO 05-01 20:47:46 [gpu_model_runner.py:6042] Estimated CUDA graph memory: 0.36 GiB total
        (EngineCore pid=187) INFO 05-01 20:47:46 [gpu_worker.py:440] Available KV cache memory: 2.95 GiB
        (EngineCore pid=187) INFO 05-01 20:47:46 [gpu_worker.py:455] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8886 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9114.
        (EngineCore pid=187) INFO 05-01 20:47:46 [kv_cache_utils.py:1711] GPU KV cache size: 75,456 tokens
        (EngineCore pid=187) INFO 05-01 20:47:49 [gpu_model_runner.py:6133] Graph capturing finished in 1 secs, took 0.73 GiB
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    j = json.loads(out)
    cg = j["figures"]["memory.cudagraph"]
    assert cg["value"] == pytest.approx(0.36 * 2**30, rel=0.01) and "took 0.73 GiB" in cg["how"]
    assert any("equivalent to 0.8886" in n for n in j["notes"])


# ---- deployment files of serving platforms -----------------------------------------------------------------------

DYNAMO = """
    apiVersion: nvidia.com/v1alpha1
    kind: DynamoGraphDeployment
    metadata:
      name: vllm-disagg
    spec:
      services:
        Frontend:
          componentType: frontend
          extraPodSpec:
            mainContainer:
              image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0
        VllmDecodeWorker:
          componentType: worker
          resources:
            limits:
              gpu: "2"
          extraPodSpec:
            mainContainer:
              image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0
              command: ["/bin/sh", "-c"]
              args:
                - "python3 -m dynamo.vllm --model Qwen/Qwen3-8B --gpu-memory-utilization 0.23 --max-model-len 32000 --tensor-parallel-size 2"
        VllmPrefillWorker:
          componentType: worker
          resources:
            limits:
              gpu: "2"
          extraPodSpec:
            mainContainer:
              image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0
              command: ["/bin/sh", "-c"]
              args:
                - "python3 -m dynamo.vllm --model Qwen/Qwen3-8B --gpu-memory-utilization 0.23 --max-model-len 32000 --tensor-parallel-size 2 --is-prefill-worker"
    """


def test_a_dynamo_graph_names_its_vllm_workers_not_its_frontend(tmp_path):
    # sweep 86 items 02-03 (ai-dynamo/dynamo components/backends/vllm/deploy): the workers run `python3 -m dynamo.vllm`
    p = _write(tmp_path, "dynamo.yaml", DYNAMO)
    code, err, _ = invoke("ledger", "--config", str(p), "--gpu", "H100")
    assert code == 2 and "VllmDecodeWorker" in err and "VllmPrefillWorker" in err and "Frontend" not in err
    code, err, out = invoke("ledger", "--config", f"{p}#VllmPrefillWorker", "--gpu", "H100", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["figures"]["engine.tensor_parallel_size"]["value"] == 2
    assert any("--is-prefill-worker" in n for n in j["notes"])


LLMD = """
    modelArtifacts:
      uri: "hf://Qwen/Qwen3-8B"
      name: "Qwen/Qwen3-8B"
    decode:
      parallelism:
        tensor: 2
      replicas: 4
      containers:
      - name: "vllm"
        image: ghcr.io/llm-d/llm-d-cuda:v0.3.1
        modelCommand: vllmServe
        args: ["--block-size", "128", "--max-model-len", "32000"]
        resources:
          limits:
            nvidia.com/gpu: "2"
    prefill:
      parallelism:
        tensor: 1
      replicas: 1
      containers:
      - name: "vllm"
        image: ghcr.io/llm-d/llm-d-cuda:v0.3.1
        modelCommand: vllmServe
        args: ["--max-model-len", "32000"]
        resources:
          limits:
            nvidia.com/gpu: "1"
    """


def test_llmd_modelservice_values_are_two_servers(tmp_path):
    # sweep 86 item 04 (llm-d guides/pd-disaggregation/ms-pd/values.yaml)
    p = _write(tmp_path, "values.yaml", LLMD)
    code, err, out = invoke("ledger", "--config", f"{p}#decode", "--gpu", "H100", "--json")
    assert code == 0, err
    f = json.loads(out)["figures"]
    assert f["engine.tensor_parallel_size"]["value"] == 2 and f["engine.max_model_len"]["value"] == 32000
    assert f["engine.block_size"]["value"] == 128


def test_aibrix_roles_hold_their_pod_templates_in_a_list(tmp_path):
    # sweep 86 item 06 (vllm-project/aibrix samples/disaggregation/vllm/1p1d.yaml)
    p = _write(tmp_path, "storm.yaml", """
        apiVersion: orchestration.aibrix.ai/v1alpha1
        kind: StormService
        metadata:
          name: vllm-1p1d
        spec:
          template:
            spec:
              roles:
                - name: prefill
                  template:
                    spec:
                      containers:
                        - name: prefill
                          image: aibrix/vllm-openai:v0.9.2
                          command: ["sh", "-c"]
                          args:
                            - python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B --max-model-len 8192
                - name: decode
                  template:
                    spec:
                      containers:
                        - name: decode
                          image: aibrix/vllm-openai:v0.9.2
                          command: ["sh", "-c"]
                          args:
                            - python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B --max-model-len 16384
        """)
    code, err, out = invoke("ledger", "--config", f"{p}#decode", "--gpu", "H100", "--json")
    assert code == 0, err
    assert json.loads(out)["figures"]["engine.max_model_len"]["value"] == 16384


def test_a_kserve_speculator_is_the_speculative_config(tmp_path):
    # sweep 86 item 05 (kserve docs/samples/llmisvc/speculative-decoding): EAGLE-3's drafter layer joins the pool
    p = _write(tmp_path, "llmisvc.yaml", """
        apiVersion: serving.kserve.io/v1alpha1
        kind: LLMInferenceService
        metadata:
          name: qwen3-32b-eagle3
        spec:
          model:
            uri: hf://RedHatAI/Qwen3-32B-FP8-dynamic
          speculator:
            model:
              uri: hf://RedHatAI/Qwen3-32B-speculator.eagle3
            config:
              method: eagle3
              num_speculative_tokens: "6"
          parallelism:
            tensor: 2
        """)
    code, err, out = invoke("ledger", "--config", str(p), "--gpu", "H100", "--json")
    assert code == 0, err
    assert any("drafter" in n for n in json.loads(out)["notes"])


def test_a_chart_whose_model_is_a_uri_and_its_args(tmp_path):
    # sweep 86 item 13 (redhat-ai-services/helm-charts vllm-kserve values): model.uri and model.args; the model was
    # shown as a Python dict before
    p = _write(tmp_path, "values.yaml", """
        image:
          image: 'registry.redhat.io/rhaiis/vllm-cuda-rhel9'
          tag: 3.3.0-1771898916
        model:
          args:
            - "--gpu-memory-utilization=0.80"
          uri: hf://Qwen/Qwen3-8B
        """)
    code, err, out = invoke("ledger", "--config", str(p), "--gpu", "H100", "--json")
    assert code == 0, err
    f = json.loads(out)["figures"]
    assert f["engine.gpu_memory_utilization"]["value"] == 0.8 and json.loads(out)["model"] == "Qwen/Qwen3-8B"


def test_tritons_model_json_is_engine_arguments(tmp_path):
    # sweep 86 item 09 (a Triton vLLM backend model_repository/vllm_model/1/model.json)
    d = tmp_path / "vllm_model" / "1"
    d.mkdir(parents=True)
    p = d / "model.json"
    p.write_text(json.dumps({"model": "facebook/opt-125m", "disable_log_requests": "true",
                             "gpu_memory_utilization": 0.7, "max_num_batched_tokens": 2048, "max_num_seqs": 32,
                             "do_sample": True, "temperature": 0.7}))
    code, err, out = invoke("ledger", "--config", str(p), "--gpu", "A10G", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["figures"]["engine.max_num_seqs"]["value"] == 32
    assert any("Triton" in n and "temperature" in n for n in j["notes"])


def test_ray_serve_llm_in_python(tmp_path):
    # sweep 86 item 10 (ray-project/ray doc/source/serve/tutorials/deployment-serve-llm/.../serve_deepseek_r1.py)
    p = _write(tmp_path, "serve_app.py", """
        from ray.serve.llm import LLMConfig, build_openai_app

        llm_config = LLMConfig(
            model_loading_config=dict(
                model_id="my-qwen",
                model_source="Qwen/Qwen3-32B",
            ),
            accelerator_type="H100",
            engine_kwargs=dict(
                max_model_len=16384,
                tensor_parallel_size=2,
            ),
        )

        app = build_openai_app({"llm_configs": [llm_config]})
        """)
    code, err, out = invoke("ledger", "--serve", str(p), "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["figures"]["engine.tensor_parallel_size"]["value"] == 2 and "H100" in j["gpu"]


def test_a_python_service_that_builds_its_args_says_what_to_pass(tmp_path):
    # sweep 86 item 12 (bentoml/BentoVLLM): imports vllm.entrypoints, sets args at run time
    p = _write(tmp_path, "service.py", """
        import bentoml
        ENGINE_CONFIG = {'tensor_parallel_size': 8, 'max_model_len': 8192}

        class VLLM:
            async def init_engine(self) -> None:
                import vllm.entrypoints.openai.api_server as vllm_api_server
                args = vllm_api_server.make_arg_parser().parse_args([])
        """)
    code, err, _ = invoke("ledger", "--serve", str(p))
    assert code == 2 and "a Python file that builds its vLLM command at run time" in err


# ---- diagnose ----------------------------------------------------------------------------------------------------

def test_a_refusal_before_a_restart_with_the_same_flags_is_memory_held(tmp_path):
    # sweep 80 item 01: systemd restarted the unit; the same flags got 1.87 GiB, then 11.33 GiB
    log = _write(tmp_path, "unit.log", """
        Feb 22 06:35:05 host env[2750]: (APIServer pid=2750) INFO 02-22 06:35:05 [utils.py:261] non-default args: {'model_tag': '/opt/models/qwen2_5_14b_instruct_awq', 'max_model_len': 16384, 'gpu_memory_utilization': 0.9}
        Feb 22 06:35:27 host env[2827]: (EngineCore_DP0 pid=2827) INFO 02-22 06:35:27 [gpu_worker.py:356] Available KV cache memory: 1.87 GiB
        Feb 22 06:35:27 host env[2827]: (EngineCore_DP0 pid=2827) ERROR 02-22 06:35:27 [core.py:946] ValueError: To serve at least one request with the models's max seq len (16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache memory (1.87 GiB). Based on the available memory, the estimated maximum model length is 10224. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
        Feb 22 06:35:29 host systemd[1]: vllm-assistant.service: Main process exited, code=exited, status=1/FAILURE
        Feb 22 06:35:31 host systemd[1]: Started vllm-assistant.service - vLLM OpenAI Server (assistant).
        Feb 22 06:35:35 host env[3285]: (APIServer pid=3285) INFO 02-22 06:35:35 [utils.py:261] non-default args: {'model_tag': '/opt/models/qwen2_5_14b_instruct_awq', 'max_model_len': 16384, 'gpu_memory_utilization': 0.9}
        Feb 22 06:35:45 host env[3361]: (EngineCore_DP0 pid=3361) INFO 02-22 06:35:45 [gpu_model_runner.py:4130] Model loading took 9.38 GiB memory and 3.424887 seconds
        Feb 22 06:35:59 host env[3361]: (EngineCore_DP0 pid=3361) INFO 02-22 06:35:59 [gpu_worker.py:356] Available KV cache memory: 11.33 GiB
        Feb 22 06:35:59 host env[3361]: (EngineCore_DP0 pid=3361) INFO 02-22 06:35:59 [kv_cache_utils.py:1307] GPU KV cache size: 61,872 tokens
        """)
    first = _diagnosed_log(log)
    assert first["verdict"] == "engine-died", first
    f = first["findings"][0]
    assert f["rule_id"] == "engine.died" and "9.46 GiB were held by something else" in f["summary"]
    assert "--max-model-len" not in (first.get("action") or "")


def test_a_bare_v1_engine_core_traceback_is_a_start_up_death(tmp_path):
    # sweep 81 item 11 (a 0.8-era log without process prefixes, cut inside the traceback)
    log = _write(tmp_path, "bare.log", """
        INFO 05-16 18:43:01 [gpu_model_runner.py:1186] Model loading took 14.2487 GB and 2.777985 seconds
        INFO 05-16 18:43:12 [monitor.py:33] torch.compile takes 5.80 s in total
        ERROR 05-16 18:43:14 [core.py:343] EngineCore hit an exception: Traceback (most recent call last):
        ERROR 05-16 18:43:14 [core.py:343]   File "/venv/lib/python3.10/site-packages/vllm/v1/engine/core.py", line 335, in run_engine_core
        ERROR 05-16 18:43:14 [core.py:343]     engine_core = EngineCoreProc(*args, **kwargs)
        ERROR 05-16 18:43:14 [core.py:343]   File "/venv/lib/python3.10/site-packages/vllm/v1/engine/core.py", line 290, in __init__
        """)
    inst = _diagnosed_log(log)
    assert inst["verdict"] == "engine-died" and "at start-up" in inst["findings"][0]["summary"]


def test_the_dgx_spark_is_in_the_catalog_and_the_opt_in_hint_gives_the_utilization(tmp_path):
    # sweeps 81-83: nine of their logs ran on a DGX Spark (GB10); vLLM printed its total as 121.63 GiB (vllm#49079).
    # 0.18's opt-in hint "increase --gpu-memory-utilization from 0.8000 to 0.8136" names the utilization the start ran
    from kvdoctor.catalog.gpus import lookup_gpu

    g = lookup_gpu("DGX Spark")
    assert g.name == "NVIDIA GB10" and round(g.memory_bytes / 2**30, 2) == 121.63
    log = _write(tmp_path, "spark.log", """
        (APIServer pid=1) INFO 03-26 10:43:40 [utils.py:299] non-default args: {'model_tag': 'Qwen/Qwen3.5-35B-A3B-FP8'}
        (EngineCore pid=62) WARNING 03-26 11:05:29 [fused_moe.py:1090] Using default MoE config. Performance might be sub-optimal! Config file not found at /usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs/E=256,N=512,device_name=NVIDIA_GB10,dtype=fp8_w8a8,block_shape=[128,128].json
        (EngineCore pid=62) INFO 03-26 11:05:40 [gpu_model_runner.py:4561] Model loading took 34.22 GiB memory and 1175.062959 seconds
        (EngineCore pid=62) INFO 03-26 11:06:09 [gpu_worker.py:456] Available KV cache memory: 55.72 GiB
        (EngineCore pid=62) INFO 03-26 11:06:09 [gpu_worker.py:470] In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.8000 to 0.8136 to maintain the same effective KV cache size.
        (EngineCore pid=62) INFO 03-26 11:06:09 [kv_cache_utils.py:1319] GPU KV cache size: 729,696 tokens
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--vllm-version", "0.18.1", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["gpu"] == "NVIDIA GB10" and j["figures"]["engine.gpu_memory_utilization"]["value"] == 0.8
    assert j["figures"]["kv_cache.tokens"]["predicted"] == 729696


@pytest.mark.parametrize("text, says", [
    # sweep 94 item 06: the card in Exclusive_Process mode with another process on it; it had read as a kernel fault
    ("(EngineCore_DP0 pid=93) ERROR 11-02 09:13:12 [core.py:708] EngineCore failed to start.\n"
     "(EngineCore_DP0 pid=93) ERROR 11-02 09:13:12 [core.py:708] RuntimeError: CUDA error: CUDA-capable device(s) "
     "is/are busy or unavailable\n", "Exclusive_Process"),
    # sweep 94 items 03-04: vLLM's start-up profiler saw free memory grow (a co-tenant released memory)
    ("AssertionError: Error in memory profiling. Initial free memory 23.4375 GiB, current free memory 23.4375 GiB. "
     "This happens when other processes sharing the same container release GPU memory while vLLM is profiling during "
     "initialization.\n", "changed its memory while vLLM profiled"),
    # sweep 94 item 07: a MIG UUID in CUDA_VISIBLE_DEVICES (vllm#41848)
    ("ValueError: invalid literal for int() with base 10: 'MIG-377e0049-554c-540b-93c6-d0976f8426cb'\n",
     "MIG UUID"),
])
def test_shared_and_sliced_gpus_get_their_own_fix(tmp_path, text, says):
    inst = _diagnosed(tmp_path, text)
    
    said = " ".join([inst.get("action") or ""] + list(inst.get("notes") or []))
    assert says in said and "a fault, not a setting" not in said and "build does not match" not in said, said


def test_a_small_hybrid_pool_takes_its_block_count_from_tokens_and_concurrency(tmp_path):
    # sweep 89 item 04 (RedHatAI/Qwen3.6-35B-A3B-NVFP4, vLLM 0.20.0, 0.32 GiB of KV): 6,288 tokens // 2,096 × 4 groups
    # says 12-15 blocks; the printed 1.50x over 10 blocks per request says 15
    log = _write(tmp_path, "small.log", """
        (APIServer pid=1) INFO 05-02 10:00:00 [utils.py:299] non-default args: {'model_tag': 'RedHatAI/Qwen3.6-35B-A3B-NVFP4', 'max_model_len': 8192, 'gpu_memory_utilization': 0.8, 'kv_cache_dtype': 'fp8_e4m3', 'enforce_eager': True, 'max_num_seqs': 32, 'enable_prefix_caching': True}
        (EngineCore pid=187) INFO 05-02 10:00:10 [__init__.py:1] Initializing a V1 LLM engine (v0.20.0) with config: model='RedHatAI/Qwen3.6-35B-A3B-NVFP4'
        (EngineCore pid=187) INFO 05-02 10:00:20 [interface.py:573] Setting attention block size to 2096 tokens to ensure that attention page size is >= mamba page size.
        (EngineCore pid=187) INFO 05-02 10:01:40 [gpu_model_runner.py:4820] Model loading took 21.86 GiB memory and 30.0 seconds
        (EngineCore pid=187) INFO 05-02 10:02:46 [gpu_worker.py:440] Available KV cache memory: 0.32 GiB
        (EngineCore pid=187) INFO 05-02 10:02:46 [kv_cache_utils.py:1711] GPU KV cache size: 6,288 tokens
        (EngineCore pid=187) INFO 05-02 10:02:46 [kv_cache_utils.py:1716] Maximum concurrency for 8,192 tokens per request: 1.50x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    f = json.loads(out)["figures"]
    assert f["kv_cache.num_blocks"]["value"] == 15 and f["kv_cache.num_blocks"]["source"] == "measured"


def test_a_gaudi_pool_takes_its_block_size_from_the_concurrency_line(tmp_path):
    # sweep 90 item 02 (vLLM 0.9.1 on Intel Gaudi, V0): "# hpu blocks: 6399" at 199.97x for 4,096 tokens is 128-token
    # blocks (the HPU default), not V0's CUDA default of 16: the pool is 100 GiB, not 12.5
    log = _write(tmp_path, "hpu.log", """
        INFO 06-04 01:18:25 [llm_engine.py:231] Initializing a V0 LLM engine (v0.9.1.dev116+gc57d577e8.d20250603) with config: model='/mnt/weka/data/pytorch/llama3.1/Meta-Llama-3.1-8B/', speculative_config=None, tokenizer='/mnt/weka/data/pytorch/llama3.1/Meta-Llama-3.1-8B/', max_seq_len=4096
        INFO 06-04 01:18:37 [executor_base.py:113] # hpu blocks: 6399, # CPU blocks: 256
        INFO 06-04 01:18:37 [executor_base.py:118] Maximum concurrency for 4096 tokens per request: 199.97x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    f = json.loads(out)["figures"]
    assert f["kv_cache.block_size"]["value"] == 128 and f["kv_cache.block_size"]["source"] == "measured"


def test_nemotron_h_mamba2_hybrid_is_sized_as_vllm_sizes_it(tmp_path):
    # sweep 89 item 02: Nemotron-Cascade-2-30B-A3B-NVFP4 (Nemotron 3 Nano 30B-A3B's architecture) at vLLM 0.19.1, fp8
    # KV, from its Hugging Face cache path on the server: block 4,176, 4,819,104 tokens, 86.16x for 262,144, and the
    # "Add 1 padding layers" warning, all as vLLM printed them
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert round(s.params.total / 1e9, 1) == 31.6  # NVIDIA's figure
    log = _write(tmp_path, "cascade.log", """
        INFO 04-26 11:13:11 [utils.py:233] non-default args: {'trust_remote_code': True, 'kv_cache_dtype': 'fp8', 'seed': 132, 'max_model_len': 262144, 'gpu_memory_utilization': 0.95, 'max_num_batched_tokens': 8192, 'max_num_seqs': 40, 'model': '/scratch-shared/u/hf_cache/hub/models--chankhavu--Nemotron-Cascade-2-30B-A3B-NVFP4/snapshots/80ee3ccfe8cb5eb019a0cde78449e8b197a0155f'}
        INFO 04-26 11:13:13 [config.py:281] Setting attention block size to 4176 tokens to ensure that attention page size is >= mamba page size.
        (EngineCore pid=1271023) INFO 04-26 11:13:15 [core.py:105] Initializing a V1 LLM engine (v0.19.1) with config: model='/scratch-shared/u/hf_cache/hub/models--chankhavu--Nemotron-Cascade-2-30B-A3B-NVFP4/snapshots/80ee3ccfe8cb5eb019a0cde78449e8b197a0155f'
        (EngineCore pid=1271023) INFO 04-26 11:13:40 [gpu_model_runner.py:4820] Model loading took 18.03 GiB memory and 20.0 seconds
        (EngineCore pid=1271023) INFO 04-26 11:14:04 [gpu_worker.py:436] Available KV cache memory: 68.97 GiB
        (EngineCore pid=1271023) INFO 04-26 11:14:04 [kv_cache_utils.py:1319] GPU KV cache size: 4,819,104 tokens
        (EngineCore pid=1271023) INFO 04-26 11:14:04 [kv_cache_utils.py:1324] Maximum concurrency for 262,144 tokens per request: 86.16x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--gpu", "H100", "--json")
    assert code == 0, err
    j = json.loads(out)
    f = j["figures"]
    assert j["model"] == "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
    assert f["kv_cache.tokens"]["predicted"] == 4819104
    assert any("Add 1 padding layers" in w for w in j["warnings"])
    # the NVFP4 copy's weights from the name's format: within 3 % of the printed 18.03 GiB
    assert abs(f["memory.weights"]["predicted"] / (18.03 * 2**30) - 1) < 0.03
    # and vLLM's own block size, from the shape alone
    code, err, out = invoke("ledger", "-m", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8", "--gpu", "H100",
                            "--kv-cache-dtype", "fp8", "--json")
    assert json.loads(out)["figures"]["kv_cache.block_size"]["value"] == 4176


def test_the_mamba2_page_formula_by_hand():
    # MambaStateShapeCalculator.mamba2_state_shape: conv ((inner + 2 x groups x state) / TP) x (kernel - 1) in bf16,
    # the SSM state (heads / TP) x head dim x state in fp32
    from kvdoctor.ledger.kv import SpecOptions, _mamba2_page_bytes

    m = {"num_heads": 64, "head_dim": 64, "n_groups": 8, "state_size": 128, "conv_kernel": 4, "intermediate": 4096,
         "ssm_dtype": "float32"}
    assert _mamba2_page_bytes(m, SpecOptions(block_size=16, kv_cache_dtype=None, model_dtype="bfloat16")) == 6144 * 3 * 2 + 64 * 64 * 128 * 4
    two = SpecOptions(block_size=16, kv_cache_dtype=None, model_dtype="bfloat16", tensor_parallel_size=2)
    assert _mamba2_page_bytes(m, two) == 3072 * 3 * 2 + 32 * 64 * 128 * 4


def test_a_trimmed_spec_decoding_line_still_counts(tmp_path):
    # sweep 102 item 08: MTP on an NVFP4 checkpoint whose acceptance fell to zero for good; the author's copy of the
    # interval line has no throughputs and its prefix on the line before
    notes = _diagnosed_notes(tmp_path, "(APIServer pid=1) INFO 09-01 12:11:11 [metrics.py:120] SpecDecoding metrics:\n"
                   "Mean acceptance length: 1.00, Accepted: 0 tokens, Drafted: 5200 tokens,\n"
                   "Per-position acceptance rate: 0.000, 0.000, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%\n")
    assert "accepted 0 of 5,200 drafted tokens" in notes


def test_a_hub_cache_path_of_an_unknown_model_says_so(tmp_path):
    # sweep 100 item 04: a vLLM YAML whose model is the server's Hugging Face cache folder of a model the catalog lacks
    p = _write(tmp_path, "serve.yaml", """
        model: /workspace/hf/hub/models--zai-org--GLM-5.3-Flash/snapshots/03eb5366286afd40d2221b1d9c63a6dd1ba4832e
        max-model-len: 32768
        """)
    code, err, _ = invoke("ledger", "--config", str(p), "--gpu", "H100")
    assert code == 2 and "Hugging Face cache folder of zai-org/GLM-5.3-Flash" in err and "not in the catalog" in err


def test_a_request_turned_away_for_its_length_is_not_a_crash(tmp_path):
    # sweep 103: the API server's 400 for a prompt plus max_tokens over --max-model-len
    notes = _diagnosed_notes(tmp_path, "ValueError: This model's maximum context length is 8192 tokens. However, you requested 8203 tokens "
                   "(7691 in the messages, 512 in the completion). Please reduce the length of the messages or "
                   "completion.\n")
    assert "one request was rejected, not a crash" in notes


def test_kernels_compiled_while_serving_are_named_as_the_spike(tmp_path):
    # sweep 96: vLLM's kernel JIT monitor (0.3x) warns of each compile during inference: "This causes a latency spike"
    notes = _diagnosed_notes(tmp_path,
        "(EngineCore) WARNING 05-18 19:12:27 [jit_monitor.py:103] Triton kernel JIT compilation during inference: "
        "_causal_conv1d_update_kernel. This causes a latency spike; consider extending warmup to cover this shape/config.\n"
        "(EngineCore) WARNING 05-18 19:12:28 [jit_monitor.py:103] Triton kernel JIT compilation during inference: "
        "expand_kernel. This causes a latency spike; consider extending warmup to cover this shape/config.\n")
    assert "vLLM compiled 2 kernel(s) while serving" in notes and "_causal_conv1d_update_kernel," in notes


def test_ray_placement_failures_name_the_cluster(tmp_path):
    # sweep 99 items 02 and 04: Ray could not place TP workers on the nodes
    inst = _diagnosed(tmp_path, "(EngineCore pid=1) ERROR 05-01 10:00:00 [core.py:708] ValueError: Cannot provide a placement group "
                   "requiring 4.0 GPUs (placement_group_specs=[{'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}]) "
                   "in a Ray cluster with 2.0 GPUs.\n")
    
    said = " ".join([inst.get("action") or ""] + list(inst.get("notes") or []))
    assert "ray status" in said


def test_a_long_context_forced_past_the_rope_table_is_named(tmp_path):
    # sweep 95 item 03: Qwen3-32B-FP8 at --max-model-len 87040 with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 and a YaRN override
    # spelled 'rope-scaling' (config.update sets it as written, so nothing scales); the server died on a device-side
    # assert "index out of bounds: 0 <= tmp48 < 40960"
    line = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve Qwen/Qwen3-32B-FP8 --quantization fp8 --max-model-len 87040 "
            "--hf-overrides '{{\"{key}\": {{\"factor\": 4.0, \"original_max_position_embeddings\": 32768, "
            "\"rope_type\": \"yarn\"}}}}'")
    code, err, out = invoke("ledger", "--serve", line.format(key="rope-scaling"), "--gpu", "H100", "--json")
    notes = " ".join(json.loads(out)["notes"])
    assert "is not a config field" in notes and "index out of bounds" in notes
    code, err, out = invoke("ledger", "--serve", line.format(key="rope_scaling"), "--gpu", "H100", "--json")
    notes = " ".join(json.loads(out)["notes"])
    assert "covered by the --hf-overrides rope_scaling" in notes and "index out of bounds" not in notes


def test_plan_without_a_device_total_is_a_clear_error(tmp_path):
    # sweep 83 item 01: a start-up log that names no device and prints no total (the ledger shows its own figures);
    # plan's levels need the GPU's memory: one line and exit 2, not an internal error
    log = _write(tmp_path, "nodev.log", """
        (APIServer pid=1) INFO 06-01 10:00:00 [utils.py:299] non-default args: {'model_tag': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 4096, 'gpu_memory_utilization': 0.95}
        (EngineCore pid=9) INFO 06-01 10:01:00 [gpu_model_runner.py:4820] Model loading took 14.29 GiB memory and 9.0 seconds
        (EngineCore pid=9) INFO 06-01 10:01:30 [gpu_worker.py:436] Available KV cache memory: 26.32 GiB
        (EngineCore pid=9) INFO 06-01 10:01:30 [kv_cache_utils.py:1319] GPU KV cache size: 492,912 tokens
        """)
    code, err, _ = invoke("plan", "--from-log", str(log), "--p99-context", "8192")
    assert code == 2 and "no GPU is known" in err and "Traceback" not in err


def test_an_rpc_time_out_names_the_workers_wait(tmp_path):
    # sweep 95 item 10: "RPC call to sample_tokens timed out" (vLLM 0.33 multiproc_executor.get_response)
    inst = _diagnosed(tmp_path, "(EngineCore_DP0 pid=32080) ERROR 03-08 17:31:28 [core.py:1102] TimeoutError: RPC call to "
                   "sample_tokens timed out.\n")
    
    said = " ".join([inst.get("action") or ""] + list(inst.get("notes") or []))
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in said


def test_a_quantized_copy_of_an_hf_converted_repository():
    # TheBloke's names drop meta-llama's "-hf" conversion suffix
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model("TheBloke/Llama-2-7B-AWQ")
    assert s.name == "meta-llama/Llama-2-7b-hf" and s.quant.method == "awq"
