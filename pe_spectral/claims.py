"""Claim rules shared by the report and the thesis study (docs/study.md).

Pure functions of run records (dicts read from committed JSON); nothing here
reads files or renders text.
"""
from __future__ import annotations

import numpy as np

__all__ = ["DEPOSIT_RATIO", "DEPOSIT_SEED_FRAC", "deposit_rule"]

# Deposit rule (claim c, and per seed in claim g): a head of an early layer
# (first half of the layers) whose drop is >= DEPOSIT_RATIO x the layer's
# second-largest drop, in at least DEPOSIT_SEED_FRAC of the seeds.
DEPOSIT_RATIO = 3.0
DEPOSIT_SEED_FRAC = 2.0 / 3.0


def deposit_rule(ablation: dict) -> dict:
  """Claim (c)'s per-seed test on one ``ablation.json`` (single-head knock-outs).

  ``ablation["drop"]``: ``[seeds, layers, heads]`` accuracy drops (fractions).
  Per seed it holds when, in some early layer, the largest drop is positive
  and at least ``DEPOSIT_RATIO`` times the second-largest (taken as 0 when
  negative). Returns per-seed hits, their fraction and the layer that hit.
  """
  d = 100 * np.asarray(ablation["drop"], float)  # [seeds, layers, heads] points
  if d.ndim != 3 or d.shape[-1] < 2:
    raise ValueError(f"deposit_rule needs drops [seeds, layers, heads >= 2], got {d.shape}")
  early = max(1, d.shape[1] // 2)
  srt = np.sort(d[:, :early], axis=-1)
  top, second = srt[..., -1], srt[..., -2]
  ratio = top / np.maximum(second, 1e-9)
  hit = (top > 0) & (top >= DEPOSIT_RATIO * np.maximum(second, 0.0))  # [seeds, early]
  per_seed = hit.any(1)
  best = np.argmax(np.where(hit, ratio, -np.inf), axis=1)
  return {"early_layers": early, "per_seed": per_seed.tolist(),
          "fraction": float(per_seed.mean()), "top": top.tolist(),
          "second": second.tolist(),
          "layer": [int(b) if h else None for b, h in zip(best, per_seed)]}
