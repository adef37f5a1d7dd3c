"""A paper's table from its rows' run summaries: mean ± SD over repeats, derived columns, published numbers.

Pure functions over plain data (the `summary.json` of each run), so `ifgym reproduce` and a test
build the same table. A table is a list of method rows (the paper's rows) and of columns (a metric
of the run's summary, in the paper's units); each row is followed by the paper's own numbers for
that row when the run's model is one the paper ran (`assets/papers/<paper>.json`), else a dash.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from ifgym.errors import ConfigError

__all__ = [
    "Column",
    "TableSpec",
    "build_table",
    "decoding_of",
    "load_published",
    "mean_sd",
    "paper_model",
    "shared_decoding",
    "table_markdown",
]

DASH = "—"
# the fields of a model's settings that decide how it decodes, and the model itself: a table's rows agree on them
DECODING_KEYS = ("temperature", "top_p", "max_tokens", "extra")
MODEL_KEYS = ("model", "base_url", "embedded_model")


@dataclass(frozen=True)
class Column:
    """One column: the first of `keys` found in a run's summary (strict), times `scale`.

    `derived="gain"`: (value - base) / base of the column `of` against the row `base`, in percent;
    `derived="drop"`: (base - value) / base, in percent (a smaller context is a positive drop).
    """

    label: str
    keys: tuple[str, ...] = ()
    scale: float = 1.0
    derived: str | None = None
    of: str | None = None  # the label of the column a derived column compares
    base: str | None = None  # the row id a derived column compares with
    digits: int = 1


@dataclass(frozen=True)
class TableSpec:
    """A table of the paper: its id in the published-numbers file, title, rows (row ids) and columns."""

    id: str
    title: str
    rows: tuple[str, ...]
    columns: tuple[Column, ...]
    notes: tuple[str, ...] = field(default=())


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the sample standard deviation (n - 1) of `values`; the SD is None for a single value.

    NaN values (a metric undefined in a run) are left out; all NaN gives (NaN, None).
    """
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return math.nan, None
    return statistics.fmean(kept), (statistics.stdev(kept) if len(kept) > 1 else None)


def _metric(summary: Mapping[str, Any], keys: Sequence[str]) -> float:
    strict = summary.get("strict") or {}
    for key in keys:
        value = strict.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return math.nan


def load_published(paper: str) -> dict[str, Any]:
    """The paper's published numbers (`assets/papers/<paper>.json`): models, tables, sources, what is missing."""
    text = files("ifgym").joinpath(f"assets/papers/{paper}.json").read_text(encoding="utf-8")
    return json.loads(text)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def paper_model(published: Mapping[str, Any], model: str | None) -> str | None:
    """The paper's name of the model a run used (its `policy.llm.model`), or None when the paper did not run it.

    A served model's name matches when it holds one of the paper model's aliases (case and
    punctuation aside: `openai/gpt-4.1-2025-04-14` is GPT-4.1); the embedded model never matches.
    """
    if not model:
        return None
    name = _norm(model)
    for paper_name, entry in (published.get("models") or {}).items():
        if any(_norm(alias) in name for alias in entry.get("aliases", ())):
            return paper_name
    return None


