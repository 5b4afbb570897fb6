"""Runtime adapters, one module per runtime, registered by name in `registry`."""
