"""The benchmark page's figures, made from result files, never written by hand (#38).

``./dev bench NAME`` writes ``benchmarks/results/NAME.json`` (``_harness.report``); that
directory is not committed, since every run rewrites it. The figures the documentation
shows are the result files copied into ``docs/benchmark-results/`` (committed), and this
module turns them into Markdown:

- as a MkDocs hook (``hooks:`` in ``mkdocs.yml``), it replaces the line
  ``<!-- benchmark-figures -->`` of ``docs/benchmarks.md`` with a section per result
  file: when and where it was measured (date, aiosb and Python versions, machine, CPUs,
  load), a chart of its targets (drawn by matplotlib from the same file, an SVG added to
  the site as it builds), each target's min / median / max with the figure it is judged
  on in bold, the target and the verdict, a comment on each target missed, the summary
  (saying which run each figure is), then the measurements themselves (each figure's
  min, median and max as one column; a table of more columns than fit the page and few
  rows turned on its side);
- a target a benchmark describes but whose result file predates its check (the scaling
  benchmark's "within 2x", the rules' "under 10 us") is judged here from the file's
  rows, and says so;
- every MISS needs its comment in ``docs/benchmark-results/comments.yml`` (what the miss
  means, by the benchmark's file and the target's case): the build fails on a MISS
  without one, and on a comment whose target no longer misses;
- as a script, ``python -m benchmarks.docs_page`` prints that Markdown, and
  ``python -m benchmarks.docs_page --publish NAME ...`` copies ``results/NAME.json``
  into ``docs/benchmark-results/`` to be committed with the code it measured.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parent.parent
RESULTS = Path(__file__).parent / "results"
PUBLISHED = ROOT / "docs" / "benchmark-results"
COMMENTS = "comments.yml"
PAGE = "benchmarks.md"
MARKER = "<!-- benchmark-figures -->"
CHARTS = "benchmark-charts"  # where the charts are in the built site, beside the page
GROWTH_TARGET = 2.0  # the scaling benchmark's "within 2x" (benchmarks/scaling.py)
RULES_TARGET_KEY = "target_us_per_rule_per_msg"  # the rules benchmark's target, in its summary


def load(directory: Path = PUBLISHED) -> list[dict[str, Any]]:
    """Every result file in ``directory``, by benchmark name, each with the checks its
    rows judge (:func:`derived_checks`) after its own."""
    results = []
    for path in sorted(directory.glob("*.json")):
        result = json.loads(path.read_text())
        result["_file"] = path.name
        result["checks"] = [*result.get("checks", []), *derived_checks(result)]
        results.append(result)
    return results


def load_comments(directory: Path = PUBLISHED) -> dict[str, dict[str, Any]]:
    """The comments on missed targets: result file -> ``measured`` (the date of the
    results they were written for) and ``misses`` (target's case -> Markdown)."""
    path = directory / COMMENTS
    if not path.exists():
        return {}
    loaded = yaml.safe_load(path.read_text()) or {}
    return {
        str(file): {"measured": str(said.get("measured", "")),
                    "misses": {str(case): " ".join(str(text).split())
                               for case, text in (said.get("misses") or {}).items()}}
        for file, said in loaded.items()
    }


def derived_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets a benchmark describes that its result file does not judge, judged from
    its rows: the scaling benchmark's growth (each operation within 2x from the smallest
    case to the largest: one figure, from the least of three runs at each size) and the
    rules benchmark's cost per rule per message (under the summary's target, judged on
    the slowest run). A check the file has already (same case) is not judged twice."""
    own = {check["case"] for check in result.get("checks", []) if not check.get("derived")}
    derived = []
    for row in result.get("rows", []):
        if "growth" in row and "operation" in row:
            sizes = [key for key in row if key.startswith("us ")]
            case = (f"{row['operation']}: cost {sizes[-1].removeprefix('us ')} over "
                    f"{sizes[0].removeprefix('us ')}" if sizes else row["operation"])
            growth = float(row["growth"])
            derived.append(_judged("scaling", case, [growth], GROWTH_TARGET, at_most=True,
                                   unit="x", note="one figure: the least of 3 runs at each size"))
        elif "us_per_rule_per_msg_max" in row and RULES_TARGET_KEY in result.get("summary", {}):
            case = f"{row['case']} [{row.get('loop', '?')}]: µs per rule per message"
            values = [row[f"us_per_rule_per_msg_{stat}"] for stat in ("min", "median", "max")]
            derived.append(_judged("rules", case, values,
                                   float(result["summary"][RULES_TARGET_KEY]),
                                   at_most=True, unit="µs", note="runs: min / median / max"))
    return [check for check in derived if check["case"] not in own]


def _judged(sid: str, case: str, values: list[float], target: float, *, at_most: bool,
            unit: str, note: str) -> dict[str, Any]:
    """A check of the shape ``benchmarks._harness.check`` writes, made on this page."""
    ordered = sorted(values)
    worst = ordered[-1] if at_most else ordered[0]
    return {
        "id": sid, "case": case, "runs": note, "min": ordered[0],
        "median": ordered[len(ordered) // 2], "max": ordered[-1],
        "target": f"{'<=' if at_most else '>='} {_fmt(target)}", "target_value": target,
        "at_most": at_most, "judged_on": "max" if at_most else "min",
        "pass": worst <= target if at_most else worst >= target, "unit": unit,
        "derived": True,
    }


def figures(results: list[dict[str, Any]],
            comments: dict[str, dict[str, Any]] | None = None) -> str:
    """The Markdown of the figures: a summary of every target, then a section per file.

    Raises ValueError for a missed target without its comment, a comment on a target
    that does not miss, or one written for other results than the file's (by date)."""
    if not results:
        return ("No result files are published yet: run `./dev bench`, then "
                "`python -m benchmarks.docs_page --publish NAME`.\n")
    comments = {} if comments is None else comments
    _check_comments(results, comments)
    parts = ["## Every target at a glance\n",
             "The figure each verdict is judged on is in bold: the slowest run for an "
             "\"at least\" target, the largest for an \"at most\" one. A target marked "
             "*judged here* is judged by this page from the result's rows (its result "
             "file predates that check).\n",
             "| benchmark | id | what | min / median / max | target | verdict | measured |",
             "|---|---|---|---|---|---|---|"]
    for result in results:
        for check in result.get("checks", []):
            parts.append(
                f"| [{result['benchmark']}](#{_anchor(result)}) | {check['id']} "
                f"| {_cell(check['case'])} | {_spread(check)} | {check['target']} "
                f"| {_verdict(check, result)} | {result.get('date', '?')} |"
            )
    parts.append("")
    for result in results:
        parts.append(_section(result, comments.get(result["_file"], {}).get("misses", {})))
    return "\n".join(parts)


