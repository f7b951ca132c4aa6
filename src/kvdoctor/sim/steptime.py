"""Step-time models: how long one engine step takes for a given batch.

A model answers two questions:

* ``step(tokens, sampled, kv_decode, prefill_pairs, num_reqs)``: seconds for a step that computes
  ``tokens`` tokens (prefill chunks + decodes), samples ``sampled`` next tokens, whose decodes
  read ``kv_decode`` cached tokens and whose prefill chunks attend ``prefill_pairs`` (query, key)
  pairs;
* ``decode_line(n)``: ``(A, B)`` such that a step of ``n`` decodes reading ``kv`` cached tokens
  takes ``A + B * kv`` seconds — what the event loop uses to skip identical decode steps;
* optionally ``decode_cpu_line(n)``: a second line ``(A2, B2)`` (or None) when the step is the
  larger of two lines (async scheduling: the engine's CPU work overlaps the GPU step, below); the
  event loop then ends a stretch where the larger line changes, so the jump stays exact.

Engine CPU work per running request (``SERVING["engine_cpu_per_req_ms"]``), as vLLM 0.33 does it:
every engine step runs, in Python, ``Scheduler.schedule()`` (``vllm/v1/core/sched/scheduler.py``:
the ``while req_index < len(self.running)`` loop over every running request), the worker's
``GPUModelRunner._update_states`` / ``_prepare_inputs`` (per-request loops over
``scheduler_output`` and ``input_batch.req_ids``) and ``Scheduler.update_from_output`` (``for
req_id, num_tokens_scheduled in num_scheduled_tokens.items()``: one ``EngineCoreOutput`` per
request). That is O(running requests) per step. ``EngineCore.step`` (``vllm/v1/engine/core.py``)
does schedule -> ``execute_model`` -> ``future.result()`` -> ``update_from_output`` in sequence,
so without async scheduling a step costs GPU + CPU. With async scheduling
(``max_concurrent_batches`` = 2, ``EngineCore.step_with_batch_queue``) the next batch is scheduled
and its inputs prepared while the current one runs on the GPU, and ``update_from_output`` of one
step runs under the next: the step period is max(GPU, CPU). The API server's per-token output
work (``OutputProcessor.process_outputs``: detokenize + stream per request per step) runs in its
own process and is the front end's ``per_output_token_s`` (``sim/frontend.py``), not this term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the boundary types (annotations only)
    from kvdoctor.engine.defaults import ResolvedEngine
    from kvdoctor.facts import GpuSpec, ModelShape


@dataclass(frozen=True)
class LinearStepTime:
    """A plain linear model (tests, and a fallback the user can reason about by hand)."""

    base_s: float = 0.005
    per_token_s: float = 0.0
    per_kv_token_s: float = 0.0
    per_pair_s: float = 0.0
    per_request_s: float = 0.0
    # a token's cost rising with the step's size (on the CPU engine, a 1,790-token step cost 0.25 ms a token where
    # 112-token steps cost 0.11: activations past the caches); 0 unless a calibration measured it
    per_token_sq_s: float = 0.0
    # a pair of prompt tokens from two different prompts prefilled in one step (the step's prefill tokens squared less
    # each prompt's own): on the CPU engine a step's cost per prompt token rose with how many prompts it prefilled,
    # not with its size (docs/simulation.md, procedure 15); 0 unless a calibration measured it
    per_cross_pair_s: float = 0.0

    def step(self, tokens: int, sampled: int, kv_decode: int, prefill_pairs: float, num_reqs: int,
             cross_pairs: float = 0.0) -> float:
        return (self.base_s + self.per_token_s * tokens + self.per_kv_token_s * kv_decode
                + self.per_pair_s * prefill_pairs + self.per_request_s * num_reqs
                + self.per_token_sq_s * tokens * tokens + self.per_cross_pair_s * cross_pairs)

    def decode_line(self, n: int) -> tuple[float, float]:
        return (self.base_s + (self.per_token_s + self.per_request_s) * n + self.per_token_sq_s * n * n,
                self.per_kv_token_s)

    def decode_cpu_line(self, n: int) -> tuple[float, float] | None:
        return None  # one line: no overlapped CPU term


# -------------------------------------------------------------------------------------------------
# The calibrated roofline model

# Maximum Achievable Matmul FLOPS (TFLOPS) per part: the best `matmul` a brute-force shape search reaches, so a
# ceiling no served GEMM passes. Source: S. Bekman, "Machine Learning Engineering", compute/accelerator, "Maximum
# Achievable Matmul FLOPS comparison table" (v2, torch 2.5-2.7; MI250X from its v1 table). Keys are catalog names.
MAMF_TFLOPS: dict[str, dict[str, float]] = {
    "bf16": {
        "NVIDIA A100 40GB SXM": 271.2, "NVIDIA A100 80GB SXM": 271.2,
        "NVIDIA A100 40GB PCIe": 252.9, "NVIDIA A100 80GB PCIe": 252.9,
        "NVIDIA H100 SXM": 794.5, "NVIDIA GH200": 828.6,
        "AMD Instinct MI325X": 784.9, "AMD Instinct MI300X": 668.4, "AMD Instinct MI250X (one GCD)": 147.0,
        # the China export parts run the same dies at the same clocks (only NVLink is cut): their A100 / H100
        # measurement, stated before any result on them was evaluated (scripts/fit_serving.py, protocol 11)
        "NVIDIA A800 80GB SXM": 271.2, "NVIDIA A800 80GB PCIe": 252.9, "NVIDIA H800 SXM": 794.5,
    },
    "fp8": {"NVIDIA H100 SXM": 1402.6, "NVIDIA GH200": 1535.0, "NVIDIA H800 SXM": 1402.6},
}
# a part the table lacks: H100 SXM's efficiency, the lowest NVIDIA entry (BF16 794.5 / 989, FP8 1402.6 / 1979)
MAMF_DEFAULT_FRACTION = {"bf16": 0.803, "fp8": 0.709}
# Protocol 6 (scripts/fit_serving.py): whether the compute-bound GEMM rate is capped at the ceiling above
GEMM_CEILING = True
MOE_COMPUTE_FLOOR = True
MOE_READ_FLOOR = False  # protocol 6 item 6: evaluated, not adopted (docs/simulation.md)


def gemm_ceiling_tflops(gpu: GpuSpec, dtype: str, peak_tflops: float) -> float:
    """The most a GEMM of ``dtype`` ("bf16" or "fp8") can reach on ``gpu``: its MAMF, else the default fraction
    of its datasheet peak."""
    return MAMF_TFLOPS[dtype].get(gpu.name) or MAMF_DEFAULT_FRACTION[dtype] * peak_tflops

def _family(gpu: GpuSpec | None) -> str:
    """Which fitted coefficient set applies: the profiled part itself, else "generic"."""
    name = (gpu.name if gpu is not None else "").upper()
    if any(t in name for t in ("H100", "H200", "H800", "H20", "GH200")):
        return "h100"
    if "A100" in name or "A800" in name:
        return "a100"
    if "A40" in name:
        return "a40"
    return "generic"


def _refuse(gpu: GpuSpec | None, bw: float | None) -> None:
    """Why the time model cannot price ``gpu`` (no bandwidth, or no 16-bit tensor rate), as one line."""
    from kvdoctor.errors import InputError

    if gpu is not None and bw and gpu.capability and gpu.capability < 80:
        # Volta / Turing: no bf16 tensor cores; the time model is fitted on bf16 / fp8 parts only
        raise InputError(f"GPU {gpu.name} (compute capability {gpu.compute_capability[0]}."
                         f"{gpu.compute_capability[1]}) has no bf16 tensor rate: the time model is fitted on "
                         "bf16/fp8 GPUs (8.0 and newer), so it does not simulate this one; ledger, plan and "
                         "check work")
    raise InputError(f"GPU {gpu.name if gpu is not None else None!s} has no bandwidth/TFLOPS in the catalog: "
                     "the simulator needs a named GPU (not just a memory size)")


# the NVLink of the parts whose collectives were profiled (Vidur's A100 and H100 nodes)
_PROFILED_NVLINK_GBPS = {"a100": 600.0, "h100": 900.0}
_EXPORT_PARTS = ("A800", "H800")


def _collective(network: dict[str, list[float]], family: str | None, op: str, gpus: int,
                gpu: GpuSpec) -> list[float]:
    """[c_ms, GB/s] of one collective over ``gpus`` GPUs: the profiled family's fit; without a
    profile, the H100 fit at this GPU's fraction of NVLink (900 GB/s), else PCIe 4.0 x16 (12 GB/s)."""
    key = f"{family}:{op}:{gpus}" if family else None
    nv = gpu.nvlink_gbps
    if key and key in network:
        c_ms, bw = network[key]
        ref = _PROFILED_NVLINK_GBPS.get(family or "")
        # an export part of the family, its NVLink cut (A800, H800: 400 GB/s), moves data at its own link's share.
        # Only those: the H100 NVL's 600 GB/s bridge would change results already evaluated (protocols 4-10), so it
        # keeps the profiled node's figure until a protocol of its own says otherwise
        export = any(t in gpu.name.upper() for t in _EXPORT_PARTS)
        return [c_ms, bw * nv / ref] if export and ref and nv and nv < ref else [c_ms, bw]
    h_c, h_bw = network.get(f"h100:{op}:{min(gpus, 8)}", network[f"h100:{op}:2"])
    return [h_c, (nv / 900.0) * h_bw if nv else 12.0]


