"""The core of the campaign orchestrator.

What lives here: the campaign-file schema, the store, the queue state machine, settings
and the CLI. It imports nothing from `flows/` or `reports/` except lazily inside CLI
commands, so that loading a campaign file or reading the store stays cheap.
"""

__version__ = "0.1.0"
