"""Where the repository's parts are, for tests in any lane (one place, whatever the depth
of the test module)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
FIXTURES_DIR = TESTS / "fixtures"
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
