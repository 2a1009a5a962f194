"""The lines of the terminal summary and of a failed item, from the results of a run. No pytest."""

from __future__ import annotations

import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence

from ..dumps.dump import BACKWARD, DUMP_FILE_NAME, FORWARD
from ..results import ERROR, PASS, RUN_THE_CALL, SKIP, WARNING, EntryResult, Status
from ..untrusted import cut, printable
from .fallbacks import fallback_lines
from .messages import call_site_text, entry_findings, entry_message, notes, output_text, probe_text

STATUSES = (PASS, ERROR, WARNING, SKIP)


def shown(lines: list[str]) -> list[str]:
    """Lines as a terminal may show them: a dump's text in them (names, reasons, a call site's
    code) escaped where made, so that every printer of them (the reporter, an item's failure,
    the merge) gets them safe."""
    return [printable(line) for line in lines]


def count_lines(results: Sequence[EntryResult]) -> list[str]:
    """A line a direction; the entries --msprobe-filter left to another's check are counted apart,
    neither compared nor SKIPped."""
    lines = []
    for direction in (FORWARD, BACKWARD):
        ours = [r for r in results if r.direction == direction]
        counts = Counter(r.status for r in ours if not r.filtered)
        filtered = sum(1 for r in ours if r.filtered)
        if ours:
            line = f"{direction:<8} " + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES)
            lines.append(line + (f", {filtered} filtered" if filtered else ""))
    return lines


def filtered_lines(results: Sequence[EntryResult]) -> list[str]:
    """What --msprobe-filter left unchecked: how many entries, and how many checks stand for them."""
    stood_for = [r for r in results if r.filtered]
    if not stood_for:
        return []
    standing = len({(r.dump, r.stood_for_by) for r in stood_for})
    return [
        f"{len(stood_for)} entries not compared: each the same call as the first of its group but for the Max "
        f"and Min of its tensors, which {standing} checked entries stand for (their rows name them)"
    ]


def failing(strict: bool = False) -> tuple[Status, ...]:
    """The statuses that fail an item: error, and warning under --msprobe-strict."""
    return (ERROR, WARNING) if strict else (ERROR,)


def severity(result: EntryResult) -> tuple[int, float, str, float]:
    """Sort key, worst first: NaN or inf where the other side has none, then how many times its
    budget the worst output is off (the standard's severity), then the order of the dump (its
    path, the entry's place in it): a total order, so that a serial run and one under xdist,
    whose results come in another order, list failures of equal severity alike. An entry that
    failed with no output judged (its tested run raised, its worker crashed) counts as beyond
    any budget."""
    flagged = [row for row in result.outputs if row.status in (ERROR, WARNING)]
    measured = [row.severity for row in flagged if row.severity is not None]
    if measured:
        worst = max(measured)
    else:
        worst = math.inf if result.status == ERROR and result.reason and not flagged else 0.0
    place = math.inf if result.position is None else result.position  # placeless (read from a CSV): as they came
    return (0 if any(row.nonfinite for row in flagged) else 1, -worst, result.dump, place)


def dump_labels(results: Sequence[EntryResult]) -> dict[str, str]:
    """`rank1: ` for each dump of a run over several (its path past what they share), else nothing."""
    dumps = sorted({result.dump for result in results if result.dump})
    if len(dumps) < 2:
        return {}
    try:
        common = os.path.commonpath([os.path.dirname(dump) or "." for dump in dumps])
    except ValueError:  # absolute and relative paths (a dump path read back from a file): none shared
        common = ""
    labels = {}
    for dump in dumps:
        relative = os.path.relpath(dump, common) if common else dump
        folder, name = os.path.split(relative)
        labels[dump] = f"{folder if name == DUMP_FILE_NAME and folder else relative}: "
    return labels


def failure_lines(results: Sequence[EntryResult], limit: int = 20, statuses: Sequence[Status] = (ERROR,)) -> list[str]:
    failed = sorted((r for r in results if r.status in statuses), key=severity)
    labels = dump_labels(results)
    lines = []
    for result in failed[:limit]:
        # Cut with a visible mark: the whole message is in the result CSV.
        lines.append(cut(f"{labels.get(result.dump, '')}{result.entry}: {entry_findings(result)}", 400, " in the CSV"))
        lines += found_lines(result)
    if len(failed) > limit:
        lines.append(f"... and {len(failed) - limit} more in the result CSV")
    return shown(lines)


def found_lines(result: EntryResult) -> list[str]:
    """Where the model called a failing entry and what the fp32 probe said, a line each."""
    return [f"    {text}" for text in (call_site_text(result.call_site), probe_text(result.probe)) if text]


