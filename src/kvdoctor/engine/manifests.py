"""The vLLM server inside a deployment file: Kubernetes manifests, Docker Compose, the vLLM production-stack Helm values
and KubeAI's ``Model`` resource.

Operators keep their flags where they deploy them, not in a ``vllm serve`` line. Each form is read the way its own
tool runs it, then handed to the serve-line parser (``sources.parse_serve_line``), so every flag means what it means on
a command line:

* Kubernetes (any kind holding a pod template: Deployment, StatefulSet, Job, Pod, LeaderWorkerSet, KServe
  ServingRuntime/InferenceService, ...): each container's ``command`` + ``args``; without ``command`` the image's
  entrypoint runs (``vllm serve`` in vllm/vllm-openai). ``$(VAR)`` in them is the container's ``env`` (Kubernetes'
  own expansion; ``valueFrom`` values are unknown). A LeaderWorkerSet's leader and workers are one server: the
  leader is read.
* Docker Compose: each service's ``entrypoint`` + ``command`` (string or list) and ``environment``. ``${VAR}`` in a
  compose file is the shell's ``.env`` at ``docker compose up``: unknown here, so it is left as written.
* production-stack Helm values (``servingEngineSpec.modelSpec[]``): ``modelURL``, ``vllmConfig`` (the chart renders
  its camelCase keys as the flags; ``extraArgs`` verbatim), ``requestGPU``, ``env``, the image ``tag``.
* KubeAI ``Model``: ``spec.url`` (``hf://org/name``), ``spec.args``, ``spec.env``, ``spec.resourceProfile``
  (``nvidia-gpu-l4:8``).
* KubeRay's ``RayService``: its ``serveConfigV2`` text, read as a Ray Serve LLM config.
* Another chart's values (an ``image`` whose repository is vLLM's, or a ``model`` mapping with a ``name``): the keys,
  at the top or in a settings section (``server``, ``vllm``, ``engine``, ...), whose snake_case is a ``vllm serve``
  flag; the note says the chart's own template decides what it renders.

The GPU: a node selector or affinity on the accelerator (GKE ``cloud.google.com/gke-accelerator``, NVIDIA GPU feature
discovery's ``nvidia.com/gpu.product``, Karpenter's ``karpenter.k8s.aws/instance-gpu-name``, a cloud instance type)
or KubeAI's resource profile gives ``EngineConfig.gpu_hint``; ``--gpu`` and a log's device name win over it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.errors import InputError

# instance types whose GPU the type names (AWS, GCP, Azure): the prefix before the size
_INSTANCE_GPUS = (
    ("p5en.", "H200"), ("p5e.", "H200"), ("p5.", "H100 SXM"), ("p4de.", "A100 80GB SXM"), ("p4d.", "A100 40GB SXM"),
    ("p6-b200.", "B200"), ("g6e.", "L40S"), ("g6.", "L4"), ("g5.", "A10G"), ("g4dn.", "T4"), ("p3.", "Tesla V100 16GB SXM2"),
    ("a3-ultragpu", "H200"), ("a3-", "H100 SXM"), ("a2-ultragpu", "A100 80GB SXM"), ("a2-", "A100 40GB SXM"),
    ("g2-", "L4"), ("a4-", "B200"),
    ("standard_nd96isr_h200", "H200"), ("standard_nd96isr_h100", "H100 SXM"), ("standard_nd96amsr_a100", "A100 80GB SXM"),
    ("standard_nd96asr_v4", "A100 40GB SXM"), ("standard_nc24ads_a100", "A100 80GB PCIe"),
)
# GKE's accelerator names that are not the catalog's: its "nvidia-tesla-a100" is the a2-highgpu's 40 GB part
_GKE_NAMES = {"tesla-a100": "A100 40GB SXM", "tesla-v100": "Tesla V100 16GB SXM2", "tesla-t4": "T4", "tesla-p100": "P100",
              "h100-mega-80gb": "H100 SXM"}
_GPU_LABELS = ("cloud.google.com/gke-accelerator", "nvidia.com/gpu.product", "karpenter.k8s.aws/instance-gpu-name",
               "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type", "gpu.nvidia.com/class",
               "amd.com/gpu.product-name")
_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "habana.ai/gaudi")
_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# vllm/vllm-openai's ENTRYPOINT (older images: the api_server module, which takes --model; the serve form reads both)
IMAGE_ENTRYPOINT = ["vllm", "serve"]
_SHELLS = ("sh", "bash", "ash", "dash")


@dataclass
class ServerSpec:
    """One vLLM server found in a deployment file, as its tool would start it."""

    name: str  # where it is: "Deployment/vllm-reasoning/vllm", "services.vllm", "modelSpec.qwen7b"
    argv: list[str]  # the process's words (entrypoint included); an `sh -c` script is one word after "-c"
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    gpu_hint: str | None = None  # what the file says of the accelerator (a label value, a profile)
    gpu_count: int | None = None  # GPUs the container asks for
    flags: dict[str, Any] | None = None  # settings given as a mapping (Helm vllmConfig), vLLM dest names
    notes: list[str] = field(default_factory=list)
    multi_node: bool = False  # one server over several pods (a LeaderWorkerSet group, a Ray cluster): gpu_count is a pod's
    files: dict[str, str] = field(default_factory=dict)  # files the deployment mounts (a ConfigMap's keys), by name
    mounts: dict[str, str] = field(default_factory=dict)  # compose bind mounts: path in the container -> host path

    def command_line(self) -> tuple[str, bool]:
        """(the command as one line of text, whether it is a shell script): `sh -c "pip install x && vllm serve ..."`
        is its script, which sees the container's environment; any other command is its words, quoted."""
        import os

        a = self.argv
        if len(a) >= 3 and os.path.basename(a[0]) in _SHELLS and a[1].startswith("-") and "c" in a[1]:
            return a[2], True
        return shlex.join(a), False


