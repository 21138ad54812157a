"""Head ablation: every (layer, head) knock-out of every seed in one compiled program.

Knocking out head h of layer l multiplies that head's attention output by 0
through the attention kernel's ``head_mask`` -- equivalent to the paper's
zeroing of that head's value rows (its W_o bias stays; the attention pattern is
untouched). All masks are evaluated with ``jax.vmap`` (in chunks of masks if
memory demands), inside the ``jax.vmap`` over seeds.

Knock-outs that touch one layer only (every mode except ``leak``) share work
(``method="shared"``, the default): per evaluation batch the un-ablated
forward pass runs once and keeps each block's input and per-head attention
outputs; ablating head h of layer l then reuses layers < l and layer l's
attention, and only re-runs layer l's ``out_proj`` + feed-forward and the
layers above it, vmapped over that layer's masks. ``method="masked"`` runs the
full masked model for every mask (the reference; also the ``leak`` path).

Modes:

* ``single``: knock out one head; all other heads intact (the default; the
  paper's leak -- head H-1 of every finished layer staying zeroed -- is *not*
  reproduced unless ``leak=True``);
* ``keep_only``: knock out every head of layer l except h.

Frequency-band knock-outs (:func:`ablate_frequencies`): for each (layer, head,
rotary pair k) the rotation of that pair is set to the identity (θ_k -> 0)
while everything else stays; all masks in one compiled call, sharing the
un-ablated prefix the same way (layers < l are reused; layer l's attention is
recomputed under the mask).
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.nn import model as model_lib
from pe_spectral.nn.model import check_freq_mask, frequency_count, mask_frequencies
from pe_spectral.runtime import devices, speed
from pe_spectral.runtime.memory import first_fit, needed_bytes
from pe_spectral.runtime.timefmt import minutes_seconds as fmt

__all__ = ["head_masks", "ablate_heads", "deposit_scores", "scores_of_drops", "frequency_masks",
           "ablate_frequencies"]


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


def _chunked_vmap(fn, xs, chunk: Optional[int]):
  """``jax.vmap(fn)(xs)`` over the leading axis, ``chunk`` at a time (lax.map)."""
  n = xs.shape[0]
  chunk = n if chunk is None else max(1, min(chunk, n))
  n_chunks = -(-n // chunk)
  pad = jnp.ones((n_chunks * chunk - n,) + xs.shape[1:], xs.dtype)
  blocks = jnp.concatenate([xs, pad]).reshape((n_chunks, chunk) + xs.shape[1:])
  out = jax.lax.map(jax.vmap(fn), blocks)
  return out.reshape((n_chunks * chunk,) + out.shape[2:])[:n]


def _masked_accuracies(steps, p, ids, labels, masks, chunk, kind):
  """Reference path: the full masked model per mask. ``masks [n, L, H]``
  (``kind="head"``: factors on head outputs) or ``[n, L, H, P]``
  (``kind="freq"``: factors on rotation angles). ``(baseline, [n])``."""
  acc_of = lambda m: steps.evaluate_params(p, ids, labels, **{f"{kind}_mask": m})[0]
  return acc_of(jnp.ones(masks.shape[1:])), _chunked_vmap(acc_of, masks, chunk)


def _shared_accuracies(steps, p, ids, labels, layer_masks, chunk, kind):
  """Prefix-shared path. ``layer_masks [L, M, ...]``: mask factors on layer
  l only (other layers intact): head factors ``[H]`` (``kind="head"``) or
  rotation factors ``[H, P]`` (``kind="freq"``). The un-ablated pass runs
  once per batch; a knock-out in layer l reuses its input to layer l (and, for
  a head knock-out, the layer's head outputs) and recomputes only layers >= l.
  Returns ``(baseline, [L, M])``."""
  ids_b, labels_b, real_b = steps.eval_batches(ids, labels)

  def one(args):
    x, y, real, b = args
    if steps.task_cfg.is_lm:  # windows: the inputs and their next tokens
      x, y = steps.split_window(x, y)
    # the compute dtype of evaluate_params (the masked path), so both agree
    model = model_lib.merge_for_compute(steps.graphdef, p)
    hits = lambda logits: steps.score(logits, y, real)[0]
    ctx = model.context(x, position_key=steps.eval_position_key(b))
    e = model.embed_inputs(x, ctx["positions"])
    blocks = list(model.blocks)
    xs, outs = [e], []
    for blk in blocks:  # the un-ablated pass, keeping what the knock-outs reuse
      outs.append(blk.head_outputs(xs[-1], e, **ctx))
      xs.append(blk.finish(xs[-1], outs[-1]))
    per_layer = []
    for l, blk in enumerate(blocks):
      def run(m, l=l, blk=blk):
        if kind == "head":
          h = blk.finish(xs[l], outs[l], head_mask=m)
        else:
          h = blk(xs[l], e, **ctx, head_mask=None, key=None, freq_mask=m)
        for later in blocks[l + 1:]:
          h = later(h, e, **ctx, head_mask=None, key=None)
        return hits(model.classify(h, x))
      per_layer.append(_chunked_vmap(run, layer_masks[l], chunk))
    correct, _, count = steps.score(model.classify(xs[-1], x), y, real)
    return correct, jnp.stack(per_layer), count

  base, abl, count = jax.lax.map(one, (ids_b, labels_b, real_b,
                                       jnp.arange(ids_b.shape[0])))
  count = jnp.maximum(count.sum(), 1.0)
  return base.sum() / count, abl.sum(0) / count


def _masks(steps, kind: str, mode: str, leak: bool):
  """The knock-out masks of ``kind`` for this model (:func:`head_masks`,
  :func:`frequency_masks`)."""
  cfg = steps.model_cfg
  if kind == "head":
    return head_masks(cfg.num_layers, cfg.num_heads, mode=mode, leak=leak)
  return frequency_masks(cfg.num_layers, cfg.num_heads, frequency_count(cfg))


@speed.cache_per_path(maxsize=64)
def _all_seeds_program(steps, kind: str, mode: str, leak: bool, mask_chunk, method: str):
  """The jitted all-seeds ablation ``(params, ids, labels) -> (baseline,
  ablated)`` over the masks of ``kind`` (mask i differs from all-ones in
  layer ``i // M`` only, as :func:`head_masks` without ``leak`` and
  :func:`frequency_masks` build them, when ``method`` is ``"shared"``).
  Cached on the frozen configs (``steps``), the options and the speed layer's
  switch (read while tracing), so repeated calls (several splits, a
  benchmark) reuse its compilation."""
  masks = _masks(steps, kind, mode, leak)
  L = steps.model_cfg.num_layers
  if method == "shared":
    m = masks.shape[0] // L
    layer_masks = masks.reshape((L, m) + masks.shape[1:])[jnp.arange(L), :, jnp.arange(L)]
    per_seed = lambda p, ids, labels: _shared_accuracies(
        steps, p, ids, labels, layer_masks, mask_chunk, kind)
  else:
    per_seed = lambda p, ids, labels: _masked_accuracies(
        steps, p, ids, labels, masks, mask_chunk, kind)
  all_seeds = jax.vmap(per_seed, in_axes=(0, None, None))
  # seeds vmapped ``steps.seed_group`` at a time, like its training and
  # evaluation, with a progress line after each group (a long CPU ablation is
  # otherwise silent for its whole run)
  return jax.jit(lambda p, ids, labels: steps.by_seed_group(
      lambda q: all_seeds(q, ids, labels), p, on_group=_group_done))


# When the running ablation started (set by the callers that run the program,
# read by its progress callback: the compiled program is cached, so the
# callback cannot close over a call's own start time).
_STARTED: list = [None]


def _group_done(done: int, total: int) -> None:
  """Progress line after seed group ``done`` of ``total``: elapsed and ETA."""
  t0 = _STARTED[0]
  if t0 is None:
    return
  el = time.time() - t0
  print(f"ablation: seed group {done}/{total} done, {fmt(el)} elapsed, ETA "
        f"{fmt(el / done * (total - done))}", file=sys.stderr, flush=True)


def _run_timed(fn, *args):
  """``fn(*args)`` with :func:`_group_done` timing from now; results fetched."""
  _STARTED[0] = time.time()
  try:
    return tuple(devices.fetch(x) for x in fn(*args))
  finally:
    _STARTED[0] = None


def _method(method: str, leak: bool) -> str:
  if method not in ("shared", "masked"):
    raise ValueError(f"method must be 'shared' or 'masked', got {method!r}")
  return "masked" if leak else method  # the leak touches earlier layers: no prefix to share


def ablation_bytes(steps, params, ids, labels, *, mode: str = "single", leak: bool = False,
                   mask_chunk: Optional[int] = None, method: str = "shared") -> int:
  """Bytes (temporaries + arguments, XLA's ``memory_analysis``) that
  :func:`ablate_heads` with these options needs; compiles, runs nothing."""
  fn = _all_seeds_program(steps, "head", mode, leak, mask_chunk, _method(method, leak))
  return needed_bytes(_compiled(fn, params, jnp.asarray(ids), jnp.asarray(labels)))


_COMPILED: dict = {}


def _compiled(fn, *args):
  """``fn`` lowered and compiled for ``args``' types and placements, kept (a
  few) so that :func:`ablate_heads` runs the very executable that
  :func:`ablation_bytes` measured instead of compiling it again."""
  key = (fn, jax.tree.structure(args),
         tuple((jax.typeof(x), x.sharding) for x in jax.tree.leaves(args)))
  if key not in _COMPILED:
    if len(_COMPILED) >= 8:
      _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[key] = fn.lower(*args).compile()
  return _COMPILED[key]


def masks_per_batch(model_cfg, *, mode: str = "single", leak: bool = False,
                    method: str = "shared") -> int:
  """How many head masks one vmapped batch holds when ``mask_chunk`` is None:
  one layer's (``shared``) or all of them (``masked``, and the leak)."""
  n = head_masks(model_cfg.num_layers, model_cfg.num_heads, mode=mode, leak=leak).shape[0]
  return n // model_cfg.num_layers if _method(method, leak) == "shared" else n


def fit_memory(needs: Callable[[Optional[int], Optional[int]], int], *, num_seeds: int,
               num_masks: int, limit_bytes: int,
               seed_groups: Optional[Sequence[Optional[int]]] = None,
               mask_chunks: Optional[Sequence[Optional[int]]] = None) -> tuple:
  """The widest ``(seed_group, mask_chunk)`` whose ablation fits ``limit_bytes``.

  Candidates: ``seed_groups`` (default: None -- all seeds in one vmap -- then
  every smaller divisor of ``num_seeds``) times ``mask_chunks`` (default:
  None -- all ``num_masks`` -- then halving down to 1), tried from the most
  work per vmapped batch (seeds x masks) down, so the first fit ends the search
  (each try compiles once). ``needs(seed_group, mask_chunk)`` gives the bytes.

  Returns ``(seed_group, mask_chunk, measured)``, ``measured`` the bytes of
  every candidate tried; the narrowest candidate if none fits (the caller warns).
  """
  if num_seeds < 1 or num_masks < 1:
    raise ValueError(f"num_seeds and num_masks must be >= 1, got {num_seeds}, {num_masks}")
  if seed_groups is None:
    seed_groups = [None] + [d for d in range(num_seeds - 1, 0, -1) if num_seeds % d == 0]
  if mask_chunks is None:
    chunks, c = [], num_masks
    while True:
      chunks.append(c)
      if c == 1:
        break
      c = -(-c // 2)
    mask_chunks = [None] + chunks[1:]
  seeds_of = lambda g: num_seeds if g is None else g
  masks_of = lambda c: num_masks if c is None else min(c, num_masks)
  # most work first; among equals the wider mask batch, then one vmap of all seeds
  order = sorted(((g, c) for g in seed_groups for c in mask_chunks),
                 key=lambda gc: (-seeds_of(gc[0]) * masks_of(gc[1]), -masks_of(gc[1]),
                                 gc[0] is not None, gc[1] is not None))
  (g, c), measured = first_fit(order, lambda gc: needs(*gc), limit_bytes)
  return g, c, measured


def ablate_heads(steps, params, ids, labels, *, mode: str = "single",
                 leak: bool = False, mask_chunk: Optional[int] = None,
                 method: str = "shared") -> dict:
  """Accuracy under every head knock-out, for every seed, in one compiled call.

  Args:
    steps: the run's :class:`pe_spectral.training.train.Steps` (model, label rule).
    params: seed-stacked parameters (``state['params']``).
    ids, labels: evaluation data (raw labels).
    mode, leak: see :func:`head_masks`.
    mask_chunk: masks per vmapped batch (``lax.map`` over chunks); default all
      (``shared``: all of one layer's masks).
    method: ``"shared"`` (reuse the un-ablated prefix; not with ``leak``) or
      ``"masked"`` (the full masked model per mask). Same accuracies.

  Returns:
    ``{"baseline": [seeds], "ablated": [seeds, layers, heads]}`` (NumPy).
  """
  cfg = steps.model_cfg
  fn = _all_seeds_program(steps, "head", mode, leak, mask_chunk, _method(method, leak))
  args = (params, jnp.asarray(ids), jnp.asarray(labels))
  base, abl = _run_timed(_compiled(fn, *args), *args)
  return {"baseline": base, "ablated": abl.reshape(-1, cfg.num_layers, cfg.num_heads)}


def deposit_scores(baseline, ablated) -> dict:
  """Per-layer concentration of the ablation damage.

  With drops ``d_h = baseline - ablated_h`` for the heads of one layer:

  * ``score`` (the original definition): ``(max_h d - mean_h d) / ((1 - 1/H)
    Σ_h max(d_h, 0))``. 0 when every head matters equally (or none does), 1
    when a single head carries all the damage and the others none -- but
    above 1 when some knock-out *raises* accuracy (a negative ``d_h`` lowers
    the mean, and the normaliser counts positive drops only).
  * ``score_bounded``: the same with every drop clipped at 0 first,
    ``(max_h d⁺ - mean_h d⁺) / ((1 - 1/H) Σ_h d⁺)``, in ``[0, 1]``: since
    ``max d⁺ <= Σ d⁺``, ``max - Σ/H <= (1 - 1/H) max <= (1 - 1/H) Σ``; 1
    exactly when one head carries all the positive damage. Equal to
    ``score`` when no drop is negative.

  Also returned: the largest single-head drop and its head.

  Args:
    baseline: ``[seeds]``; ablated: ``[seeds, layers, heads]``.
  Returns:
    dict of ``[seeds, layers]`` arrays: ``score``, ``score_bounded``,
    ``max_drop``, ``argmax_head``; and ``drops`` ``[seeds, layers, heads]``.
  """
  base = np.asarray(baseline, np.float64)[:, None, None]
  drops = base - np.asarray(ablated, np.float64)
  return dict(scores_of_drops(drops), max_drop=drops.max(-1),
              argmax_head=drops.argmax(-1), drops=drops)


def scores_of_drops(drops) -> dict:
  """``{"score", "score_bounded"}`` ``[..., layers]`` of drops ``[..., heads]``
  (:func:`deposit_scores`; e.g. from a committed ``ablation.json``'s ``drop``)."""
  drops = np.asarray(drops, np.float64)
  h = drops.shape[-1]
  pos = np.clip(drops, 0, None)
  total = pos.sum(-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    score = np.where(total > 1e-12, (drops.max(-1) - drops.mean(-1)) / ((1 - 1 / h) * total),
                     0.0)
    bounded = np.where(total > 1e-12, (pos.max(-1) - pos.mean(-1)) / ((1 - 1 / h) * total),
                       0.0)
  return {"score": score, "score_bounded": bounded}


def frequency_masks(num_layers: int, num_heads: int, num_pairs: int) -> jnp.ndarray:
  """``[L * H * P, L, H, P]`` masks: mask ``i`` = (layer ``i // (H P)``, head
  ``i // P % H``, pair ``i % P``) has a 0 there (rotation off) and 1 elsewhere."""
  n = num_layers * num_heads * num_pairs
  return 1.0 - jnp.eye(n, dtype=jnp.float32).reshape(n, num_layers, num_heads, num_pairs)


def ablate_frequencies(steps, params, ids, labels, *, mask_chunk: Optional[int] = None,
                       method: str = "shared") -> dict:
  """Accuracy with each (layer, head, rotary pair)'s rotation switched off
  (θ_k -> 0), for every seed, in one compiled call.

  Returns ``{"baseline": [seeds], "ablated": [seeds, layers, heads, pairs],
  "frequencies": [pairs]}`` (NumPy; ``frequencies``: the pairs' θ_k).
  Raises ValueError for a model without a rotation on standard heads.
  """
  method = _method(method, False)
  cfg = steps.model_cfg
  L, H, P = cfg.num_layers, cfg.num_heads, max(frequency_count(cfg), 1)
  check_freq_mask(cfg, jnp.ones((L, H, P)))
  fn = _all_seeds_program(steps, "freq", "single", False, mask_chunk, method)
  base, abl = _run_timed(fn, params, jnp.asarray(ids), jnp.asarray(labels))
  return {"baseline": base, "ablated": abl.reshape(-1, L, H, P),
          "frequencies": np.asarray(mask_frequencies(cfg), np.float64)}
