"""`campaign worker --host NAME`: run the arms placed on this host.

It serves the arm flow as the Prefect deployment `arm/arm-NAME` (`flows.placement`);
`campaign run` on any machine starts runs of it for the arms whose runtime says
`host = "NAME"`. Beside it, `campaign/campaign-NAME` runs a whole campaign from this host
(`flows.campaign_flow.campaign_launch_flow`), so the Prefect UI can launch and rerun one:
its typed parameters name a campaign in the shared database or a campaign file here.
Each run executes in its own process here, with $CAMPAIGN_HOST set to NAME, so its
attempts record the host they ran on; the database credentials come from
this process's `--db` / $CAMPAIGN_DB, never from the run's parameters. Ctrl-C stops
serving (runs in progress are stopped with it; `campaign run` sends them again once a
worker is back).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable

from campaign.core.serving import NAME


class BadHost(ValueError):
    """The host name cannot name a deployment (a usage error)."""


class WorkerCannotStart(RuntimeError):
    """No Prefect server to serve from; the message is one line with the fix."""


def heed_ctrl_c() -> None:
    """Let SIGINT stop the worker even when it was started with SIGINT ignored.

    A shell without job control starts a background command (`campaign worker ... &` in a
    script, a process started under `nohup ... &`) with SIGINT and SIGQUIT ignored, and
    Python then keeps ignoring it: Prefect's serve loop never sees a KeyboardInterrupt, and
    the worker outlives every Ctrl-C and `kill -INT` sent to it. A worker's one way to stop
    cleanly is SIGINT, so it takes Python's own handler back."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def serve_host(host: str, db: str | None, say: Callable[[str], None]) -> None:
    """Serve this host's arms until Ctrl-C. Prefect's environment defaults
    (`cli.app.prefect_env`) are set by the caller before this imports Prefect."""
    if not re.fullmatch(NAME, host):
        raise BadHost(f"--host {host!r}: letters, digits, '.', '_' and '-', starting with a letter or digit")
    os.environ["CAMPAIGN_HOST"] = host
    os.environ["PREFECT_LOGGING_TO_API_ENABLED"] = "true"  # a lasting server: its UI shows the arms' logs
    heed_ctrl_c()
    from campaign.store.database import db_url
    from campaign.store.store import Store
    from cli.prefect_server import PrefectUnavailable, check_configured

    try:
        api = check_configured()
    except PrefectUnavailable as exc:
        raise WorkerCannotStart(str(exc)) from None
    if not api:
        raise WorkerCannotStart(
            "campaign worker needs the Prefect server that `campaign run` uses: "
            "export PREFECT_API_URL=http://SERVER:4200/api (start one with `prefect server start --host 0.0.0.0`)"
        )
    where = "each run's database (set CAMPAIGN_DB or --db for one that needs a password)"
    if db:
        os.environ["CAMPAIGN_DB"] = db_url(db)
    if os.environ.get("CAMPAIGN_DB"):
        where = Store(db_url(os.environ["CAMPAIGN_DB"])).public_url  # opened (and migrated) now: a wrong URL fails here
    from prefect import serve

    from flows.arm_flow import arm_flow
    from flows.campaign_flow import campaign_launch_flow
    from flows.placement import campaign_deployment_name, deployment_name

    name, launch = deployment_name(host), campaign_deployment_name(host)
    say(
        f"worker for host {host}: serving deployment arm/{name} (and campaign/{launch}) from Prefect {api}, database {where}; Ctrl-C stops"
    )
    serve(
        arm_flow.to_deployment(name=name, tags=[f"host:{host}"]),  # type: ignore[arg-type]  # typed sync-or-async by Prefect; sync here
        campaign_launch_flow.to_deployment(  # type: ignore[arg-type]  # typed sync-or-async by Prefect; sync here
            name=launch,
            tags=[f"host:{host}"],
            description=f"Run a campaign (its name in the shared database, or a campaign file on {host}) from host {host}.",
        ),
        print_starting_message=False,
        pause_on_shutdown=False,
    )
    say(f"worker for host {host} stopped")
