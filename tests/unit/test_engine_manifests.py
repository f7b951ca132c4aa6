"""Deployment files (engine.manifests): the vLLM server a Kubernetes manifest, a compose file, production-stack Helm
values or a KubeAI Model runs, read as its tool starts it. The shapes are those of a sweep of 33 public deployment
files (2026-12-04, docs/engine.md); the texts here are written for the tests."""

from __future__ import annotations

import pytest

from kvdoctor.deployment import DeploymentInputs, resolve_deployment
from kvdoctor.engine.sources import load_yaml, parse_serve_line
from kvdoctor.errors import InputError, UnknownModelError

K8S = """\
apiVersion: v1
kind: Service
metadata: {name: llama}
spec: {ports: [{port: 8000}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: llama}
spec:
  template:
    spec:
      nodeSelector:
        cloud.google.com/gke-accelerator: nvidia-l4
      containers:
        - name: vllm-server
          image: vllm/vllm-openai:v0.11.1
          command: ["python3", "-m", "vllm.entrypoints.openai.api_server"]
          args:
            - --model=meta-llama/Meta-Llama-3.1-8B-Instruct
            - --max-model-len=$(CTX)
            - --port=$(PORT)
          env:
            - {name: CTX, value: "8192"}
            - {name: HF_TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}
          resources:
            limits: {nvidia.com/gpu: "2"}
        - name: sidecar
          image: busybox
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_kubernetes_deployment_is_its_vllm_containers_command(tmp_path):
    cfg = load_yaml(_write(tmp_path, "deploy.yaml", K8S))
    assert cfg.model == "meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert cfg.max_model_len == 8192  # $(CTX) from the container's env, as Kubernetes expands it
    assert cfg.vllm_version == "0.11.1" and cfg.gpu_hint == "l4"
    assert any("not set in the text" in n and "--port" in n for n in cfg.notes)  # $(PORT) has no value
    assert any("2 GPU(s) and vLLM uses 1" in n and "idle" in n for n in cfg.notes)
    dep = resolve_deployment(DeploymentInputs(config=str(tmp_path / "deploy.yaml")))
    assert dep.gpu.name == "NVIDIA L4" and dep.shape.name == "meta-llama/Llama-3.1-8B-Instruct"
    assert any("GPU from the deployment file" in n for n in dep.notes)
    assert any("renamed repository" in n for n in dep.notes)
    # --gpu wins over the node selector
    assert resolve_deployment(DeploymentInputs(config=str(tmp_path / "deploy.yaml"), gpu="H100")).gpu.name \
        == "NVIDIA H100 SXM"


def test_compose_services_entrypoint_and_selection(tmp_path):
    text = """\
services:
  web:
    image: nginx
  vllm:
    image: vllm/vllm-openai:v0.10.2
    command: >
      --model Qwen/Qwen3-8B --gpu-memory-utilization 0.8
      --tensor-parallel-size 2 --no-enable-prefix-caching
    environment:
      - VLLM_ATTENTION_BACKEND=FLASHINFER
    deploy:
      resources:
        reservations:
          devices: [{driver: nvidia, device_ids: ["5,6"], capabilities: [gpu]}]
  vllm-small:
    image: vllm/vllm-openai:latest
    command: ["vllm", "serve", "Qwen/Qwen3-0.6B", "--max-num-seqs", "8"]
"""
    p = _write(tmp_path, "compose.yaml", text)
    with pytest.raises(InputError, match=r"2 vLLM servers \(services.vllm, services.vllm-small\)"):
        load_yaml(p)
    cfg = load_yaml(f"{p}#vllm")
    assert (cfg.model, cfg.gpu_memory_utilization, cfg.tensor_parallel_size, cfg.enable_prefix_caching) == \
        ("Qwen/Qwen3-8B", 0.8, 2, False)
    assert cfg.env["VLLM_ATTENTION_BACKEND"] == "FLASHINFER" and cfg.vllm_version == "0.10.2"
    assert not any("GPU(s)" in n for n in cfg.notes)  # two devices, TP 2
    small = load_yaml(f"{p}#vllm-small")
    assert (small.model, small.max_num_seqs, small.vllm_version) == ("Qwen/Qwen3-0.6B", 8, None)
    with pytest.raises(InputError, match="no single vLLM server named 'nope'"):
        load_yaml(f"{p}#nope")
    # a command compose could not split either: the error names the file and the key
    bad = _write(tmp_path, "bad.yaml", text.replace("--no-enable-prefix-caching", '--served-model-name "oops'))
    with pytest.raises(InputError, match=r"bad.yaml: services.vllm.command: cannot split the command: No closing"):
        load_yaml(bad)


def test_production_stack_values_and_kubeai_model(tmp_path):
    helm = """\
