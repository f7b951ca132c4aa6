"""The memory ledger: model shape, weights, activation/non-torch/CUDA-graph terms, KV page/block math."""
