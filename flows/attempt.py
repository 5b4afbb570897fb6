"""One attempt of one arm: its states and the transitions between them, in one place.

```
            claim                    done / failed / blocked
  (none) ---------> running ------------------------------------> done | failed | blocked
                    ^     |  interrupted (Ctrl-C, SIGTERM, holder died)
            resumed |     v
                    interrupted
```

Why one owner: an attempt's state is what everything else reads -- `campaign resume`
(continue it or not), recovery on another host (is its holder dead), the dispatcher
(what did the worker do), the verdicts (which rows count) and the pages. Each transition
is three writes that belong together: the state column (with its error and end time),
the attempt's event row (`Store.log_event`) and its progress line (`flows.progress.emit`).
Spread over the arm flow's exit paths, each path had to remember all three. Here each
transition makes them, always in that order, and the arm flow only says which transition
happened. Within the arm and campaign flows (`flows.arm_flow`, `flows.lanes`,
`flows.groups`) nothing else writes an attempt's state, its arm-* events or its
arm-start/arm-done lines; the other columns of the row (server process, device lease,
identity) are facts the arm flow records as it learns them. (A queue item's state has
its own one owner: `campaign.store.queue.move_item`.)

Two writers stay outside, for reasons of their layer: `campaign.store.queue.recover` (the store
layer, which cannot import flows) marks attempts of provably dead holders interrupted
before a run starts, and `flows.placement` records an arm no worker took as blocked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from campaign.core.states import AttemptClaim, AttemptState
from campaign.store.liveness import holder_gone
from campaign.store.store import Store
from campaign.store.tables import AttemptRow, utcnow
from flows import interrupt
from flows.contracts import ArmOutcome, Block
from flows.progress import emit

INTERRUPTED_MESSAGE = "interrupted by the user"
NO_BLOCK = Block()  # an attempt made outside a block plan: block 0, no block fields


@dataclass
class Attempt:
    """The attempt this process holds (or found done), and its transitions.

    `how` is what the claim found (`AttemptClaim`): new, resumed (an interrupted attempt
    continued, its finished probe runs kept) or done (not `fresh`, and the newest attempt
    had finished: nothing to run)."""

    store: Store
    campaign_id: int
    item_key: str
    arm_id: str
    row: AttemptRow
    how: AttemptClaim

    @property
    def id(self) -> int:
        return self.row.id or 0

    # -- claim and resume -------------------------------------------------------------

    @classmethod
    def claim(
        cls,
        store: Store,
        campaign_id: int,
        item_key: str,
        arm_id: str,
        overrides: dict[str, Any],
        block: Block | None = None,
        fresh: bool = True,
        flow_run_id: str = "",
    ) -> Attempt:
        """Claim the arm's attempt in `block` (`Store.claim_attempt`, atomic). While another live
        process runs it (here or on another host), wait for it; one provably dead
        (`holder_gone`) is moved to interrupted -- only if it is still the holder that
        was judged -- and then continued here."""
        said = False
        while True:
            how, row = store.claim_attempt(
                campaign_id,
                item_key,
                arm_id,
                overrides,
                (block or NO_BLOCK).index,
                fresh=fresh,
                flow_run_id=flow_run_id,
                block=(block or NO_BLOCK).fields(),
            )
            if how != AttemptClaim.BUSY:
                assert row is not None
                attempt = cls(store, campaign_id, item_key, arm_id, row, AttemptClaim(how))
                if attempt.how == AttemptClaim.RESUMED:
                    store.log_event(
                        campaign_id, "attempt-resumed", f"continuing attempt {row.number}", item_key, arm_id
                    )
                return attempt
            if row is not None:
                gone = holder_gone(row)
                if gone:
                    if store.release_attempt(
                        row.id or 0,
                        row,
                        state=AttemptState.INTERRUPTED,
                        ended_at=utcnow(),
                        error=f"holder died: {gone}",
                    ):
                        store.log_event(
                            campaign_id, "recover", f"attempt {row.id} taken over: {gone}", item_key, arm_id
                        )
                    continue
                if not said:
                    emit(
                        "arm-wait",
                        arm=arm_id,
                        item=item_key,
                        message=f"attempt {row.id} runs on host {row.host} (pid {row.owner_pid})",
                    )
                    said = True
            interrupt.check(f"waiting for {item_key}/{arm_id} run elsewhere")
            time.sleep(1.0)

    # -- while it runs ----------------------------------------------------------------

    def started(self) -> None:
        """Its arm begins (the device is held; the server is about to start)."""
        emit("arm-start", arm=self.arm_id, item=self.item_key)

    def waiting_for_device(self, message: str) -> None:
        emit("device-wait", arm=self.arm_id, item=self.item_key, message=message)

    # -- how it ends ------------------------------------------------------------------

    def outcome(self, state: AttemptState, message: str = "") -> ArmOutcome:
        """Its outcome as the campaign flow reads it."""
        return ArmOutcome(self.arm_id, state, message, self.row.id, self.row.repeat, self.item_key)

    def done(self, rss_bytes: int | None = None) -> ArmOutcome:
        self.store.update(AttemptRow, self.id, state=AttemptState.DONE, ended_at=utcnow(), rss_bytes=rss_bytes)
        emit("arm-done", arm=self.arm_id, item=self.item_key, state=str(AttemptState.DONE))
        return self.outcome(AttemptState.DONE)

    def failed(self, message: str) -> ArmOutcome:
        """The measurement broke (a crash, a server that would not start, every request
        failed); a retry is a new attempt."""
        return self._end(AttemptState.FAILED, message)

    def blocked(self, message: str) -> ArmOutcome:
        """The runtime cannot serve the recipe (an external reason, word for word);
        `campaign resume` re-checks it."""
        return self._end(AttemptState.BLOCKED, message)

    def interrupted(self, message: str = INTERRUPTED_MESSAGE) -> ArmOutcome:
        """The user stopped the campaign: left for `campaign resume` to continue."""
        return self._end(AttemptState.INTERRUPTED, message)

    def _end(self, state: AttemptState, message: str) -> ArmOutcome:
        self.store.update(AttemptRow, self.id, state=state, error=message, ended_at=utcnow())
        self.store.log_event(self.campaign_id, f"arm-{state}", message, self.item_key, self.arm_id)
        emit("arm-done", arm=self.arm_id, item=self.item_key, state=str(state))
        return self.outcome(state, message)
