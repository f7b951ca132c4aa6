"""``kvdoctor experiment``: the one-variable experiment, run for real against vLLM.

- ``server``: start/stop a process group kvdoctor owns, wait for /health, ports, the vLLM command;
- ``load``: the load spec (shared option names with ``simulate``) -> `vllm bench serve` args and a sim workload;
- ``measure``: one run (start, /metrics before, samples, bench, /metrics after, stop), files kept;
- ``readout``: figures from a run's files (bench result, counters, samples, cache_config_info, start-up facts);
- ``core``: the experiment (baseline + one change, or chain one's levels), prediction, journal, verdict.

No heavy imports at module level: the CLI's start-up budget applies.
"""
