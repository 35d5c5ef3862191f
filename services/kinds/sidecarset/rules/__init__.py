"""The SidecarSet's rules, pure (the ``kinds-rules-pure`` contract): ``decisions`` (a round's events) over
``upgrade`` (which pods to update) and ``revisions``, and the state fold ``state``. The planner service
(services/planner) reads and appends; nothing here does I/O."""
