"""The prompts a calibration series really sent, as the prefix cache sees them: one digest per full KV block.

Executed by the test bed venv's interpreter (its ``main`` needs vLLM and the tokenizer stack; kvdoctor imports only
``dataset_key``, which needs neither):

    VENV_PYTHON prompt_blocks.py TOKENIZER_DIR OUT_JSON SERIES_DIR [SERIES_DIR ...] [--block-size 32]

For every run of each ``SERIES_DIR/series.json`` it rebuilds the run's prompts with vLLM's own ``RandomDataset`` (the
bench's ``--seed`` and lengths, read from the run's ``bench_args``), tokenizes each as the server does (the tokenizer's
``encode`` with its special tokens: what ``/v1/completions`` sends the engine), checks the token counts against the
run's saved ``input_lens``, and writes ``OUT_JSON``: per distinct random load (``dataset_key``: seed, count, lengths,
range; the prompts depend on nothing else), per request, the chained digests of its prompt's full blocks (block j's
digest covers tokens ``[0, (j + 1) * block_size)``, as vLLM's block hashes chain the parent's hash). Two requests
share a cached block exactly when their digests agree.

Why: on the tiny model's 1,356 allowed tokens the random dataset's prompts share heads far more often than a real
vocabulary lets them (runs of the byte alphabet above 0x7f decode to U+FFFD and re-encode the same, whatever bytes they
were), so a few requests of every run find most of their prompt cached (series31: the server logged a 6.1 % prefix-cache
hit rate). kvdoctor replays them through the server's block pool (``kvdoctor.testbed.series.session_prompt_heads``).
"""

import argparse
import hashlib
import json
import sys


def _opts(args: list[str]) -> dict:
    out, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[a[2:]] = args[i + 1]
                i += 2
                continue
            out[a[2:]] = True
        i += 1
    return out


KEY_OPTS = ("seed", "num-prompts", "random-input-len", "random-output-len", "random-range-ratio")


def dataset_key(bench_args: list[str]) -> str:
    """The random load's identity: what the bench's prompts depend on (kvdoctor.testbed.series reads it the same way)."""
    o = _opts(bench_args)
    return " ".join(f"{k}={o.get(k, '')}" for k in KEY_OPTS)


def block_digests(tokens: list[int], block_size: int) -> list[str]:
    out, prev = [], b""
    for j in range(len(tokens) // block_size):
        h = hashlib.sha256(prev + json.dumps(tokens[j * block_size:(j + 1) * block_size]).encode()).digest()
        out.append(h.hex()[:16])
        prev = h
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer_dir")
    ap.add_argument("out_json")
    ap.add_argument("series_dirs", nargs="+")
    ap.add_argument("--block-size", type=int, default=32)
    a = ap.parse_args()

    import os

    from transformers import AutoTokenizer
    from vllm.benchmarks.datasets.datasets import RandomDataset

    tok = AutoTokenizer.from_pretrained(a.tokenizer_dir)
    loads: dict[str, list[list[str]]] = {}
    for d in a.series_dirs:
        meta = json.load(open(os.path.join(d, "series.json")))
        for r in meta["runs"]:
            o = _opts(r["bench_args"])
            if o.get("dataset-name", "random") != "random" or int(o.get("random-prefix-len", 0) or 0):
                print(f"{d}/{r['name']}: not a random dataset without a shared prefix", file=sys.stderr)
                return 2
            key = dataset_key(r["bench_args"])
            saved = json.load(open(os.path.join(d, f"{r['name']}.json")))["input_lens"]
            if key not in loads:
                reqs = RandomDataset(random_seed=int(o.get("seed", 0))).sample(
                    tokenizer=tok, num_requests=int(o["num-prompts"]),
                    range_ratio=float(o.get("random-range-ratio", 0.0)),
                    input_len=int(o.get("random-input-len", 1024)), output_len=int(o.get("random-output-len", 128)))
                prompts = [tok.encode(q.prompt) for q in reqs]
                if [len(p) for p in prompts] != list(saved):
                    print(f"{d}/{r['name']}: the rebuilt prompts' lengths differ from the run's input_lens",
                          file=sys.stderr)
                    return 1
                loads[key] = [block_digests(p, a.block_size) for p in prompts]
            elif [len(b) for b in loads[key]] != [n // a.block_size for n in saved]:
                print(f"{d}/{r['name']}: another run of the same load had other lengths", file=sys.stderr)
                return 1
    doc = {"block_size": a.block_size, "tokenizer": os.path.basename(os.path.normpath(a.tokenizer_dir)),
           "vocab_size": tok.vocab_size, "loads": loads}
    with open(a.out_json, "w") as f:
        f.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