def first_failure_lines(results: Sequence[EntryResult]) -> list[str]:
    """The first failing entry in call order, per dump: where precision is first lost in the step."""
    first: dict[str, tuple[int, EntryResult]] = {}
    for result in results:
        if result.status == ERROR and result.position is not None:
            known = first.get(result.dump)
            if known is None or result.position < known[0]:
                first[result.dump] = (result.position, result)
    lines = []
    for dump in sorted(first):
        position, result = first[dump]
        of = f" of {dump}" if len(first) > 1 else ""
        lines.append(f"first failure in call order{of}: {result.entry} (entry {position + 1} of the dump)")
        lines += found_lines(result)
    return shown(lines)


def _reason_class(message: str) -> str:
    """A skip reason with the entry-specific parts (names, shapes, numbers) folded; a path
    keeps the digits of its folders (`step0/rank1/`), its file name (an entry's) folds."""
    reason = message.split("; ")[0]
    reason = re.sub(r"^[\w.]+\.(forward|backward): ", "", reason)
    while True:  # innermost brackets first: shapes nest, `[[16, 64], [16, 32]]`
        folded = re.sub(r"\[[^\[\]]*\]", "\0", reason)
        if folded == reason:
            break
        reason = folded
    reason = reason.replace("\0", "[...]")
    reason = re.sub(r"\b(API|op) [\w.]+", r"\1 ...", reason)
    return re.sub(r"\S+", _fold_numbers, reason)


# A number, or an escape (`\x1b`, `\ud800`: untrusted.py's) kept whole: its digits are no number.
# A number stands alone (`.0.`, `[2, 8]`, `1,024`); the digits inside a name are the name's
# (`conv2d`, `Conv2D`, `float16`: folded, they named APIs and dtypes that do not exist).
_NUMBER_OR_ESCAPE = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4})|(?<![A-Za-z0-9])\d+(?:[eE][-+]?\d+)?(?![A-Za-z0-9])")


def _fold_numbers(word: re.Match) -> str:
    folders, slash, name = word.group().rpartition("/")
    return folders + slash + _NUMBER_OR_ESCAPE.sub(lambda m: m.group() if m.group()[0] == "\\" else "N", name)


def skip_lines(results: Sequence[EntryResult], examples: int = 3) -> list[str]:
    by_reason: dict[str, list[str]] = defaultdict(list)
    for result in results:
        if result.status == SKIP and not result.filtered:
            by_reason[_reason_class(entry_message(result))].append(result.entry)
    lines = []
    for reason, names in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        listed = ", ".join(names[:examples]) + (", ..." if len(names) > examples else "")
        lines.append(f"{len(names):>4} x {reason}  ({listed})")
    return shown(lines)


def floor_line(results: Sequence[EntryResult]) -> list[str]:
    """How many failing outputs are rounding alone, by dtype (basic standard only)."""
    failed = [row for r in results for row in r.outputs if row.status == ERROR]
    at_floor = Counter(row.tested_dtype.rsplit(".", 1)[-1] for row in failed if row.floor)
    if not at_floor:
        return []
    dtypes = ", ".join(f"{n} {dtype}" for dtype, n in at_floor.most_common())
    total = sum(at_floor.values())
    return shown(
        [
            f"{total} of {len(failed)} failing outputs are at the rounding floor of their dtype ({dtypes}); "
            "--msprobe-standard dtype would pass them"
        ]
    )


def unchecked(selected: Collection[tuple[str, str]], results: Sequence[EntryResult]) -> Counter[str]:
    """The selected entries ((dump, entry name)) that no result came for, counted by direction."""
    done = {(result.dump, result.entry) for result in results}
    return Counter(entry.rpartition(".")[2] for dump, entry in selected if (dump, entry) not in done)


def stopped_line(why: str, selected: Collection[tuple[str, str]], results: Sequence[EntryResult]) -> str:
    """What a run that stopped early left unchecked, as the terminal and the HTML report say it:
    `the run stopped early (stopping after 1 failures): 47 of 66 entries never checked (18 forward, 29 backward)`."""
    return stopped_text(why, len(selected), unchecked(selected, results))


def stopped_text(why: str, selected: int, missing: Mapping[str, int]) -> str:
    """stopped_line from the counts alone (a manifest's `stopped`, read back by a later report)."""
    by_direction = ", ".join(f"{missing[d]} {d}" for d in (FORWARD, BACKWARD) if missing.get(d))
    return shown(
        [
            f"the run stopped early ({why}): {sum(missing.values())} of {selected} entries never checked"
            + (f" ({by_direction})" if by_direction else "")
        ]
    )[0]


