"""The benchmark page's figures, made from result files, never written by hand (#38).

``./dev bench NAME`` writes ``benchmarks/results/NAME.json`` (``_harness.report``); that
directory is not committed, since every run rewrites it. The figures the documentation
shows are the result files copied into ``docs/benchmark-results/`` (committed), and this
module turns them into Markdown:

- as a MkDocs hook (``hooks:`` in ``mkdocs.yml``), it replaces the line
  ``<!-- benchmark-figures -->`` of ``docs/benchmarks.md`` with a section per result
  file: when and where it was measured (date, aiosb and Python versions, machine, CPUs,
  load), each target's min / median / max, the target and the verdict, the summary,
  then the measurements themselves;
- as a script, ``python -m benchmarks.docs_page`` prints that Markdown, and
  ``python -m benchmarks.docs_page --publish NAME ...`` copies ``results/NAME.json``
  into ``docs/benchmark-results/`` to be committed with the code it measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent
RESULTS = Path(__file__).parent / "results"
PUBLISHED = ROOT / "docs" / "benchmark-results"
PAGE = "benchmarks.md"
MARKER = "<!-- benchmark-figures -->"


def load(directory: Path = PUBLISHED) -> list[dict[str, Any]]:
    """Every result file in ``directory``, by benchmark name."""
    results = []
    for path in sorted(directory.glob("*.json")):
        result = json.loads(path.read_text())
        result["_file"] = path.name
        results.append(result)
    return results


def figures(results: list[dict[str, Any]]) -> str:
    """The Markdown of the figures: a summary of every target, then a section per file."""
    if not results:
        return ("No result files are published yet: run `./dev bench`, then "
                "`python -m benchmarks.docs_page --publish NAME`.\n")
    parts = ["## Every target at a glance\n",
             "| benchmark | id | what | min / median / max | target | verdict | measured |",
             "|---|---|---|---|---|---|---|"]
    for result in results:
        for check in result.get("checks", []):
            parts.append(
                f"| [{result['benchmark']}](#{_anchor(result)}) | {check['id']} "
                f"| {_cell(check['case'])} | {_spread(check)} | {check['target']} "
                f"| {_verdict(check)} | {result.get('date', '?')} |"
            )
    parts.append("")
    for result in results:
        parts.append(_section(result))
    return "\n".join(parts)


def _section(result: dict[str, Any]) -> str:
    lines = [f"## {result['benchmark']} {{#{_anchor(result)}}}\n", _where(result) + "\n"]
    checks = result.get("checks", [])
    if checks:
        lines += ["| id | what | runs | min / median / max | target | verdict |",
                  "|---|---|---|---|---|---|"]
        lines += [
            f"| {c['id']} | {_cell(c['case'])} | {c['runs']} | {_spread(c)} "
            f"| {c['target']} | {_verdict(c)} |"
            for c in checks
        ]
        lines.append("")
    summary = result.get("summary", {})
    if summary:
        lines += ["| summary | value |", "|---|---|"]
        lines += [f"| {_cell(key)} | {_cell(_fmt(value))} |" for key, value in summary.items()]
        lines.append("")
    rows = result.get("rows", [])
    if rows:
        columns = list(dict.fromkeys(column for row in rows for column in row))
        lines += ["The measurements:\n",
                  "| " + " | ".join(columns) + " |",
                  "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(_fmt(row.get(c, ""))) for c in columns) + " |"
                  for row in rows]
        lines.append("")
    lines.append(f"Source: [`{result['_file']}`](benchmark-results/{result['_file']}).\n")
    return "\n".join(lines)


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
    unit = f" {check['unit']}" if check.get("unit") else ""
    return f"{_fmt(check['min'])} / {_fmt(check['median'])} / {_fmt(check['max'])}{unit}"


def _verdict(check: dict[str, Any]) -> str:
    return f"{'PASS' if check['pass'] else 'MISS'} (on the {check['judged_on']})"


def _anchor(result: dict[str, Any]) -> str:
    return "result-" + "".join(c if c.isalnum() else "-" for c in result["benchmark"]).lower()


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if value == int(value):
        return str(int(value))
    return f"{value:.3g}" if abs(value) >= 1 else f"{value:.3f}"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the benchmark page with its figures made from the published results."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its line {MARKER}: nowhere to put the figures")
    return markdown.replace(MARKER, figures(load(Path(config["docs_dir"]) / PUBLISHED.name)))


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
    print(figures(load()))


if __name__ == "__main__":
    main()
