"""Where a campaign's results are logged in MLflow."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..validation import Name, Strict


def default_tracking_uri(output_dir: Path) -> str:
    return f"sqlite:///{(output_dir / 'mlflow.db').resolve()}"


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

    def uri(self, output_dir: Path, environ: Mapping[str, str]) -> str:
        """Where the campaign logs: this spec's tracking_uri, else MLFLOW_TRACKING_URI, else the output folder's store."""
        return self.tracking_uri or environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(output_dir)

    def registered_name(self, campaign: str) -> str | None:
        return (self.registered_model or campaign) if self.registry else None
