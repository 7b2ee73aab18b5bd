"""The progress bar of ``lsrl.compile``, kept outside the pipeline: the stages report
``on_progress(stage, done, total)`` and know nothing of tqdm."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

OnProgress = Callable[[str, int, int], None]  # (stage name, work done, work in all)


@contextmanager
def progress_bar(description: str, total: int, progress: bool | None) -> Iterator[OnProgress]:
    """A tqdm bar of ``total`` steps, fed by the callback it yields; the bar names the stage running.

    ``progress``: True shows it at once, False never, None only once it has run for a second."""
    with tqdm(
        total=total, desc=description, unit="op", leave=False,
        disable=progress is False, delay=0 if progress else 1.0,
    ) as bar:
        shown: list[str] = []  # the stages shown so far

        def show(stage: str, done: int, total: int) -> None:
            bar.set_postfix_str(stage, refresh=False)
            bar.total = total
            bar.update(done - bar.n)
            if stage not in shown:
                shown.append(stage)
                if not bar.disable and bar.format_dict["elapsed"] >= bar.delay:  # never before the bar's delay
                    bar.refresh()

        yield show
