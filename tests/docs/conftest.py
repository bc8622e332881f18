import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def gen() -> ModuleType:
    """The generator script ``tools/gen_spec_docs.py``, imported as a module."""
    path = ROOT / "tools" / "gen_spec_docs.py"
    spec = importlib.util.spec_from_file_location("gen_spec_docs", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_spec_docs"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
