"""The probes. Each is `async run(target, sink, params)`; `registry` maps names to them."""
