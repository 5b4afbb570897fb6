"""`python -m arms.simulator` — see arms.simulator.main."""

from arms.simulator.main import main

raise SystemExit(main())
