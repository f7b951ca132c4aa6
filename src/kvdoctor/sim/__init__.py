"""Discrete-event simulation of vLLM's v1 scheduler with a calibrated step-time model."""
