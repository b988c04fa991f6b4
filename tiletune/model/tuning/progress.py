"""One progress display for tuning a whole model (``tiletune model tune``).

A tuning-loop callback (``tiletune.tune.Callback``) for every round, plus ``round_done`` after each round.
In a terminal: one rich bar of the model's trials (the current task, the tasks with results, elapsed
time). Elsewhere: one line per round (task, its trials, its best, the model's trials so far).
"""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichBars

from ...records import Record
from ...tune import TuneRun


class ModelProgress:
    def __init__(self, total: int | None, tasks: int, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.total, self.tasks = total, tasks
        self.done = 0
        self.bars = RichBars(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=self.console,
                             disable=not self.live)
        self.bar = self.bars.add_task("model", total=total, info="")
        self.bars.start()

    def on_start(self, run: TuneRun) -> None:
        self.bars.update(self.bar, description=f"{run.workload.split('[')[0][:40]}")

    def on_trial(self, run: TuneRun, record: Record, measured: bool) -> None:
        self.done += 1
        self.bars.update(self.bar, completed=self.done)

    def on_end(self, run: TuneRun) -> None:
        pass

    def round_done(self, state, run: TuneRun | None, total: int, tuned: int) -> None:
        self.bars.update(self.bar, completed=total, info=f"{tuned}/{self.tasks} tasks with a kernel")
        if not self.live:
            budget = f"/{self.total}" if self.total else ""
            best = (f"best {state.best_gflops:.1f} GFLOPS" if state.best_gflops
                    else f"no kernel yet ({state.failure})" if state.failure else "no kernel yet")
            what = state.done if state.done and state.done != "exhausted" else best
            self.note(f"  {total}{budget} model trials; {state.kernel.name}: round {state.rounds}, "
                      f"{state.trials} trials, {what}")
        elif state.done.startswith("failed"):
            self.note(f"  {state.kernel.name}: {state.done}")
        elif not state.best_gflops and state.failure and state.rounds == 1:
            self.note(f"  {state.kernel.name}: no kernel yet: {state.failure}")

    def note(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        self.bars.stop()
