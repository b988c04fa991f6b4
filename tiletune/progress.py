"""Console progress of tuning runs, for ``tiletune tune``, ``tiletune table`` and ``tiletune bench``.

``Progress`` is a tuning-loop callback (``tiletune.tune.Callback``) with two modes:

- one run (``Progress()``: tune, table), or
- a series of runs (``Progress(runs=N)``: bench), which adds a count of the finished runs.

In a terminal it draws rich bars: the current run's trials (best GFLOPS so far, errors, configurations
recalled from the records, elapsed time) and, for a series, the runs done out of N. Elsewhere (a log
file, a pipe) it prints plain lines instead: for one run, a line every 5% of its trial budget (every 16
trials when it has none); for a series, nothing per trial; in both modes, one line when a run ends.
``note(text)`` prints a line (above the bars in a terminal). Errors are shown as what they mean (``failures``):
"failed" (build, run or check failures) apart from "invalid skipped" (configurations the template refuses,
never built). The text ``tiletune tune`` prints at the end is ``tiletune.commands.tune.summary``.
"""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichBars

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
