"""The run record and what it is made from: the record itself (run.py), its measurements as typed models
(measurements.py), the per-item results store (store.py), and metric declarations (metrics.py)."""