servingEngineSpec:
  modelSpec:
  - name: "qwen"
    repository: "vllm/vllm-openai"
    tag: "v0.8.5"
    modelURL: "Qwen/Qwen2.5-7B-Instruct"
    requestGPU: 2
    vllmConfig:
      dtype: "half"
      v0: "1"
      tensorParallelSize: 2
      maxModelLen: 8192
      gpuMemoryUtilization: 0.9
      extraArgs: ["--enforce-eager", "--max-model-len", "4096"]
"""
    cfg = load_yaml(_write(tmp_path, "values.yaml", helm))
    assert (cfg.model, cfg.tensor_parallel_size, cfg.gpu_memory_utilization, cfg.dtype) == \
        ("Qwen/Qwen2.5-7B-Instruct", 2, 0.9, "float16")
    assert cfg.max_model_len == 4096  # extraArgs are rendered after the chart's own flags: they win
    assert cfg.enforce_eager is True and cfg.env["VLLM_USE_V1"] == "0" and cfg.vllm_version == "0.8.5"
    kubeai = """\
apiVersion: kubeai.org/v1
kind: Model
metadata: {name: llama-70b-l4}
spec:
  url: hf://meta-llama/Llama-3.1-70B-Instruct
  engine: VLLM
  args: [--max-model-len=32768, --pipeline-parallel-size=4, --tensor-parallel-size=2, --kv-cache-dtype=fp8]
  resourceProfile: nvidia-gpu-l4:8
"""
    k = load_yaml(_write(tmp_path, "model.yaml", kubeai))
    assert (k.model, k.pipeline_parallel_size, k.tensor_parallel_size, k.kv_cache_dtype, k.gpu_hint) == \
        ("meta-llama/Llama-3.1-70B-Instruct", 4, 2, "fp8", "l4")
    assert not any("GPU(s)" in n for n in k.notes)  # 8 GPUs = PP 4 x TP 2


def test_a_leader_worker_set_is_one_server_and_shell_scripts_in_containers(tmp_path):
    lws = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: big}
spec:
  leaderWorkerTemplate:
    leaderTemplate:
      spec:
        nodeSelector: {node.kubernetes.io/instance-type: p5.48xlarge}
        containers:
          - name: vllm
            image: vllm/vllm-openai:v0.23.0
            command: ["vllm", "serve"]
            args: [Qwen/Qwen3-235B-A22B-FP8, --tensor-parallel-size=8, --pipeline-parallel-size=2,
                   --nnodes=$(LWS_GROUP_SIZE)]
            resources: {limits: {nvidia.com/gpu: "8"}}
    workerTemplate:
      spec:
        containers:
          - name: vllm
            image: vllm/vllm-openai:v0.23.0
            command: ["vllm", "serve"]
            args: [Qwen/Qwen3-235B-A22B-FP8, --tensor-parallel-size=8, --pipeline-parallel-size=2, --headless]
"""
    cfg = load_yaml(_write(tmp_path, "lws.yaml", lws))
    assert cfg.pipeline_parallel_size == 2 and cfg.gpu_hint == "H100 SXM"  # the leader's flags; p5 is H100
    assert not any("GPU(s)" in n for n in cfg.notes)  # 8 GPUs a pod over two pods is TP 8 x PP 2: no mismatch
    sh = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - name: server
      image: python:3.11
      command: ["/bin/sh", "-c"]
      args: ["pip install vllm==0.9.2 && vllm serve Qwen/Qwen3-8B --max-num-seqs 16 2>&1 | tee /log"]
