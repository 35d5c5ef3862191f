"""Infrastructure every service shares: event store, bus, embedded servers, leases, runtime, metrics and
the one settings object.
"""
