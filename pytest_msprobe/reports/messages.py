"""Results turned into words: the Message cells of the CSVs and the lines of the terminal.

The one place where an entry's reason, its outputs' reasons and its notes are
joined into text; everything before it keeps them apart (results.py).
"""

from __future__ import annotations

from ..results import ERROR, PASS, SKIP, CallSite, EntryResult, OutputResult, ProbeResult

SEPARATOR = "; "


def floor_text(output: OutputResult) -> str:
    return f"within the {output.floor} rounding budget (--msprobe-standard dtype passes it)" if output.floor else ""


def output_message(output: OutputResult) -> str:
    """The Message of a details row: the rules broken (or kept), the rounding floor, how it was
    paired, why the bench is not float64; and its side, where an entry was judged twice (the two
    rows of one output tell their side apart by it)."""
    text = output_text(output)
    return f"{output.side}: {text}" if output.side and text else text


def output_text(output: OutputResult) -> str:
    """output_message without the side, for lines that name the output by its label."""
    return join([*output.reasons, floor_text(output), output.note, output.bench_note])


def output_findings(result: EntryResult) -> list[str]:
    """`output.0: <why>` for every output that did not pass, failures before SKIPs; and how a
    passing one was paired, where that needs saying."""
    told = [o for o in result.outputs if (o.status != PASS and output_text(o)) or o.note]
    ranked = sorted(told, key=lambda o: (o.status == PASS, o.status == SKIP))
    return [f"{o.label}: {output_text(o) if o.status != PASS else o.note}" for o in ranked]


def entry_message(result: EntryResult) -> str:
    """What an entry has to say in one line: its reason, its failing outputs, the fp32 probe,
    where the model called it, its notes."""
    return join(
        [
            result.reason,
            *output_findings(result),
            probe_text(result.probe),
            call_site_text(result.call_site),
            *notes(result),
        ]
    )


def entry_findings(result: EntryResult) -> str:
    """entry_message without the probe and the call site, which the terminal gives lines of their own."""
    return join([result.reason, *output_findings(result), *notes(result)])


def notes(result: EntryResult) -> list[str]:
    """An entry's notes, each once: a note made per input (the tensor folder missing, for each
    tensor the entry reads) says the same thing as often as the entry has inputs."""
    return list(dict.fromkeys(result.notes))


def details_message(result: EntryResult, output: OutputResult) -> str:
    """The Message of a details row: the output's own, and where the model called a failing one."""
    failing = output.status not in (PASS, SKIP)
    return join([output_message(output), call_site_text(result.call_site) if failing else ""])


def call_site_text(site: CallSite | None) -> str:
    """`at train/model.py:74 in forward: loss = F.cross_entropy(...)`."""
    if site is None:
        return ""
    return f"at {site.path}:{site.line} in {site.function}" + (f": {site.code}" if site.code else "")


def probe_text(probe: ProbeResult | None) -> str:
    """What the fp32 probe found: autocast's doing, or the kernel's."""
    if probe is None:
        return ""
    where = " (on the CPU: the tested side was recorded, there is no device to re-run)" if probe.recorded else ""
    if probe.status is None:
        return f"fp32 probe{where} could not run: {probe.error}"
    if probe.status != ERROR:
        return f"passes when run in fp32{where}: keep {probe.api} out of autocast or cast it to fp32"
    if probe.floor:
        return (
            f"fails in fp32 too{where}, within the {probe.floor} rounding budget: rounding to {probe.floor} "
            "alone (--msprobe-standard dtype passes it)"
        )
    return f"fails in fp32 too{where}: the kernel itself"


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


def split_message(message: str, forward: str, backward: str) -> tuple[str, str]:
    """The forward and backward parts of a result row's Message (messages.api_message, undone)."""
    if forward and backward:
        head, sep, tail = message.partition(" | backward: ")
        if sep and head.startswith("forward: "):
            return head[len("forward: ") :], tail
        if message.startswith("backward: "):
            return "", message[len("backward: ") :]
        return message, ""
    return (message, "") if forward else ("", message)
