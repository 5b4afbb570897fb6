"""Every built-in predicate, registered: import this to judge gates or check names.

The predicate modules only register themselves; this module is the one place that
lists them, so the registry is complete without a caller knowing the module list and
without any predicate module importing another layer's catalogue.
"""

from __future__ import annotations

from gates import library, load_gates, predicates  # noqa: F401  (each registers itself on import)
from gates.registry import get, names, params_model, register

for _name, (_fn, _params) in load_gates.PREDICATES.items():
    register(_name, _params)(_fn)

__all__ = ["get", "names", "params_model", "register"]