def _check_comments(results: list[dict[str, Any]], comments: dict[str, dict[str, Any]]) -> None:
    missed = {(r["_file"], c["case"]) for r in results for c in r["checks"] if not c["pass"]}
    said = {(file, case) for file, on in comments.items() for case in on["misses"]}
    dates = {result["_file"]: str(result.get("date", "")) for result in results}
    if outdated := sorted(f"{file} (comments for {on['measured']}, results of "
                          f"{dates.get(file)})" for file, on in comments.items()
                          if on["misses"] and on["measured"] != dates.get(file)):
        raise ValueError(f"comments in docs/benchmark-results/{COMMENTS} written for other "
                         f"results than those published: {outdated}")
    if uncommented := sorted(missed - said):
        raise ValueError(
            f"a missed target without its comment in docs/benchmark-results/{COMMENTS} "
            f"(what the miss means, from the data): {uncommented}")
    if stale := sorted(said - missed):
        raise ValueError(f"a comment in docs/benchmark-results/{COMMENTS} on a target that "
                         f"does not miss (any more): {stale}")


def _section(result: dict[str, Any], comments: dict[str, str]) -> str:
    lines = [f"## {result['benchmark']} {{#{_anchor(result)}}}\n", _where(result) + "\n"]
    checks = result.get("checks", [])
    if checks:
        lines.append(f"![The targets of {result['benchmark']}: each run's range, median and "
                     f"target]({chart_path(result)})\n")
        lines += ["| id | what | runs | min / median / max | target | verdict |",
                  "|---|---|---|---|---|---|"]
        lines += [
            f"| {c['id']} | {_cell(c['case'])} | {c['runs']} | {_spread(c)} "
            f"| {c['target']} | {_verdict(c, result)} |"
            for c in checks
        ]
        lines.append("")
        for check in checks:
            if not check["pass"]:
                lines.append(f"**Why {check['id']} misses** ({_cell(check['case'])}): "
                             f"{_shortfall(check, result)} {comments[check['case']]}\n"
                             f"{{: #{_miss_anchor(result, check)} }}\n")
    summary = {key: value for key, value in result.get("summary", {}).items()
               if key != "load_average"}
    if summary:
        which = _which_run(result)
        lines += ["| summary | value | which figure |", "|---|---|---|"]
        lines += [f"| {_name(key)} | {_cell(_fmt(value))} | {which.get(_key(value), '')} |"
                  for key, value in summary.items()]
        lines.append("")
    rows = result.get("rows", [])
    if rows:
        lines.append("The measurements:\n")
        for group in _alike(rows):
            lines += [*_table(group), ""]
    lines.append(f"Source: [`{result['_file']}`](benchmark-results/{result['_file']}).\n")
    return "\n".join(lines)


