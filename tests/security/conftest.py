from tests.e2e.conftest import cluster

__all__ = ["cluster"]
