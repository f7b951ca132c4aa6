"""Evidence readers: vLLM logs of every era, /metrics, Prometheus, benchmark results, request traces."""
