"""What the spectral module predicts for a trained PE at a longer length.

:func:`predict` reads the registry's hooks and returns a typed
:class:`Prediction` (one per evaluated length in ``lengths.json``):

* a bias with a closed form (ALiBi): its exact spread per head
  (``bias="closed_form"``);
* any other Toeplitz bias (relative, KERPLE, FIRE): the widest symbol bound
  over layers and heads, per seed (``bias="symbol"``), or
  ``bias="not_toeplitz"`` where the bias has no Toeplitz form at that length;
* a rotation: the smallest feasible RoPE base (``rope_min_base``) against the
  model's (NTK-scaled) base.

The record is what the report renders (:meth:`Prediction.describe`): nothing
downstream reads meaning out of key names.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from pe_spectral.pe import positional, spectral
from pe_spectral.pe.base import Kind

__all__ = ["Prediction", "predict"]

BIAS_KINDS = ("closed_form", "symbol", "not_toeplitz")


@dataclasses.dataclass(frozen=True)
class Prediction:
  """The spectral prediction for one PE at one length (None: does not apply)."""
  pe: str
  bias: Optional[str] = None                    # one of BIAS_KINDS
  spread_vs_train: Optional[float] = None       # mean ratio of the spread to the training length's
  bias_spread_per_head: Optional[list] = None   # closed form: exact spread per head
  symbol_spread_max_per_seed: Optional[list] = None  # symbol bound, widest over layers/heads
  table_reach: Optional[int] = None             # a clipped table's largest distinct offset
  rope_min_base: Optional[float] = None
  rope_base: Optional[float] = None             # the model's base (NTK-scaled if so)
  rope_base_feasible: Optional[bool] = None

  def __post_init__(self):
    if self.bias is not None and self.bias not in BIAS_KINDS:
      raise ValueError(f"bias must be one of {', '.join(BIAS_KINDS)} or None, got "
                       f"{self.bias!r}")

  def to_dict(self) -> dict:
    """The JSON form: the fields that apply (None ones are left out)."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

  @classmethod
  def from_dict(cls, d: dict) -> "Prediction":
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
      raise ValueError(f"unknown prediction field(s) {', '.join(unknown)}")
    return cls(**d)

  def describe(self, n: int) -> str:
    """The prediction at length ``n`` in words (one table cell)."""
    bits = []
    if self.bias == "not_toeplitz":
      bits.append(f"{self.pe} bias not Toeplitz at {n}")
    elif self.bias is not None:
      what = "bias spread" if self.bias == "closed_form" else "bias symbol spread"
      bits.append(f"{self.pe} {what} ×{self.spread_vs_train:.2f} at {n}"
                  + ("" if self.table_reach is None else
                     f" (table reach {self.table_reach})"))
    if self.rope_min_base is not None:
      feas = "≥" if self.rope_base_feasible else "<"
      bits.append(f"base {self.rope_base:.4g} {feas} rope_min_base({n}) = "
                  f"{self.rope_min_base:.4g}")
    return "; ".join(bits) or "—"


def predict(cfg, params, n: int, train_len: int) -> Prediction:
  """The :class:`Prediction` for the PE of model config ``cfg`` at length ``n``
  (per seed where it depends on the seed-stacked trained ``params``), against
  the training length ``train_len``."""
  import jax
  import jax.numpy as jnp

  enc = cfg.encoding
  out: dict = {}
  if enc.bias_extremes(cfg, n) is not None:
    spread = lambda m: [float(hi - lo) for lo, hi in
                        zip(*map(np.asarray, enc.bias_extremes(cfg, m)))]
    now, before = spread(n), spread(train_len)
    out.update(bias="closed_form", bias_spread_per_head=now,
               spread_vs_train=float(np.mean(np.divide(now, before))))
  elif Kind.BIAS in enc.kinds:
    blocks = params["blocks"]
    blocks = [blocks[k] for k in sorted(blocks)] if isinstance(blocks, dict) else blocks
    seeds = len(jax.tree_util.tree_leaves(params)[0])

    def max_spread(length):
      """``[seeds]``: the widest symbol bound over layers and heads, or None
      where the bias is not Toeplitz at this length."""
      per_seed = []
      for s_ in range(seeds):
        widest = -np.inf
        for blk in blocks:
          coeffs = enc.toeplitz_coeffs(
              cfg, jax.tree_util.tree_map(lambda a: jnp.asarray(a[s_]), blk), length)
          if coeffs is None:
            return None
          lo, hi = spectral.toeplitz_eig_bounds(jnp.asarray(coeffs, jnp.float32))
          widest = max(widest, float(np.max(np.asarray(hi) - np.asarray(lo))))
        per_seed.append(widest)
      return np.asarray(per_seed)

    now, before = max_spread(n), max_spread(train_len)
    if now is None or before is None:
      out.update(bias="not_toeplitz")
    else:
      out.update(bias="symbol", symbol_spread_max_per_seed=now.tolist(),
                 spread_vs_train=float(np.mean(now / before)))
    if enc.table_reach(cfg) is not None:
      out["table_reach"] = int(enc.table_reach(cfg))
  if enc.rotary_frequencies(cfg) is not None:
    d = enc.rotary_dim(cfg)
    base = cfg.rope_base
    sc = cfg.rope_scaling_spec
    if sc is not None and sc.kind == "ntk":
      base = positional.ntk_base(base, sc.factor, d)
    need = spectral.rope_min_base(n, d)
    out.update(rope_min_base=need, rope_base=base, rope_base_feasible=bool(base >= need))
  return Prediction(pe=enc.name, **out)


def eval_model_config(model_cfg, n: int, train_len: int, rope_scaling: Optional[str]):
  """The model config that evaluates ``n`` tokens: ``model_cfg`` itself, or
  with ``rope_scaling`` (a :data:`positional.ROPE_SCALINGS` kind; ``"none"``
  and None mean none) at factor ``max(1, n / train_len)`` from ``train_len``."""
  if rope_scaling in (None, "none"):
    return model_cfg
  return model_cfg.replace(rope_scaling=rope_scaling,
                           rope_scaling_factor=max(1.0, n / train_len),
                           rope_scaling_original_len=train_len)


def eval_train_config(train_cfg, train_len: int, n: int):
  """``train_cfg`` with an evaluation batch that keeps the attention's
  ``[batch, heads, n, n]`` memory of the training length at ``n`` tokens
  (``batch · n² <= eval_batch_size · train_len²``): at 8x the length a
  1,000-example batch would need 64x the memory (a 5-seed cpu-preset run at
  320 tokens was killed for it on a 24 GiB machine). The same numbers: only
  the batching changes (and with it randomized positions' per-batch draws)."""
  if n <= train_len:
    return train_cfg
  bs = max(1, int(train_cfg.eval_batch_size * (train_len / n) ** 2))
  return dataclasses.replace(train_cfg, eval_batch_size=bs)