"""
    # a generic image: the container is vLLM's because its script starts vLLM
    pod = load_yaml(_write(tmp_path, "pod.yaml", sh))
    assert (pod.model, pod.max_num_seqs) == ("Qwen/Qwen3-8B", 16)


def test_deployment_files_that_say_too_little(tmp_path):
    none = _write(tmp_path, "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
    with pytest.raises(InputError, match="no vLLM server in it"):
        load_yaml(none)
    templ = _write(tmp_path, "t.yaml", K8S.replace("meta-llama/Meta-Llama-3.1-8B-Instruct", "${MODEL}"))
    with pytest.raises(UnknownModelError, match=r"'\$\{MODEL\}', a variable or template placeholder"):
        resolve_deployment(DeploymentInputs(config=str(templ)))
    # an explicit --model answers it
    assert resolve_deployment(DeploymentInputs(config=str(templ), model="Qwen/Qwen3-8B")).shape.name == "Qwen/Qwen3-8B"
    two = _write(tmp_path, "two.yaml", "max-model-len: 4096\n---\nmax-num-seqs: 8\n")
    with pytest.raises(InputError, match="2 YAML documents"):
        load_yaml(two)


def test_a_scripts_own_variables_and_comment_lines():
    script = """#!/bin/bash
export MODEL="Qwen/Qwen3-8B" \\
#export MODEL="Qwen/Qwen3-0.6B" \\
TP=2
# the server
vllm serve $MODEL --tensor-parallel-size ${TP} --max-model-len ${CTX:-16384} \\
  --max-num-seqs "$CONC" --port ${PORT}
#python -m vllm.entrypoints.openai.api_server --model=meta-llama/Llama-3.1-8B --max-model-len 1024
"""
    cfg = parse_serve_line(script)
    assert (cfg.model, cfg.tensor_parallel_size, cfg.max_model_len, cfg.max_num_seqs) == ("Qwen/Qwen3-8B", 2, 16384, None)
    assert any("--max-num-seqs $CONC" in n for n in cfg.notes)
    # a root prompt is still a prompt, not a comment
    assert parse_serve_line("# vllm serve Qwen/Qwen3-8B --max-model-len 8k").max_model_len == 8000


def test_a_model_directory_named_as_a_catalog_model():
    dep = resolve_deployment(DeploymentInputs(serve="vllm serve /models/Qwen3-8B --max-model-len 8192", gpu="L4"))
    assert dep.shape.name == "Qwen/Qwen3-8B"
    assert any("not on this machine" in n and "Qwen/Qwen3-8B" in n for n in dep.notes)
    with pytest.raises(UnknownModelError, match="does not exist"):
        resolve_deployment(DeploymentInputs(serve="vllm serve /models/my-finetune --max-model-len 8192", gpu="L4"))


def test_serve_takes_the_path_of_a_script(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nMODEL=Qwen/Qwen3-8B\nvllm serve $MODEL --max-model-len 8192 --max-num-seqs 32\n")
    dep = resolve_deployment(DeploymentInputs(serve=str(script), gpu="L4"))
    assert (dep.shape.name, dep.config.max_model_len, dep.config.max_num_seqs) == ("Qwen/Qwen3-8B", 8192, 32)


def test_a_config_file_the_script_writes_itself():
    """Benchmark scripts (InferenceMAX-style) write the vLLM YAML with a here-document, then start vLLM with --config:
    the file is read from the script, and the here-document's lines are not words of the command."""
    script = """PORT=${PORT:-8888}
cat > config.yaml << EOF
max-model-len: 10240
max-num-batched-tokens: 8192
no-enable-prefix-caching: true
EOF
vllm serve Qwen/Qwen3-8B --config config.yaml --max-num-batched-tokens 4096 --port="$PORT"
"""
    cfg = parse_serve_line(script)
    assert (cfg.max_model_len, cfg.enable_prefix_caching) == (10240, False)
    assert cfg.max_num_batched_tokens == 4096  # the line wins over its file, as in vLLM
    assert cfg.extra["port"] == "8888"  # ${PORT:-8888}: the default