def looks_like_deployment(docs: list[Any]) -> bool:
    """A Kubernetes manifest, a compose file, production-stack values or a KubeAI Model rather than a vLLM config."""
    for d in docs:
        if not isinstance(d, dict):
            continue
        if "apiVersion" in d and "kind" in d:
            return True
        if isinstance(d.get("services"), dict) and any(isinstance(s, dict) and ("image" in s or "command" in s)
                                                      for s in d["services"].values()):
            return True
        if isinstance(d.get("servingEngineSpec"), dict) or _is_llmd_values(d):
            return True
        if _ray_llm_configs(d) or _is_skypilot(d) or _is_chart_values(d):
            return True
    return False


def _is_chart_values(d: dict) -> bool:
    """Another chart's values for a vLLM server (not production-stack's): an ``image`` whose repository is vLLM's, or a
    ``model`` mapping with a ``name``, beside the chart's settings."""
    img = d.get("image")
    vllm_image = isinstance(img, dict) and "vllm" in str(img.get("repository") or img.get("image") or "").lower()
    model = d.get("model")
    return "kind" not in d and (vllm_image or (isinstance(model, dict) and ("name" in model or "uri" in model)))


def _is_skypilot(d: dict) -> bool:
    """A SkyPilot task: a ``run`` script beside its ``resources``, ``envs`` or ``setup``."""
    return isinstance(d.get("run"), str) and ("resources" in d or "envs" in d or "setup" in d)


def _ray_llm_configs(d: dict) -> list[tuple[str, dict]]:
    """Ray Serve LLM's configs in a serve config: ``llm_configs:`` at the top, or each application's ``args`` (its
    ``llm_configs`` list, or a prefill/decode pair ``prefill_config`` / ``decode_config``). (name, config) pairs."""
    out: list[tuple[str, dict]] = []

    def take(where: str, args: object) -> None:
        if not isinstance(args, dict):
            return
        for i, c in enumerate(args.get("llm_configs") or []):
            if isinstance(c, dict) and "model_loading_config" in c:
                out.append((f"{where}llm_configs.{i}", c))
        for key in ("prefill_config", "decode_config", "llm_config"):
            c = args.get(key)
            if isinstance(c, dict) and "model_loading_config" in c:
                out.append((f"{where}{key}", c))

    take("", d)
    for i, app in enumerate(d.get("applications") or []):
        if isinstance(app, dict):
            take(f"applications.{app.get('name', i)}.", app.get("args"))
    return out


def _ray_service_configs(d: dict) -> list[tuple[str, dict]]:
    """KubeRay's RayService carries its Serve config as YAML text (``spec.serveConfigV2: |``): its Ray Serve LLM
    configs, read as a serve config file's."""
    import yaml

    from kvdoctor.safeio import load_yaml_documents

    text = (d.get("spec") or {}).get("serveConfigV2") if isinstance(d.get("spec"), dict) else None
    if not isinstance(text, str):
        return []
    try:
        docs = load_yaml_documents(text, "serveConfigV2")
    except (yaml.YAMLError, InputError):  # the embedded text is not YAML: no server here
        return []
    return [(f"RayService.{name}", c) for doc in docs if isinstance(doc, dict) for name, c in _ray_llm_configs(doc)]


