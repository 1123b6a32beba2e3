"""Suites turn an endpoint into per-item records: custom JSONL suites, lm-eval tasks, logprobs corpora, and any
kind a plugin registers, all through the Suite protocol (base.py)."""
