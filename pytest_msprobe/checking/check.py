"""Check one dump entry: run both sides through its framework, judge every output.

The one place that ties the frameworks to the standards; it knows no pytest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..artifacts import error_data, repro
from ..dumps.dump import Dump, EntryName
from ..dumps.stack import CallSites
from ..frameworks import BenchmarkFailed, OutputPair, Probe, Run, RunOptions, Unsupported, for_framework
from ..frameworks.output_bounds import recorded_entry
from ..frameworks.references import ReferenceFailed, stopped_in
from ..inputs.rebuild import InputError, element_budget
from ..judging import dropout
from ..judging.compare import Comparison, compare
from ..judging.msprobe_metrics import msprobe_metrics
from ..judging.samples import figure_samples
from ..judging.standards import Standard, Verdict, for_dump
from ..options import DEFAULT_MAX_ELEMENTS, DEFAULT_TIMEOUT
from ..reports.fallbacks import explain_bench
from ..reports.msprobe_pytorch import backward_numbering, has_fp8_input, msprobe_numbers
from ..results import ERROR, PASS, SKIP, EntryResult, OutputResult, ProbeResult, judged_twice, worst_status
from .time_limit import TimeLimit, TimeUp

LOW_PRECISION = ("torch.float16", "torch.bfloat16")  # what the fp32 probe is for


@dataclass(frozen=True)
class Checker:
    """How this process checks entries: how both sides run, the standard, where error data goes."""

    run: RunOptions
    standard: Standard
    error_data: Path | None = None  # where the values of entries that are not pass are saved
    repro: Path | None = None  # where the reproducers of entries that are not pass are written
    max_elements: int = DEFAULT_MAX_ELEMENTS  # elements one entry may build: inputs, files, outputs
    timeout: float = DEFAULT_TIMEOUT  # seconds one entry's check may take (0: no limit)
    # Where the model called each entry; each dump's stack.json read once per process, on first need.
    call_sites: CallSites = field(default_factory=CallSites, compare=False)
    # --msprobe-device recorded,<device>: the check of the recorded outputs, made beside this one.
    recorded_too: Checker | None = None
    samples: bool = False  # --msprobe-html: each failing output keeps a sample of its elements for the figures
    # Each output's msprobe metrics (judging/msprobe_metrics.py), for the msprobe-pytorch CSV layout
    # and the benchmark standard; off, a run pays nothing for them.
    msprobe: bool = False

    def check(self, dump: Dump, name: EntryName, position: int | None = None) -> EntryResult:
        """The entry's result; an `error` naming the limit where its check ran past --msprobe-timeout."""
        standard = for_dump(self.standard, dump.path)
        if standard is not self.standard:  # judged against its own dump's reference run
            return replace(self, standard=standard).check(dump, name, position)
        result: EntryResult | None = None
        limit = TimeLimit(self.timeout)
        stopped_in()  # a check before this one that stopped in a user's function: forgotten
        try:
            with limit:
                result = self.checked(dump, name, position)
        except TimeUp:
            pass  # said below: `expired` holds it, also where a framework made it another exception
        finally:
            limit.stop()
        if limit.expired or result is None:
            inside = stopped_in()
            where = f" in {inside}" if inside else ""
            reason = (
                f"stopped after {limit.elapsed:.1f} s{where}: ran past --msprobe-timeout {self.timeout:g} s "
                "(a slower call than any of a real step); the run goes on"
            )
            result = EntryResult(name.prefix, name.direction, ERROR, reason, dump=str(dump.path), position=position)
            result.call_site = self.call_sites.of(dump.path, name)
        if self.recorded_too is not None:
            result = judged_twice(self.recorded_too.check(dump, name, position), result, self.run.tested_on)
        return result

    def checked(self, dump: Dump, name: EntryName, position: int | None) -> EntryResult:
        result = EntryResult(name.prefix, name.direction, SKIP, dump=str(dump.path), position=position)
        result.reason = dump.fault(name) or ""  # nested too deep, written twice: never read further
        if result.reason:
            return result
        # Only asked for when saving: the default path holds no values past the comparison.
        options = replace(self.run, keep=self.error_data is not None or self.repro is not None)
        try:
            with element_budget(self.max_elements):
                # The outputs the dump recorded, before anything is rebuilt (what the call itself
                # would make is sized by its framework, on the meta device).
                recorded_entry(dump.entries, name.prefix, name.direction, self.max_elements)
                run = for_framework(dump.framework).run(dump, name, options)
        except (Unsupported, BenchmarkFailed, InputError) as exc:
            result.reason = str(exc)
            return result
        except ReferenceFailed as exc:  # a user's reference, model or mask: its error, naming it
            return self.failed(dump, result, name, exc)
        try:
            self.judge(result, name, run, self.msprobe_inputs(dump, name, result))
        except ReferenceFailed as exc:  # a user's magnitude model, asked by the standard
            return self.failed(dump, result, name, exc)
        if result.status in (PASS, SKIP):
            return result
        result.call_site = self.call_sites.of(dump.path, name)
        if run.probe is not None and low_precision_failure(result, run):
            result.probe = self.probe(result, name, run, run.probe)
        self.save(dump, result, run)
        return result

    def msprobe_inputs(self, dump: Dump, name: EntryName, result: EntryResult) -> bool | None:
        """Whether the call had an fp8 input (msprobe's absolute-threshold rule), where the
        msprobe metrics are asked for, else None; a backward's outputs numbered as msprobe does."""
        if not self.wants_msprobe:
            return None
        forward = dump.entries.get(f"{name.prefix}.forward")
        if not isinstance(forward, dict):
            return False
        if name.direction == "backward":
            result.msprobe_outputs = backward_numbering(forward)
        return has_fp8_input(forward)

    def failed(self, dump: Dump, result: EntryResult, name: EntryName, exc: ReferenceFailed) -> EntryResult:
        result.status, result.reason, result.outputs = ERROR, str(exc), []
        result.call_site = self.call_sites.of(dump.path, name)
        return result

    def judge(self, result: EntryResult, name: EntryName, run: Run, fp8_input: bool | None = None) -> None:
        result.notes = list(run.notes)
        if run.tested_error:
            result.status = ERROR
            result.reason = f"the tested run on {self.run.tested_on} raised {run.tested_error}"
            return
        numbers = msprobe_numbers(result.msprobe_outputs, (pair.index for pair in run.pairs))
        result.outputs = [self.output(name, pair, run, fp8_input, numbers.get(pair.index)) for pair in run.pairs]
        explain_bench(result)
        result.status = worst_status(output.status for output in result.outputs)
        if not result.outputs:
            result.reason = "no output to compare"

    @property
    def wants_msprobe(self) -> bool:
        """msprobe's metrics of every output: for its CSV layout, or for a standard that judges by them."""
        return self.msprobe or getattr(self.standard, "wants_msprobe", False)

    def output(
        self, name: EntryName, pair: OutputPair, run: Run, fp8_input: bool | None = None, number: int | None = None
    ) -> OutputResult:
        """One output judged; its msprobe metrics too where asked (fp8_input not None), `number` the
        output's number as msprobe's rows name it (a backward's counts every positional tensor)."""
        if pair.skip or pair.tested is None or pair.bench is None:
            return OutputResult(pair.index, SKIP, pair.bench_dtype, pair.tested_dtype, pair.shape, reasons=[pair.skip])
        # A dropout that draws compares two masks element by element: msprobe's metrics of it mean
        # nothing (acc_check writes no details row for a dropout), so they stay blank.
        msprobe = (
            None
            if fp8_input is None or pair.dropout is not None
            else msprobe_metrics(pair.tested, pair.bench, pair.tested_dtype, api=name.api, fp8_input=fp8_input)
        )
        comparison = Comparison(
            pair.tested,
            pair.bench,
            pair.tested_dtype,
            name=f"{name.full}.output.{pair.index}",
            extra=pair.extra,
            computed_in=pair.computed_in,
            msprobe=msprobe,
            msprobe_name=f"{name.full}.output.{pair.index if number is None else number}",
        )
        if pair.dropout is not None:
            metrics, verdict = dropout.judge(comparison, pair.dropout, self.standard)
            if self.msprobe:  # the CSV in msprobe's layout: say why its metric cells are blank
                verdict.reasons.append(dropout.NO_MSPROBE_METRICS)
        else:
            metrics, verdict = compare(comparison, self.standard)
        if pair.kernel_deficit and verdict.status not in (PASS, SKIP):
            verdict.reasons.append(pair.kernel_deficit)
        return OutputResult(
            pair.index,
            verdict.status,
            pair.bench_dtype,
            pair.tested_dtype,
            pair.shape,
            metrics.cosine,
            metrics.max_abs_err,
            metrics.max_rel_err,
            verdict.reasons,
            verdict.floor,
            pair.note,
            verdict.ratio,
            severity=verdict.severity,
            nonfinite=verdict.nonfinite,
            samples=figure_samples(pair.tested, pair.bench, pair.tested_dtype) if self.wants_samples(verdict) else None,
            msprobe=msprobe,
        )

    def wants_samples(self, verdict: Verdict) -> bool:
        """Only a failing output, and only for --msprobe-html: a run without it pays nothing."""
        return self.samples and verdict.status not in (PASS, SKIP)

    def probe(self, result: EntryResult, name: EntryName, run: Run, probe: Probe) -> ProbeResult:
        """The fp32 probe of a failing entry, judged by the run's standard."""
        found = ProbeResult(f"{name.api_type}.{name.api}", probe.device, self.run.recorded)
        at_nodes = sorted(o.index for o in result.outputs if o.status == ERROR and o.index in probe.unprobed)
        if at_nodes:
            found.error = (
                f"output {', '.join(map(str, at_nodes))} was judged at a node of the API's graph (where msprobe "
                "recorded it), and a run of the call in fp32 gives the inputs' gradients only"
            )
            return found
        try:
            pairs = probe.pairs()
        except Exception as exc:  # noqa: BLE001 - the probe is an extra: the verdict stands without it
            lines = str(exc).strip().splitlines()
            found.error = f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
            return found
        found.outputs = [self.output(name, pair, run) for pair in pairs]
        found.status = worst_status(output.status for output in found.outputs)
        return found

    def save(self, dump: Dump, result: EntryResult, run: Run) -> None:
        """The error data and the repro of an entry that is not pass (nor SKIP): extras, the verdict
        stands without them."""
        if run.kept is None:
            return
        for folder, writer, what in (
            (self.error_data, error_data.save, "error data"),
            (self.repro, repro.save, "repro"),
        ):
            if folder is None:
                continue
            try:
                result.notes.append(f"{what} in {writer(folder, dump, result, run.kept, self)}")
            except Exception as exc:  # noqa: BLE001 - saving is an extra: the verdict stands without it
                result.notes.append(f"{what} not saved: {type(exc).__name__}: {exc}")


def low_precision_failure(result: EntryResult, run: Run) -> bool:
    """A failing entry computed in fp16/bf16 (a failing output in those dtypes, low-precision
    inputs, or autocast): what the fp32 probe tells apart."""
    if result.status != ERROR:
        return False
    return run.low_precision or any(o.status == ERROR and o.tested_dtype in LOW_PRECISION for o in result.outputs)
