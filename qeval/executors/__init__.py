"""Where a campaign's variants run: each executor kind's settings (spec.py), read by the campaign file.

The executors themselves (placement, retries, a budget) live with the pipeline they drive; this room holds
only what the campaign file validates, so config.py never imports the pipeline."""
