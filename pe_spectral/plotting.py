"""Matplotlib figures (Agg backend; files only, never a window)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["accuracy_curves"]


def _band(ax, x, per_seed, label, color):
  a = np.asarray(per_seed, float) * 100.0  # [evals, seeds]
  mean, std = a.mean(1), a.std(1)
  ax.plot(x, mean, color=color, label=label)
  ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, lw=0)


def accuracy_curves(records: list[dict], path: str, title: str = "") -> None:
  """Train/test accuracy (mean ± std over seeds) against step, from metrics.jsonl rows."""
  if not records:
    return
  steps = [r["step"] for r in records]
  fig, ax = plt.subplots(figsize=(5.5, 3.5), dpi=110)
  _band(ax, steps, [r["train_accuracy"] for r in records], "train", "tab:blue")
  _band(ax, steps, [r["test_accuracy"] for r in records], "test", "tab:orange")
  ax.set_xlabel("step")
  ax.set_ylabel("accuracy (%)")
  ax.set_ylim(0, 100)
  ax.grid(alpha=0.3)
  n = len(records[-1]["test_accuracy"])
  ax.set_title(f"{title} (mean ± std over {n} seed{'s' if n != 1 else ''})",
               fontsize=9)
  ax.legend(loc="lower right", fontsize=8)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
