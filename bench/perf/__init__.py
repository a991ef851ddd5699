"""The benchmark suite: ``python -m bench.perf``. See docs/performance.md."""