def test_what_a_held_out_batch_of_deployment_files_showed(tmp_path):
    """A second collection of 22 public deployment files, read once before these were handled (docs/engine.md)."""
    # docker run --entrypoint vllm IMAGE serve MODEL; ${V:+flag $V} adds the flag only when V is set and not empty
    script = """MODEL="${MODEL:-Qwen/Qwen3-8B}"
MAX_NUM_SEQS="${MAX_NUM_SEQS:-}"
GPU_UTIL="${GPU_UTIL:-0.50}"
docker run -d --gpus all --entrypoint vllm "$IMAGE" serve "$MODEL" --gpu-memory-utilization "$GPU_UTIL" \\
  ${MAX_NUM_SEQS:+--max-num-seqs $MAX_NUM_SEQS} --enable-prefix-caching
"""
    cfg = parse_serve_line(script)
    assert (cfg.model, cfg.gpu_memory_utilization, cfg.max_num_seqs) == ("Qwen/Qwen3-8B", 0.5, None)
    # a here-document's variables are the script's (an unquoted delimiter expands them); one it does not set is
    # dropped with a note instead of failing the file
    heredoc = "TP=2\ncat > c.yaml <<EOF\ntensor-parallel-size: $TP\nmax-model-len: $MAX_MODEL_LEN\nEOF\n" \
              "vllm serve Qwen/Qwen3-8B --config c.yaml\n"
    cfg = parse_serve_line(heredoc)
    assert cfg.tensor_parallel_size == 2 and cfg.max_model_len is None
    assert any("max-model-len: $MAX_MODEL_LEN" in n for n in cfg.notes)
    # an `sh -c` script in a container sees the container's env; a fork's CLI over vLLM's flags (vllm-omni serve)
    pod = """\
apiVersion: v1
kind: Pod
metadata: {name: dp}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.11.0
      command: ["/bin/sh", "-c"]
      args: ["vllm serve Qwen/Qwen3-30B-A3B-FP8 --tensor-parallel-size $TP_SIZE --data-parallel-size $DP_SIZE"]
      env: [{name: TP_SIZE, value: "1"}, {name: DP_SIZE, value: "8"}]
"""
    cfg = load_yaml(_write(tmp_path, "pod.yaml", pod))
    assert (cfg.tensor_parallel_size, cfg.data_parallel_size) == (1, 8)
    compose = "services:\n  omni:\n    image: local/vllm-omni:v0.20\n    command: [vllm-omni, serve, Qwen/Qwen3-8B, " \
              "--max-num-seqs, '1']\n"
    cfg = load_yaml(_write(tmp_path, "c.yaml", compose))
    assert (cfg.model, cfg.max_num_seqs) == ("Qwen/Qwen3-8B", 1)
    # production-stack renders --no-enable-prefix-caching from any vllmConfig without enablePrefixCaching: true,
    # and only its own keys (maxNumBatchedTokens is not one: extraArgs are the way)
    helm = "servingEngineSpec:\n  modelSpec:\n  - name: m\n    modelURL: Qwen/Qwen3-8B\n    vllmConfig:\n" \
           "      tensorParallelSize: 1\n      maxNumBatchedTokens: 4096\n"
    cfg = load_yaml(_write(tmp_path, "v.yaml", helm))
    assert cfg.enable_prefix_caching is False and cfg.max_num_batched_tokens is None
    assert any("does not render" in n and "maxNumBatchedTokens" in n for n in cfg.notes)
    sed = _write(tmp_path, "lws.yaml", K8S.replace("meta-llama/Meta-Llama-3.1-8B-Instruct", "__MODEL__"))
    with pytest.raises(UnknownModelError, match="template placeholder"):
        resolve_deployment(DeploymentInputs(config=str(sed)))


def test_a_config_file_mounted_from_a_config_map(tmp_path):
    """A manifest that ships the vLLM YAML in a ConfigMap and starts vLLM with --config on its mount path."""
    text = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: vllm-config}
data:
  vllm.yaml: |
    max-model-len: 16384
    max-num-seqs: 48
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: qwen}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.11.0
          args: [Qwen/Qwen3-8B, --config, /etc/vllm/vllm.yaml, --max-num-seqs, "32"]
          volumeMounts: [{name: cfg, mountPath: /etc/vllm}]
      volumes: [{name: cfg, configMap: {name: vllm-config}}]
