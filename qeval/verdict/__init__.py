"""The verdict: a suite's paired scores and the gate policy in, comparisons, gate results and verdicts out.

Pure throughout (no results store, no engine, no campaign file): policy.py (the policy and its settings), rules.py
(its queries), pairing.py, comparison.py (the interval and the tests of one metric), gates.py, sequential.py
(looks while a suite runs), suite.py (one suite of one variant: what the driver and the monitor both ask),
noise.py (the A/A floor), flips.py, recommend.py, decision.py (may a KV-cache or serving variant be turned on),
findings.py and savings.py. Nothing is imported here, so that reading a
campaign file (which needs policy.py) never loads the statistics.
"""
