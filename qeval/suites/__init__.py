"""Suites turn an endpoint into per-item records: custom JSONL suites and lm-eval tasks."""
