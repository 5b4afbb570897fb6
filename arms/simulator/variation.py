"""Run-to-run variation: how fast this start of the server is, and how that wanders.

A real server does not run at one rate. Each start lands on a different state of the
machine (core placement, frequency, memory layout, page cache), so its prefill and decode
rates differ from the last start's by a random factor that then holds for the whole run;
during the run the rates drift slowly (heat, other load). Verdicts compare arms over
server runs (blocks), and requests of one run share that run's factor: they are not
independent draws. A simulator without this makes identical arms look identical and
hides the dependence from the gates.

The model, on log-rates (`SimProfile` holds the knobs and the measurements behind their
defaults):

- a random effect per start: log(rate) += sd * z, z ~ N(0, 1) drawn once per start
  from `random.Random(f"run:{seed}:{run_seed}")` (decode first, then prefill; see
  `run_corr` for how the two draws are tied);
- a drift over model time t: a random walk whose change over one minute has sd
  `drift_sd_per_min`, sampled every `DRIFT_STEP_S` model seconds from
  `random.Random(f"drift:{seed}:{run_seed}")` and interpolated linearly in between
  (continuous, so two consecutive engine steps never jump apart), starting at 0 when the
  server starts. One walk moves prefill and decode together.

With every sd at 0 both factors are exactly 1.0 and nothing is drawn.
"""

from __future__ import annotations

import math
import random

from arms.simulator.profile import SimProfile

DRIFT_STEP_S = 10.0  # model seconds between the drift walk's grid points


class RunVariation:
    """The rate factors of one server start; `decode_factor(t)` and `prefill_factor(t)`
    multiply the profile's decode and prefill rates at model time `t`."""

    def __init__(self, profile: SimProfile) -> None:
        decode_sd = profile.run_sd
        prefill_sd = profile.effective_prefill_run_sd
        self.log_decode = 0.0
        self.log_prefill = 0.0
        if decode_sd > 0 or prefill_sd > 0:
            rng = random.Random(f"run:{profile.seed}:{profile.run_seed}")
            z_decode = rng.gauss(0.0, 1.0)
            z_other = rng.gauss(0.0, 1.0)
            rho = profile.run_corr
            z_prefill = rho * z_decode + math.sqrt(max(0.0, 1.0 - rho * rho)) * z_other
            self.log_decode = decode_sd * z_decode
            self.log_prefill = prefill_sd * z_prefill
        self._drift_sd_per_step = profile.drift_sd_per_min * math.sqrt(DRIFT_STEP_S / 60.0)
        self._drift_rng = random.Random(f"drift:{profile.seed}:{profile.run_seed}")
        self._walk = [0.0]  # log-drift at k * DRIFT_STEP_S

    def drift(self, t: float) -> float:
        """The drift of the log-rates at model time t (0 at the start, and before it)."""
        if self._drift_sd_per_step == 0 or t <= 0:
            return 0.0
        position = t / DRIFT_STEP_S
        k = int(position)
        while len(self._walk) < k + 2:
            self._walk.append(self._walk[-1] + self._drift_rng.gauss(0.0, self._drift_sd_per_step))
        frac = position - k
        return self._walk[k] + frac * (self._walk[k + 1] - self._walk[k])

    def decode_factor(self, t: float) -> float:
        """What decode_tps (the whole decode step's speed) is multiplied by at model time t."""
        return math.exp(self.log_decode + self.drift(t))

    def prefill_factor(self, t: float) -> float:
        """What prefill_tps is multiplied by at model time t."""
        return math.exp(self.log_prefill + self.drift(t))
