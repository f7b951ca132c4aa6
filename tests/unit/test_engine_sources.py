"""engine.sources: every way an operator writes a vLLM configuration, and the one-line errors."""

from __future__ import annotations

import ast
import json
import re

import pytest

from kvdoctor.engine.config import EngineConfig
from kvdoctor.engine.diff import diff
from kvdoctor.engine.sources import (
    from_flags,
    from_non_default_args,
    from_startup,
    human_int,
    human_int_or_auto,
    load_yaml,
    merge,
    parse_serve_line,
    unknown_flags,
)
from kvdoctor.errors import InputError
from kvdoctor.evidence.model import StartupFacts


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg, msg
    return msg


# --- human-readable ints (vLLM utils/argparse_utils.py human_readable_int) ----------------------


@pytest.mark.parametrize(
    "text,value",
    [("32k", 32000), ("32K", 32768), ("8K", 8192), ("25.6k", 25600), ("1m", 10**6), ("2M", 2 * 2**20),
     ("10G", 10 * 2**30), ("4096", 4096), (" 512 ", 512), (1024, 1024), (2048.0, 2048)],
)
def test_human_int(text, value):
    assert human_int(text) == value


@pytest.mark.parametrize("text", ["1.5K", "abc", "32kb", "", True, 1.5])
def test_human_int_rejects(text):
    with pytest.raises(ValueError):
        human_int(text)


def test_max_model_len_auto():
    assert human_int_or_auto("auto") == -1
    assert human_int_or_auto("-1") == -1
    assert human_int_or_auto("AUTO") == -1


# --- from_flags -----------------------------------------------------------------------------------


def test_from_flags_types_and_names():
    cfg = from_flags({"max_model_len": "32k", "--gpu-memory-utilization": "0.85", "-tp": "2",
                      "enable_prefix_caching": "false", "max-num-batched-tokens": "8K", "dtype": "half",
                      "enforce_eager": True, "port": "8000", "block_size": None})
    assert cfg.max_model_len == 32000
    assert cfg.gpu_memory_utilization == 0.85
    assert cfg.tensor_parallel_size == 2
    assert cfg.enable_prefix_caching is False
    assert cfg.max_num_batched_tokens == 8192
    assert cfg.dtype == "float16"
    assert cfg.enforce_eager is True
    assert cfg.block_size is None
    assert cfg.extra == {"port": "8000"}
    assert unknown_flags(cfg) == ["--port"]


def test_from_flags_negated_bool():
    assert from_flags({"--no-enable-prefix-caching": True}).enable_prefix_caching is False


@pytest.mark.parametrize(
    "mapping,fragment",
    [({"max_num_seqs": "1k"}, "--max-num-seqs: not an integer"),  # vLLM: plain int
     ({"gpu_memory_utilization": "high"}, "--gpu-memory-utilization: not a number"),
     ({"enforce_eager": "maybe"}, "--enforce-eager: not a boolean"),
     ({"--max-model-len": "1.5K"}, "--max-model-len: decimals are not allowed")],
)
def test_from_flags_errors_one_line(mapping, fragment):
    with pytest.raises(InputError) as exc:
        from_flags(mapping)
    assert fragment in one_line(exc)


# --- vllm serve lines -----------------------------------------------------------------------------


def test_serve_positional_model_and_flags():
    cfg = parse_serve_line("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 "
                           "--gpu-memory-utilization=0.85 --no-enable-prefix-caching --max-num-seqs 64")
    assert cfg.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (cfg.max_model_len, cfg.gpu_memory_utilization, cfg.max_num_seqs) == (32768, 0.85, 64)
    assert cfg.enable_prefix_caching is False
    assert cfg.origin == "serve-line"


def test_serve_short_forms_and_underscores():
    cfg = parse_serve_line("vllm serve m -tp 4 -pp=2 -dp 2 -q awq --max_num_batched_tokens 16k --kv_cache_dtype=fp8")
    assert (cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.data_parallel_size) == (4, 2, 2)
    assert cfg.quantization == "awq"
    assert cfg.max_num_batched_tokens == 16000
    assert cfg.kv_cache_dtype == "fp8"


