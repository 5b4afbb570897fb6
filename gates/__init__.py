"""Gates: the comparison primitive, the predicate library and the verdict engine.

Pure functions over pandas frames of *canonical* measurements; no I/O. Greedy rows are
removed in exactly one place, `engine.canonical_only`, before any predicate runs. Every
comparative predicate reads its numbers through `compare` (cells, n, intervals of the
median from `intervals`, error rates), so a verdict is one its numbers support. Each
predicate has a module named by what it judges (`control`, `best_of`, `majority`, ...);
`catalog` is the one module that lists them.
May import the core (`campaign.core.schema`, `campaign.core.states`, `campaign.core.units`), nothing
else of the project.
"""
