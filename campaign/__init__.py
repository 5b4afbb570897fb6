"""The bottom two layers of the orchestrator.

The core, which imports nothing of the project: the campaign-file schema (`schema`), the
state and verdict names (`states`), units and number formatting (`units`), facts about
operating-system processes (`processes`) and the registry primitive (`registry`).

The store and queue on top of it: the database (`store`, `migrations`), the queue state
machine with its atomic claims (`queue`), and the read models over the store (`summary`,
`isolation`). Nothing here imports arms, gates, flows, reports or the CLI; see
docs/architecture.md.
"""

__version__ = "0.1.0"