def test_python_module_entrypoint():
    cfg = parse_serve_line("python3 -m vllm.entrypoints.openai.api_server --model /models/Yi-34B "
                           "--served-model-name yi chat --port 8001 --swap-space 0 --tensor-parallel-size 4 --enforce-eager")
    assert cfg.model == "/models/Yi-34B"
    assert cfg.served_model_name == "yi,chat"  # nargs="+"
    assert cfg.swap_space == 0.0
    assert cfg.tensor_parallel_size == 4 and cfg.enforce_eager is True
    assert cfg.extra == {"port": "8001"}


def test_env_prefix_and_continuations():
    text = ("VLLM_USE_V1=1 CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen2.5-7B-Instruct \\\n"
            "    --max-model-len 8k \\\n    --trust-remote-code \\\n    --enable-chunked-prefill\n")
    cfg = parse_serve_line(text)
    assert cfg.env == {"VLLM_USE_V1": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert cfg.max_model_len == 8000
    assert cfg.enable_chunked_prefill is True
    assert cfg.extra == {"trust_remote_code": True}


def test_docker_run_line():
    text = ("docker run --runtime nvidia --gpus all -v ~/.cache/huggingface:/root/.cache/huggingface "
            "--env HUGGING_FACE_HUB_TOKEN=xyz -e VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 -p 8000:8000 --ipc=host "
            "--rm vllm/vllm-openai:v0.10.1 --model mistralai/Mistral-7B-v0.1 --max-model-len 65536")
    cfg = parse_serve_line(text)
    assert cfg.vllm_version == "0.10.1"
    assert cfg.model == "mistralai/Mistral-7B-v0.1"
    assert cfg.env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    assert cfg.max_model_len == 65536


def test_docker_with_explicit_command_and_positional():
    cfg = parse_serve_line("docker run --gpus all vllm/vllm-openai:latest meta-llama/Llama-3.2-1B -tp 1")
    assert cfg.model == "meta-llama/Llama-3.2-1B" and cfg.vllm_version is None
    cfg = parse_serve_line("docker run -it vllm/vllm-openai:v0.6.3.post1 vllm serve m --dtype half")
    assert cfg.vllm_version == "0.6.3.post1" and cfg.dtype == "float16"


@pytest.mark.parametrize(
    "text,expect",
    [("cd /srv && CUDA_VISIBLE_DEVICES=0 nohup vllm serve m --max-model-len 8k > vllm.log 2>&1 &",
      {"model": "m", "max_model_len": 8000, "env.CUDA_VISIBLE_DEVICES": "0"}),
     ("conda run -n vllm vllm serve m -tp 2 | tee out.log", {"model": "m", "tensor_parallel_size": 2}),
     ("sudo docker run --gpus all vllm/vllm-openai:v0.9.2 --model m", {"model": "m"}),
     ("--model m --max-model-len 4096", {"model": "m", "max_model_len": 4096}),
     # a runbook pasted without continuation backslashes (vllm-project issue style), with a tee tail
     ("VLLM_USE_V1=1\npython3 -m vllm.entrypoints.openai.api_server\n--model ${MODEL}\n--dtype float16\n"
      "--no-enable-prefix-caching\n--block-size 64\n2>&1 | tee \"${NAME}.log\"",
      {"model": "${MODEL}", "dtype": "float16", "enable_prefix_caching": False, "block_size": 64,
       "env.VLLM_USE_V1": "1"})],
)
def test_shell_wrappers_and_tails(text, expect):
    assert parse_serve_line(text).given() == expect


def test_positional_model_wins_over_model_flag():
    cfg = parse_serve_line("vllm serve org/a --model org/b -tp 2")
    assert cfg.model == "org/a" and any("uses the positional one" in n for n in cfg.notes)
    cfg = parse_serve_line("vllm serve org/a -tp 2 stray")
    assert cfg.model == "org/a" and any("stray" in n for n in cfg.notes)


def test_offline_llm_call():
    cfg = parse_serve_line("llm = LLM(model='/models/alpaca-2', gpu_memory_utilization=0.9, max_model_len=4096, "
                           "tensor_parallel_size=2, enforce_eager=True, seed=0)\nout = llm.generate(p)")
    assert cfg.usage_context == "llm" and cfg.origin == "llm-call"
    assert cfg.given() == {"model": "/models/alpaca-2", "max_model_len": 4096, "gpu_memory_utilization": 0.9,
                           "tensor_parallel_size": 2, "enforce_eager": True, "extra.seed": 0}
    cfg = parse_serve_line("LLM(path, max_num_seqs=8, **kw)")
    assert cfg.max_num_seqs == 8 and len(cfg.notes) == 2
    with pytest.raises(InputError, match="unbalanced"):
        parse_serve_line("LLM(model='m'")


def test_old_boolean_spelling_is_accepted_with_a_note():
    cfg = parse_serve_line("vllm serve /model --enable-chunked-prefill False --gpu-memory-utilization 0.9")
    assert cfg.enable_chunked_prefill is False
    assert cfg.gpu_memory_utilization == 0.9
    assert any("old boolean spelling" in n for n in cfg.notes)


def test_prompt_prefix_and_speculative_json():
    cfg = parse_serve_line("$ vllm serve m --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'")
    assert cfg.speculative_config == {"method": "mtp", "num_speculative_tokens": 3}


def test_config_file_in_line_line_flags_win(tmp_path):
    (tmp_path / "cfg.yaml").write_text("max-model-len: 16384\ntensor_parallel_size: 2\nmax-num-seqs: 32\nport: 9000\n")
    cfg = parse_serve_line("vllm serve m --config cfg.yaml --max-num-seqs 128", base_dir=tmp_path)
    assert cfg.max_model_len == 16384 and cfg.tensor_parallel_size == 2
    assert cfg.max_num_seqs == 128  # the line wins, as in vLLM
    assert cfg.extra == {"port": 9000}
    assert cfg.origin_of("max_num_seqs") == "serve-line"
    assert cfg.origin_of("max_model_len") == f"yaml:{tmp_path / 'cfg.yaml'}"
    cfg = parse_serve_line(f"vllm serve m --config={tmp_path / 'cfg.yaml'}")
    assert cfg.max_num_seqs == 32


@pytest.mark.parametrize(
    "text,fragment",
    [("", "empty command line"),
     ("ls -la /tmp", "not a vLLM server command"),
     ("vllm bench serve --model x", "expected `vllm serve ...`, got `vllm bench`"),
     ("vllm", "expected `vllm serve MODEL ...`"),
     ("vllm serve m --max-model-len 'abc", "cannot split the command line"),
     ("vllm serve m --max-model-len abc", "--max-model-len: not an integer"),
     ("vllm serve m --max-num-seqs", "--max-num-seqs: expected a value"),
     ("docker run --gpus all", "docker run line has no image"),
     ("python -m http.server", "not a vLLM server command")],
)
def test_serve_line_errors_one_line(text, fragment):
    with pytest.raises(InputError) as exc:
        parse_serve_line(text)
    assert fragment in one_line(exc)


# --- real command lines and non-default-args lines from public issues -----------------------------

_CHECK = ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
          "tensor_parallel_size", "enforce_eager")


