"""The vLLM release a container image names: vLLM's own tags, ROCm's `..._vllm_X_...`, and other projects' tags that
are their own releases, not vLLM's (engine.sources.version_from_image)."""

from __future__ import annotations

import pytest

from kvdoctor.engine.sources import parse_serve_line, version_from_image


@pytest.mark.parametrize(("image", "version"), [
    ("vllm/vllm-openai:v0.10.1", "0.10.1"), ("docker.io/vllm/vllm-openai:v0.11.0", "0.11.0"),
    ("vllm/vllm-openai:v0.9.0.1", "0.9.0.1"), ("vllm/vllm-openai:v0.8.5.post1", "0.8.5.post1"),
    ("rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521", "0.8.5"),
    ("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.10.1", "0.10.1"),
    ("vllm/vllm-openai:latest", None), ("localhost:5000/vllm-openai", None),
    # LMCache's image carries LMCache's release (LMCache#3326: lmcache/vllm-openai:v0.4.5 on a 2026 vLLM), NGC its
    # month, llm-d its own
    ("lmcache/vllm-openai:v0.4.5", None), ("nvcr.io/nvidia/vllm:25.09-py3", None), ("ghcr.io/llm-d/llm-d:v0.2.0", None),
])
def test_the_release_an_image_names(image, version):
    assert version_from_image(image) == version


def test_a_docker_line_with_lmcaches_image_is_not_read_as_vllm_0_4():
    cfg = parse_serve_line("docker run --runtime nvidia --gpus all --network host lmcache/vllm-openai:v0.4.5 "
                           "Qwen/Qwen3-14B --kv-transfer-config '{\"kv_connector\":\"LMCacheMPConnector\"}'")
    assert cfg.vllm_version is None and cfg.model == "Qwen/Qwen3-14B"
