"""What a check did other than asked, said where a reader looks: the details row, the summary.

Two fallbacks change what a verdict means. Random data in a tensor dump (a tensor file
missing, `--msprobe-mode auto`) checks the API on other inputs than the recorded call's; a
benchmark in float32 (float64 has no kernel for the API) is a benchmark with float32's own
rounding. Each is a note of its entry, made where it happens (inputs.py, the frameworks); the
summary counts them here. A Bench Dtype other than float64 always says why in its details
row: a fallback, an integer or bool output (compared exactly), or the dtype the call itself
asks for (a cast). No pytest, no framework.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..results import BENCH_FALLBACK, NO_TENSOR_FOLDER, RANDOM_DATA, SKIP, EntryResult

FLOAT64 = ("torch.float64", "float")  # a Python float is a double
_FLOATING = ("float", "half", "double", "bfloat", "complex")


def explain_bench(result: EntryResult) -> None:
    """Give every compared output whose bench is not float64 its reason (OutputResult.bench_note)."""
    fallback = next((note for note in result.notes if note.startswith(BENCH_FALLBACK)), "")
    for output in result.outputs:
        dtype = output.bench_dtype
        if output.status == SKIP or not dtype or dtype in FLOAT64:
            continue
        if not any(word in dtype.rsplit(".", 1)[-1].lower() for word in _FLOATING):
            output.bench_note = f"bench in {dtype}: an integer or bool output, compared exactly"
        elif fallback:
            output.bench_note = fallback
        else:
            output.bench_note = f"bench in {dtype}: the dtype the call itself asks for (a cast)"


def random_data(result: EntryResult) -> bool:
    """The entry ran on random data where its dump recorded tensors (a tensor file missing)."""
    return not no_tensor_folder(result) and any(note.endswith(RANDOM_DATA) for note in result.notes)


def no_tensor_folder(result: EntryResult) -> bool:
    """The entry ran on random data: its tensor dump came without its dump_tensor_data/ folder."""
    return NO_TENSOR_FOLDER in result.notes


def bench_fallback(result: EntryResult) -> bool:
    """The entry's benchmark ran in another dtype than float64, which raised."""
    return any(note.startswith(BENCH_FALLBACK) for note in result.notes)


KINDS = (
    ("on random data: their tensor dump has no dump_tensor_data/ folder", no_tensor_folder),
    ("on random data: a tensor file the dump names is missing", random_data),
    ("benchmarked in float32: float64 has no kernel for them", bench_fallback),
)


def fallback_lines(results: Sequence[EntryResult], examples: int = 3) -> list[str]:
    """`   2 entries benchmarked in float32: ...  (Torch.x.0.forward, ...)`, one line a kind."""
    found: dict[str, list[str]] = defaultdict(list)
    for result in results:
        for text, took in KINDS:
            if took(result):
                found[text].append(result.entry)
    lines = []
    for text, _ in KINDS:
        names = found.get(text)
        if names:
            shown = ", ".join(names[:examples]) + (", ..." if len(names) > examples else "")
            lines.append(f"{len(names):>4} {'entry' if len(names) == 1 else 'entries'} {text}  ({shown})")
    return lines