def find_servers(docs: list[Any]) -> list[ServerSpec]:
    """Every vLLM server in the file's documents, in file order; each sees the ConfigMaps' files of the same file
    (a ``--config /etc/vllm/config.yaml`` mounted from one)."""
    servers = _find_servers(docs)
    files = _config_map_files(docs)
    for spec in servers:
        spec.files = files
    return servers


def _config_map_files(docs: list[Any]) -> dict[str, str]:
    return {str(k): str(v) for d in docs if isinstance(d, dict) and d.get("kind") == "ConfigMap"
            for k, v in ((d.get("data") or {}).items() if isinstance(d.get("data"), dict) else ())
            if isinstance(v, str)}


def _find_servers(docs: list[Any]) -> list[ServerSpec]:
    out: list[ServerSpec] = []
    for d in docs:
        if not isinstance(d, dict):
            continue
        if isinstance(d.get("servingEngineSpec"), dict):
            out += _helm_stack(d)
        elif _is_llmd_values(d):
            out += _llmd_values(d)
        elif ray := _ray_llm_configs(d):
            out += ray_llm_servers(ray)
        elif _is_skypilot(d):
            out += _skypilot(d)
        elif _is_chart_values(d):
            out += _chart_values(d)
        elif isinstance(d.get("services"), dict):
            out += _compose(d["services"])
        elif str(d.get("kind", "")) == "Model" and "kubeai" in str(d.get("apiVersion", "")):
            out += _kubeai(d)
        elif d.get("kind") == "LLMInferenceService" and "kserve" in str(d.get("apiVersion", "")):
            out += _llm_inference_service(d)
        elif d.get("kind") == "DynamoGraphDeployment":
            out += _dynamo(d)
        elif d.get("kind") == "List" and isinstance(d.get("items"), list):
            out += _find_servers(d["items"])
        elif d.get("kind") == "RayService" and (ray := _ray_service_configs(d)):
            out += ray_llm_servers(ray)
        elif "kind" in d:
            out += _k8s(d)
    return out


def pick(servers: list[ServerSpec], selector: str | None, where: str) -> ServerSpec:
    """The one server the user means: the only one, or the one ``selector`` names (a suffix of its name)."""
    if selector:
        hits = [s for s in servers if s.name == selector or s.name.endswith("/" + selector)
                or s.name.endswith("." + selector)]
        if len(hits) != 1:
            names = ", ".join(s.name for s in servers) or "none"
            raise InputError(f"{where}: no single vLLM server named {selector!r} (servers: {names})")
        return hits[0]
    if not servers:
        raise InputError(f"{where}: a deployment file, but no vLLM server in it (no container or service whose image "
                         "or command is vLLM's)")
    if len(servers) > 1:
        names = ", ".join(s.name for s in servers)
        raise InputError(f"{where}: {len(servers)} vLLM servers ({names}); pick one: --config '{where}#NAME'")
    return servers[0]


# ---- Kubernetes --------------------------------------------------------------------------------------------------

def _k8s(doc: dict) -> list[ServerSpec]:
    kind = str(doc.get("kind"))
    name = str((doc.get("metadata") or {}).get("name", "?"))
    out: list[ServerSpec] = []
    for path, pod in _pod_specs(doc.get("spec"), ""):
        if kind == "LeaderWorkerSet" and "workerTemplate" in path and any("leaderTemplate" in s.name for s in out):
            continue  # one multi-node server: the leader's flags are the server's
        hint = _gpu_label(pod)
        for c in pod.get("containers") or []:
            if not isinstance(c, dict):
                continue
            spec = _container(c, f"{kind}/{name}{path}/{c.get('name', '?')}", hint)
            if spec is not None:
                spec.multi_node = kind == "LeaderWorkerSet"
                out.append(spec)
    return out


def _pod_specs(node: object, path: str, depth: int = 0):
    """Every pod spec (a mapping with a ``containers`` list) under a resource's spec, with where it sits."""
    if depth > 12 or not isinstance(node, dict):
        return
    if isinstance(node.get("containers"), list):
        yield path, node
        return
    for k, v in node.items():
        if isinstance(v, dict):
            yield from _pod_specs(v, f"{path}.{k}" if k in ("leaderTemplate", "workerTemplate", "predictor") else path,
                                  depth + 1)
        elif isinstance(v, list):  # AIBrix's StormService keeps one pod template per role in ``roles: [...]``
            for i, item in enumerate(v):
                if isinstance(item, dict) and not isinstance(item.get("containers"), list):
                    yield from _pod_specs(item, f"{path}.{item.get('name', i)}", depth + 1)


