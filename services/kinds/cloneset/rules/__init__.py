"""The CloneSet's rules, pure (the ``kinds-rules-pure`` contract): ``decisions`` (a round: the plan, its
events, RULES_VERSION) over ``plan`` (spec, revisions, counting, scale, update, status) and the state fold
``workload_state``. The planner service (services/planner) reads and appends; nothing here does I/O."""
