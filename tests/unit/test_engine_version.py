"""engine.version: parsing what operators type and the behaviour boundaries between releases."""

from __future__ import annotations

import pytest

from kvdoctor.engine.version import LATEST_KNOWN, parse_version, traits
from kvdoctor.errors import InputError


@pytest.mark.parametrize(
    "text,triple,pre",
    [("0.33.0", (0, 33, 0), ""), ("v0.10.1", (0, 10, 1), ""), ("0.6.3.post1", (0, 6, 3), "post1"),
     ("0.11.0rc2", (0, 11, 0), "rc2"), ("0.10.2.dev45+g1234abc", (0, 10, 2), "dev45"), ("0.9", (0, 9, 0), ""),
     ("0.1.dev20073+g8e685d198", LATEST_KNOWN, "dev20073"),
     # a release candidate's dev build, as a public 0.16 start-up log prints it (it was refused: a whole log unreadable)
     ("0.16.1rc1.dev265+gd106bf39f", (0, 16, 1), "rc1.dev265"), ("0.6.3.post2.dev5", (0, 6, 3), "post2.dev5")],
)
def test_parse(text, triple, pre):
    v = parse_version(text)
    assert v.triple == triple and v.pre == pre


def test_str_roundtrip():
    assert str(parse_version("v0.6.3.post1")) == "0.6.3.post1"
    assert str(parse_version("0.11.0rc2")) == "0.11.0rc2"
    assert str(parse_version("0.16.1rc1.dev265+gd106bf39f")) == "0.16.1rc1.dev265+gd106bf39f"


@pytest.mark.parametrize("text", ["latest", "0", "1.2.3", "0.x.1", "", "0.10.1-foo bar"])
def test_garbage(text):
    with pytest.raises(InputError) as exc:
        parse_version(text)
    assert "\n" not in str(exc.value)


def test_ordering_against_tuples():
    assert parse_version("0.9.2") < (0, 10, 0)
    # a release candidate behaves as its release (boundaries are stated per release line)
    assert parse_version("0.10.0rc1") >= (0, 10, 0) and not parse_version("0.10.0rc1") < (0, 10, 0)
    assert parse_version("0.21.0") >= (0, 21, 0)
    assert sorted([parse_version("0.10.1"), parse_version("0.9.2"), parse_version("0.33.0")])[0].triple == (0, 9, 2)


@pytest.mark.parametrize(
    "version,util,cg,formula,engine",
    [("0.6.3.post1", 0.9, False, "v0", "v0"),
     ("0.7.3", 0.9, False, "v0", "v0"),
     ("0.8.5", 0.9, False, "blocks_x_block_size", "v1"),
     ("0.9.2", 0.9, False, "blocks_x_block_size", "v1"),
     ("0.10.1", 0.9, False, "per_group", "v1"),
     ("0.19.0", 0.9, False, "per_group", "v1"),  # vllm issue #40691 (per-group log on 0.19.0)
     ("0.20.1", 0.9, False, "concurrency_x_len", "v1"),
     ("0.21.0", 0.92, True, "concurrency_x_len", "v1"),  # PR #38284
     ("0.33.0", 0.92, True, "concurrency_x_len", "v1")],
)
def test_traits_boundaries(version, util, cg, formula, engine):
    t = traits(version)
    assert t.gpu_memory_utilization_default == util
    assert t.cudagraph_in_kv_budget is cg
    assert t.kv_tokens_formula == formula
    assert t.engine == engine
    assert t.requested_memory_ceil is (engine == "v1")
    assert t.null_block_reserved is (engine == "v1")


def test_env_selects_v0_only_while_it_exists():
    assert traits("0.9.2", env={"VLLM_USE_V1": "0"}).engine == "v0"
    assert traits("0.9.2", env={"VLLM_USE_V1": "0"}).kv_tokens_formula == "v0"
    assert traits("0.7.3", env={"VLLM_USE_V1": "1"}).engine == "v1"
    assert traits("0.11.0", env={"VLLM_USE_V1": "0"}).engine == "v1"  # v0 removed


