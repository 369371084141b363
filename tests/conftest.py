import sys
from pathlib import Path

# Test helpers (builders) live beside the tests; make them importable without packaging the tests.
sys.path.insert(0, str(Path(__file__).parent))
