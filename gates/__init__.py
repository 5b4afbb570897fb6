"""Gates: the predicate library and the verdict engine.

Pure functions over pandas frames of *canonical* measurements; no I/O. Greedy rows are
removed in exactly one place, `engine.canonical_only`, before any predicate runs.
May import `campaign.schema` and `campaign.states`, nothing else of the project.
"""
