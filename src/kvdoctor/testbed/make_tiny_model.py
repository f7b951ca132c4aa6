"""Build a tiny random-weight Llama and a locally trained tokenizer, for vLLM's CPU engine.

Runs INSIDE the test bed's venv (it needs torch, transformers, tokenizers — vLLM's own requirements),
never in kvdoctor's process: ``<venv>/bin/python make_tiny_model.py OUT_DIR``.

Why random weights: the test bed exercises vLLM's scheduler, KV-cache manager, metrics, logs and
``vllm bench serve`` — all of which depend on token counts, not on what the tokens say. No hub access is
needed (nor possible on the CI machines). Everything is seeded, so two builds give the same files.
Adapted from ../shared/real-vllm/make_tiny_model.py (same architecture: 2 layers, hidden 128,
4 heads / 2 KV heads, bf16, byte-level BPE with a chat template).
"""

from __future__ import annotations

import argparse
import json
import os
import random


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--max-pos", type=int, default=8192)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    # Tokenizer: byte-level BPE trained on seeded synthetic text, so any byte string encodes.
    random.seed(0)
    words = ["the", "kv", "cache", "block", "token", "request", "scheduler", "prefill", "decode",
             "batch", "gpu", "memory", "model", "layer", "head", "vllm", "random", "prompt", "output",
             "latency", "throughput", "queue", "page"]
    corpus = [" ".join(random.choice(words) + str(random.randint(0, 999)) for _ in range(40))
              for _ in range(3000)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=["<s>", "</s>", "<unk>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    # A chat template so /v1/chat/completions works as well as /v1/completions.
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant: {% endif %}")
    fast.save_pretrained(a.out)

    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=a.hidden, intermediate_size=a.hidden * 2,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      num_key_value_heads=a.kv_heads, max_position_embeddings=a.max_pos,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                      pad_token_id=fast.pad_token_id, tie_word_embeddings=False, torch_dtype=a.dtype)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).to(getattr(torch, a.dtype))
    m.save_pretrained(a.out, safe_serialization=True)
    print(json.dumps({"out": a.out, "vocab": len(fast),
                      "params": sum(p.numel() for p in m.parameters()),
                      "files": sorted(os.listdir(a.out))}))


if __name__ == "__main__":
    main()
