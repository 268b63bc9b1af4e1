"""Shared set-up: tests import the package from this checkout (python/),
and find the header and the library of the same checkout."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def header_text() -> str:
    return (REPO / "include" / "symmcomm.h").read_text()


@pytest.fixture(scope="session")
def built_library() -> Path:
    """The library scripts/setup builds (or SYMMCOMM_LIBRARY when set)."""
    explicit = os.environ.get("SYMMCOMM_LIBRARY")
    path = Path(explicit) if explicit else REPO / "target" / "release" / "libsymmcomm.so"
    assert path.is_file(), f"{path} is missing: build the library first (scripts/setup)"
    return path


@pytest.fixture(scope="session")
def lib(built_library):
    import symmcomm

    return symmcomm.SymmLibrary(str(built_library))
