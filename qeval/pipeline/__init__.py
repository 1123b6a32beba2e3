"""The pipeline, stage by stage: plan -> variant (quantize, serve, suites, probe, grid) behind an executor ->
judge (compare, gate) -> publish (report, MLflow); resume reads what an earlier run left; power plans sizes.

Nothing is imported here: a Ray worker that runs one variant imports its stage, not the whole driver."""
