"""Engine configuration (vLLM's own flag names) and its sources: flags, `vllm serve` line, YAML, log."""
