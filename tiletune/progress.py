"""Console progress for tuning runs (rich): trials, best GFLOPS so far, errors; a summary at the end."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .records import Record
from .tune import TuneRun


class RichProgress:
    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress: Progress | None = None
        self.task = None

    def on_start(self, run: TuneRun) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("best {task.fields[best]:.1f} GFLOPS"), TextColumn("errors {task.fields[errors]}"),
            TextColumn("recalled {task.fields[recalled]}"), TimeElapsedColumn(),
            console=self.console, transient=False, disable=not self.console.is_terminal,
        )
        self.progress.start()
        total = run.budget_trials
        self.task = self.progress.add_task(f"{run.strategy} {run.workload}", total=total, best=0.0, errors=0,
                                           recalled=0)

    def on_trial(self, run: TuneRun, record: Record, measured: bool) -> None:
        assert self.progress is not None
        self.progress.update(self.task, completed=run.trials, best=run.best_gflops, errors=run.errors,
                             recalled=run.recalled)
        if not self.console.is_terminal and run.trials % 16 == 0:
            self.console.print(f"  {run.trials} trials, best {run.best_gflops:.1f} GFLOPS, {run.errors} errors, "
                               f"{run.elapsed:.0f} s")

    def on_end(self, run: TuneRun) -> None:
        if self.progress is not None:
            self.progress.stop()


def summary(run: TuneRun) -> str:
    lines = [f"workload  {run.workload}", f"strategy  {run.strategy}",
             f"trials    {run.trials} ({run.measured} measured, {run.recalled} from records, {run.errors} errors)",
             f"time      {run.elapsed:.1f} s ({run.trials / max(run.elapsed, 1e-9):.2f} trials/s)",
             f"stopped   {run.stopped}"]
    if run.best is not None:
        b = run.best
        lines += [f"best      {b.gflops:.2f} GFLOPS, {b.median_s * 1e3:.4f} ms (trial {b.trial})",
                  f"config    {b.config}"]
    else:
        lines.append("best      none: every trial failed")
    errs: dict[str, int] = {}
    for r in run.history:
        if r.error:
            errs[r.error] = errs.get(r.error, 0) + 1
    if errs:
        lines.append("errors    " + ", ".join(f"{k}: {v}" for k, v in sorted(errs.items())))
        first = next(r for r in run.history if r.error)
        lines.append(f"first error message: {first.message[:300]}")
    return "\n".join(lines)