def _cases(shared_data):
    return [json.loads(line) for line in (shared_data / "real" / "kv_capacity_cases.jsonl").open()]


def test_real_serve_commands(shared_data):
    seen = 0
    for case in _cases(shared_data):
        cmd = (case.get("extra") or {}).get("command")
        if not cmd or "serve" not in cmd:
            continue
        cfg = parse_serve_line(cmd)
        assert cfg.model, case["case_id"]
        assert cfg.model.split("/")[-1] in case["model"], case["case_id"]
        for f in _CHECK:
            if case.get(f) is not None and getattr(cfg, f) is not None:
                assert getattr(cfg, f) == case[f], (case["case_id"], f)
        seen += 1
    assert seen >= 5


def _nda_lines(shared_data):
    for case in _cases(shared_data):
        for line in (case.get("log_excerpt") or "").splitlines():
            m = re.search(r"non-default args: (\{.*\})\s*$", line)
            if m:
                try:
                    yield case, ast.literal_eval(m.group(1))
                except (ValueError, SyntaxError):
                    continue  # excerpts elided with "..." between entries


def test_real_non_default_args(shared_data):
    seen = 0
    for case, args in _nda_lines(shared_data):
        cfg = from_non_default_args(args)
        assert cfg.model == args.get("model", args.get("model_tag"))
        for f in _CHECK + ("kv_cache_dtype", "dtype"):
            if f in args:
                assert getattr(cfg, f) == args[f], (case["case_id"], f)
        seen += 1
    assert seen >= 2


def test_serve_line_equals_its_own_non_default_args(shared_data):
    """kv015 shows both the command and the log's dict: they must describe the same settings."""
    case = next(c for c in _cases(shared_data) if c["case_id"] == "kv015")
    line = parse_serve_line(case["extra"]["command"])
    args = next(a for c, a in _nda_lines(shared_data) if c["case_id"] == "kv015")
    assert diff(line, from_non_default_args(args)) == []


