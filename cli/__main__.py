"""`python -m cli`: the same as the `campaign` script."""

from cli.main import main

main()
