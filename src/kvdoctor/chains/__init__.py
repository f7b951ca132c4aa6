"""Reasoning: the rule registry, chain one (plan), chain two (diagnose), slow requests, swap, stop-loss."""
