"""`python -m campaign.core.metrics > docs/metrics.md`: the catalogue as the docs page."""

from campaign.core.metrics import markdown

print(markdown(), end="")
