"""The bottom layer: fact types every other package names (model, GPU). Imports nothing from kvdoctor.

See docs/architecture.md for the layer order; tests/unit/test_layers.py keeps it.
"""

from kvdoctor.facts.gpu import GpuSpec, capability_int, capability_text
from kvdoctor.facts.model import LAYER_KINDS, ModelShape, MoeShape, ParamCounts, QuantInfo

__all__ = ["GpuSpec", "capability_int", "capability_text", "LAYER_KINDS", "ModelShape", "MoeShape", "ParamCounts",
           "QuantInfo"]