"""
    cfg = load_yaml(_write(tmp_path, "deploy.yaml", text))
    assert (cfg.model, cfg.max_model_len, cfg.max_num_seqs) == ("Qwen/Qwen3-8B", 16384, 32)  # the line wins


def test_a_config_file_bind_mounted_by_compose(tmp_path):
    """Sweep 47 (a public compose file): `--config /etc/vllm/config.yaml` is the host's ./configs/vllm.yaml, bind-mounted
    read-only; the line's own flags win over the file's, and a ${V:?message} the file does not set stays unresolved."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "vllm.yaml").write_text("gpu-memory-utilization: 0.85\nmax-model-len: 8192\n"
                                                   "max-num-seqs: 48\n")
    text = """services:
  vllm:
    image: ${VLLM_IMAGE:-vllm/vllm-openai:v0.30.0}
    volumes:
      - ${HOME}/.cache/huggingface:/root/.cache/huggingface
      - ./configs/vllm.yaml:/etc/vllm/config.yaml:ro
      - type: bind
        source: ./configs
        target: /etc/other
    command:
      - --config
      - /etc/vllm/config.yaml
      - --model
      - ${MODEL_NAME:?Set MODEL_NAME in .env}
      - --max-model-len
      - "${MAX_MODEL_LEN:-16384}"
"""
    cfg = load_yaml(_write(tmp_path, "docker-compose.yml", text))
    assert (cfg.gpu_memory_utilization, cfg.max_num_seqs, cfg.max_model_len) == (0.85, 48, 16384)
    assert cfg.model == "${MODEL_NAME:?Set MODEL_NAME in .env}"
    with pytest.raises(UnknownModelError, match="a variable or template placeholder"):
        resolve_deployment(DeploymentInputs(config=str(tmp_path / "docker-compose.yml"), gpu="H100"))
    # a file under a mounted directory is found too; a mount the file cannot name (${HOME}) is not read
    cfg2 = load_yaml(_write(tmp_path, "c2.yml", text.replace("/etc/vllm/config.yaml\n", "/etc/other/vllm.yaml\n")))
    assert cfg2.max_num_seqs == 48


def test_the_journal_takes_one_server_of_a_deployment_file(tmp_path):
    from kvdoctor.journal.configs import read_config

    compose = ("services:\n  a:\n    image: vllm/vllm-openai:v0.10.2\n    command: [Qwen/Qwen3-8B, --max-num-seqs, '8']\n"
               "  b:\n    image: vllm/vllm-openai:v0.10.2\n    command: [Qwen/Qwen3-0.6B]\n")
    p = _write(tmp_path, "compose.yaml", compose)
    cfg, text, origin = read_config(f"{p}#a")
    assert (cfg.model, cfg.max_num_seqs) == ("Qwen/Qwen3-8B", 8) and text == compose and origin.endswith("#a")


def test_a_systemd_unit_and_the_script_beside_it(tmp_path):
    """Sweep 47 (public units and their scripts): a unit's [Service] Environment= and ExecStart=, an ExecStart that runs a
    script lying beside the unit, the script's bash array of arguments with a conditional append, a default that falls
    back to another variable (${A:-${B}}) and a prefix cut (${REPO##*/})."""
    unit = tmp_path / "vllm.service"
    unit.write_text("[Unit]\nDescription=vLLM\n\n[Service]\nType=simple\nEnvironment=MAX_MODEL_LEN=16384\n"
                    'Environment="GPU_MEM_UTIL=0.80" "SPEC=0"\nExecStart=/srv/vllm/run-vllm.sh\n'
                    "Restart=on-failure\n\n[Install]\nWantedBy=default.target\n")
    (tmp_path / "run-vllm.sh").write_text("""#!/usr/bin/env bash
REPO=${REPO:-Qwen/Qwen3-8B}
SEQS=${SEQS:-${DEFAULT_SEQS:-24}}
ARGS=(
  "${REPO}"
  "--max-model-len" "${MAX_MODEL_LEN}"
  "--gpu-memory-utilization" "${GPU_MEM_UTIL}"
  "--max-num-seqs" "${SEQS}"
)
if [ "${SPEC}" -gt 0 ]; then
  ARGS+=("--enforce-eager")
fi
echo "> vllm serve ${ARGS[*]} (${REPO##*/})"
exec vllm serve "${ARGS[@]}"
""")
    cfg = parse_serve_line(unit.read_text(), base_dir=tmp_path)
    assert (cfg.model, cfg.max_model_len, cfg.gpu_memory_utilization, cfg.max_num_seqs) == ("Qwen/Qwen3-8B", 16384, 0.8,
                                                                                             24)
    # the append's condition is not evaluated: kept, and said
    assert cfg.enforce_eager is True and any("if ... fi kept as written" in n for n in cfg.notes)
    dep = resolve_deployment(DeploymentInputs(serve=str(unit), gpu="L4"))
    assert dep.config.max_model_len == 16384
    # a unit that runs vLLM directly, its line continued over lines
    direct = ("[Service]\nEnvironment=M=Qwen/Qwen3-8B\nExecStart=/opt/venv/bin/vllm serve ${M} \\\n"
              "    --max-model-len 8192\n")
    assert parse_serve_line(direct).max_model_len == 8192 and parse_serve_line(direct).model == "Qwen/Qwen3-8B"
    # a unit whose script is not beside it says what to pass
    with pytest.raises(InputError, match=r"ExecStart= runs /usr/local/bin/vllm-serve, not vLLM: pass that script"):
        parse_serve_line("[Service]\nExecStart=/usr/local/bin/vllm-serve\n", base_dir=tmp_path)


