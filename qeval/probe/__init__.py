"""Latency and throughput probes against a variant's endpoint."""
