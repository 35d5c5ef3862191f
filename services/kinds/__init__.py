"""The kinds of workload rollbook knows, one folder each (docs/kinds.md).

``services.kinds.registry`` is the one list of them, read by the watcher (what to watch and where an object's
observations go), the planner, the executor, the auditor (bus partitions) and the CLI (stream names). Each
kind's folder holds its streams and watch routing; a recorded kind (one rollbook observes but does not
drive: Deployment, StatefulSet) also holds ``rules.py``, the pure fold of its observations into the
trail. Every ``services.kinds.*.rules`` module is pure: no I/O library and nothing of rollbook's outside the
model and the kinds' own rules (import-linter contract ``kinds-rules-pure``).
"""
