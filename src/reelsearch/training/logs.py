"""Training logs: a CSV row per epoch, TensorBoard scalars when installed, and a PNG of loss and RSum per epoch."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

from reelsearch.io import atomic_path, atomic_write_text

#: Seconds between two drawings of ``curves.png``: drawing costs about 0.3 s of CPU, more than an epoch of a small
#: model; an epoch that ends sooner than that after the last drawing (or the log's start) waits for a later one, or
#: for the run's end (``close``).
PLOT_EVERY_S = 10.0


class TrainLog:
    """Epoch history kept in memory and rewritten atomically to ``dir/log.csv`` (every epoch) and ``dir/curves.png``
    (at most every :data:`PLOT_EVERY_S` seconds, and at the end)."""

    def __init__(self, out_dir: Path, history: list[dict] | None = None):
        self.dir = Path(out_dir)
        self.history: list[dict] = list(history or [])
        self._tb = None
        self._drawn = time.monotonic()  # when curves.png was last drawn (or the log started)
        self._undrawn = False  # rows curves.png does not show yet
        try:  # optional
            from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - optional package (tensorboard)

            self._tb = SummaryWriter(str(self.dir / "tensorboard"))
        except Exception:  # noqa: BLE001 - tensorboard missing or broken: CSV and PNG still written
            self._tb = None

    def add(self, row: dict) -> None:
        self.history.append(dict(row))
        if self._tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and k != "epoch":
                    self._tb.add_scalar(k, v, row.get("epoch", len(self.history)))
            self._tb.flush()
        self.write()

    def write(self) -> None:
        if not self.history:
            return
        keys: list[str] = []
        for row in self.history:
            keys += [k for k in row if k not in keys]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys)
        w.writeheader()
        w.writerows(self.history)
        atomic_write_text(self.dir / "log.csv", buf.getvalue())
        self._undrawn = True
        if time.monotonic() - self._drawn >= PLOT_EVERY_S:
            self._draw()

    def _draw(self) -> None:
        self._plot()
        self._drawn, self._undrawn = time.monotonic(), False

    def _plot(self) -> None:
        try:
            import matplotlib  # noqa: PLC0415 - optional package (plot extra)

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt  # noqa: PLC0415 - optional package (plot extra)
        except ImportError:
            return
        epochs = [r["epoch"] for r in self.history]
        fig, ax1 = plt.subplots(figsize=(7, 4))
        ax1.plot(epochs, self._series("train_loss"), "o-", color="tab:blue")
        ax1.set_xlabel("epoch")
        ax1.set_ylabel("training loss", color="tab:blue")
        if any("RSum" in r for r in self.history):
            ax2 = ax1.twinx()
            ax2.plot(epochs, self._series("RSum"), "s-", color="tab:red")
            ax2.set_ylabel("validation RSum", color="tab:red")
        ax1.set_title("training loss and validation RSum per epoch")
        fig.tight_layout()
        with atomic_path(self.dir / "curves.png", suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=90)
        plt.close(fig)

    def _series(self, key: str) -> list[float]:
        """``key`` of every row, NaN where a row has none (the start's row has no training loss)."""
        return [float("nan") if r.get(key) is None else r[key] for r in self.history]

    def close(self) -> None:
        """The run has ended: ``curves.png`` shows every epoch."""
        if self._undrawn:
            self._draw()
        if self._tb is not None:
            self._tb.close()
