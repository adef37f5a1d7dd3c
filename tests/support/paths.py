"""Where the tests find the checkout and their data, wherever in tests/ they live."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
