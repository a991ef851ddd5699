"""Benchmarks and the fault campaign: run from a checkout, never shipped in the wheel."""