def _container(c: dict, name: str, hint: str | None) -> ServerSpec | None:
    image = str(c.get("image") or "")
    command = _words(c.get("command"))
    args = _words(c.get("args"))
    env = _env_list(c.get("env"))
    argv = [_K8S_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), w) for w in command + args]
    if not _is_vllm(image, argv):
        return None
    if not command:
        argv = IMAGE_ENTRYPOINT + argv
    return ServerSpec(name=name, argv=argv, env=env, image=image or None, gpu_hint=hint,
                      gpu_count=_gpu_count(c.get("resources")))


def _gpu_count(resources: object) -> int | None:
    if not isinstance(resources, dict):
        return None
    for part in ("limits", "requests"):
        got = resources.get(part)
        if isinstance(got, dict):
            for key in _GPU_RESOURCES:
                if key in got:
                    try:
                        return int(str(got[key]))
                    except ValueError:
                        return None  # a template placeholder
    return None


def _gpu_label(pod: dict) -> str | None:
    """The accelerator a pod is pinned to: a node selector, or a required node affinity with one value."""
    sel = pod.get("nodeSelector")
    if isinstance(sel, dict):
        for key in _GPU_LABELS:
            if sel.get(key):
                return _hint(key, str(sel[key]))
    terms = ((((pod.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms"))
    for term in terms if isinstance(terms, list) else []:
        for ex in (term or {}).get("matchExpressions") or []:
            vals = ex.get("values") if isinstance(ex, dict) else None
            if isinstance(ex, dict) and ex.get("key") in _GPU_LABELS and isinstance(vals, list) and len(vals) == 1:
                return _hint(str(ex["key"]), str(vals[0]))
    return None


def _hint(key: str, value: str) -> str:
    v = value.strip()
    if "instance-type" in key:
        low = v.lower()
        return next((gpu for prefix, gpu in _INSTANCE_GPUS if low.startswith(prefix)), v)
    if key == "cloud.google.com/gke-accelerator":
        short = v.lower().removeprefix("nvidia-")
        return _GKE_NAMES.get(short, short.removeprefix("tesla-"))
    return v.replace("-", " ") if key == "nvidia.com/gpu.product" else v


# ---- Docker Compose ----------------------------------------------------------------------------------------------

def _compose(services: dict) -> list[ServerSpec]:
    out = []
    for sname, s in services.items():
        if not isinstance(s, dict):
            continue
        image = str(s.get("image") or "")
        entry = _words(s.get("entrypoint"), shell=f"services.{sname}.entrypoint")
        command = _words(s.get("command"), shell=f"services.{sname}.command")
        argv = entry + command
        if not _is_vllm(image, argv):
            continue
        if not entry:
            argv = IMAGE_ENTRYPOINT + command if not _starts_command(command) else command
        env_raw = s.get("environment")
        if isinstance(env_raw, list):
            env = dict(str(e).split("=", 1) for e in env_raw if "=" in str(e))
        elif isinstance(env_raw, dict):
            env = {str(k): str(v) for k, v in env_raw.items() if v is not None}
        else:
            env = {}
        devices = ((((s.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices"))
        out.append(ServerSpec(name=f"services.{sname}", argv=argv, env=env, image=image or None,
                              gpu_count=_compose_gpus(devices), mounts=_compose_mounts(s.get("volumes"))))
    return out


def _compose_mounts(volumes: object) -> dict[str, str]:
    """Bind mounts of a compose service, container path -> host path as written (``./cfg/v.yaml:/etc/v.yaml:ro``, or
    the long form ``{type: bind, source, target}``); named volumes have no host path and are left out."""
    out: dict[str, str] = {}
    for v in volumes if isinstance(volumes, list) else ():
        if isinstance(v, dict):
            src, dst = v.get("source"), v.get("target")
        else:
            parts = str(v).split(":")
            src, dst = (parts[0], parts[1]) if len(parts) >= 2 else (None, None)
        if src and dst and str(src).startswith(("/", ".", "~")):
            out[str(dst)] = str(src)
    return out


def _compose_gpus(devices: object) -> int | None:
    for d in devices if isinstance(devices, list) else []:
        if not isinstance(d, dict):
            continue
        if isinstance(d.get("count"), int):
            return d["count"]
        ids = d.get("device_ids")
        if isinstance(ids, list):
            return len([x for i in ids for x in str(i).split(",") if x.strip()])
    return None


# ---- production-stack Helm values and KubeAI ---------------------------------------------------------------------

def ray_llm_servers(configs: list[tuple[str, dict]]) -> list[ServerSpec]:
    """Ray Serve LLM (``ray.serve.llm``): each config's model (``model_loading_config.model_source`` or ``model_id``)
    and ``engine_kwargs`` (vLLM's engine arguments by their Python names), its ``accelerator_type``; Ray starts the
    engine in its replicas, so a server here is one replica's engine."""
    out = []
    for name, c in configs:
        mlc = c.get("model_loading_config") if isinstance(c.get("model_loading_config"), dict) else {}
        model = str(mlc.get("model_source") or mlc.get("model_id") or "")
        kw = c.get("engine_kwargs") if isinstance(c.get("engine_kwargs"), dict) else {}
        flags = {str(k): v for k, v in kw.items() if k not in ("model",)}
        env = {str(k): str(v) for k, v in ((c.get("runtime_env") or {}).get("env_vars") or {}).items()}
        spec = ServerSpec(name=name, argv=["vllm", "serve", model], env=env, flags=flags,
                          gpu_hint=str(c["accelerator_type"]) if c.get("accelerator_type") else None,
                          multi_node=True)
        spec.notes.append("a Ray Serve LLM replica: Ray places its engine's workers (tensor x pipeline parallel) on "
                          "the cluster's GPUs")
        out.append(spec)
    return out


def _helm_stack(doc: dict) -> list[ServerSpec]:
    out = []
    for m in doc["servingEngineSpec"].get("modelSpec") or []:
        if not isinstance(m, dict):
            continue
        vc = m.get("vllmConfig") if isinstance(m.get("vllmConfig"), dict) else {}
        flags, unrendered = _chart_flags(vc, ray=isinstance(m.get("raySpec"), dict))
        argv = ["vllm", "serve", str(m.get("modelURL") or "")] + [str(a) for a in vc.get("extraArgs") or []]
        env = _env_list(m.get("env"))
        if str(vc.get("v0", "")) == "1":
            env.setdefault("VLLM_USE_V1", "0")  # the chart's v0: "1" sets it
        image = f"{m.get('repository', 'vllm/vllm-openai')}:{m.get('tag', '')}".rstrip(":")
        spec = ServerSpec(name=f"modelSpec.{m.get('name', len(out))}", argv=argv, env=env, image=image, flags=flags,
                          gpu_count=_int_or_none(m.get("requestGPU")), gpu_hint=_gpu_label(m),
                          multi_node=isinstance(m.get("raySpec"), dict))
        if unrendered:
            spec.notes.append("vllmConfig keys the chart does not render as flags (use extraArgs): "
                              + ", ".join(map(str, unrendered)))  # a YAML key may be a number
        if "tensorParallelSize" not in vc and any("tensor-parallel" in str(a) for a in vc.get("extraArgs") or []):
            spec.notes.append("tensor parallelism given in extraArgs: the chart requests GPUs from vllmConfig's "
                              "tensorParallelSize, so the pod may get one GPU")
        out.append(spec)
    return out


# vllmConfig keys production-stack's chart renders as flags (helm/templates/deployment-vllm-multi.yaml), in its order;
# extraArgs follow them. Any other key (v0, prometheusMultiprocDir, ...) sets no flag.
_CHART_KEYS = ("maxModelLen", "dtype", "tensorParallelSize", "maxNumSeqs", "gpuMemoryUtilization", "maxLoras")
_CHART_OTHER = ("extraArgs", "v0", "v1", "prometheusMultiprocDir", "enableChunkedPrefill", "enablePrefixCaching")


def _chart_flags(vc: dict, ray: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The flags the chart renders from one vllmConfig, and the keys it leaves out. A non-empty vllmConfig always
    renders a prefix-caching flag: --enable-prefix-caching when enablePrefixCaching is true, else
    --no-enable-prefix-caching (so leaving it out turns vLLM's default off); chunked prefill only when the key is
    there. A modelSpec with ``raySpec`` is started by the chart's RayCluster script, which renders
    pipelineParallelSize too."""
    if not vc:
        return {}, []
    keys = _CHART_KEYS + (("pipelineParallelSize",) if ray else ())
    flags: dict[str, Any] = {_snake(k): vc[k] for k in keys if k in vc}
    flags["enable_prefix_caching"] = bool(vc.get("enablePrefixCaching"))
    if "enableChunkedPrefill" in vc:
        flags["enable_chunked_prefill"] = bool(vc["enableChunkedPrefill"])
    return flags, [k for k in vc if k not in keys and k not in _CHART_OTHER]


# where other charts keep the server's settings (one level down), besides the top level
_CHART_SECTIONS = ("server", "vllm", "engine", "vllmConfig", "engineArgs", "config", "serving", "args")
_MODEL_KEYS = ("name", "id", "repo", "repository", "path", "modelName", "uri")


def _chart_values(doc: dict) -> list[ServerSpec]:
    """A vLLM chart's values whose template kvdoctor does not know: the model from ``model.name`` (or ``model`` as
    text), every key at the top or in a settings section whose snake_case is a ``vllm serve`` flag (``maxModelLen`` →
    --max-model-len), ``extraArgs`` as words, the GPUs its ``resources`` ask for and the image tag. The chart's own
    template decides what it renders; the note says so."""
    from kvdoctor.engine.serve_flags import SERVE_FLAGS

    model = doc.get("model")
    name = next((model.get(k) for k in _MODEL_KEYS if isinstance(model, dict) and model.get(k)), None) \
        if isinstance(model, dict) else model
    name = _model_from_uri(name) if name else name
    flags: dict[str, Any] = {}
    sections = [doc] + [doc[k] for k in _CHART_SECTIONS if isinstance(doc.get(k), dict)]
    taken: list[str] = []
    extra: list[str] = []
    for sec in sections:
        for k, v in sec.items():
            dest = _snake(k)
            if dest in ("model", "image") or v is None or isinstance(v, (dict, list)) and dest != "extra_args":
                continue
            if dest == "extra_args":
                extra += [str(a) for a in v] if isinstance(v, list) else str(v).split()
            elif "--" + dest.replace("_", "-") in SERVE_FLAGS and v != "":
                flags.setdefault(dest, v)
                taken.append(str(k))
    if isinstance(model, dict) and isinstance(model.get("args"), list):  # the model section's own flags
        extra += [str(a) for a in model["args"]]
    img = doc.get("image") if isinstance(doc.get("image"), dict) else {}
    image = f"{img.get('repository') or img.get('image') or 'vllm/vllm-openai'}:{img.get('tag', '')}".rstrip(":")
    spec = ServerSpec(name="values", argv=["vllm", "serve"] + ([str(name)] if name else []) + extra, image=image,
                      flags=flags or None,
                      gpu_count=_gpu_count(doc.get("resources")), gpu_hint=_gpu_label(doc))
    spec.notes.append("Helm values of a chart kvdoctor does not know: its keys that are vLLM flags ("
                      + (", ".join(taken[:8]) + (", ..." if len(taken) > 8 else "") if taken else "none")
                      + ") are read as those flags; the chart's template decides what it really renders")
    return [spec]


def _kubeai(doc: dict) -> list[ServerSpec]:
    spec = doc.get("spec") or {}
    if str(spec.get("engine", "VLLM")).upper() != "VLLM":
        return []
    model = _model_from_uri(spec.get("url", ""))
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()} if isinstance(spec.get("env"), dict) else {}
    profile = str(spec.get("resourceProfile") or "")
    hint, _, count = profile.partition(":")
    hint = re.sub(r"^(nvidia|amd)-gpu-", "", hint) if hint.startswith(("nvidia-gpu-", "amd-gpu-")) else None
    return [ServerSpec(name=f"Model/{(doc.get('metadata') or {}).get('name', '?')}",
                       argv=["vllm", "serve", model] + [str(a) for a in spec.get("args") or []], env=env,
                       gpu_hint=hint, gpu_count=_int_or_none(count))]


def _skypilot(doc: dict) -> list[ServerSpec]:
    """A SkyPilot task: its ``run`` script in its ``envs``, with the variables SkyPilot sets on the head node
    (``SKYPILOT_NUM_GPUS_PER_NODE`` from ``resources.accelerators``, ``SKYPILOT_NUM_NODES``, rank 0); the image of
    ``resources.image_id`` (``docker:vllm/vllm-openai:TAG``) gives the version."""
    run = str(doc["run"])
    if not re.search(r"\bvllm\s+serve\b|vllm\.entrypoints", run):
        return []
    res = doc.get("resources") if isinstance(doc.get("resources"), dict) else {}
    acc = res.get("accelerators")
    if isinstance(acc, dict) and acc:
        hint, count = next(iter(acc.items()))
    elif isinstance(acc, list) and acc:
        hint, _, count = str(acc[0]).partition(":")  # candidates: the first one
    else:
        hint, _, count = str(acc or "").partition(":")
    gpus = _int_or_none(count) or (1 if hint else None)
    nodes = _int_or_none(doc.get("num_nodes")) or 1
    env = {str(k): str(v) for k, v in (doc.get("envs") or {}).items() if v is not None}
    env.update({"SKYPILOT_NUM_GPUS_PER_NODE": str(gpus or 1), "SKYPILOT_NUM_NODES": str(nodes),
                "SKYPILOT_NODE_RANK": "0"})
    image = str(res.get("image_id") or "").removeprefix("docker:") or None
    spec = ServerSpec(name="run", argv=["bash", "-c", run], env=env, image=image, gpu_hint=str(hint) or None,
                      gpu_count=gpus, multi_node=nodes > 1)
    if isinstance(acc, list) and len(acc) > 1:
        spec.notes.append(f"resources.accelerators lists candidates {acc}: the first is taken")
    return [spec]


def _llm_inference_service(doc: dict) -> list[ServerSpec]:
    """KServe's ``LLMInferenceService`` (the llm-d path): KServe starts vLLM itself from ``spec.model.uri`` with
    ``spec.parallelism`` (tensor / pipeline / data) and the ``main`` container's ``args`` and ``env``; a ``prefill``
    section is a second server (prefill/decode disaggregation), the rest of ``spec`` the decode one."""
    spec = doc.get("spec") or {}
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    name = f"LLMInferenceService/{(doc.get('metadata') or {}).get('name', '?')}"
    out = []
    for part, sec in (("", spec), (".prefill", spec.get("prefill"))):
        if not isinstance(sec, dict) or (part and not sec):
            continue
        par = sec.get("parallelism") if isinstance(sec.get("parallelism"), dict) else {}
        flags: dict[str, Any] = {k: _int_or_none(par[p]) for p, k in (("tensor", "tensor_parallel_size"),
                                                                      ("pipeline", "pipeline_parallel_size"),
                                                                      ("data", "data_parallel_size")) if p in par}
        if par.get("expert") is True:
            flags["enable_expert_parallel"] = True  # KServe renders --enable-expert-parallel
        tmpl = sec.get("template") if isinstance(sec.get("template"), dict) else {}
        main = next((c for c in tmpl.get("containers") or [] if isinstance(c, dict) and c.get("name") == "main"), {})
        limits = ((main.get("resources") or {}).get("limits") or {}) if isinstance(main, dict) else {}
        argv = ["vllm", "serve", _model_from_uri(model.get("uri"))]
        s = ServerSpec(name=name + part, argv=argv + [str(a) for a in main.get("args") or []],
                       env=_env_list(main.get("env")), flags={k: v for k, v in flags.items() if v} or None,
                       gpu_count=_int_or_none(limits.get("nvidia.com/gpu")))
        spc = spec.get("speculator")
        if isinstance(spc, dict):
            conf = spc.get("config") if isinstance(spc.get("config"), dict) else {}
            draft = _model_from_uri((spc.get("model") or {}).get("uri")) if isinstance(spc.get("model"), dict) else ""
            sc = {str(k): (_int_or_none(v) if _int_or_none(v) is not None else v) for k, v in conf.items()}
            if draft:
                sc.setdefault("model", draft)
            if sc.get("method") or sc.get("model"):
                # KServe renders the speculator as --speculative-config (its method, draft model and token count)
                s.flags = {**(s.flags or {}), "speculative_config": sc}
            else:
                s.notes.append("a speculator (speculative decoding) is configured without a method or draft model: "
                               "not modelled")
        out.append(s)
    return out


def _dynamo(doc: dict) -> list[ServerSpec]:
    """NVIDIA Dynamo's ``DynamoGraphDeployment``: each service's ``extraPodSpec.mainContainer`` is its process
    (``python3 -m dynamo.vllm --model X ...`` for a vLLM worker; the frontend is not one), and the service's own
    ``resources`` ask for its GPUs (``gpu: "8"``)."""
    name = str((doc.get("metadata") or {}).get("name", "?"))
    services = (doc.get("spec") or {}).get("services") if isinstance(doc.get("spec"), dict) else None
    out = []
    for sname, svc in (services or {}).items() if isinstance(services, dict) else ():
        if not isinstance(svc, dict):
            continue
        extra = svc.get("extraPodSpec") if isinstance(svc.get("extraPodSpec"), dict) else {}
        main = extra.get("mainContainer")
        if not isinstance(main, dict) or svc.get("componentType") == "frontend":
            continue
        # Dynamo's runtime image does not start vLLM by itself: only a command that names the worker is one
        if not re.search(r"\bdynamo\.vllm\b|\bvllm\s+serve\b|vllm\.entrypoints",
                         " ".join(_words(main.get("command")) + _words(main.get("args")))):
            continue
        spec = _container(main, f"DynamoGraphDeployment/{name}/{sname}", _gpu_label(extra))
        if spec is None:
            continue
        res = svc.get("resources") if isinstance(svc.get("resources"), dict) else {}
        for part in ("limits", "requests"):
            got = res.get(part)
            if spec.gpu_count is None and isinstance(got, dict) and got.get("gpu") is not None:
                spec.gpu_count = _int_or_none(got["gpu"])
        out.append(spec)
    return out


def _is_llmd_values(d: dict) -> bool:
    """llm-d's ModelService Helm values: ``modelArtifacts`` beside a ``decode`` (and maybe ``prefill``) section of
    containers."""
    return "kind" not in d and isinstance(d.get("modelArtifacts"), dict) and any(
        isinstance(d.get(k), dict) and isinstance(d[k].get("containers"), list) for k in ("decode", "prefill"))


def _llmd_values(doc: dict) -> list[ServerSpec]:
    """llm-d's ModelService values: one server per ``decode`` / ``prefill`` section (disaggregated prefill/decode).
    The chart renders the vLLM container from ``modelCommand``: ``vllmServe`` runs ``vllm serve <model>`` plus the
    container's ``args``, ``imageDefault`` the image's entrypoint with ``--model`` added, ``custom`` the container's
    own ``command``; ``parallelism.tensor`` / ``data`` become the matching flags when the args do not give them."""
    art = doc["modelArtifacts"]
    model = str(art.get("name") or _model_from_uri(art.get("uri")) or "")
    out = []
    for role in ("decode", "prefill"):
        sec = doc.get(role)
        if not isinstance(sec, dict) or sec.get("create") is False:
            continue
        cont = next((c for c in sec.get("containers") or [] if isinstance(c, dict)
                     and (c.get("name") == "vllm" or c.get("modelCommand"))), None)
        if cont is None:
            continue
        how = str(cont.get("modelCommand") or "vllmServe")
        args = _words(cont.get("args"))
        if how == "custom":
            argv = _words(cont.get("command")) + args
        elif how == "imageDefault":
            argv = IMAGE_ENTRYPOINT + ["--model", model] + args
        else:
            argv = ["vllm", "serve", model] + args
        par = sec.get("parallelism") if isinstance(sec.get("parallelism"), dict) else {}
        flags = {k: _int_or_none(par[p]) for p, k in (("tensor", "tensor_parallel_size"),
                                                        ("data", "data_parallel_size")) if p in par}
        spec = ServerSpec(name=f"modelservice.{role}", argv=argv, env=_env_list(cont.get("env")),
                          image=str(cont.get("image") or "") or None, flags={k: v for k, v in flags.items() if v} or None,
                          gpu_count=_gpu_count(cont.get("resources")), gpu_hint=_gpu_label(sec))
        spec.notes.append(f"llm-d ModelService values, the {role} pods ({sec.get('replicas', 1)} replica(s)): the "
                          f"container as the chart renders modelCommand '{how}'")
        out.append(spec)
    return out


# ---- shared ------------------------------------------------------------------------------------------------------

def _model_from_uri(uri: object) -> str:
    """A model named by a platform's storage URI (``hf://org/name``, ``s3://...``, ``pvc://...``): what vLLM is given."""
    return re.sub(r"^(hf|s3|gs|oss|pvc|ollama)://", "", str(uri or ""))


def _words(value: object, shell: str = "") -> list[str]:
    """A command given as a list, or (compose, ``shell`` naming the key for an error) as a string the way compose
    splits it."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    if shell:
        try:
            return shlex.split(str(value))
        except ValueError as exc:
            raise InputError(f"{shell}: cannot split the command: {exc}") from None
    return [str(value)]


def _is_vllm(image: str, argv: list[str]) -> bool:
    """A vLLM server: its command starts one, or a vLLM image runs its own entrypoint (no command, or only flags and
    a model after it). A router or another program in a vLLM-named image (production-stack's router) is not one."""
    import os

    if re.search(r"\bvllm(?:-[a-z0-9]+)?\s+serve\b|vllm\.entrypoints|\bdynamo\.vllm\b", " ".join(argv)):
        return True
    low = image.lower()
    if "vllm" not in low or "router" in low:
        return False
    head = os.path.basename(argv[0]) if argv else ""
    return not argv or argv[0].startswith("-") or not (head in (*_SHELLS, "env")
                                                       or head.startswith("python") or argv[0].startswith("/bin/"))


def _starts_command(words: list[str]) -> bool:
    import os

    head = os.path.basename(words[0]) if words else ""
    return bool(words) and (head in ("vllm", "sh", "bash") or head.startswith(("python", "vllm-")))


def _env_list(items: object) -> dict[str, str]:
    """A Kubernetes-style ``env`` list (``[{name, value}]``) as a mapping; ``valueFrom`` entries have no value here."""
    return {str(e["name"]): str(e["value"]) for e in items if isinstance(e, dict) and "name" in e
            and e.get("value") is not None} if isinstance(items, list) else {}


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", str(key)).lower()


def _int_or_none(v: object) -> int | None:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None
