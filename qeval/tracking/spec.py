"""Where a campaign's results are logged in MLflow."""

from __future__ import annotations

from ..specs import Name, Strict


class MlflowSpec(Strict):
    enabled: bool = True
    tracking_uri: str | None = None  # default: MLFLOW_TRACKING_URI, else a SQLite store in the run folder
    # with no tracking URI: log through a real `mlflow server` started on loopback for the run (and
    # stopped after it), rather than writing the SQLite store directly
    server: bool = False
    experiment: str | None = None  # default: the campaign name
    # each variant as a version in the model registry, its verdict a tag (qeval.verdict), for deployment tooling
    registry: bool = False
    registered_model: Name | None = None  # default: the campaign name

    def registered_name(self, campaign: str) -> str | None:
        return (self.registered_model or campaign) if self.registry else None
