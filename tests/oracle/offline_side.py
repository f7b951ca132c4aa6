"""vLLM 0.33's own reading of `vllm bench throughput` / `vllm bench latency` command lines, run in the oracle env:
stdin a JSON list of {"tool", "args"}, stdout the workload each parses to (throughput: after validate_args' dataset
default and _to_serve_args, the adapter get_samples reads; latency: its parser). Nothing is sampled (no tokenizer)."""
import json, sys, shlex, warnings
warnings.simplefilter("ignore")
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks import throughput as T, latency as L
out = []
for line in json.load(sys.stdin):
    tool, args = line["tool"], line["args"]
    p = FlexibleArgumentParser()
    (T if tool == "throughput" else L).add_cli_args(p)
    a = p.parse_args(args)
    if tool == "throughput":
        if not a.dataset_path and a.dataset_name != "prefix_repetition":
            a.dataset_name = "random"  # validate_args' first step (the rest needs a tokenizer)
        s = T._to_serve_args(a)
        out.append({"dataset_name": a.dataset_name, "num_prompts": a.num_prompts,
                    "random_input_len": s.random_input_len, "random_output_len": s.random_output_len,
                    "random_prefix_len": s.random_prefix_len, "random_range_ratio": float(s.random_range_ratio),
                    "enable_prefix_caching": a.enable_prefix_caching})
    else:
        out.append({"num_prompts": a.batch_size, "random_input_len": a.input_len, "random_output_len": a.output_len,
                    "enable_prefix_caching": a.enable_prefix_caching})
print(json.dumps(out))
