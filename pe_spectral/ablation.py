"""Head ablation: every (layer, head) knock-out of every seed in one compiled program.

Knocking out head h of layer l multiplies that head's attention output by 0
through the attention kernel's ``head_mask`` -- equivalent to the paper's
zeroing of that head's value rows (its W_o bias stays; the attention pattern is
untouched). All masks are evaluated with ``jax.vmap`` (in chunks of masks if
memory demands), inside the ``jax.vmap`` over seeds.

Modes:

* ``single``: knock out one head; all other heads intact (the default; the
  paper's leak -- head H-1 of every finished layer staying zeroed -- is *not*
  reproduced unless ``leak=True``);
* ``keep_only``: knock out every head of layer l except h.
"""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["head_masks", "ablate_heads", "deposit_scores", "mean_ci"]


def head_masks(num_layers: int, num_heads: int, *, mode: str = "single",
               leak: bool = False) -> jnp.ndarray:
  """``[num_layers * num_heads, num_layers, num_heads]`` masks (mask i = layer i//H, head i%H).

  ``leak=True`` reproduces the paper's bug: while ablating layer l, head
  ``num_heads - 1`` of every earlier layer is also zeroed (``single`` only).
  """
  if mode not in ("single", "keep_only"):
    raise ValueError(f"mode must be 'single' or 'keep_only', got {mode!r}")
  if leak and mode != "single":
    raise ValueError("leak only applies to mode='single'")
  masks = np.ones((num_layers, num_heads, num_layers, num_heads), np.float32)
  for l in range(num_layers):
    for h in range(num_heads):
      if mode == "single":
        masks[l, h, l, h] = 0.0
        if leak:
          masks[l, h, :l, num_heads - 1] = 0.0
      else:
        masks[l, h, l, :] = 0.0
        masks[l, h, l, h] = 1.0
  return jnp.asarray(masks.reshape(num_layers * num_heads, num_layers, num_heads))


def ablate_heads(trainer, params, ids, labels, *, mode: str = "single",
                 leak: bool = False, mask_chunk: Optional[int] = None) -> dict:
  """Accuracy under every head knock-out, for every seed, in one compiled call.

  Args:
    trainer: the run's :class:`pe_spectral.train.Trainer` (model, label rule).
    params: seed-stacked parameters (``state['params']``).
    ids, labels: evaluation data (raw labels).
    mode, leak: see :func:`head_masks`.
    mask_chunk: masks per vmapped batch (``lax.map`` over chunks); default all.

  Returns:
    ``{"baseline": [seeds], "ablated": [seeds, layers, heads]}`` (NumPy).
  """
  cfg = trainer.model_cfg
  masks = head_masks(cfg.num_layers, cfg.num_heads, mode=mode, leak=leak)
  n_masks = masks.shape[0]
  chunk = n_masks if mask_chunk is None else max(1, min(mask_chunk, n_masks))
  n_chunks = -(-n_masks // chunk)
  padded = jnp.concatenate(
      [masks, jnp.ones((n_chunks * chunk - n_masks,) + masks.shape[1:])])
  padded = padded.reshape(n_chunks, chunk, cfg.num_layers, cfg.num_heads)

  def per_seed(p):
    acc_of = lambda m: trainer._eval_one(p, ids, labels, head_mask=m)[0]
    ablated = jax.lax.map(jax.vmap(acc_of), padded).reshape(-1)[:n_masks]
    return acc_of(jnp.ones((cfg.num_layers, cfg.num_heads))), ablated

  base, abl = jax.jit(jax.vmap(per_seed))(params)
  base, abl = trainer.fetch(base), trainer.fetch(abl)
  return {"baseline": base,
          "ablated": abl.reshape(-1, cfg.num_layers, cfg.num_heads)}


_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_ci(values, axis: int = 0):
  """Mean and 95% Student-t half-width over ``axis`` (half-width NaN for n = 1)."""
  v = np.asarray(values, np.float64)
  n = v.shape[axis]
  mean = v.mean(axis)
  if n < 2:
    return mean, np.full_like(mean, np.nan)
  t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
  return mean, t * v.std(axis, ddof=1) / math.sqrt(n)


def deposit_scores(baseline, ablated) -> dict:
  """Per-layer concentration of the ablation damage.

  With drops ``d_h = baseline - ablated_h`` (accuracy points) for the heads of
  one layer, the **deposit score** is ``(max_h d - mean_h d) / ((1 - 1/H) Σ_h
  max(d_h, 0))``: 0 when every head matters equally (or none does), 1 when a
  single head carries all the damage. Also returned: the largest single-head
  drop and its head.

  Args:
    baseline: ``[seeds]``; ablated: ``[seeds, layers, heads]``.
  Returns:
    dict of ``[seeds, layers]`` arrays: ``score``, ``max_drop``, ``argmax_head``.
  """
  base = np.asarray(baseline, np.float64)[:, None, None]
  drops = base - np.asarray(ablated, np.float64)
  h = drops.shape[-1]
  total = np.clip(drops, 0, None).sum(-1)
  spread = drops.max(-1) - drops.mean(-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    score = np.where(total > 1e-12, spread / ((1 - 1 / h) * total), 0.0)
  return {"score": score, "max_drop": drops.max(-1),
          "argmax_head": drops.argmax(-1), "drops": drops}
