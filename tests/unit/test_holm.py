"""gates.holm against statsmodels' Holm, the reference it replaces for speed."""

from __future__ import annotations

import numpy as np
from statsmodels.stats.multitest import multipletests

from gates.holm import holm


def test_holm_is_statsmodels_holm_on_random_families() -> None:
    rng = np.random.default_rng(7)
    for trial in range(40):  # each reference call runs a full gc.collect(): 0.1 s in a test process
        m = int(rng.integers(1, 12))
        ps = list(rng.uniform(0, 0.2, m) if trial % 2 else rng.beta(0.3, 3.0, m))
        if trial % 5 == 0 and m > 1:
            ps[1] = ps[0]  # ties
        alpha = float(rng.choice([0.01, 0.05, 0.1]))
        reject, adjusted, _, _ = multipletests(ps, alpha=alpha, method="holm")
        ours = holm(ps, alpha)
        assert [r for r, _ in ours] == [bool(r) for r in reject], (ps, alpha)
        assert np.allclose([a for _, a in ours], adjusted, rtol=0, atol=1e-12), (ps, alpha)


def test_holm_steps_down_and_stops_at_the_first_kept() -> None:
    # m = 3: the smallest against 0.05/3, then 0.05/2, then 0.05
    assert holm([0.01, 0.04, 0.03], 0.05) == [(True, 0.03), (False, 0.06), (False, 0.06)]
    assert holm([0.001, 0.02, 0.04], 0.05) == [(True, 0.003), (True, 0.04), (True, 0.04)]
    assert holm([], 0.05) == []
