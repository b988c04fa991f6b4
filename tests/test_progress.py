"""The one progress display: rich bars in a terminal, plain lines elsewhere; one run or a series."""
from __future__ import annotations

import io

from rich.console import Console

from tests.conftest import bowl_cost, bowl_space
from tiletune.measure.synthetic import FunctionMeasurer
from tiletune.commands.tune import summary
from tiletune.progress import Progress
from tiletune.strategies import create
from tiletune.tune import tune


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=terminal, width=120), buf


def _tune(progress: Progress, trials: int | None = 40, seconds: float | None = None, seed: int = 0):
    space = bowl_space()
    return tune(space=space, strategy=create("random", space, seed=seed), measurer=FunctionMeasurer(bowl_cost(space)),
                workload="synthetic", flops=10**9, trials=trials, seconds=seconds, batch_size=4,
                callbacks=[progress])


def test_one_run_prints_a_line_every_5_percent_and_at_the_end():
    console, buf = _console(False)
    run = _tune(Progress(console=console), trials=40)
    lines = buf.getvalue().splitlines()
    trial_lines = [l for l in lines if l.startswith("  ")]
    assert [l.split()[0] for l in trial_lines] == [f"{n}/40" for n in range(2, 41, 2)]
    assert "recalled" in trial_lines[0] and "GFLOPS" in trial_lines[0]
    assert lines[-1].startswith("synthetic random: 40 trials in") and "stopped: trials" in lines[-1]
    assert "best" in summary(run)


def test_one_run_without_a_trial_budget_prints_every_16_trials():
    console, buf = _console(False)
    _tune(Progress(console=console), trials=None, seconds=0.5)
    trial_lines = [l for l in buf.getvalue().splitlines() if l.startswith("  ")]
    assert trial_lines and trial_lines[0].split()[0] == "16"


def test_series_prints_one_line_per_run_with_its_label():
    console, buf = _console(False)
    prog = Progress(runs=2, console=console)
    for seed in range(2):
        prog.label = f"seed {seed}"
        _tune(prog, trials=8, seed=seed)
    prog.note("a [bold]note[/bold]")
    prog.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("synthetic random seed 0: 8 trials") and lines[1].startswith("synthetic random seed 1:")
    assert lines[2] == "a [bold]note[/bold]"  # notes are printed as they are


def test_terminal_draws_bars():
    console, buf = _console(True)
    prog = Progress(runs=2, console=console)
    prog.label = "seed 0"
    _tune(prog, trials=8)
    assert prog.bars is not None  # a series keeps its bars until closed
    prog.close()
    out = buf.getvalue()
    assert "random seed 0 synthetic" in out and "runs" in out and "1/2" in out
    assert "trials in" not in out  # no plain lines in a terminal
    console, buf = _console(True)
    one = Progress(console=console)
    _tune(one, trials=8)
    assert one.bars is None  # one run: stopped at its end
    assert "8/8" in buf.getvalue()