# --- non-default args, startup facts --------------------------------------------------------------


def test_non_default_args_model_tag_and_secrets():
    cfg = from_non_default_args({"model_tag": "~/m", "api_key": "***", "max_model_len": 262144,
                                 "quantization": "auto_round", "served_model_name": [...],
                                 "override_generation_config": {...}, "speculative_config":
                                 {"method": "mtp", "num_speculative_tokens": 3}})
    assert cfg.model == "~/m"
    assert cfg.max_model_len == 262144 and cfg.quantization == "auto_round"
    assert cfg.served_model_name is None  # elided
    assert "api_key" not in cfg.extra
    assert cfg.speculative_config["num_speculative_tokens"] == 3


def test_non_default_args_type_error_one_line():
    with pytest.raises(InputError) as exc:
        from_non_default_args({"max_model_len": "lots"})
    assert one_line(exc).startswith("non-default args: max_model_len:")


def test_from_startup_given_and_measured():
    facts = StartupFacts(vllm_version="0.11.0", model="m", max_model_len=32768, block_size=16,
                         max_num_batched_tokens=8192, gpu_memory_utilization=0.85,
                         non_default_args={"model_tag": "m", "gpu_memory_utilization": 0.85},
                         engine_config={"dtype": "torch.bfloat16", "max_seq_len": "32768",
                                        "tensor_parallel_size": "2", "enable_prefix_caching": "True",
                                        "quantization": "None"})
    cfg = from_startup(facts, origin="log:x.log")
    assert cfg.given() == {"model": "m", "gpu_memory_utilization": 0.85}
    assert cfg.measured["max_model_len"] == 32768
    assert cfg.measured["dtype"] == "bfloat16"
    assert cfg.measured["tensor_parallel_size"] == 2
    assert cfg.measured["enable_prefix_caching"] is True
    assert "quantization" not in cfg.measured
    assert cfg.vllm_version == "0.11.0"


# --- YAML -----------------------------------------------------------------------------------------


def test_yaml_kebab_and_snake(tmp_path):
    p = tmp_path / "serve.yaml"
    p.write_text("model: meta-llama/Llama-3.1-8B-Instruct\nmax-model-len: 32k\ngpu_memory_utilization: 0.85\n"
                 "enable-prefix-caching: false\ntensor-parallel-size: 2\nhost: 0.0.0.0\n")
    cfg = load_yaml(p)
    assert cfg.max_model_len == 32000 and cfg.gpu_memory_utilization == 0.85
    assert cfg.enable_prefix_caching is False and cfg.tensor_parallel_size == 2
    assert cfg.extra == {"host": "0.0.0.0"}
    assert cfg.origin == f"yaml:{p}"


def test_yaml_equals_serve_line(tmp_path):
    p = tmp_path / "serve.yaml"
    p.write_text("model: meta-llama/Llama-3.1-8B-Instruct\nmax-model-len: 32000\ngpu-memory-utilization: 0.85\n"
                 "enable_prefix_caching: false\nport: 8000\ndtype: half\nkv-cache-dtype: auto\n")
    line = parse_serve_line("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32k "
                            "--gpu-memory-utilization 0.85 --no-enable-prefix-caching --port 8000 --dtype float16")
    assert diff(load_yaml(p), line) == []


@pytest.mark.parametrize(
    "content,fragment",
    [("max-model-len: lots\n", "max-model-len: not an integer"),
     ("gpu-memory-utilization: [1, 2]\n", "gpu-memory-utilization: not a number"),
     ("enforce-eager: sometimes\n", "enforce-eager: not a boolean"),
     ("- a\n- b\n", "expected a mapping of vLLM flags"),
     ("max-model-len: [\n", "invalid YAML")],
)
def test_yaml_errors_one_line(tmp_path, content, fragment):
    p = tmp_path / "c.yaml"
    p.write_text(content)
    with pytest.raises(InputError) as exc:
        load_yaml(p)
    assert fragment in one_line(exc)


