"""Prefect flows: campaign flow -> one flow run per arm -> one task per probe.

Prefect observes and schedules; the campaign database is the source of truth, so a flow
can be killed at any point and `campaign resume` carries on from the store.

The layer that knows every registry (runtimes, probes, predicates), so it also resolves a
campaign file's names (`resolve`). May import campaign, arms and gates; never reports or
the CLI.
"""
