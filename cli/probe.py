"""`campaign probe URL --probe NAME`: one probe against any OpenAI-compatible server.

No campaign file, no database: the probe writes into memory, a summary is printed, and
`--json` keeps every metric and raw record. Exit codes: 0 when at least one request of
the probe succeeded (failed ones are counted by kind in the summary), 1 when none did or
the server could not be reached, 2 for bad arguments.

The command's own options are written here; a probe's parameters are options made from
its parameter model (`cli.probe_options`). Building them imports every probe, so the app
lists the command by its summary and builds it only when it runs (`cli.app.BUILT_WHEN_RUN`).
"""

from __future__ import annotations

import inspect
import json
from copy import copy
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from cli.app import BUILT_WHEN_RUN, UsageError, app, console

if TYPE_CHECKING:
    import httpx


@app.command(name="probe")
def listed() -> None:
    """Run one probe against a live server and print a readable summary."""
    # the stand-in `campaign --help` lists; running `campaign probe` runs `command()`'s


def command() -> Any:
    """The `campaign probe` command: its own options and one per probe parameter."""
    from arms.probes import registry as probes
    from cli.probe_options import probe_options

    options = probe_options([probes.get(name) for name in probes.names()])
    own = [
        p if p.name == "url" else p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(_run, eval_str=True).parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    own = [_naming(p, probes.names()) if p.name == "probe_name" else p for p in own]
    taken = {d for p in own for d in _decls(p)}
    clash = [o.flag for o in options if o.flag in taken]
    if clash:
        raise ValueError(f"probe parameters {', '.join(clash)} clash with `campaign probe`'s own options")

    def probe(**values: Any) -> None:
        from cli.probe_options import given_values

        own_values = {p.name: values.pop(p.name) for p in own}
        _run(**own_values, **given_values(options, values))

    probe.__doc__ = listed.__doc__
    probe.__signature__ = inspect.Signature([*own, *(o.parameter() for o in options)])  # type: ignore[attr-defined]  # typeshed omits __signature__, which inspect.signature reads
    probe.__annotations__ = {}
    single = typer.Typer(
        add_completion=False,
        context_settings=app.info.context_settings,
        rich_markup_mode=app.rich_markup_mode,
        pretty_exceptions_enable=False,
    )
    single.command(name="probe")(probe)
    return typer.main.get_command(single)


BUILT_WHEN_RUN["probe"] = command


def _naming(parameter: inspect.Parameter, names: list[str]) -> inspect.Parameter:
    """`--probe` with the registered probes' names as its help."""
    base, info = get_args(parameter.annotation)
    info = copy(info)
    info.help = " | ".join(names)
    return parameter.replace(annotation=Annotated[base, info])


def _decls(parameter: inspect.Parameter) -> list[str]:
    info = getattr(parameter.annotation, "__metadata__", (None,))[0]
    return [d for decl in getattr(info, "param_decls", None) or () for d in decl.split("/")]


def _run(
    url: Annotated[str, typer.Argument(help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080")],
    probe_name: Annotated[str, typer.Option("--probe", help="the probe to run (`command` lists the registered ones)")],
    model: Annotated[str | None, typer.Option(help="model id to request (default: the first in /v1/models)")] = None,
    runtime: Annotated[str, typer.Option(help="runtime adapter that says where counters live")] = "external",
    temperature: Annotated[float, typer.Option(help="canonical sampling temperature")] = 1.0,
    top_p: Annotated[float | None, typer.Option(help="canonical top_p")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write every metric and raw record here")] = None,
    # not a probe parameter: the client's stall limit, which the probe target carries
    read_timeout: Annotated[
        float | None,
        typer.Option(
            "--read-timeout",
            metavar="SECONDS",
            help="a request with no byte for this long has stalled; after 2 stalls in a row the probe stops sending (default 120; agent-load: its turn timeout)",
        ),
    ] = None,
    # the load probe's `targets` table, as NAME=SECONDS pairs (a table has no option of its own)
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            metavar="NAME=SECONDS",
            help="load: a latency target every good request meets: ttft_s, tpot_s or e2e_s (repeatable)",
            rich_help_panel="load",
        ),
    ] = None,
    **given: Any,
) -> None:
    """Run the probe `probe_name` with the probe parameters `given` (by key; None: not given)."""
    import asyncio

    from rich.markup import escape

    from arms.probes import registry as probes
    from arms.probes.base import MemorySink, ProbeTarget
    from arms.runtimes import catalog as runtimes
    from cli.probe_view import print_summary

    try:
        spec = probes.get(probe_name)
    except KeyError:
        raise UsageError(f"--probe: found {probe_name!r}, expected one of: {', '.join(probes.names())}") from None
    name = spec.name
    try:
        adapter = runtimes.get(runtime)
    except KeyError as exc:
        raise UsageError(f"--runtime: {exc.args[0]}") from None
    given["targets"] = _targets(target) if target else None
    if read_timeout is not None and not read_timeout > 0:
        raise UsageError(f"--read-timeout: found {read_timeout:g}, expected seconds > 0")
    params = _params(spec, given)
    speaks = adapter.recognise(url.rstrip("/"))  # a server at a URL: the family its metrics page shows
    try:
        served = _reachable_model(url.rstrip("/"), model, speaks.dialect.request_model)
    except ConnectionError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    if speaks is not adapter:
        console.print(f"its metrics page shows a {speaks.name} server: counters read as {speaks.name}'s")
    sampling = {"temperature": temperature, "top_p": top_p}
    probe_target = ProbeTarget(
        base_url=url.rstrip("/"),
        model=served,
        telemetry=speaks.telemetry,
        dialect=speaks.dialect,
        sampling={k: v for k, v in sampling.items() if v is not None},
        read_timeout=read_timeout,
    )
    sink = MemorySink()
    with console.status(f"{name} against {url} ({served})..."):
        asyncio.run(spec.run(probe_target, sink, params))
    succeeded = print_summary(name, sink)
    for warning in sink.warnings:
        console.print(f"[yellow]warning: {escape(warning)}[/yellow]")
    if json_out is not None:
        _write_json(json_out, spec, url, served, params, sink)
    if not succeeded:
        console.print(f"[red]error:[/red] no request of {name} succeeded")
        raise typer.Exit(1)


def _params(spec: Any, given: dict[str, Any]) -> Any:
    """The probe's parameters from the flags given (None: not given), over its command-line
    defaults; a flag the probe does not read, or a value its model refuses, is a usage
    error naming the flag."""
    from cli.probe_options import flag as _flag

    unknown = [k for k, v in given.items() if v is not None and k not in spec.keys]
    if unknown:
        flags = ", ".join(_flag(k) for k in unknown)
        raise UsageError(f"{flags} do(es) not apply to --probe {spec.name}")
    from pydantic import ValidationError

    values = {**spec.cli_defaults, **{k: v for k, v in given.items() if v is not None}}
    try:
        return spec.params.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = (
            f"{_flag(str(first['loc'][0]))}: " if first["loc"] else ""
        )  # a rule between fields names its fields itself
        raise UsageError(where + str(first["msg"]).removeprefix("Value error, ")) from None


def _write_json(path: Path, spec: Any, url: str, served: str, params: Any, sink: Any) -> None:
    """Everything the probe measured, with its parameters and the probe's own extras."""
    doc: dict[str, Any] = {
        "probe": spec.name,
        "url": url,
        "model": served,
        "params": params.model_dump(mode="json", by_alias=True),
        "measurements": sink.measurements,
        "samples": sink.samples,
        "requests": sink.requests,
    }
    if spec.extras is not None:
        doc.update(spec.extras(sink.measurements, sink.requests))
    path.write_text(json.dumps(doc, indent=1, default=str))
    console.print(f"wrote {path}")


def _targets(values: list[str]) -> dict[str, float]:
    """--target NAME=SECONDS (repeatable) as the load probe's targets."""
    out: dict[str, float] = {}
    for text in values:
        name, _, number = text.partition("=")
        try:
            out[name.strip()] = float(number)
        except ValueError:
            raise UsageError(f"--target: found {text!r}, expected NAME=SECONDS, e.g. ttft_s=2.0") from None
    return out


def _reachable_model(url: str, model: str | None, adapter_model: str | None = None) -> str:
    """The model to request: `model`, else the name the runtime's adapter always requests
    (`request_model`: mlx-lm serves the model it loaded only as "default_model", and
    loads any other name it is asked for from the Hub), else the first /v1/models lists. A /v1/models that
    answers something other than a JSON model list (mlx-lm answers an empty body when its
    Hugging Face cache folder does not exist) lists nothing; only a server that cannot be
    reached, or says it is unhealthy, is refused."""
    import httpx

    try:
        with httpx.Client(base_url=url, timeout=10.0) as http:
            response = http.get("/v1/models")
            ids: list[str] = []
            if response.status_code == 200:
                ids = _model_ids(response)
            elif http.get("/health").status_code >= 500:
                raise ConnectionError(f"{url} answers but is not healthy (HTTP {response.status_code})")
    except httpx.HTTPError as exc:
        raise ConnectionError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from None
    if model or adapter_model:
        return str(model or adapter_model)
    if not ids:
        raise UsageError(f"{url}/v1/models lists no model; pass --model")
    return ids[0]


def _model_ids(response: httpx.Response) -> list[str]:
    try:
        data = response.json().get("data", [])
    except (ValueError, AttributeError):
        return []
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")] if isinstance(data, list) else []
