"""Presentation: terminal rendering, JSON schemas, the self-contained HTML report."""
