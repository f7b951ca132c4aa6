#!/usr/bin/env bash
# Build (or reuse) the model-free vLLM 0.33.0 oracle environment used by tests/oracle/.
#
# What it holds: vLLM 0.33.0's Python code (the CUDA wheel installed --no-deps) on CPU torch, with
# VLLM_TARGET_DEVICE=cpu. Its kernels and engine never run; its Scheduler, KVCacheManager and KV-cache
# planning (kv_cache_utils / kv_cache_planning) do, which is all the differential tests need.
#
# Usage: bash scripts/oracle_env.sh [DIR]
#   DIR defaults to ${KVDOCTOR_ORACLE_ENV:-$HOME/.cache/kvdoctor/vllm033}. A DIR whose marker file
#   (.kvdoctor-oracle-ok) exists is reused as is (exit 0 at once); otherwise it is (re)built: ~100 s, ~3.7 GB.
# Needs: python3 >= 3.10 with venv, and PyPI (or a find-links folder that holds torch 2.13.0+cpu).
set -euo pipefail
ENV_DIR=${1:-${KVDOCTOR_ORACLE_ENV:-$HOME/.cache/kvdoctor/vllm033}}
VLLM_VERSION=0.33.0
MARK="$ENV_DIR/.kvdoctor-oracle-ok"
if [ -f "$MARK" ] && [ -x "$ENV_DIR/bin/python" ]; then
  echo "oracle env ready: $ENV_DIR"; exit 0
fi
PY=${PYTHON:-python3}
mkdir -p "$(dirname "$ENV_DIR")"
# Build beside the target and move into place at the end, so an interrupted build never looks finished.
# (venv scripts hard-code their path, so the build dir IS the final dir; the marker is what says "done".)
rm -rf "$ENV_DIR"
"$PY" -m venv "$ENV_DIR"
. "$ENV_DIR/bin/activate"
pip install -q -U pip packaging
WHEELDIR="$ENV_DIR/wheels"; mkdir -p "$WHEELDIR"
pip download -q --no-deps "vllm==$VLLM_VERSION" -d "$WHEELDIR"
WHL=$(ls "$WHEELDIR"/vllm-"$VLLM_VERSION"-*.whl | head -1)
# vLLM 0.33 pins torch==2.14.0 (CUDA). The scheduler and planning code only need torch's dtypes:
# a CPU build is enough and far smaller. 2.13.0+cpu comes from a find-links folder where there is one;
# elsewhere the PyPI CPU index serves it.
TORCH_SPEC=${KVDOCTOR_ORACLE_TORCH:-torch==2.13.0+cpu}
pip install -q "$TORCH_SPEC" || pip install -q --index-url https://download.pytorch.org/whl/cpu "$TORCH_SPEC"
pip install -q --no-deps "$WHL"
python - "$WHL" > "$ENV_DIR/reqs.txt" <<'PY'
import sys, zipfile
from packaging.requirements import Requirement
z = zipfile.ZipFile(sys.argv[1])
meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
# GPU-only kernels and media packages: not importable (or not needed) by the scheduler/planning code.
skip = {"torch", "torchvision", "torchaudio", "torchcodec", "flashinfer-python", "pynvvideocodec",
        "humming-kernels", "tilelang", "tokenspeed-mla", "instanttensor", "fastsafetensors", "nvidia-cutlass-dsl"}
for line in meta.splitlines():
    if not line.startswith("Requires-Dist: "):
        continue
    r = Requirement(line[len("Requires-Dist: "):])
    if r.marker and not r.marker.evaluate({"extra": ""}):
        continue
    n = r.name.lower()
    if n in skip or n.startswith("nvidia-"):
        continue
    print(str(r).split(";")[0])
PY
pip install -q -r "$ENV_DIR/reqs.txt" "$TORCH_SPEC"
rm -rf "$WHEELDIR"
VLLM_TARGET_DEVICE=cpu python -c "import vllm, sys; assert vllm.__version__ == '$VLLM_VERSION', vllm.__version__; print('vllm', vllm.__version__)"
touch "$MARK"
echo "oracle env ready: $ENV_DIR"
