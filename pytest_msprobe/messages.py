"""Results turned into words: the Message cells of the CSVs and the lines of the terminal.

The one place where an entry's reason, its outputs' reasons and its notes are
joined into text; everything before it keeps them apart (results.py).
"""

from __future__ import annotations

from .results import PASS, SKIP, EntryResult, OutputResult

SEPARATOR = "; "


def floor_text(output: OutputResult) -> str:
    return f"within the {output.floor} rounding budget (--msprobe-standard dtype passes it)" if output.floor else ""


def output_message(output: OutputResult) -> str:
    """The Message of a details row: the rules broken (or kept), the rounding floor, how it was
    paired, why the bench is not float64."""
    return join([*output.reasons, floor_text(output), output.note, output.bench_note])


def output_findings(result: EntryResult) -> list[str]:
    """`output.0: <why>` for every output that did not pass, failures before SKIPs; and how a
    passing one was paired, where that needs saying."""
    told = [o for o in result.outputs if (o.status != PASS and output_message(o)) or o.note]
    ranked = sorted(told, key=lambda o: (o.status == PASS, o.status == SKIP))
    return [f"output.{o.index}: {output_message(o) if o.status != PASS else o.note}" for o in ranked]


def entry_message(result: EntryResult) -> str:
    """What an entry has to say in one line: its reason, its failing outputs, its notes."""
    return join([result.reason, *output_findings(result), *result.notes])


def api_message(forward: EntryResult | None, backward: EntryResult | None) -> str:
    """The Message of a result row, both directions of one API."""
    forward_text = entry_message(forward) if forward else ""
    backward_text = entry_message(backward) if backward else ""
    if forward_text and backward_text:
        return f"forward: {forward_text} | backward: {backward_text}"
    if backward_text:
        return f"backward: {backward_text}" if forward else backward_text
    return forward_text


def join(parts: list[str]) -> str:
    return SEPARATOR.join(part for part in parts if part)
