"""The gate pages: docs/gates.md (how a verdict is reached, the list of predicates, the
verdict words) and the predicate pages (each built-in predicate with its params), one
page for those that compare arms and one for bounds on one arm's value.

Why generated: the predicate registry (`gates.catalog`) is what a campaign file's gates
are checked against, so the list of predicates and each one's params (name, type,
default, description) are read from it; a page written by hand would miss the next
param. The explanation around them (direction, intervals, the family, the verdict
words) is the constant text of `gates.doc_text`. A test compares each page with
`pages()`; regenerate one with `python -m gates.doc --page NAME > docs/NAME` (gates.md
without `--page`).
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from campaign.core.mechanisms import MECHANISMS
from campaign.core.schema_doc import cell, default_text, limits, type_words
from campaign.core.states import Verdict
from gates import catalog
from gates.doc_text import INTRO, VERDICTS

# Each built-in predicate: what it decides in a few words, then in full, and whether it is
# one of the campaign's comparative claims (the family Holm adjusts). A predicate missing
# here fails the generator, so a new one cannot be left out of the pages.
SUMMARIES: dict[str, tuple[str, str, str]] = {
    "relative_improvement": (
        "subjects beat the baseline by at least `min_gain`",
        "Every subject beats every baseline arm by at least `min_gain` (0.10 = +10%) on every cell "
        "they share: pass when the CI of the gain lies wholly above `min_gain`, fail when wholly "
        "below, else inconclusive. With `also_metric`, the same must hold on that metric too "
        "(with `also_min_gain`). Needs a baseline.",
        "yes",
    ),
    "context_change": (
        "one arm at `context` against itself at `baseline_context`",
        "\"8K decodes within 10% of 4K\": each subject's cell at `context` against the same arm's "
        "cell at `baseline_context`, judged as `relative_improvement` judges two arms (the gain's "
        "CI over runs against `min_gain`; -0.10 = at most 10% worse), paired by block: a run that "
        "measured both contexts on one server start is its own pair. No baseline arm.",
        "yes",
    ),
    "equivalence": (
        "subjects within +- `margin` of the baseline",
        "\"Within X%\": every subject's value stays within 1 +- `margin` of every baseline's, by two "
        "one-sided tests on the log ratio over runs: pass when the whole CI lies inside the margin; "
        "fail when the value is shown outside it on one side (each side tested at half the level, "
        "since either would do); else inconclusive. A wide CI never passes. Needs a baseline.",
        "yes",
    ),
    "threshold": (
        "each subject's value meets a fixed bound",
        "Each subject's value satisfies `metric op value`, in each named scenario and each context: "
        "pass when its whole CI over runs does, fail when none of it does, inconclusive when the CI "
        "straddles `value`. `partial_scenarios` are reported beside, never required. No baseline.",
        "yes (a bound)",
    ),
    "control": (
        "no control arm beats the subjects by more than `max_advantage`",
        "Subjects against control arms (listed in `baseline`), per common cell, each control against "
        "each subject: the subjects are promoted (pass) when no control's advantage over the best "
        "subject can exceed `max_advantage` (the advantage's CI over some subject wholly below it, "
        "at the level divided by the number of subjects: which subject is best is not known before "
        "the runs); a control surely ahead of every subject by more fails them; else inconclusive. "
        'With `role = "control"` the gate only characterises: its verdict is `control`, with the '
        "numbers in the reason.",
        "yes (role promote)",
    ),
    "regression_guard": (
        "a gain that must not break a guard metric",
        "A gain on `metric` against every baseline arm (as `relative_improvement`, by `min_gain`) "
        "that must not cost another metric: each subject's `guard_metric` must hold at or above "
        "`guard_min`, per guard scenario and context, with its whole CI. A guard surely broken "
        "fails the gate whatever the gain (its fail is the guard's own test, Holm-adjusted with the "
        "gain's), and the reason then adds how many times worse `worse_metric` got than on the "
        "baseline. Needs a baseline.",
        "yes",
    ),
    "best_of": (
        "the first subject ranks first",
        "The first subject ranks first among the subjects and baseline arms, per common cell, "
        "beating each other arm with the CI of its gain wholly above 0: pass; an arm that surely "
        "beats it fails it; else inconclusive.",
        "yes",
    ),
    "majority": (
        "the tool-loop pass rate is above `min_ratio`",
        "Tool-loop trials: each subject's pass rate per cell (context, and the settings the trials "
        "ran under: never pooled), with its exact (Clopper-Pearson) interval: pass when the whole "
        "interval is above `min_ratio`, fail when it is at or below it, else inconclusive (3 "
        "trials always land here: 2/3 has [0.09, 0.99]). Trials, each its own draw of the model's "
        "sampling, not server runs, are the unit.",
        "yes (a bound)",
    ),
    "acceptance_rate": (
        "draft acceptance is at least `min_rate`",
        "Speculative decoding: accepted / drafted tokens from the server's counters, one rate per "
        "server run, per cell (probe, context and settings: never pooled): pass when the whole CI "
        "over runs is at or above `min_rate`, fail when wholly below, else inconclusive; pending "
        "while a subject drafted nothing. Counters from a trace replay (scenario `trace=...`) are "
        "not read: its prompts are random words, and a gate with only those is inconclusive saying so.",
        "yes (a bound)",
    ),
    "holds_at_ceiling": (
        "subjects hold `min_value` at the ceiling context",
        "At the ceiling `context`, each subject's value holds `min_value` with its whole CI (pass), "
        "or fails when the CI is wholly below; baseline arms are shown beside, and called collapsed "
        "when all of theirs are wholly below.",
        "yes (a bound)",
    ),
    "goodput": (
        "a share of requests meets a latency target",
        "A latency `target` met by at least `min_share` of a typical server run's requests, failed "
        "requests counting as misses, per subject and cell (probe, context, settings). The server "
        "run is the unit: one share per run, and the t interval over the runs' shares on the "
        "probit scale (where a run's latency shift moves its share), widened to at least the exact "
        "(Clopper-Pearson) interval of the pooled requests: pass when the whole interval reaches "
        "`min_share`, fail when it is wholly below, else inconclusive (also under `min_runs` runs "
        "or `min_n` requests).",
        "yes (a bound)",
    ),
    "load_goodput": (
        "a load run's goodput: a floor, a gain, or both",
        "A `load` run's goodput (requests that met every target per second of the window the "
        'load was offered over), or with `scenario = "sweep"` a sweep\'s `max_goodput_rps`: a '
        "floor `min_rps`, a gain `min_gain` over each baseline arm, or both (one is required). "
        "One value per server run, CI over runs.",
        "yes",
    ),
    "load_latency": (
        "a load run's latency percentile: a ceiling, a cut, or both",
        "A percentile (`percentile`, p99 by default) of a per-request latency in one `load` "
        "run's cell, one value per server run: a ceiling `max_value`, a cut `min_gain` against "
        "each baseline arm (lower is better), or both (one is required). Runs too short for that "
        "percentile stay inconclusive, and the reason says how many requests a run needs.",
        "yes",
    ),
    "attribution": (
        "credits a win to a mechanism, by ablation",
        "Which mechanism (`claim`) earned a win, by ablation. The win is the first subject against "
        "the baseline arms other than the ablation, by `min_gain`; no win fails the gate. With "
        "`ablation` (a baseline arm: the subject's recipe with that mechanism switched off and "
        "nothing else changed, checked when the file loads): pass when switching it off costs the "
        "win (the subject beats its ablation by `min_gain`) and the ablation does not keep it; fail "
        "when the ablation keeps the win and switching off costs less; inconclusive when the "
        "mechanism is worth part of the win, or, for the cache, when the subject made fewer than "
        "`min_hits` cache hits. When the ablation is the only baseline arm, the win is what "
        "switching the mechanism off costs. Without an ablation, never pass: the cache counters "
        "only argue by elimination, and the reason says so.",
        "yes",
    ),
    "all_of": (
        "several checks that must all pass",
        "Several judgements (`checks`) that must all pass; the reason joins theirs. Each check is a "
        "table with `predicate` (not all_of), `params`, and optionally its own `subjects`, "
        "`baseline` and `report_only = true` (shown, never deciding). The verdict is the first of "
        "pending, fail, inconclusive, control among the deciding checks, else pass; a check's "
        "statistical fail fails the whole only where it survives Bonferroni over the deciding checks.",
        "yes, as one claim, when a deciding check is",
    ),
}

# Param meanings where the params model gives no description: by (predicate, name), else by name.
PARAM_TEXT: dict[tuple[str, str] | str, str] = {
    "metric": "the metric read (docs/metrics.md)",
    "probe": "read only this probe's rows",
    "scenario": "read only this scenario (`identical`, `summary`, ...); unset: every scenario, each its own cell",
    "context": "read only this context (tokens); unset: every context, each compared on its own",
    "higher_is_better": "which way `metric` reads",
    "also_probe": "`also_metric`'s probe",
    "also_scenario": "`also_metric`'s scenario",
    "also_min_gain": "the least gain on `also_metric`; 0: it must improve at all (CI wholly above 0)",
    "also_higher_is_better": "which way `also_metric` reads",
    ("regression_guard", "min_gain"): "the least gain on `metric`; 0: it must improve at all (CI wholly above 0)",
    "guard_probe": "the probe of `guard_metric` (and of `worse_metric`)",
    "guard_scenarios": "scenarios the guard must hold in; empty: every cell",
    "worse_scenarios": "scenarios of `worse_metric` reported; empty: every cell",
    "op": "how each subject's value must compare with `value`",
    "value": "the bound, in the metric's unit",
    "min_rate": "the least accepted / drafted tokens",
    ("acceptance_rate", "probe"): "read only this probe's counters; unset: every probe's",
    ("holds_at_ceiling", "label"): "how the reason names the ceiling (default: the context, as 256K)",
    "percentile": "which percentile of each run's requests (99 = p99)",
    "lower_is_better": "which way `metric` reads (this flag is not filled in from docs/metrics.md)",
    "counter_scenario": "the scenario whose cache_hits / cache_lookups counters are read",
    "min_hits": "a cache with fewer hits than this did no work and is never credited",
    "checks": "the judgements: tables of `predicate`, `params`, and optionally `subjects`, `baseline`, `report_only`",
    ("majority", "max_error_rate"): "an arm failing more of its requests than this cannot pass",
}


def _builtin(name: str) -> bool:
    """A predicate this project ships (a plugin's registered in the same process is not)."""
    return catalog.get(name).__module__.startswith("gates.")


def builtins() -> list[str]:
    return [n for n in catalog.names() if _builtin(n)]


def _direction_flags(model: type[BaseModel]) -> set[str]:
    """Params the engine fills in from the catalogue (`higher_is_better` for `metric`, ...)."""
    fields = model.model_fields
    keys = [k for k in fields if k == "metric" or k.endswith("_metric")]
    return {catalog.direction_key(k) for k in keys} & set(fields)


def param_text(predicate: str, name: str, info: FieldInfo) -> str:
    text = info.description or PARAM_TEXT.get((predicate, name)) or PARAM_TEXT.get(name)
    if not text:
        raise KeyError(f"no description for {predicate}.{name}: add Field(description=...) or a PARAM_TEXT entry")
    return text


def param_default(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    if name == "confidence":
        return f"the campaign's `confidence` ({default_text(info)} by default)"
    if name in _direction_flags(model):
        return f"the metric's direction (metrics.md); {default_text(info)} where it has none"
    return default_text(info)


def params_table(predicate: str) -> list[str]:
    model = catalog.params_model(predicate)
    rows = ["| param | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        kind = ", ".join([type_words(info.annotation), *limits(info)])
        rows.append(
            f"| `{name}` | {cell(kind)} | {cell(param_default(model, name, info))} | {cell(param_text(predicate, name, info))} |"
        )
    return rows


INDEX = "gates.md"

# The predicate pages: each one's first lines and the built-ins it holds. A built-in on no
# page (or on two) fails the generator, so a new one cannot be left off.
PREDICATE_PAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "predicates-compare.md": (
        """\
# Predicates that compare arms

The built-in predicates that judge subjects against `baseline` (or control) arms, each
with its params. The page is generated from the predicate registry
(`python -m gates.doc --page predicates-compare.md`); what every gate reads, which way a
metric reads, how the interval and the family are formed and what each verdict means
are in [gates.md](gates.md), bounds on one arm's value in
[predicates-bounds.md](predicates-bounds.md).""",
        (
            "all_of",
            "attribution",
            "best_of",
            "context_change",
            "control",
            "equivalence",
            "regression_guard",
            "relative_improvement",
        ),
    ),
    "predicates-bounds.md": (
        """\
# Predicates that bound a value

The built-in predicates that hold each subject's value to a bound: a threshold, a rate, a
share of requests, a load run's goodput or latency percentile (the load ones may also ask
a gain over baseline arms), each with its params. The page is generated from the
predicate registry (`python -m gates.doc --page predicates-bounds.md`); what every gate
reads, how the interval and the family are formed and what each verdict means are in
[gates.md](gates.md), predicates that compare arms in
[predicates-compare.md](predicates-compare.md).""",
        ("acceptance_rate", "goodput", "holds_at_ceiling", "load_goodput", "load_latency", "majority", "threshold"),
    ),
}

PAGES = (INDEX, *PREDICATE_PAGES)


def page_of(name: str) -> str:
    """The predicate page that holds a built-in's section."""
    holders = [page for page, (_, held) in PREDICATE_PAGES.items() if name in held]
    if len(holders) != 1:
        raise KeyError(
            f"built-in predicate {name!r} is on {len(holders)} predicate pages: list it in one PREDICATE_PAGES entry"
        )
    return holders[0]


def predicate_section(name: str) -> list[str]:
    _, decides, family = SUMMARIES[name]
    lines = [f"## {name}", "", decides, "", f"In the family: {family}.", "", *params_table(name)]
    if name == "attribution":
        claims = ", ".join(f"`{c}` ({', '.join(fields)})" for c, fields in MECHANISMS.items())
        lines += ["", f"`claim` is one of: {claims}: the mechanism and the recipe fields that switch it."]
    return lines


def index_page(names: list[str]) -> str:
    """docs/gates.md: how a verdict is reached, every predicate linked to its section, the verdicts."""
    links = " and ".join(f"[{page}]({page})" for page in PREDICATE_PAGES)
    lines = [
        INTRO.rstrip("\n"),
        "",
        "## The predicates",
        "",
        f"Each predicate's params are in its section on {links}.",
        "",
        "| predicate | in the family | decides |",
        "| --- | --- | --- |",
    ]
    for name in names:
        short, _, family = SUMMARIES[name]
        lines.append(f"| [`{name}`]({page_of(name)}#{name}) | {family} | {cell(short)} |")
    lines += ["", "## Verdicts", "", "| verdict | means |", "| --- | --- |"]
    lines += [f"| `{v.value}` | {cell(VERDICTS[v])} |" for v in Verdict]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """Every gate page by file name (a test keeps each file in docs/ current)."""
    names = builtins()
    out = {INDEX: index_page(names)}
    for page, (intro, _) in PREDICATE_PAGES.items():
        lines = [intro]
        for name in (n for n in names if page_of(n) == page):
            lines += ["", *predicate_section(name)]
        out[page] = "\n".join(lines) + "\n"
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gates.doc", description="Print one gate page.")
    parser.add_argument("--page", choices=PAGES, default=INDEX, help="the page to print (default: %(default)s)")
    print(pages()[parser.parse_args().page], end="")
