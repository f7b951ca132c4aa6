"""Write ``src/kvdoctor/catalog/data/config_defaults.json``: the defaults transformers' config classes declare for the
shape fields kvdoctor reads, per ``model_type``.

Why: vLLM reads a checkpoint's config.json through transformers, whose config class fills every field the file leaves
out. Google's Gemma 3 files are that short form (gemma-3-4b-it's ``text_config`` names neither its heads nor its
vocabulary: Gemma3TextConfig's 8 heads, 4 KV heads, head_dim 256 and 262,208 tokens stand in), so a reader of the raw
JSON alone refused them. kvdoctor ships the declared defaults instead of importing transformers (offline, fast
start-up).

Only *declared* defaults are taken (a dataclass field's default, or ``__init__``'s), never a value a class computes
after the fact: LlamaConfig declares ``head_dim=None`` and derives 128 from its own default hidden size and heads, which
would be wrong for a file that gives other ones.

Run with the interpreter that has transformers installed (the vLLM 0.33 environment of ``scripts/oracle_env.sh``):
    ~/.cache/kvdoctor/vllm033/bin/python scripts/build_config_defaults.py
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "kvdoctor" / "catalog" / "data" / "config_defaults.json"

# the size and attention fields ledger.shape reads. Not the MLA or MoE ones: their classes' defaults are one model's
# (DeepseekV2Config's kv_lora_rank 512 with num_experts_per_tok None), and the families that use them publish them
# whole; a file missing them is read as it is.
FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "max_position_embeddings", "sliding_window", "query_pre_attn_scalar",
    # whether the output projection shares the embedding's weights: Gemma's classes say True, Llama's False; a file
    # that leaves it out (gemma-3-1b-it's gemma3_text) gets its class's answer, as vLLM does through transformers
    "tie_word_embeddings",
)
TEXT_KEYS = ("text_config", "language_config", "llm_config", "thinker_config")  # ledger.shape._TEXT_CONFIG_KEYS


def declared(cls) -> dict:
    if dataclasses.is_dataclass(cls):
        return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return {}
    return {k: p.default for k, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}


def main() -> int:
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    out: dict[str, dict] = {}
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:  # noqa: BLE001 - a class that cannot import here has nothing to give
            continue
        d = declared(cls)
        row = {k: v for k in FIELDS if isinstance(v := d.get(k), (bool, int, float)) and not (
            isinstance(v, float) and v != v)}
        subs = getattr(cls, "sub_configs", None) or {}
        for key in TEXT_KEYS:
            sub = subs.get(key)
            if isinstance(getattr(sub, "model_type", None), str) and sub.model_type:
                row[f"{key}.model_type"] = sub.model_type
        if row and ("num_attention_heads" in row or "num_hidden_layers" in row or any("." in k for k in row)):
            out[model_type] = row
    doc = {"schema": "kvdoctor.catalog.config_defaults/1",
           "source": f"transformers {transformers.__version__}: each config class's declared defaults",
           "fields": list(FIELDS), "model_types": out}
    OUT.write_text(json.dumps(doc, indent=0, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(out)} model types -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
