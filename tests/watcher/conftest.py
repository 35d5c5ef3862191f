"""Debian's kubectl for the recorder's tests (fetched as tests/simcluster/conftest.py says)."""

from tests.simcluster.conftest import kubectl, kubectl_binary  # noqa: F401
