"""Benchmarks: each prints its own figures next to the reference measured in the same run."""