def test_a_ray_serve_llm_config(tmp_path):
    """Sweep 47 (Ray's own examples): a Ray Serve LLM serve config is one server per LLM config, its model from
    model_loading_config, its engine arguments from engine_kwargs (Python names), the GPU from accelerator_type."""
    text = """\
applications:
  - name: llm-app
    import_path: ray.serve.llm:build_openai_app
    args:
      llm_configs:
        - model_loading_config:
            model_id: qwen-8b
            model_source: Qwen/Qwen3-8B
          accelerator_type: L40S
          engine_kwargs:
            tensor_parallel_size: 2
            max_model_len: 16384
            gpu_memory_utilization: 0.85
          deployment_config:
            autoscaling_config: {min_replicas: 1, max_replicas: 2}
"""
    p = _write(tmp_path, "serve.yaml", text)
    cfg = load_yaml(p)
    assert (cfg.model, cfg.tensor_parallel_size, cfg.max_model_len, cfg.gpu_memory_utilization) == (
        "Qwen/Qwen3-8B", 2, 16384, 0.85)
    dep = resolve_deployment(DeploymentInputs(config=str(p)))
    assert dep.gpu.name == "NVIDIA L40S"  # accelerator_type
    # a prefill/decode pair is two servers, picked by name
    two = _write(tmp_path, "pd.yaml", """\
applications:
  - args:
      prefill_config:
        model_loading_config: {model_id: meta-llama/Llama-3.1-8B-Instruct}
        engine_kwargs: {kv_transfer_config: {kv_connector: NixlConnector, kv_role: kv_producer}}
      decode_config:
        model_loading_config: {model_id: meta-llama/Llama-3.1-8B-Instruct}
        engine_kwargs: {max_num_seqs: 64}
""")
    with pytest.raises(InputError, match="2 vLLM servers"):
        load_yaml(two)
    assert load_yaml(f"{two}#decode_config").max_num_seqs == 64


def test_a_kserve_llm_inference_service(tmp_path):
    """Sweep 47 (KServe's own sample): an LLMInferenceService is started by KServe from spec.model.uri with
    spec.parallelism; its prefill section is a second server."""
    p = _write(tmp_path, "llmisvc.yaml", """\
apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceService
metadata: {name: qwen8}
spec:
  model: {uri: "hf://Qwen/Qwen3-8B", name: Qwen/Qwen3-8B}
  replicas: 2
  parallelism: {tensor: 2}
  template:
    containers:
      - name: main
        args: ["--max-model-len", "16384"]
        env: [{name: VLLM_USE_V1, value: "1"}]
        resources: {limits: {nvidia.com/gpu: "2"}}
  prefill:
    parallelism: {tensor: 1}
    template:
      containers:
        - name: main
          resources: {limits: {nvidia.com/gpu: "1"}}
""")
    with pytest.raises(InputError, match="2 vLLM servers"):
        load_yaml(p)
    decode = load_yaml(f"{p}#qwen8")
    assert (decode.model, decode.tensor_parallel_size, decode.max_model_len) == ("Qwen/Qwen3-8B", 2, 16384)
    prefill = load_yaml(f"{p}#prefill")
    assert (prefill.model, prefill.tensor_parallel_size) == ("Qwen/Qwen3-8B", 1)