def test_yaml_missing_and_wrong_extension(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_yaml(tmp_path / "absent.yaml")
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(InputError, match="yaml/yml"):
        load_yaml(tmp_path / "c.json")


# --- merge / overlay ------------------------------------------------------------------------------


def test_merge_precedence_and_origin():
    log = from_non_default_args({"model": "m", "max_model_len": 8192, "max_num_seqs": 64}, origin="log:a")
    line = parse_serve_line("vllm serve m --max-model-len 16k")
    flags = from_flags({"max_num_seqs": 32})
    cfg = merge([log, line, flags])
    assert (cfg.max_model_len, cfg.max_num_seqs, cfg.model) == (16000, 32, "m")
    assert cfg.origin == "log:a < serve-line < flags"
    assert merge([EngineConfig(), flags]).origin == "flags"


def test_serve_line_env_reaches_resolved_engine():
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.engine.defaults import resolve

    shape, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100")
    cfg = parse_serve_line("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 VLLM_FOO=bar vllm serve "
                           "meta-llama/Llama-3.1-8B-Instruct")
    res = resolve(cfg, shape, gpu)
    assert res.env == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0", "VLLM_FOO": "bar"}
    assert res.traits.cudagraph_in_kv_budget is False
    assert res.to_json()["env"] == res.env and res.as_dict()["env"] == res.env
    docker = parse_serve_line("docker run --gpus all -e VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 "
                              "vllm/vllm-openai:v0.33.0 --model meta-llama/Llama-3.1-8B-Instruct")
    assert resolve(docker, shape, gpu).env == {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}


def test_an_abbreviated_option_is_read_as_vllms_parser_reads_it():
    """vLLM's parser keeps argparse's allow_abbrev: a unique prefix of an option sets it (a public KubeAI manifest
    passes --max-num-batched-token=32768). The options are vLLM 0.33's own (engine/serve_flags.py, generated)."""
    from kvdoctor.engine.serve_flags import SERVE_FLAGS

    assert "--max-num-batched-tokens" in SERVE_FLAGS and len(SERVE_FLAGS) > 300
    cfg = parse_serve_line("vllm serve Qwen/Qwen3-8B --max-num-batched-token=32768 --gpu-mem 0.8 --enable-prefix "
                           "--max 3 --moe-backend b12x")
    assert (cfg.max_num_batched_tokens, cfg.gpu_memory_utilization, cfg.enable_prefix_caching) == (32768, 0.8, True)
    assert any("--max-num-batched-token read as --max-num-batched-tokens" in n for n in cfg.notes)
    # ambiguous: vLLM would refuse it; a flag no option starts with (a fork's) is kept as it is
    assert cfg.extra == {"max": "3", "moe_backend": "b12x"} and any("--max is ambiguous" in n for n in cfg.notes)


def test_a_command_printed_as_its_python_argv_parses_like_a_typed_line():
    # a harness's log (a 2026 BFCL benchmark of Qwen3.5-2B; verl prints its rollout server the same way)
    from kvdoctor.engine.sources import parse_serve_line

    text = ("Server command: ['vllm', 'serve', 'Qwen/Qwen3.5-2B', '--served-model-name', 'smolqwen', '--dtype', "
            "'bfloat16', '--max-model-len', '8192', '--gpu-memory-utilization', '0.85', '--chat-template', \"it's\"]")
    cfg = parse_serve_line(text)
    assert cfg.model == "Qwen/Qwen3.5-2B" and cfg.max_model_len == 8192 and cfg.gpu_memory_utilization == 0.85
    assert cfg.extra.get("chat_template") == "it's"  # a quote inside a word survives the round trip
    # a list that is not a command stays a parse error, one line, as before
    from kvdoctor.errors import InputError

    with pytest.raises(InputError):
        parse_serve_line("Models: ['a', 'b']")


def test_a_compilation_configs_capture_sizes_set_the_graph_ceiling():
    # public 2026 threads: a fork's hardcoded [1, 2] and a recipe's capture size passed as a sequence count ran every
    # larger decode batch eager (4-30x slower per token); the ceiling is what decides it
    from kvdoctor.engine.sources import parse_serve_line

    cfg = parse_serve_line("vllm serve Qwen/Qwen3-8B --max-num-seqs 64 --compilation-config "
                           "'{\"cudagraph_capture_sizes\": [1, 2]}'")
    assert cfg.max_cudagraph_capture_size == 2
    assert from_flags({"compilation_config": {"max_cudagraph_capture_size": 4, "cudagraph_capture_sizes": [1, 2]}}
                      ).max_cudagraph_capture_size == 4  # the explicit ceiling wins, as in vLLM
    assert parse_serve_line("vllm serve x -O3").max_cudagraph_capture_size is None
    assert parse_serve_line("vllm serve x --cuda-graph-sizes 16").max_cudagraph_capture_size == 16  # 0.10's flag


def test_a_dockerfile_runs_its_entrypoint_and_cmd_with_its_env(tmp_path):
    # the shapes of public 2026 Dockerfiles: vLLM's image with a CMD of flags; an ENTRYPOINT script copied in and
    # driven by ENV (an ARG naming the base image)
    from kvdoctor.engine.sources import parse_serve_line

    plain = "FROM vllm/vllm-openai:v0.28.0\nCMD [\"Qwen/Qwen3-8B\", \"--max-model-len\", \"8192\", \"--enforce-eager\"]\n"
    cfg = parse_serve_line(plain)
    assert cfg.model == "Qwen/Qwen3-8B" and cfg.max_model_len == 8192 and cfg.enforce_eager is True
    assert cfg.vllm_version == "0.28.0"
    (tmp_path / "serve.sh").write_text('#!/bin/bash\nexec vllm serve Qwen/Qwen3-8B --max-model-len "${MAX_MODEL_LEN}" '
                                       '--gpu-memory-utilization "${GPU_UTIL:-0.9}"\n')
    scripted = ("ARG VLLM_BASE_IMAGE=vllm/vllm-openai:v0.25.1\nFROM ${VLLM_BASE_IMAGE}\n"
                "ENV MAX_MODEL_LEN=16384 \\\n    GPU_UTIL=0.85\nCOPY serve.sh /opt/vllm/serve.sh\n"
                'ENTRYPOINT ["/opt/vllm/serve.sh"]\n')
    cfg = parse_serve_line(scripted, base_dir=tmp_path)
    assert (cfg.max_model_len, cfg.gpu_memory_utilization, cfg.vllm_version) == (16384, 0.85, "0.25.1")
    # the script not beside the Dockerfile: one line that says what to pass
    with pytest.raises(InputError, match="a Dockerfile whose command runs /opt/vllm/serve.sh"):
        parse_serve_line(scripted, base_dir=tmp_path / "elsewhere")
    # an ENV line with an unbalanced quote is read word by word, not an internal error
    cfg = parse_serve_line('FROM vllm/vllm-openai:v0.28.0\nENV A="x\nCMD ["Qwen/Qwen3-8B"]\n')
    assert cfg.model == "Qwen/Qwen3-8B"
    # Python's `from vllm import LLM` is no Dockerfile FROM: the offline call is read as before
    cfg = parse_serve_line('from vllm import LLM\nllm = LLM(model="Qwen/Qwen3-8B", max_model_len=4096)\n')
    assert cfg.model == "Qwen/Qwen3-8B" and cfg.max_model_len == 4096


def test_a_python_file_or_a_yaml_file_given_as_the_serve_line():
    from kvdoctor.engine.sources import parse_serve_line

    # Modal's app builds `cmd = ["vllm", "serve", MODEL, ...]` at run time: said in one line, not "got `import`"
    with pytest.raises(InputError, match="a Python file that builds its vLLM command at run time"):
        parse_serve_line("import subprocess\nMODEL = 'x'\ncmd = ['vllm', MODEL]\nsubprocess.Popen(cmd)\n")
    # a manifest handed to --serve is read as --config reads it
    cfg = parse_serve_line("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: v}\nspec:\n  template:\n    spec:\n"
                           "      containers:\n      - name: vllm\n        image: vllm/vllm-openai:v0.28.0\n"
                           "        args: [\"Qwen/Qwen3-8B\", \"--max-model-len\", \"4096\"]\n")
    assert cfg.model == "Qwen/Qwen3-8B" and cfg.max_model_len == 4096
    # a `command: ["vllm", "serve"]` list in it is the manifest's, not a printed argv
    cfg = parse_serve_line("kind: Pod\napiVersion: v1\nspec:\n  containers:\n  - name: vllm\n"
                           "    image: vllm/vllm-openai:v0.28.0\n    command: [\"vllm\", \"serve\"]\n"
                           "    args: [\"Qwen/Qwen3-8B\", \"--max-model-len\", \"2048\"]\n")
    assert cfg.model == "Qwen/Qwen3-8B" and cfg.max_model_len == 2048