def unfinished_line(count: int, result_path: object, where: str = "") -> str:
    """The APIs a run that stopped early left without a row in a pair, and the command that runs them."""
    return shown(
        [f"{where}{count} APIs unfinished when the run stopped, not written: --msprobe-resume {result_path} runs them"]
    )[0]


def summary_lines(results: Sequence[EntryResult], strict: bool = False) -> list[str]:
    lines = count_lines(results)
    failures = failure_lines(results, statuses=failing(strict))
    if failures:
        title = "failures (warnings fail: --msprobe-strict)" if strict else "failures"
        lines += ["", f"{title}, worst first:", *failures, *floor_line(results)]
        first = first_failure_lines(results)
        lines += ["", *first] if first else []
    warnings = [] if strict else failure_lines(results, statuses=(WARNING,))
    if warnings:
        lines += ["", "warnings (passed; --msprobe-strict fails them), worst first:", *warnings]
    fallbacks = fallback_lines(results)
    if fallbacks:
        lines += ["", "fallbacks:", *fallbacks]
    skips = skip_lines(results)
    if skips:
        lines += ["", "SKIP reasons:", *skips, *run_the_call_lines(results)]
    filtered = filtered_lines(results)
    if filtered:
        lines += ["", "filtered (--msprobe-filter):", *filtered]
    return lines


def run_the_call_lines(results: Sequence[EntryResult]) -> list[str]:
    """Once: how many backward entries SKIP a gradient msprobe recorded only as the one arriving at the
    output (no input's: results.RUN_THE_CALL in its reason), and what judges them instead."""
    held = [r for r in results if _held_at_a_view(r)]
    if not held:
        return []
    one = len(held) == 1
    return [
        f"{len(held)} backward {'entry SKIPs' if one else 'entries SKIP'} gradients msprobe recorded only as the "
        f"gradient arriving at the output, no input's: --msprobe-device recorded,cpu judges "
        f"{'it' if one else 'them'} by running the calls"
    ]


def _held_at_a_view(result: EntryResult) -> bool:
    judged = {o.index for o in result.outputs if o.status != SKIP}  # another side's row (recorded,cpu)
    skipped = [o for o in result.outputs if o.status == SKIP and o.index not in judged]
    return any(RUN_THE_CALL in output_text(o) for o in skipped) or (
        result.status == SKIP and RUN_THE_CALL in (result.reason or "")
    )


def inherited_lines(earlier: Sequence[EntryResult], strict: bool = False) -> list[str]:
    """What a resumed file held before this run: its counts, and its failures by name (its
    errors fail this run as new ones do)."""
    lines = count_lines(earlier)
    failures = failure_lines(earlier, statuses=failing(strict))
    if failures:
        lines += ["failures it held, worst first:", *failures]
    warnings = [] if strict else failure_lines(earlier, statuses=(WARNING,))
    if warnings:
        lines += ["warnings it held (passed; --msprobe-strict fails them):", *warnings]
    return lines


def failure_text(result: EntryResult, standard: str, strict: bool = False) -> list[str]:
    """The lines of one item's failure message: every output that broke the rule, with its metrics.
    `standard` is its name: the report header describes it, once."""
    failed = [row for row in result.outputs if row.status in failing(strict)]
    if not failed:
        return shown([f"{result.entry}: {entry_message(result)}"])
    breaks = "break" if len(failed) > 1 else "breaks"
    lines = [f"{result.entry}: {len(failed)} of {len(result.outputs)} outputs {breaks} the {standard} standard"]
    if result.call_site is not None:
        lines.append(f"  {call_site_text(result.call_site)}")
    for row in failed:
        cosine = "n/a" if row.cosine is None else f"{row.cosine:.6g}"
        lines.append(
            f"  {row.label} {row.tested_dtype} {row.shape}: {row.status}, Cosine {cosine}, "
            f"MaxAbsErr {row.max_abs_err:.4g}, MaxRelativeErr {row.max_rel_err:.4g}"
        )
        lines.append(f"    {output_text(row)}")
    if result.probe is not None:
        lines.append(f"  fp32 probe: {probe_text(result.probe)}")
    lines += [f"  note: {note}" for note in notes(result)]
    return shown(lines)


def metric_properties(result: EntryResult) -> list[tuple[str, str]]:
    """(name, value) pairs for --junitxml: the metrics of every output."""
    props = []
    for row in result.outputs:
        name = result.output_name(row) + (f".{row.side}" if row.side else "")
        props.append((f"{name}.status", row.status.value))
        for metric, value in (
            ("cosine", row.cosine),
            ("max_abs_err", row.max_abs_err),
            ("max_rel_err", row.max_rel_err),
        ):
            if value is not None:
                props.append((f"{name}.{metric}", repr(value)))
    return props
