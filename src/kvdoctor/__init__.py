"""kvdoctor: deduce vLLM memory and scheduling tuning instead of guessing."""

__version__ = "0.1.0"
