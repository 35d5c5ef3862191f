"""rollbook's vocabulary: events, streams, labels, int-or-percent and the SidecarSet rules.

Pure: imports nothing else of rollbook's and does no I/O (enforced by the import-linter contracts in
pyproject.toml).
"""
