"""Benchmarks: scripts that print tables of ratios measured in one run (not timed tests)."""
