"""What every recorded kind shares: the opt-in, the pod actions and the fold (``rules.py``)."""