WIDEST = 7  # columns a table of measurements may have before it is turned on its side


def _alike(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rows in runs of the same columns (a result's rows of different kinds, as the
    scaling benchmark's operations and its durable restarts, make a table each)."""
    groups: list[list[dict[str, Any]]] = []
    for row in rows:
        if groups and list(groups[-1][0]) == list(row):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def _spreads(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each min, median and max of one figure (``min_per_s``,
    ``median_per_s``, ``max_per_s``; or ``..._min`` and so on) as one column,
    ``per_s (min / median / max)``, as the targets show them."""
    merged = []
    for row in rows:
        out: dict[str, Any] = {}
        for column, value in row.items():
            parts = column.split("_")
            if "min" not in parts:
                if not any(p in ("median", "max") and _triple(row, column, p) for p in parts):
                    out[column] = value
                continue
            at = parts.index("min")
            names = {stat: "_".join([*parts[:at], stat, *parts[at + 1:]])
                     for stat in ("min", "median", "max")}
            if not all(name in row for name in names.values()):
                out[column] = value
                continue
            figure = "_".join([*parts[:at], *parts[at + 1:]])
            out[f"{figure} (min / median / max)" if figure else "min / median / max"] = " / ".join(
                _fmt(row[names[stat]]) for stat in ("min", "median", "max"))
        merged.append(out)
    return merged


def _triple(row: dict[str, Any], column: str, stat: str) -> bool:
    """Whether ``column``, a median or max, has its min and the third beside it."""
    parts = column.split("_")
    at = parts.index(stat)
    return all("_".join([*parts[:at], other, *parts[at + 1:]]) in row
               for other in ("min", "median", "max"))


def _table(rows: list[dict[str, Any]]) -> list[str]:
    """Rows of the same columns as a Markdown table; turned on its side (a line per
    column, a column per row) when it has more columns than fit the page and fewer rows."""
    rows = _spreads(rows)
    columns = list(rows[0])
    if len(columns) > WIDEST and len(rows) + 1 < len(columns):
        first, *others = columns
        return ["| " + " | ".join([_name(first), *(_cell(_fmt(r[first])) for r in rows)]) + " |",
                "|" + "---|" * (len(rows) + 1),
                *("| " + " | ".join([_name(c), *(_cell(_fmt(r[c])) for r in rows)]) + " |"
                  for c in others)]
    return ["| " + " | ".join(_name(c) for c in columns) + " |",
            "|" + "---|" * len(columns),
            *("| " + " | ".join(_cell(_fmt(row[c])) for c in columns) + " |" for row in rows)]


def _which_run(result: dict[str, Any]) -> dict[str, str]:
    """What a summary figure is, where it is one of the runs' figures: a summary line
    repeats a check's or a row's min, median or max (or a row's best run)."""
    which: dict[str, str] = {}
    for check in result.get("checks", []):
        runs = f"{check['runs']} runs" if isinstance(check["runs"], int) else "the runs"
        best, worst = ("min", "max") if check["at_most"] else ("max", "min")
        which.setdefault(_key(check[worst]), f"the worst of {runs} (judged)")
        which.setdefault(_key(check["median"]), f"the median of {runs}")
        which.setdefault(_key(check[best]), f"the best of {runs}")
    for row in result.get("rows", []):
        for column, value in row.items():
            if column.startswith("best_") or column.endswith("_best"):
                which.setdefault(_key(value), "the best run")
            for stat in ("min", "median", "max"):
                if column.startswith(f"{stat}_") or column.endswith(f"_{stat}"):
                    which.setdefault(_key(value), f"the {stat} of the runs")
    return which


def _key(value: Any) -> str:
    return f"{value:.9g}" if isinstance(value, float | int) and not isinstance(value, bool) else ""


def _shortfall(check: dict[str, Any], result: dict[str, Any]) -> str:
    """What the data says of a miss: by how much, on which run, and the machine's load."""
    judged = check[check["judged_on"]]
    target = check["target_value"]
    unit = f" {check['unit']}" if check.get("unit") else ""
    off = abs(judged - target) / abs(target) if target else None
    by = f"{off:.1%} {'over' if check['at_most'] else 'short'}" if off is not None else "off"
    median_passes = check["median"] <= target if check["at_most"] else check["median"] >= target
    runs = check["runs"] if isinstance(check["runs"], int) else None
    if median_passes and runs:
        share = f"the median ({_fmt(check['median'])}) meets the target, so at most " \
                f"{(runs - 1) // 2} of the {runs} runs missed"
    elif median_passes:
        share = f"the median ({_fmt(check['median'])}) meets the target"
    else:
        share = f"the median ({_fmt(check['median'])}) misses too"
    load = result.get("load_average")
    loaded = (f"; load average {load[0]:.2f} at the end, on {result.get('cpus', '?')} CPUs"
              if load else "")
    return (f"the {check['judged_on']} of the runs, {_fmt(judged)}{unit} against "
            f"{_fmt(target)}, is {by}; {share}{loaded}.")


def _where(result: dict[str, Any]) -> str:
    load = result.get("load_average")
    loaded = f", load average {load[0]:.2f} at the end" if load else ""
    return (
        f"Measured on {result.get('date', 'an unrecorded date')} with aiosb "
        f"{result.get('aiosb', '(version not recorded)')} and Python "
        f"{result.get('python', '?')}, on {result.get('system', '')} "
        f"{result.get('machine', '?')} with {result.get('cpus', '?')} CPUs{loaded}."
    ).replace(" on  ", " on ")


def _spread(check: dict[str, Any]) -> str:
    """min / median / max, the judged one in bold; one figure when the runs gave one."""
    unit = f" {check['unit']}" if check.get("unit") else ""
    if check["min"] == check["max"] and check.get("derived"):
        return f"**{_fmt(check['min'])}**{unit}"
    shown = {stat: _fmt(check[stat]) for stat in ("min", "median", "max")}
    shown[check["judged_on"]] = f"**{shown[check['judged_on']]}**"
    return f"{shown['min']} / {shown['median']} / {shown['max']}{unit}"


def _verdict(check: dict[str, Any], result: dict[str, Any]) -> str:
    here = ", judged here" if check.get("derived") else ""
    if check["pass"]:
        return f"PASS (on the {check['judged_on']}{here})"
    return f"[MISS](#{_miss_anchor(result, check)}) (on the {check['judged_on']}{here})"


def _anchor(result: dict[str, Any]) -> str:
    return "result-" + "".join(c if c.isalnum() else "-" for c in result["benchmark"]).lower()


def _miss_anchor(result: dict[str, Any], check: dict[str, Any]) -> str:
    index = result["checks"].index(check)
    return f"{_anchor(result)}-miss-{index + 1}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def _name(text: str) -> str:
    """A column's or a summary line's name, free to break after each ``_`` (a long
    ``in_memory_rss_per_message`` would widen its table past the page)."""
    return _cell(text).replace("_", "_<wbr>")


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if value == int(value):
        return str(int(value))
    return f"{value:.3g}" if abs(value) >= 1 else f"{value:.3f}"


def chart_path(result: dict[str, Any]) -> str:
    """Where the chart of ``result`` is, from the benchmark page's source."""
    return f"{CHARTS}/{Path(result['_file']).stem}.svg"


def chart(result: dict[str, Any]) -> str:
    """The chart of a result's targets, as SVG: a panel per target, each run's range
    (min to max) as a bar, the median as a tick, the judged figure as a dot, the target
    as a line; green where it passes, red where it misses. The text stays text (the
    figures can be searched and tested), and nothing varies from build to build."""
    import matplotlib  # the plot extra; the site's build has it from the dev extra
    from matplotlib.figure import Figure

    checks = result["checks"]
    titles = [textwrap.fill(
        f"{c['id']} {c['case']}: {_spread(c).replace('**', '')}, target {c['target']}, "
        f"{'PASS' if c['pass'] else 'MISS'}", 115) for c in checks]
    lines = sum(title.count("\n") for title in titles)
    figure = Figure(figsize=(8, 0.9 + 0.75 * len(checks) + 0.15 * lines), dpi=100,
                    facecolor="white")
    # one scale for all when the targets are alike (one unit, one target), else their own
    alike = len({(c.get("unit"), c["target_value"]) for c in checks}) == 1
    axes = figure.subplots(len(checks), 1, squeeze=False, sharex=alike)[:, 0]
    for ax, check, title in zip(axes, checks, titles, strict=True):
        low, median, high = check["min"], check["median"], check["max"]
        target, judged = check["target_value"], check[check["judged_on"]]
        colour = "#2e7d32" if check["pass"] else "#c62828"
        ax.barh([0], [high - low], left=[low], height=0.5, color=colour, alpha=0.3)
        ax.plot([median, median], [-0.3, 0.3], color=colour, linewidth=2)
        ax.plot([judged], [0], "o", color=colour)
        ax.axvline(target, color="#333", linestyle="--", linewidth=1)
        span = ([v for c in checks for v in (c["min"], c["max"], c["target_value"])] if alike
                else [low, high, target])
        pad = (max(span) - min(span)) * 0.1 or abs(target) * 0.1 or 1.0
        ax.set_xlim(min(span) - pad, max(span) + pad)
        ax.set_yticks([])
        ax.set_title(title, fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
    figure.suptitle(f"{result['benchmark']}: min to max (bar), median (tick), judged "
                    "figure (dot), target (dashed)", fontsize=9)
    figure.tight_layout()
    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "aiosb"}):
        figure.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the benchmark page with its figures made from the published results."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its line {MARKER}: nowhere to put the figures")
    published = Path(config["docs_dir"]) / PUBLISHED.name
    return markdown.replace(MARKER, figures(load(published), load_comments(published)))


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: each result's chart, drawn now, added to the site beside the page."""
    from mkdocs.structure.files import File

    for result in load(Path(config["docs_dir"]) / PUBLISHED.name):
        if result["checks"]:
            files.append(File.generated(config, chart_path(result), content=chart(result)))
    return files


def publish(names: list[str]) -> list[Path]:
    """Copy ``results/NAME.json`` for each name into the published directory."""
    PUBLISHED.mkdir(exist_ok=True)
    copied = []
    for name in names:
        source = RESULTS / f"{name}.json"
        if not source.exists():
            raise SystemExit(f"{source} does not exist: run ./dev bench first")
        copied.append(Path(shutil.copy(source, PUBLISHED / source.name)))
    return copied


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.docs_page",
                                     description=__doc__.split("\n", 1)[0])
    parser.add_argument("--publish", nargs="+", metavar="NAME",
                        help="copy results/NAME.json into docs/benchmark-results/")
    args = parser.parse_args(argv)
    if args.publish:
        for path in publish(args.publish):
            print(f"published {path.relative_to(ROOT)}")
        return
    try:
        print(figures(load(), load_comments()))
    except ValueError as error:
        raise SystemExit(str(error)) from None


if __name__ == "__main__":
    main()