def test_a_skypilot_task(tmp_path):
    """Sweep 47 (SkyPilot's own vLLM recipe): the task's run script in its envs, with the variables SkyPilot sets on the
    head node (GPUs per node from resources.accelerators, the node count), the accelerator as the GPU."""
    p = _write(tmp_path, "serve.sky.yaml", """\
envs:
  MODEL_NAME: Qwen/Qwen3-8B
resources:
  accelerators: {L40S: 2}
  image_id: docker:vllm/vllm-openai:v0.30.0
num_nodes: 1
setup: |
  pip install vllm
run: |
  echo starting
  if [ "$SKYPILOT_NODE_RANK" == "0" ]; then
    vllm serve $MODEL_NAME \\
      --tensor-parallel-size $SKYPILOT_NUM_GPUS_PER_NODE \\
      --pipeline-parallel-size $SKYPILOT_NUM_NODES \\
      --max-model-len 16384
  fi
""")
    cfg = load_yaml(p)
    assert (cfg.model, cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.max_model_len) == (
        "Qwen/Qwen3-8B", 2, 1, 16384)
    assert cfg.vllm_version == "0.30.0"
    dep = resolve_deployment(DeploymentInputs(config=str(p)))
    assert dep.gpu.name == "NVIDIA L40S"


# another chart's values (a homelab chart for a 6 GB card, 2026): settings under `server:`, the model under `model:`
CHART_VALUES = """model:
  name: "Qwen/Qwen3-4B-AWQ"
  quantization: ""

server:
  maxModelLen: 8192
  maxNumSeqs: 2
  gpuMemoryUtilization: 0.92
  enforceEager: true # disables CUDA graph capture
  languageModelOnly: false

image:
  repository: vllm/vllm-openai
  tag: "v0.28.0"

resources:
  limits:
    nvidia.com/gpu: 1
"""


def test_another_charts_values_are_read_by_their_flag_keys(tmp_path):
    f = tmp_path / "values.yaml"
    f.write_text(CHART_VALUES)
    cfg = load_yaml(f)
    assert cfg.model == "Qwen/Qwen3-4B-AWQ" and cfg.max_model_len == 8192 and cfg.max_num_seqs == 2
    assert cfg.gpu_memory_utilization == 0.92 and cfg.enforce_eager is True and cfg.vllm_version == "0.28.0"
    assert any("a chart kvdoctor does not know" in n for n in cfg.notes)
    # a chart whose model.name is left empty (CAST AI's defaults) reads as no model, for --model to give, not an error
    # about a file name made of the whole mapping
    f.write_text(CHART_VALUES.replace('"Qwen/Qwen3-4B-AWQ"', ""))
    assert load_yaml(f).model is None


RAY_SERVICE = """apiVersion: ray.io/v1
kind: RayService
metadata:
  name: ray-serve-llm
spec:
  serveConfigV2: |
    applications:
    - name: llms
      import_path: ray.serve.llm:build_openai_app
      args:
        llm_configs:
        - model_loading_config:
            model_id: qwen2.5-7b-instruct
            model_source: Qwen/Qwen2.5-7B-Instruct
          engine_kwargs:
            max_model_len: 1024
            gpu_memory_utilization: 0.75
  rayClusterConfig:
    rayVersion: "2.50.1"
"""


def test_a_kuberay_rayservice_is_read_through_its_serve_config_text(tmp_path):
    f = tmp_path / "rayservice.yaml"
    f.write_text(RAY_SERVICE)
    cfg = load_yaml(f)
    assert cfg.model == "Qwen/Qwen2.5-7B-Instruct" and cfg.max_model_len == 1024 and cfg.gpu_memory_utilization == 0.75


def test_an_unknown_models_suggestions_lead_with_its_family_and_size():
    # sweep 60's KServe file served Qwen3-Coder-30B-A3B-Instruct: spelling alone suggested Qwen2.5-3B first (that
    # model is in the catalog since 2026-12-06; Qwen3-Omni-30B-A3B, not in it, shows the same ranking)
    from kvdoctor.catalog.models import lookup_model

    with pytest.raises(UnknownModelError) as exc:
        lookup_model("Qwen/Qwen3-Omni-30B-A3B-Instruct")
    assert exc.value.suggestions[0] == "Qwen/Qwen3-30B-A3B"
    assert lookup_model("Qwen/Qwen3-Coder-30B-A3B-Instruct").name == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    # (Mistral-7B-Instruct-v0.3 is in the catalog since the second 2026-12-06 stop; the Mixtral instruct is not)
    with pytest.raises(UnknownModelError) as exc:
        lookup_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert exc.value.suggestions[0] == "mistralai/Mixtral-8x7B-v0.1"
