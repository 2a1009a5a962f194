"""What a hostile hand can make of the files a run reads back (issue 46): the CSV pair, the journal and
the manifest that --msprobe-resume, `python -m pytest_msprobe.merge` and `python -m
pytest_msprobe.report` consume, stack.json, the tensor files.

`payload(field)` is text that runs a script wherever a page takes it raw (a tag, an attribute, a
script, a link): if it ever runs it sets `data-pwned` on the page's root element, naming the field it
came in. `forge_strings(out)` writes one into every text field of a finished run's files.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_msprobe.reports import manifest
from pytest_msprobe.reports.csv_files import (
    DETAILS_COLUMNS,
    DETAILS_PREFIX,
    RESULT_COLUMNS,
    RESULT_PREFIX,
    read_result_rows,
    text_cell,
)
from pytest_msprobe.reports.journal import JOURNAL_PREFIX

PWNED = "data-pwned"


def payload(field: str) -> str:
    """Script in every place a page could take text raw: a tag, the end of an attribute (either
    quote), the end of a script or a style, a comment, a link, a line separator in JSON."""
    run = f"document.documentElement.setAttribute('{PWNED}','{field}')"
    return (
        f"'\"><img src=x onerror=\"{run}\"><svg onload=\"{run}\"></svg>"
        f"</script><script>{run}</script></style><script>{run}</script>"
        f"<!--\u2028\u2029--><a href=\"javascript:{run}\">{field}</a>"
        f"<iframe srcdoc=\"<script>parent.{run}</script>\"></iframe>"
    )


def pair_files(out: Path) -> tuple[Path, Path, Path, Path]:
    """(result, details, journal, manifest) of the one pair in out."""
    (result,) = sorted(out.glob(f"{RESULT_PREFIX}*.csv"))
    stem = result.name[len(RESULT_PREFIX) : -len(".csv")]
    return (
        result,
        out / f"{DETAILS_PREFIX}{stem}.csv",
        out / f"{JOURNAL_PREFIX}{stem}.jsonl",
        manifest.path_for(result),
    )


def _strings(data: Any, where: str, keep: Callable[[str], bool]) -> Any:
    """Every str of plain data replaced by payload(its path), but where keep(path) says."""
    if isinstance(data, str):
        return data if keep(where) else payload(where)
    if isinstance(data, dict):
        return {key: _strings(value, f"{where}.{key}" if where else key, keep) for key, value in data.items()}
    if isinstance(data, list):
        return [_strings(value, f"{where}[{i}]", keep) for i, value in enumerate(data)]
    return data


WORDS = ("status", "direction")  # a status and a direction are words the reader checks, never shown raw


def _kept(path: str) -> bool:
    last = path.rsplit(".", 1)[-1]
    return last in WORDS or last == "api"


def write_csv(path: Path, columns: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)


def forge_strings(out: Path) -> None:
    """A payload in every text field of the pair in out, its journal and its manifest; the APIs renamed
    alike in all three (a payload too). Numbers, statuses and directions stay of their kind: the rows
    still read as a run's."""
    result, details, journal, manifest_path = pair_files(out)
    apis = {row[0]: f"{row[0]}{payload('API Name')}" for row in read_result_rows(result)}

    rows = []
    for api, forward, backward, _message in read_result_rows(result):
        rows.append([text_cell(apis[api]), forward, backward, text_cell(payload("Message"))])
    write_csv(result, RESULT_COLUMNS, rows)

    with open(details, newline="", encoding="utf-8-sig") as handle:
        read = list(csv.reader(handle))[1:]
    rows = []
    for row in read:
        name = row[0]
        api = next(a for a in apis if name.startswith(a + "."))
        text = [text_cell(payload(column)) for column in DETAILS_COLUMNS[1:4]]
        rows.append([text_cell(apis[api] + name[len(api) :]), *text, *row[4:8], text_cell(payload("Message"))])
    write_csv(details, DETAILS_COLUMNS, rows)

    lines = []
    for line in journal.read_text().splitlines():
        record = json.loads(line)
        if "running" in record:
            continue
        record = _strings(record, "", _kept)
        record["api"] = apis.get(record["api"], record["api"])
        lines.append(json.dumps(record))
    journal.write_text("\n".join(lines) + "\n")

    document = json.loads(manifest_path.read_text())
    document = _strings(document, "", lambda path: path in ("result", "details"))
    manifest_path.write_text(json.dumps(document))
