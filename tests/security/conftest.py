import sys
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import cluster

__all__ = ["cluster", "services_recursion_limit"]


@pytest.fixture
def services_recursion_limit() -> Iterator[None]:
    """Python's default recursion limit, as in rollbook's service processes: an in-process simcluster
    started earlier in the session raises it for the whole test process (it stores 10,000 levels)."""
    raised = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(raised)
