"""The device lanes stop starting steps once one meets the stop rule (an arm blocked): the
steps after it on its lane, and those not yet started on the other lanes, never run."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from flows.blocks import Step
from flows.contracts import Block
from flows.lanes import in_lanes


@dataclass(frozen=True)
class _Devices:
    """What `in_lanes` reads of a campaign: which device each arm runs on."""

    of: dict[str, str]

    def device_of(self, arm_id: str) -> str:
        return self.of[arm_id]


def _steps(arms: str, blocks: int) -> list[Step]:
    return [
        Step(arm, Block(index=n, order=i, id=f"x/b{n}/0", settings_hash="0", recipe_hash="0"))
        for n in range(blocks)
        for i, arm in enumerate(arms)
    ]


def test_one_lane_stops_after_the_step_that_meets_the_rule() -> None:
    ran = in_lanes(
        _Devices({"A": "d0", "B": "d0"}),
        _steps("AB", 3),
        lambda s: (s.arm_id, s.block.index),
        stop=lambda r: r == ("A", 1),
    )  # type: ignore[arg-type]
    assert ran == [("A", 0), ("B", 0), ("A", 1)]


def test_without_a_rule_every_step_runs() -> None:
    ran = in_lanes(_Devices({"A": "d0", "B": "d1"}), _steps("AB", 3), lambda s: (s.arm_id, s.block.index))  # type: ignore[arg-type]
    assert sorted(ran) == sorted((a, n) for a in "AB" for n in range(3))


def test_a_stop_on_one_device_ends_the_other_lanes_after_their_running_step() -> None:
    b_started, stopped = threading.Event(), threading.Event()

    def run(step: Step) -> tuple[str, int]:
        if step.arm_id == "A":  # A ends while B's lane is mid-step
            assert b_started.wait(10)
        else:
            b_started.set()
            assert stopped.wait(10)
        return step.arm_id, step.block.index

    def stop(result: tuple[str, int]) -> bool:
        if result == ("A", 0):
            threading.Timer(0.2, stopped.set).start()  # B's step ends after A's lane noted the stop
            return True
        return False

    ran = in_lanes(_Devices({"A": "d0", "B": "d1"}), _steps("AB", 3), run, stop=stop)  # type: ignore[arg-type]
    assert sorted(ran) == [("A", 0), ("B", 0)]
