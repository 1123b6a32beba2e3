"""Where a campaign's variants run. Each executor only places: where a unit of work runs, how often it is tried
again, and the run's time budget (base.py). The pipeline hands it the work (base.Work); what a unit sends back
is one message stream, merged the same way by every executor (stream.py).

spec.py: each kind's settings and the registry, read by the campaign file; base.py: the contract, the
budget; outcome.py: what a variant's run found; stream.py: the messages, both sides; local.py, ray.py: the
built-ins; leases.py: a latency probe's device held alone where variants share it. Nothing here imports the
pipeline."""
