"""What a runtime adapter would start, for the tests of adapters and their options.

Why here: tests/unit/test_adapters.py and tests/unit/test_runtime_options.py both turn a
launch context into the adapter's argv and read a flag's value out of it; one copy keeps
their "the adapter launched nothing" failure and their flag lookup alike.
"""

from __future__ import annotations

from arms.runtimes import catalog
from arms.runtimes.launching import LaunchContext


def argv_of(ctx: LaunchContext) -> list[str]:
    """The command line the context's runtime adapter starts (one that starts nothing fails the test)."""
    launch = catalog.get(ctx.runtime.adapter).launch(ctx)
    assert launch is not None, f"adapter {ctx.runtime.adapter!r} launched nothing"
    return launch.argv


def value_after(argv: list[str], flag: str) -> str:
    """The value given to `flag` (the argument after it); the flag must be there."""
    assert flag in argv, (flag, argv)
    return argv[argv.index(flag) + 1]
