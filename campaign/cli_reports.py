"""Report-side commands of the `campaign` CLI (export, ui), registered on the main app."""

from __future__ import annotations

from campaign.cli import app  # noqa: F401  (commands below register on it)