def _softmax(m: float, f: float, q: float) -> float:
    hi, lo = (m, f) if m >= f else (f, m)
    if hi <= 0:
        return 0.0
    return hi * (1.0 + (lo / hi) ** q) ** (1.0 / q)


@dataclass(frozen=True)
class Term:
    """One named term of the step-time model, for --explain output and docs."""

    name: str
    formula: str


class RooflineStepTime:
    """Step time on one GPU rank of a deployment, from roofline terms with fitted efficiencies.

    GEMMs: ``c + softmax(weight_bytes / (BW*eta_m), 2*params*tokens / (PEAK*eta_c))`` per linear
    layer (MoE experts: only the experts the batch touches are read); element-wise kernels:
    ``c_op + bytes_op / (BW*eta_op)``; attention: decode ``c + kv_bytes_read / (BW*eta_d)``,
    prefill ``c + 4*heads*head_dim*pairs / (PEAK*eta_p)``; TP: two all-reduces of the hidden
    state per layer; plus the sampler per step (and scheduling/input preparation when async
    scheduling is off).

    PP: vLLM v1 keeps up to ``pp`` batches in flight, so the running requests travel as
    ``m = min(pp, requests)`` micro-batches. One "step" of the simulation (every running request
    advances one token) is one trip of a micro-batch through all stages: the layers at ``T/m``
    tokens, its ``kv/m`` KV reads, plus ``pp-1`` send/recv hops. Weight reads are not shared
    between micro-batches, so memory-bound decode gains nothing, while compute and KV reads
    spread over the stages; with fewer requests than stages the pipeline has bubbles (m < pp).
    """

    def __init__(self, shape: ModelShape, gpu: GpuSpec | None, *, tp: int = 1, pp: int = 1, weight_bytes: float = 2.0,
                 kv_bytes: float = 2.0, compute_peak_tflops: float | None = None, async_scheduling: bool = True,
                 quant_name: str | None = None, enforce_eager: bool = False, serving: dict | None = None,
                 full_decode_graph_max: int = 0):
        from kvdoctor.sim import coefficients as C

        self.family = _family(gpu)
        # serving-level corrections fitted on real `vllm bench serve` results (scripts/fit_serving.py):
        # the kernel-profile fit above knows kernels, not what a served engine adds around them
        sv = dict(C.SERVING)
        sv.update(serving or {})
        self.serving = sv
        self.eager = bool(enforce_eager)
        co = C.COEFFS[self.family]
        self.gemm = co["gemm"]
        self.ew = co["ew"]
        bw = gpu.hbm_bandwidth_gbps if gpu is not None else None
        peak16 = gpu.bf16_tflops if gpu is not None else None
        if gpu is None or not bw or not peak16:
            _refuse(gpu, bw)
        self.bw = bw * 1e9 / 1e3  # bytes per ms
        self._compute_rates(gpu, sv, peak16, compute_peak_tflops)
        low_bit = weight_bytes < 1.0  # 4-bit AWQ/GPTQ (Marlin kernels): dequantisation costs bandwidth
        self.wq_mem = sv["int4_mem_eff"] if low_bit else 1.0
        self.tp, self.pp = tp, pp
        self.wb, self.kvb = weight_bytes, kv_bytes
        self.quant_name = quant_name
        L = shape.num_layers
        self.L = L
        h = shape.hidden_size
        self.h = h
        nh = shape.num_attention_heads
        hd = shape.attn_head_dim or shape.head_size
        self.nh_r = max(1, nh // tp)
        self.hd = hd
        p = shape.params
        if shape.is_mla:
            # MLA: one latent (kv_lora_rank + rope dim) per token per layer on every rank
            self.kv_tok_layer = shape.head_size * kv_bytes
            attn_params = (p.attention / L if p else 4 * h * h) / tp
            self.attn_ops = [attn_params / 2, attn_params / 2]
        else:
            nkv_r = max(1, shape.num_kv_heads // tp)
            self.kv_tok_layer = 2 * nkv_r * hd * kv_bytes
            self.attn_ops = [h * (self.nh_r + 2 * nkv_r) * hd, self.nh_r * hd * h]
        moe = shape.moe
        n_moe_layers = 0
        if moe is not None:
            n_dense = moe.first_dense_layers or len(moe.dense_layers)
            n_moe_layers = max(0, L - n_dense)
        self.n_moe_layers = n_moe_layers
        n_dense_layers = L - n_moe_layers
        if p is not None and n_dense_layers:
            mlp = p.mlp_dense / n_dense_layers / tp
        else:
            mlp = 3 * h * shape.intermediate_size / tp if n_dense_layers else 0.0
        gated = shape.mlp_kind == "gated"
        self.mlp_ops = [mlp * 2 / 3, mlp / 3] if gated else [mlp / 2, mlp / 2]
        self.mlp_inter_r = (mlp / 3 / h) if gated else (mlp / 2 / h)
        self.gated = gated
        if moe is not None and n_moe_layers:
            e_all = (p.experts / n_moe_layers / tp) if p else 3 * h * moe.moe_intermediate_size * moe.num_experts / tp
            self.expert_params = e_all / moe.num_experts
            self.n_experts = moe.num_experts
            self.top_k = moe.experts_per_token
            sh = (p.shared_experts / n_moe_layers / tp) if p else 0.0
            self.shared_ops = [sh * 2 / 3, sh / 3] if sh else []
        else:
            self.expert_params = 0.0
            self.n_experts = self.top_k = 0
            self.shared_ops = []
        self.lm_head = shape.vocab_size * h / tp
        ad = C.ATTENTION["decode"]
        ap = C.ATTENTION["prefill"]
        self.att_dec = ad
        self.att_pre = ap
        # network: fitted per GPU family and GPU count; other parts scale NVLink or assume PCIe
        fam_net = self.family if self.family in ("h100", "a100") else None
        self.ar = _collective(C.NETWORK, fam_net, "all_reduce", tp, gpu) if tp > 1 else None
        self.sr = _collective(C.NETWORK, fam_net, "send_recv", 2, gpu) if pp > 1 else None
        ov = C.OVERHEADS.get(self.family if self.family in C.OVERHEADS else "a100")
        # Vidur's CPU-overhead profiles come from a v0-era engine; the served V1 engine's sampler and
        # input preparation cost what the public results say (overhead_scale)
        # (both parts: the per-request part of that v0 profile is Python per-sequence-group work; V1's
        # batched sampler reads the logits once, which the roofline terms already price)
        k = sv.get("overhead_scale", 1.0)
        self.sampler = [k * x for x in ov["sampler"]]
        self.cpu = [k * x for x in ov["cpu"]] if not async_scheduling else [0.0, 0.0]
        # the V1 engine core's Python work per running request per step (module docstring): added to
        # the GPU step without async scheduling, overlapped with it (max) with async scheduling
        self.cpu_req_ms = float(sv.get("engine_cpu_per_req_ms", 0.0))
        self.async_scheduling = bool(async_scheduling)
        self._step_overheads(sv, L, n_moe_layers, full_decode_graph_max)
        # served prefill attention (FlashAttention-2/3, FlashInfer) relative to the older A100
        # attention profile the kernel fit used
        self.attn_pre_scale = float(sv.get("attn_prefill_scale", 1.0)) or 1.0
        self._fixed_cache: dict[tuple, float] = {}
        self._line_cache: dict[int, tuple[float, float]] = {}

    def _step_overheads(self, sv: dict, L: int, n_moe_layers: int, full_decode_graph_max: int) -> None:
        """``step_ms`` (piecewise graphs or eager), ``full_step_ms`` (full decode graphs) and, under candidate E,
        the eager launch stream ``launch_ms``."""
        # per-step engine overhead around the kernels, per layer: with CUDA graphs the gaps between
        # replayed kernels and the collectives' launches; eager mode launches every kernel from Python
        layer_ms = sv["eager_layer_ms"] if self.eager else sv.get("graph_layer_ms", 0.0)
        self.step_ms = (sv["eager_step_ms"] if self.eager else sv["graph_step_ms"]) + layer_ms * L
        # Eager mode, candidate E of protocol 21 (``serving["eager_overlap"]``): PyTorch launches each kernel
        # from Python asynchronously and the CPU runs ahead of the GPU until the step's sync (the sampled
        # tokens' copy to the host), so the step is the LARGER of the GPU's kernels (as with piecewise graphs)
        # and the CPU's launch stream (eager_step_ms + eager_layer_ms per layer), not their sum: launch-bound
        # at small batches, GPU-bound at large ones. Invariant: eager is never faster than piecewise graphs.
        self.launch_ms = 0.0
        if self.eager and sv.get("eager_overlap"):
            self.launch_ms = self.step_ms
            self.step_ms = sv["graph_step_ms"] + sv.get("graph_layer_ms", 0.0) * L
        # fused-MoE layers: routing, top-k, permutation and the grouped GEMM launch, per MoE layer
        self.step_ms += sv.get("moe_layer_ms", 0.0) * n_moe_layers
        # Full CUDA graphs for decode-only batches (cudagraph_mode FULL_AND_PIECEWISE, the V1 default
        # from vLLM 0.11): the whole forward, attention included, replays as one graph, so the
        # per-layer gaps of piecewise graphs (attention launched eagerly between graph pieces) go
        # away; mixed prefill batches and batches above the largest captured size still run piecewise.
        # Invariant: full_step_ms <= step_ms.
        self.full_decode_graph_max = 0 if self.eager else int(full_decode_graph_max)
        self.full_step_ms = (sv["graph_step_ms"] + sv.get("full_graph_layer_ms", 0.0) * L
                             + sv.get("moe_layer_ms", 0.0) * n_moe_layers)
        self.full_step_ms = min(self.full_step_ms, self.step_ms)

    def _compute_rates(self, gpu: GpuSpec, sv: dict, peak16: float, compute_peak_tflops: float | None) -> None:
        """``peak16`` (attention) and ``peak`` (GEMMs, fp8 where the weights run fp8 GEMMs) in flop per ms."""
        # compute efficiency per GPU generation, measured on served prefills (the Vidur kernel
        # profiles over-state H100's advantage: served H100/A100 prefill is ~1.8x, datasheets say 3.2x)
        cs = sv["compute_scale"].get(self.family, sv["compute_scale"]["generic"])
        self.peak16 = peak16 * 1e12 / 1e3 * cs
        self.peak = (compute_peak_tflops or peak16) * 1e12 / 1e3 * cs
        self.gemm_ceiling_tflops = None
        ceiling_on = bool(sv.get("gemm_ceiling", GEMM_CEILING))
        self._moe_floor = ceiling_on and bool(sv.get("moe_compute_floor", MOE_COMPUTE_FLOOR))
        self._moe_read_floor = self._moe_floor and bool(sv.get("moe_read_floor", MOE_READ_FLOOR))
        if not ceiling_on:
            return
        # Invariant: the compute-bound GEMM rate (peak x eta_c) never exceeds what the part's best matmul reaches
        # (protocol 6). compute_scale, fitted on public runs (some on a warm prefix cache read as cold), alone puts an
        # H100's GEMMs at 103 % of its datasheet peak. It is one constant acting on GEMMs and attention alike, so its
        # excess is taken out of both (the amended form, docs/simulation.md): the BF16 factor slows attention too.
        eta_c = self.gemm[2]
        ceiling16 = gemm_ceiling_tflops(gpu, "bf16", peak16)
        f16 = min(1.0, ceiling16 / (peak16 * cs * eta_c))
        self.peak16 *= f16
        if compute_peak_tflops and compute_peak_tflops != peak16:  # fp8 GEMMs: the fp8 entry
            self.gemm_ceiling_tflops = gemm_ceiling_tflops(gpu, "fp8", compute_peak_tflops)
            self.peak *= min(1.0, self.gemm_ceiling_tflops / (compute_peak_tflops * cs * eta_c))
        else:
            self.gemm_ceiling_tflops = ceiling16
            self.peak *= f16

    # -- pieces (ms) ---------------------------------------------------------------------------
    def _gemm(self, params: float, tokens: int) -> float:
        c, eta_m, eta_c, q = self.gemm
        m = params * self.wb / (self.bw * eta_m * self.wq_mem)
        f = 2.0 * params * tokens / (self.peak * eta_c)
        return c + _softmax(m, f, q)

    def _ew(self, op: str, nbytes: float) -> float:
        c, eta = self.ew[op]
        return c + nbytes / (self.bw * eta)

    def _dense_part(self, T: float, sampled: float) -> float:
        """Everything that depends only on the token count (weights, activations, comms) for one
        micro-batch of ``T`` tokens travelling through all layers."""
        key = (T, sampled)
        v = self._fixed_cache.get(key)
        if v is not None:
            return v
        h, L = self.h, self.L
        layer = sum(self._gemm(pp, T) for pp in self.attn_ops)
        if L - self.n_moe_layers:
            dense = sum(self._gemm(pp, T) for pp in self.mlp_ops)
            dense += self._ew("mlp_act", (3 if self.gated else 2) * T * self.mlp_inter_r * 2)
        else:
            dense = 0.0
        moe = 0.0
        if self.n_moe_layers:
            E, k = self.n_experts, self.top_k
            touched = E * (1.0 - (1.0 - k / E) ** T)  # expected distinct experts read by T tokens
            c, eta_m, eta_c, q = self.gemm
            m = touched * self.expert_params * self.wb / (self.bw * eta_m * self.wq_mem)
            f = 2.0 * self.expert_params * k * T / (self.peak * eta_c)
            # fused-MoE kernels run below dense GEMM efficiency (routing, permutation, small per-expert tiles)
            experts = self.serving["moe_factor"] * _softmax(m, f, q)
            if self._moe_read_floor:  # nor the touched experts' reads below the dense GEMMs' memory rate
                experts = max(experts, m, f)
            elif self._moe_floor:  # the fitted factor may shrink the reads, never the compute below the ceiling's rate
                experts = max(experts, f)
            moe = 3 * c + experts + sum(self._gemm(pp, T) for pp in self.shared_ops)
            moe += self._ew("mlp_act", 3 * T * k * self.expert_params / 3 / h * 2)
        ew = (self._ew("input_layernorm", 2 * T * h * 2) + self._ew("post_attention_layernorm", 2 * T * h * 2)
              + self._ew("attn_rope", 2 * T * (self.attn_ops[0] / h) * 2) + self._ew("add", 3 * T * h * 2))
        total = L * (layer + ew) + (L - self.n_moe_layers) * dense + self.n_moe_layers * moe
        total += self._ew("emb", 2 * T * h * 2) + self._gemm(self.lm_head, max(1, sampled))
        if self.ar is not None:
            c, gbs = self.ar
            total += 2 * L * (c + T * h * 2 / (gbs * 1e9 / 1e3))
        if self.sr is not None:
            c, gbs = self.sr
            total += (self.pp - 1) * (c + T * h * 2 / (gbs * 1e9 / 1e3))
        if len(self._fixed_cache) < 65536:
            self._fixed_cache[key] = total
        return total

    def _kv_ms_per_token(self) -> float:
        return self.L * self.kv_tok_layer / (self.bw * self.att_dec[1])

    # -- the interface ---------------------------------------------------------------------------
    def step(self, tokens: int, sampled: int, kv_decode: int, prefill_pairs: float, num_reqs: int,
             cross_pairs: float = 0.0) -> float:
        m = min(self.pp, max(1, num_reqs))  # micro-batches in flight (1 without PP)
        ms = self._dense_part(tokens / m if m > 1 else tokens, sampled / m if m > 1 else sampled)
        n_dec = sampled / m  # every sampled request attends; per-sequence cost is tiny
        if kv_decode:
            ms += self.L * (self.att_dec[0] + self.att_dec[2] * n_dec) + kv_decode / m * self._kv_ms_per_token()
        if prefill_pairs:
            ms += self.L * (self.att_pre[0]
                            + 4.0 * self.nh_r * self.hd * prefill_pairs / m
                            / (self.peak16 * self.att_pre[1] * self.attn_pre_scale))
        full = not prefill_pairs and tokens <= sampled and num_reqs <= self.full_decode_graph_max
        ms += (self.sampler[0] + self.sampler[1] * num_reqs + self.cpu[0] + self.cpu[1] * num_reqs
               + (self.full_step_ms if full else self.step_ms))
        cpu = self.cpu_req_ms * num_reqs
        # async scheduling: max(GPU, engine CPU), step_with_batch_queue; sync: their sum, EngineCore.step
        ms = max(ms, cpu) if self.async_scheduling else ms + cpu
        if self.launch_ms:  # the eager launch stream (E): the same max as decode_cpu_line's
            ms = max(ms, self.launch_ms + (0.0 if self.async_scheduling else cpu))
        return ms / 1e3

    def decode_line(self, n: int) -> tuple[float, float]:
        v = self._line_cache.get(n)
        if v is None:
            m = min(self.pp, max(1, n))
            a = (self._dense_part(n / m if m > 1 else n, n / m if m > 1 else n)
                 + self.L * (self.att_dec[0] + self.att_dec[2] * n / m)
                 + self.sampler[0] + self.sampler[1] * n + self.cpu[0] + self.cpu[1] * n
                 + (self.full_step_ms if n <= self.full_decode_graph_max else self.step_ms))
            if not self.async_scheduling:
                a += self.cpu_req_ms * n  # sync: the engine's CPU work adds to the step
            v = (a / 1e3, self._kv_ms_per_token() / m / 1e3)
            self._line_cache[n] = v
        return v

    def decode_cpu_line(self, n: int) -> tuple[float, float] | None:
        """Async scheduling: the engine's CPU time for ``n`` decodes, ``(A2, 0)``; a decode step
        takes ``max(decode_line, this)``. None when it adds instead (sync) or is zero. Eager mode under
        candidate E: the CPU's launch stream (with the sync engine CPU added, as decode_line adds it)."""
        cpu = self.cpu_req_ms * n
        if self.launch_ms:
            # eager (E): the launch stream, plus the engine's CPU work where it adds (sync), else the larger
            a2 = max(self.launch_ms, cpu) if self.async_scheduling else self.launch_ms + cpu
            return a2 / 1e3, 0.0
        if not self.async_scheduling or self.cpu_req_ms <= 0:
            return None
        return cpu / 1e3, 0.0

    def weight_floor_s(self) -> float:
        """The least time one request's decode step can take on this rank: every weight it multiplies read once at the
        part's peak bandwidth (no efficiency, no launch gap, no KV read; MoE: its top-k and shared experts). A step
        model that prices a lone decode below this prices a read the memory cannot do."""
        params = (self.L * sum(self.attn_ops) + (self.L - self.n_moe_layers) * sum(self.mlp_ops)
                  + self.n_moe_layers * (self.top_k * self.expert_params + sum(self.shared_ops)) + self.lm_head)
        return params * self.wb / self.bw / 1e3

    def describe(self) -> dict:
        return {
            "coefficients": self.family,
            "engine_cpu_per_req_ms": self.cpu_req_ms,
            "engine_cpu_overlaps_gpu": self.async_scheduling,
            "tensor_parallel_size": self.tp,
            "pipeline_parallel_size": self.pp,
            "weight_bytes_per_param": self.wb,
            "kv_bytes_per_element": self.kvb,
            "compute_peak_tflops": self.peak * 1e3 / 1e12,
            "gemm_rate_tflops": round(self.peak * self.gemm[2] * 1e3 / 1e12, 1),
            "gemm_ceiling_tflops": round(self.gemm_ceiling_tflops, 1) if self.gemm_ceiling_tflops else None,
            "quantization": self.quant_name,
            "enforce_eager": self.eager,
            "step_overhead_ms": round(self.step_ms, 4),
            "eager_launch_floor_ms": round(self.launch_ms, 4) if self.launch_ms else None,
            "decode_full_graph_step_overhead_ms": round(self.full_step_ms, 4) if self.full_decode_graph_max else None,
            "decode_step_ms_batch1_ctx1k": round(1e3 * self.step(1, 1, 1024, 0, 1), 3),
            "decode_step_ms_batch64_ctx1k": round(1e3 * self.step(64, 64, 64 * 1024, 0, 64), 3),
        }


_FP8_METHODS = ("fp8", "fbgemm_fp8", "modelopt", "compressed-tensors", "fp8_per_tensor", "fp8_per_block",
                "fp8_per_channel", "mxfp8", "modelopt_mxfp8", "deepseek_v4_fp8")


def from_deployment(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine,
                    serving: dict | None = None) -> RooflineStepTime:
    """The step-time model for ``shape`` on ``gpu`` under a resolved engine configuration."""
    from kvdoctor.ledger.weights import DTYPE_BYTES, resolve_quant

    r = resolved  # every field concrete (engine.defaults.resolve)
    dtype_bytes = DTYPE_BYTES.get(r.dtype or "bfloat16", 2)
    quant = resolve_quant(shape, r.quantization) if (r.quantization or shape.quant) else None
    wb = quant.bytes_per_weight if quant is not None else dtype_bytes
    peak = None
    cap = gpu.capability if gpu is not None else None
    if quant is not None and quant.method in _FP8_METHODS and (quant.bits in (None, 8)) and cap and cap >= 89:
        # fp8 weights run fp8 GEMMs on Ada/Hopper/Blackwell; elsewhere vLLM dequantizes (Marlin)
        peak = gpu.fp8_tflops if gpu is not None else None
    return RooflineStepTime(
        shape, gpu, tp=int(r.tensor_parallel_size), pp=int(r.pipeline_parallel_size),
        weight_bytes=wb, kv_bytes=float(r.kv_cache_dtype_bytes), compute_peak_tflops=peak,
        async_scheduling=bool(r.async_scheduling), quant_name=quant.method if quant else None,
        enforce_eager=bool(r.enforce_eager), serving=serving,
        full_decode_graph_max=full_decode_graph_max(resolved),
    )


# FULL_AND_PIECEWISE became V1's default cudagraph_mode in vLLM 0.11.0 (decode-only batches replay
# one full graph); 0.8-0.10 captured piecewise graphs only (attention outside the graph)
FULL_DECODE_GRAPHS_SINCE = (0, 11)


def full_decode_graph_max(resolved: ResolvedEngine) -> int:
    """Largest decode batch that replays a full CUDA graph under ``resolved`` (0: none)."""
    from kvdoctor.engine.version import parse_version

    mode = str(resolved.cudagraph_mode or "")
    if resolved.enforce_eager or mode not in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
        return 0
    if (resolved.engine or "v1") != "v1" or (resolved.platform or "cuda") != "cuda":
        return 0
    try:
        v = parse_version(str(resolved.vllm_version or "0.33.0")).triple[:2]
    except Exception:  # an unparsable version string: the current default
        v = (0, 33)
    if v < FULL_DECODE_GRAPHS_SINCE:
        return 0
    return int(resolved.max_cudagraph_capture_size or 0)
