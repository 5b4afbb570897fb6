"""The bottom two layers of the orchestrator, one folder each.

- `campaign.core`: what a campaign is, importing nothing of the project: the campaign
  file's schema and loader, state and verdict names, units, the metrics catalogue, the
  mechanisms, operating-system process facts and the registry primitive.
- `campaign.store`: where a campaign's facts live, on top of the core: tables and
  migrations, the database, the queue state machine with its atomic claims, liveness of
  runners, and the read models over the store (summary, isolation).

Nothing here imports arms, gates, flows, reports or the CLI; see docs/architecture.md.
"""

__version__ = "0.1.0"
