"""The store layer: the campaign's database, its queue state machine and the read models
over it. It reads the core and nothing above it, so any runner, page or CLI command sees
the same facts through one set of tables.
"""
