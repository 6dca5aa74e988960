"""Benchmark harness: `navi bench` runs these; results go to bench/results/."""
