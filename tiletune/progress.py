"""Console progress of tuning runs, for ``tiletune tune``, ``tiletune table`` and ``tiletune bench``.

``Progress`` is a tuning-loop callback (``tiletune.tune.Callback``) with two modes:

- one run (``Progress()``: tune, table), or
- a series of runs (``Progress(runs=N)``: bench), which adds a count of the finished runs.

In a terminal it draws rich bars: the current run's trials (best GFLOPS so far, errors, configurations
recalled from the records, elapsed time) and, for a series, the runs done out of N. Elsewhere (a log
file, a pipe) it prints plain lines instead: for one run, a line every 5% of its trial budget (every 16
trials when it has none); for a series, nothing per trial; in both modes, one line when a run ends.
``note(text)`` prints a line (above the bars in a terminal). ``summary(run)`` is the text that
``tiletune tune`` prints at the end. Errors are shown as what they mean: "failed" (build, run or check
failures) apart from "invalid skipped" (configurations the template refuses, never built).
"""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichBars

from .bench.results import BaselineResult
from .records import Record
from .tune import TuneRun

PLAIN_EVERY = 16  # trials between plain lines of a run without a trial budget


class Progress:
    """Progress of one run (``runs=None``) or of a series of ``runs`` runs; see the module docstring.
    ``label`` (e.g. "seed 2") is shown after the strategy's name; set it before a run starts."""

    def __init__(self, runs: int | None = None, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.runs = runs
        self.label = ""
        self.bars: RichBars | None = None
        self.outer = None  # the task counting runs (series only)
        self.task = None  # the current run's task
        self.next_line = 0  # trials at which the next plain line is printed

    def _start_bars(self) -> RichBars:
        if self.bars is None:
            self.bars = RichBars(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=self.console,
                                 disable=not self.live)
            if self.runs is not None:
                self.outer = self.bars.add_task("runs", total=self.runs, info="")
            self.bars.start()
        return self.bars

    def _who(self, run: TuneRun) -> str:
        return f"{run.strategy} {self.label}" if self.label else run.strategy

    def _every(self, run: TuneRun) -> int:
        return max(1, run.budget_trials // 20) if run.budget_trials else PLAIN_EVERY

    def on_start(self, run: TuneRun) -> None:
        bars = self._start_bars()
        if self.task is not None:
            bars.remove_task(self.task)
        self.task = bars.add_task(f"{self._who(run)} {run.workload}"[:70], total=run.budget_trials, info="")
        self.next_line = self._every(run)

    def on_trial(self, run: TuneRun, record: Record, measured: bool) -> None:
        if self.bars is not None and self.task is not None:
            self.bars.update(self.task, completed=run.trials,
                             info=f"best {run.best_gflops:.1f} GFLOPS, {failures(run)}, {run.recalled} recalled")
        if not self.live and self.runs is None and run.trials >= self.next_line:
            self.next_line = run.trials + self._every(run)
            total = f"/{run.budget_trials}" if run.budget_trials else ""
            self.note(f"  {run.trials}{total} trials ({run.measured} measured, {run.recalled} recalled, "
                      f"{failures(run)}), best {run.best_gflops:.1f} GFLOPS, {run.elapsed:.0f} s")

    def on_end(self, run: TuneRun) -> None:
        if self.bars is not None and self.outer is not None:
            self.bars.advance(self.outer)
        if not self.live:
            self.note(f"{run.workload} {self._who(run)}: {run.trials} trials in "
                      f"{run.elapsed:.1f} s, best {run.best_gflops:.2f} GFLOPS ({failures(run)}, "
                      f"stopped: {run.stopped})")
        if self.runs is None:
            self.close()

    def note(self, text: str) -> None:
        """Print a line of text as it is (no markup), above the bars in a terminal."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        """Stop the bars (a series: after its last run; one run: done at its end)."""
        if self.bars is not None:
            self.bars.stop()
            self.bars, self.outer, self.task = None, None, None


def failures(run: TuneRun) -> str:
    """'N failed' and, when there are any, 'M invalid (skipped)': the error count in a user's words."""
    failed = run.errors - run.skipped
    return f"{failed} failed" + (f", {run.skipped} invalid skipped" if run.skipped else "")


def summary(run: TuneRun, *, vendor: BaselineResult | None = None, flops: int = 0, records: str | None = None) -> str:
    """The text ``tiletune tune`` prints at the end: the run, its best result, why it stopped, what failed;
    with ``vendor`` (and the workload's ``flops``), the vendor library's figure and our ratio to it; with
    ``records``, the records file and how to build the best kernel from it."""
    lines = [f"workload  {run.workload}", f"strategy  {run.strategy}",
             f"trials    {run.trials} ({run.measured} measured, {run.recalled} from records, {failures(run)})",
             f"time      {run.elapsed:.1f} s ({run.trials / max(run.elapsed, 1e-9):.2f} trials/s)",
             f"stopped   {run.stopped}" + (f": {run.stop_reason}" if run.stop_reason else "")]
    if run.best is not None:
        b = run.best
        lines += [f"best      {b.gflops:.2f} GFLOPS, {b.median_s * 1e3:.4f} ms (trial {b.trial})",
                  f"config    {b.config}"]
    else:
        lines.append("best      none: every trial failed")
    if vendor is not None:
        lines.append(_vendor_line(run, vendor, flops))
    if run.skipped:
        lines.append(f"skipped   {run.skipped} configuration{'s' * (run.skipped > 1)} invalid for this template "
                     "(refused before building: not failures)")
    errs: dict[str, int] = {}
    for r in run.history:
        if r.error and r.error != "invalid":
            errs[r.error] = errs.get(r.error, 0) + 1
    if errs:
        lines.append("failed    " + ", ".join(f"{k}: {v}" for k, v in sorted(errs.items())))
        first = next(r for r in run.history if r.error and r.error != "invalid")
        lines.append(f"first failure message: {first.message[:300]}")
    if records is not None:
        lines.append(f"records   {records}")
        if run.best is not None:
            lines.append(f"next      tiletune build {records} -o kernel.so  (the best kernel as a shared library; "
                         "needs a C compiler)")
    return "\n".join(lines)


def _vendor_line(run: TuneRun, vendor: BaselineResult, flops: int) -> str:
    if not vendor.ok:
        return f"vendor    {vendor.label or 'vendor library'}: not timed ({vendor.error}: {vendor.message[:200]})"
    g = vendor.gflops(flops)
    line = f"vendor    {g:.2f} GFLOPS, {vendor.median_s * 1e3:.4f} ms: {vendor.label}"
    if run.best is not None and g > 0:
        line += f"; ours is {run.best.gflops / g:.2f}x its speed"
    return line