def test_cudagraph_env_switch():
    assert traits("0.33.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}).cudagraph_in_kv_budget is False
    assert traits("0.15.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}).cudagraph_in_kv_budget is True
    assert traits("0.10.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}).cudagraph_in_kv_budget is False


def test_batch_eras():
    assert traits("0.6.0").batch_defaults_era == "v0"
    assert traits("0.8.4").batch_defaults_era == "v1-0.8-name"  # by device name until 0.8.4 (wheel source)
    assert traits("0.8.5").batch_defaults_era == "v1-0.8"  # by device memory from 0.8.5
    assert traits("0.10.0").batch_defaults_era == "v1-0.9"
    assert traits("0.33.0").batch_defaults_era == "v1-0.2x"


def test_as_dict_is_plain():
    d = traits("0.33.0").as_dict()
    assert d["version"] == "0.33.0" and d["gpu_memory_utilization_default"] == 0.92


def test_memory_regimes_are_traits():
    # The empirical regimes ledger/memory.py applies, now with their boundaries in one place.
    assert [traits(v).sampler_regime for v in ("0.11.0", "0.12.0", "0.19.0", "0.20.2", "0.21.0", "0.33.0")] == \
        ["full", "light", "light", "light", "full", "full"]
    # v0 before 0.6.5 counted the CUDA context and other processes as non-torch (PR #10511 changed it).
    # V1 until 0.9.1 did the same (gpu_worker: used − torch allocated), then measured over a snapshot.
    assert [traits(v).non_torch_era for v in ("0.6.3", "0.6.5", "0.8.0", "0.9.1", "0.11.0", "0.12.0", "0.33.0")] == \
        ["v0-early", "v0", "v1-0.8", "v1-early", "v1-early", "v1-late", "v1-late"]
    assert traits("0.10.0", env={"VLLM_USE_V1": "0"}).non_torch_era == "v0"
    from kvdoctor.ledger import memory

    # 0.19 lies in the light-sampler releases [0.12, 0.21) (LIGHT_SAMPLER, fitted on the H100 table):
    # the old entry point gives that answer itself, not "whatever traits says"
    assert memory.sampler_regime(traits("0.19.0").version) == "light"
    assert memory.sampler_regime((0, 11, 0)) == "full" and memory.sampler_regime((0, 21, 0)) == "full"
    assert memory.LIGHT_SAMPLER == ((0, 12, 0), (0, 21, 0))  # still importable from the old home


def test_chunked_local_hybrid_env_and_version():
    var = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
    assert traits("0.33.0").chunked_local_hybrid is True  # envs.py default "1"
    assert traits("0.33.0", env={var: "0"}).chunked_local_hybrid is False
    assert traits("0.19.0").chunked_local_hybrid is False  # default "0" since PR #21761 (0.10.1)
    assert traits("0.19.0", env={var: "1"}).chunked_local_hybrid is True
    assert traits("0.10.0").chunked_local_hybrid is True and traits("0.10.0").chunked_local_env is False
    assert traits("0.9.1", env={var: "1"}).chunked_local_hybrid is False  # no ChunkedLocalAttentionSpec yet


def test_env_flags_read_like_vllm():
    # bool(int(os.getenv(...))): " 0 " is 0, "2" is true, "true" makes vLLM crash at start-up.
    assert traits("0.33.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": " 0 "}).cudagraph_in_kv_budget is False
    assert traits("0.33.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}).cudagraph_estimate_disabled
    assert not traits("0.19.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}).cudagraph_estimate_disabled
    assert traits("0.33.0", env={"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "2"}).chunked_local_hybrid
    with pytest.raises(InputError, match="int\\(\\)"):
        traits("0.33.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "false"})
