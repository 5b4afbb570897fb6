"""`campaign compare`: the same arms across two databases, two campaigns, or one campaign
before and after a date, judged as a verdict is (`gates.across`); with `--fail-on
regression:5%` a check for CI that exits 1 only when a regression of at least 5% is
established.

    campaign compare before.db after.db
    campaign compare mine --since 2026-11-01 [--db campaign.db]
    campaign compare --baseline base.db --fail-on regression:5%      (after: --db or the default)
    campaign compare old-run new-run --arm L --metric decode_tps     (two campaigns in --db)
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.app import DbOption, UsageError, app, console, err, open_existing_store

FAIL_ON = re.compile(r"^regression:(\d+(?:\.\d+)?)%$")


def _is_database(text: str) -> bool:
    return "://" in text or Path(text).expanduser().is_file()


def _side(source: str | None, db: str | None, campaign: str | None, label: str, **window: Any) -> Any:
    """A side from a database file/URL (its `campaign`, else its latest) or a campaign
    name in `db`."""
    from campaign.store.sides import load_side

    if source is not None and _is_database(source):
        store, name = open_existing_store(source), campaign
    else:
        store, name = open_existing_store(db), source or campaign
    try:
        return load_side(store, name, label, **window)
    except LookupError as exc:
        raise UsageError(str(exc)) from None


def _date(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected a date or time, e.g. 2026-11-01 or 2026-11-01T12:00") from None


def _fail_on(text: str | None) -> float | None:
    if text is None:
        return None
    found = FAIL_ON.match(text.strip())
    if not found:
        raise UsageError(f"--fail-on {text!r}: expected regression:N%, e.g. regression:5%")
    return float(found.group(1)) / 100


@app.command()
def compare(
    before: Annotated[
        str | None, typer.Argument(help="the earlier side: a database file or URL, or a campaign name in --db")
    ] = None,
    after: Annotated[
        str | None, typer.Argument(help="the later side (default: --db's campaign, or BEFORE after --since)")
    ] = None,
    db: DbOption = None,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="the earlier side's database (the later one is --db)")
    ] = None,
    name: Annotated[str | None, typer.Option("--campaign", help="campaign name in each database")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="one campaign split in two: attempts started before this vs from it")
    ] = None,
    arms: Annotated[list[str] | None, typer.Option("--arm", help="compare this arm (repeatable; default: all)")] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", help="compare this metric (repeatable; default: each probe's headline)"),
    ] = None,
    fail_on: Annotated[
        str | None,
        typer.Option("--fail-on", help="exit 1 when a regression of at least N% is established: regression:N%"),
    ] = None,
    allow_model_change: Annotated[
        bool, typer.Option("--allow-model-change", help="compare arms whose model changed between the sides")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison as JSON")] = False,
) -> None:
    """The same arms on two sides, cell by cell: each change with its CI over server runs."""
    from gates.across import compare_sides

    threshold = _fail_on(fail_on)
    if baseline is not None:
        if before is not None or since is not None:
            raise UsageError("--baseline names the earlier side: give no BEFORE and no --since with it")
        first, second = _side(baseline, None, name, "baseline"), _side(after, db, name, "now")
    elif since is not None:
        if after is not None:
            raise UsageError("--since splits one campaign: give BEFORE (its name or database) only")
        cut = _date(since, "--since")
        first = _side(before, db, name, f"before {since}", until=cut)
        second = _side(before, db, name, f"from {since}", since=cut)
    else:
        if before is None or after is None:
            raise UsageError(
                "compare two sides: BEFORE AFTER (databases or campaign names), NAME --since DATE, or --baseline BASE.db"
            )
        first, second = _side(before, db, name, before), _side(after, db, name, after)
    result = compare_sides(
        first, second, arms=arms, metric_names=metric, fail_on=threshold, allow_model_change=allow_model_change
    )
    if as_json:
        console.print_json(json.dumps(_as_json(result), default=str))
    else:
        _print(result)
    if threshold is not None and result.alarms:
        raise typer.Exit(1)


def _print(result: Any) -> None:
    say = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    for side in (result.before, result.after):
        arms = "; ".join(f"{a.arm_id} {a.model} on {a.runtime} ({a.version})" for a in side.arms.values())
        say(f"{side.label}: campaign {side.campaign}: {arms or 'no finished arm'}")
    for why in result.refused:
        say(f"not compared: {why}")
    if not result.changes:
        say("nothing to compare: no cell of the same arm and settings on both sides")
    for change in result.changes:
        say(("ALARM " if change.alarm else "") + change.text(result.confidence))
    if result.fail_on is None:
        return
    limit = f"regression:{result.fail_on:.0%}"
    if result.alarms:
        say(f"{limit}: established in {len(result.alarms)} of {len(result.changes)} cells (Holm over them): exit 1")
        return
    for change in result.unsettled:
        err.print(
            f"warning: {change.metric} {change.arm}{' ' + change.cell.key() if change.cell.key() else ''} could still"
            f" be a regression of {result.fail_on:.0%} or more ({change.note or 'too few runs'})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    say(f"{limit}: none established over {len(result.changes)} cells")


def _as_json(result: Any) -> dict[str, Any]:
    def side(s: Any) -> dict[str, Any]:
        return {
            "label": s.label,
            "campaign": s.campaign,
            "arms": {
                a.arm_id: {
                    "model": a.model,
                    "served": list(a.served),
                    "runtime": a.runtime,
                    "versions": list(a.versions),
                }
                for a in s.arms.values()
            },
        }

    return {
        "before": side(result.before),
        "after": side(result.after),
        "confidence": result.confidence,
        "fail_on": result.fail_on,
        "refused": result.refused,
        "changes": [
            {
                "metric": c.metric,
                "arm": c.arm,
                "cell": c.cell.key(),
                "settings": c.cell.settings,
                "change": c.change,
                "low": c.low,
                "high": c.high,
                "before_runs": c.before_runs,
                "after_runs": c.after_runs,
                "label": c.label,
                "alarm": c.alarm,
                "note": c.note,
            }
            for c in result.changes
        ],
        "alarms": len(result.alarms),
    }