def decoding_of(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The decoding of the model under test in a resolved config: `policy.llm`'s sampling fields."""
    llm = (resolved.get("policy") or {}).get("llm") or {}
    return {k: llm.get(k) for k in DECODING_KEYS}


def shared_decoding(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The decoding every row's resolved config shares; a ConfigError naming the rows and fields that differ.

    The model under test (`policy.llm`'s model, base_url, embedded_model) must be the same too.
    """
    fields = (*DECODING_KEYS, *MODEL_KEYS)
    settings = {
        row: {k: ((cfg.get("policy") or {}).get("llm") or {}).get(k) for k in fields} for row, cfg in configs.items()
    }
    first_row, first = next(iter(settings.items()))
    for row, decoding in settings.items():
        differ = [k for k in fields if decoding[k] != first[k]]
        if differ:
            detail = ", ".join(f"{k} {first[k]!r} vs {decoding[k]!r}" for k in differ)
            raise ConfigError(
                f"rows {first_row!r} and {row!r} of one table would decode differently ({detail}); a table's rows "
                "share the paper's model and decoding: set policy.llm.<field> once for every row, not per row"
            )
    return {k: first[k] for k in DECODING_KEYS}


def decoding_line(decoding: Mapping[str, Any]) -> str:
    """The shared decoding as the table's header says it."""
    parts = [f"temperature {decoding['temperature']}"]
    if decoding.get("top_p") is not None:
        parts.append(f"top_p {decoding['top_p']}")
    parts += [f"{k} {v}" for k, v in sorted((decoding.get("extra") or {}).items())]
    parts.append(f"max_tokens {decoding['max_tokens']}")
    return ", ".join(parts)


def _cell(mean: float, sd: float | None, digits: int) -> str:
    if math.isnan(mean):
        return "n/a"
    text = f"{mean:.{digits}f}"
    return f"{text} ± {sd:.{digits}f}" if sd is not None else text


def build_table(
    spec: TableSpec,
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    labels: Mapping[str, str],
    published: Mapping[str, Any],
    model: str | None,
) -> dict[str, Any]:
    """The table as data: per row, each column's mean, SD and repeats, then the paper's numbers for the row.

    `runs` maps a row id to the summaries of its repeats (a row without any is reported as not run);
    `labels` gives each row's name as the paper prints it; `model` is the runs' model under test,
    matched to the paper's models with `paper_model`.
    """
    paper_name = paper_model(published, model)
    entry = (published.get("tables") or {}).get(spec.id) or {}
    numbers = (entry.get("numbers") or {}).get(paper_name, {}) if paper_name else {}
    means: dict[tuple[str, str], float] = {}
    rows = []
    for row in spec.rows:
        summaries = runs.get(row) or []
        cells = {}
        for column in spec.columns:
            if column.derived:
                continue
            mean, sd = mean_sd([_metric(s, column.keys) * column.scale for s in summaries])
            means[(row, column.label)] = mean
            cells[column.label] = {"mean": mean, "sd": sd, "repeats": len(summaries)}
        rows.append({"row": row, "label": labels.get(row, row), "cells": cells, "runs": len(summaries)})
    for row in rows:
        for column in spec.columns:
            if column.derived:
                value = _derived(column, means.get((row["row"], column.of or "")), means.get((column.base, column.of)))
                row["cells"][column.label] = {"mean": value, "sd": None, "repeats": row["runs"]}
        given = numbers.get(row["row"], {})
        row["published"] = {c.label: given.get(c.label) for c in spec.columns}
    why = None
    if paper_name is None:
        ran = ", ".join(published.get("models") or {}) or "no model with transcribed numbers"
        why = f"the paper's numbers are shown for the model it ran ({ran}); this run's model is {model or 'embedded'}"
    elif not numbers:
        why = entry.get("missing")
    return {
        "id": spec.id,
        "title": spec.title,
        "source": f"{entry.get('table', spec.id)}, page {entry.get('page') or 'not recorded'}: {published['source']}",
        "paper_model": paper_name,
        "published_missing": why if not numbers else entry.get("missing"),
        "columns": [c.label for c in spec.columns],
        "digits": {c.label: c.digits for c in spec.columns},
        "rows": rows,
        "notes": list(spec.notes),
    }


def _derived(column: Column, value: float | None, base: float | None) -> float:
    if value is None or base is None or math.isnan(value) or math.isnan(base) or base == 0:
        return math.nan
    if column.derived == "gain":
        return (value - base) / base * 100
    if column.derived == "drop":
        return (base - value) / base * 100
    raise ValueError(f"unknown derived column kind {column.derived!r}: gain or drop")


def _published_cell(value: Any) -> str:
    return DASH if value is None else f"{value:g}"


def table_lines(
    table: Mapping[str, Any], *, header: Sequence[str] = (), markdown: bool = False, run: str = "this run"
) -> list[str]:
    """The table as Markdown (`markdown=True`) or aligned text: each row (`run` names it), then the paper's numbers."""
    columns = table["columns"]
    digits = table.get("digits") or dict.fromkeys(columns, 1)
    paper = f"paper ({table['paper_model']})" if table["paper_model"] else "paper"
    body: list[list[str]] = []
    for row in table["rows"]:
        cells = [_cell(row["cells"][c]["mean"], row["cells"][c]["sd"], digits[c]) for c in columns]
        if not row["runs"]:
            cells = ["not run"] * len(columns)
        body.append([row["label"], run, *cells])
        body.append(["", paper, *(_published_cell(row["published"][c]) for c in columns)])
    titles = ["method", "numbers", *columns]
    lines = [f"{table['title']}"] + [str(h) for h in header]
    if markdown:
        lines += ["", "| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        lines.append("")
    else:
        widths = [max(len(r[i]) for r in [titles, *body]) for i in range(len(titles))]
        lines += ["  ".join(t.ljust(w) for t, w in zip(titles, widths, strict=True)).rstrip()]
        lines += ["  ".join("-" * w for w in widths)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() for cells in body]
    lines.append(f"published: {table['source']}")
    if table.get("published_missing"):
        lines.append(f"published numbers missing: {table['published_missing']}")
    lines += list(table.get("notes") or [])
    return lines


def table_markdown(table: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    """`table_lines` as one Markdown string."""
    return "\n".join(table_lines(table, header=header, markdown=True))
