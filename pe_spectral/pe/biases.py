"""Logit-bias PEs: a term of position alone added to (or multiplying) the
content logits -- T5's bucketed relative bias, ALiBi, KERPLE, FIRE,
``rope_additive`` (RoPE's cosines as an additive bias) and
``alibi_multiplicative`` (a decay factor) -- their functions and registered
classes together."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.pe.absolute import distances
from pe_spectral.pe.base import (
  Kind,
  PositionalEncoding,
  _check_count,
  _int_field,
  _symmetric,
  inv_softplus,
)
from pe_spectral.pe.rotary import rope_inverse_frequencies

__all__ = [
    "ALIBI_B", "alibi_extreme_eigs",
    "kerple_params", "kerple_coeffs", "kerple_of_distance", "kerple_bias", "alibi_slopes",
    "alibi_slopes_paper", "alibi_bias", "relative_position_bucket", "relative_offsets",
    "relative_bias_from_table", "relative_table_index", "fire_psi", "fire_init",
    "fire_constants", "fire_bias", "fire_coeffs", "rotary_cos_bias", "rotary_cos_coeffs",
    "decay_rates", "decay_factor", "decay_coeffs", "AlibiOptions", "FireOptions", "Relative",
    "Alibi", "Kerple", "Fire", "RopeAdditive", "AlibiMultiplicative"
]


def kerple_params(raw_r1: jax.Array, raw_r2: jax.Array, *, kind: str):
  """Positive ``(r1, r2)`` from unconstrained parameters: ``r1 = softplus``;
  ``r2 = softplus`` (log) or ``2 · sigmoid`` (power, ``0 < r2 <= 2``)."""
  r1 = jax.nn.softplus(raw_r1)
  if kind == "log":
    return r1, jax.nn.softplus(raw_r2)
  if kind == "power":
    return r1, 2.0 * jax.nn.sigmoid(raw_r2)
  raise ValueError(f"kerple kind must be 'log' or 'power', got {kind!r}")


def kerple_coeffs(seq_len: int, r1, r2, *, kind: str) -> jax.Array:
  """Toeplitz coefficients ``[..., 2n-1]`` (``t_k``, ``k = -(n-1)..n-1``) of
  the KERPLE bias: ``-r1 log(1 + r2 |k|)`` or ``-r1 |k|^r2``; symmetric, so
  they feed :func:`spectral.toeplitz_eig_bounds` directly."""
  k = jnp.abs(jnp.arange(-(seq_len - 1), seq_len)).astype(jnp.float32)
  return kerple_of_distance(k, r1, r2, kind=kind)


def kerple_of_distance(dist, r1, r2, *, kind: str) -> jax.Array:
  """The KERPLE kernel at distances ``dist [...k]`` for per-head ``r1, r2``
  (``[..., heads]``): ``[..., heads, *dist.shape]``."""
  dist = jnp.asarray(dist, jnp.float32)
  extra = (None,) * dist.ndim
  r1 = jnp.asarray(r1, jnp.float32)[(..., *extra)]
  r2 = jnp.asarray(r2, jnp.float32)[(..., *extra)]
  if kind == "log":
    return -r1 * jnp.log1p(r2 * dist)
  if kind == "power":
    # |0|^r2 = 0 for r2 > 0; written so the gradient at 0 stays finite
    safe = jnp.where(dist > 0, dist, 1.0)
    return jnp.where(dist > 0, -r1 * safe ** r2, 0.0)
  raise ValueError(f"kerple kind must be 'log' or 'power', got {kind!r}")


def kerple_bias(seq_len: int, r1, r2, *, kind: str) -> jax.Array:
  """KERPLE logit bias ``[heads, seq_len, seq_len]`` for per-head ``r1, r2 > 0``
  (``[heads]``): ``bias[h, m, n] = -r1_h log(1 + r2_h |m - n|)`` (``kind="log"``)
  or ``-r1_h |m - n|^r2_h`` (``kind="power"``, ``0 < r2 <= 2``)."""
  coeffs = kerple_coeffs(seq_len, r1, r2, kind=kind)  # [..., 2n-1]
  i = jnp.arange(seq_len)
  return coeffs[..., i[:, None] - i[None, :] + seq_len - 1]


def alibi_slopes(num_heads: int) -> jax.Array:
  """Standard ALiBi slopes ``[num_heads]`` (Press et al.).

  For a power-of-two ``H`` the slopes are ``2 ** (-8 h / H)``, ``h = 1..H``.
  Otherwise the slopes of the closest smaller power of two ``P`` are followed by
  every other slope of ``2P`` heads, as in the reference implementation.
  """
  _check_count("num_heads", num_heads)

  def pow2(n):
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

  p = 2 ** int(math.floor(math.log2(num_heads)))
  slopes = pow2(p)
  if p < num_heads:
    slopes += pow2(2 * p)[0::2][: num_heads - p]
  return jnp.asarray(slopes, jnp.float32)


def alibi_slopes_paper(num_heads: int) -> jax.Array:
  """The paper's code's slopes ``exp(-h / H)``, ``h = 0..H-1`` (faithful mode)."""
  return jnp.exp(-jnp.arange(num_heads, dtype=jnp.float32) / num_heads)


def alibi_bias(seq_len: int, slopes: jax.Array, *,
               causal: bool = False, positions: Optional[jax.Array] = None) -> jax.Array:
  """ALiBi bias ``[heads, seq_len, seq_len]`` (``[seq_len, seq_len]`` for a scalar slope).

  ``bias[h, i, j] = -slopes[h] * |p_i - p_j|`` with positions ``p`` (default
  ``0..seq_len-1``; :func:`distances`). With ``causal=True`` the entries for
  ``j <= i`` are the same and the entries above the diagonal are 0 (the
  pre-mask Toeplitz form); masking future keys is the attention mask's job.
  """
  dist = distances(jnp.arange(seq_len) if positions is None else positions, causal=causal)
  slopes = jnp.asarray(slopes, jnp.float32)
  return -slopes[..., None, None] * dist


def relative_position_bucket(relative_position: jax.Array, *, num_buckets: int,
                             max_distance: int,
                             bidirectional: bool = True) -> jax.Array:
  """T5 bucketing of ``relative_position = key_pos - query_pos``.

  Bidirectional: half of the buckets per sign (positive offsets get the upper
  half); within a sign, the first half of the buckets are exact offsets, the
  rest are log-spaced up to ``max_distance`` and clamped beyond it.
  Unidirectional: only non-positive offsets (keys in the past) are
  distinguished; positive offsets share bucket 0.
  Returns int32 buckets in ``[0, num_buckets)``.
  """
  rel = jnp.asarray(relative_position, jnp.int32)
  ret = jnp.zeros_like(rel)
  n = -rel
  if bidirectional:
    num_buckets //= 2
    ret = ret + (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  is_small = n < max_exact
  # Guard log(0) for the small branch; it is discarded by the where below.
  n_safe = jnp.maximum(n, 1).astype(jnp.float32)
  val_if_large = max_exact + (
      jnp.log(n_safe / max_exact) / math.log(max_distance / max_exact)
      * (num_buckets - max_exact)).astype(jnp.int32)
  val_if_large = jnp.minimum(val_if_large, num_buckets - 1)
  return ret + jnp.where(is_small, n, val_if_large)


def relative_offsets(seq_len: int) -> jax.Array:
  """``[seq_len, seq_len]`` int32 matrix of ``j - i`` (key minus query)."""
  pos = jnp.arange(seq_len, dtype=jnp.int32)
  return pos[None, :] - pos[:, None]


def relative_bias_from_table(table: jax.Array, seq_len: int, *,
                             max_distance: int,
                             num_buckets: Optional[int] = None,
                             positions: Optional[jax.Array] = None) -> jax.Array:
  """Relative-position logit bias ``[heads, seq_len, seq_len]`` from a table.

  Args:
    table: ``[num_entries, heads]`` learned scalars.
    seq_len: sequence length.
    max_distance: without buckets, offsets are clipped to
      ``[-max_distance, max_distance]`` and ``table`` has
      ``2 * max_distance + 1`` rows (entry ``j - i + max_distance``, the
      paper's layout when ``max_distance = max_len - 1``). With buckets, the T5
      ``max_distance``.
    num_buckets: ``None`` for clipped offsets, else the T5 bucket count.
    positions: ``[seq_len]`` positions of the tokens (default ``0..seq_len-1``).

  Returns:
    ``bias[h, i, j] = table[index(j - i), h]`` -- Toeplitz in ``(i, j)``.
  """
  if positions is None:
    rel = relative_offsets(seq_len)
  else:  # offsets of arbitrary (e.g. randomized) positions
    pos = jnp.asarray(positions, jnp.int32)
    rel = pos[None, :] - pos[:, None]
  idx = relative_table_index(rel, max_distance=max_distance, num_buckets=num_buckets)
  return jnp.moveaxis(table[idx], -1, 0)


def relative_table_index(offsets, *, max_distance: int,
                         num_buckets: Optional[int] = None) -> jax.Array:
  """The table row of each key-minus-query offset: the offset clipped to
  ``±max_distance`` (shifted to ``0..2 max_distance``), or its T5 bucket."""
  if num_buckets is None:
    return jnp.clip(offsets, -max_distance, max_distance) + max_distance
  return relative_position_bucket(offsets, num_buckets=num_buckets,
                                  max_distance=max_distance)


def fire_psi(x, c):
  """FIRE's monotone transform ``ψ(x) = log(c x + 1)``."""
  return jnp.log(c * x + 1.0)


def fire_init(key: jax.Array, num_heads: int, *, hidden: int = 32,
              threshold: float = 512.0, c: float = 0.1) -> dict:
  """FIRE's parameters for one layer: the MLP ``f_θ: R -> R^heads`` (one ReLU
  hidden layer of ``hidden`` units; ``w1`` ~ N(0, 1), ``w2`` ~ N(0, 1/hidden),
  zero biases) and the unconstrained ``c_raw`` and ``threshold_raw``
  (:func:`fire_constants` maps them to ``c > 0`` and ``L > 0``)."""
  k1, k2 = jax.random.split(key)
  return {
      "fire_w1": jax.random.normal(k1, (hidden,)),
      "fire_b1": jnp.zeros((hidden,)),
      "fire_w2": jax.random.normal(k2, (hidden, num_heads)) / math.sqrt(hidden),
      "fire_b2": jnp.zeros((num_heads,)),
      "fire_c": jnp.asarray(inv_softplus(c), jnp.float32),
      "fire_threshold": jnp.asarray(inv_softplus(threshold), jnp.float32),
  }


def fire_constants(params: dict):
  """``(c, L)``: both ``softplus`` of their raw parameters."""
  return jax.nn.softplus(params["fire_c"]), jax.nn.softplus(params["fire_threshold"])


def _fire_mlp(params: dict, x):
  """``f_θ`` on ``x [...]`` -> ``[..., heads]``."""
  h = jax.nn.relu(x[..., None] * params["fire_w1"] + params["fire_b1"])
  return h @ params["fire_w2"] + params["fire_b2"]


def fire_bias(params: dict, seq_len: int, *, causal: bool = False,
              positions: Optional[jax.Array] = None) -> jax.Array:
  """FIRE logit bias ``[heads, seq_len, seq_len]``:
  ``bias[h, i, j] = f_θ(ψ(d_ij) / ψ(max(L, i)))_h`` with query ``i``, key ``j``.

  The paper is causal (``d_ij = i - j`` for ``j <= i``; entries above the
  diagonal are 0 here and masked by the attention mask). This classifier is
  bidirectional, so the default uses ``d_ij = |i - j|``: a key ``k`` tokens
  ahead gets the bias of one ``k`` tokens behind. While ``i <= L`` the
  normaliser is ``ψ(L)`` for every query, so on sequences of at most ``L + 1``
  tokens the bias is Toeplitz (:func:`fire_coeffs`); beyond, longer queries are
  interpolated into the same ``[0, 1]`` range -- FIRE's length generalisation.
  """
  c, L = fire_constants(params)
  pos = (jnp.arange(seq_len, dtype=jnp.float32) if positions is None
         else jnp.asarray(positions, jnp.float32))
  diff = pos[:, None] - pos[None, :]
  dist = jnp.where(diff >= 0, diff, 0.0) if causal else jnp.abs(diff)
  norm = fire_psi(jnp.maximum(L, pos), c)[:, None]
  out = jnp.moveaxis(_fire_mlp(params, fire_psi(dist, c) / norm), -1, 0)  # [heads, seq, seq]
  # (sorted positions: diff >= 0 iff j <= i)
  return jnp.where(diff >= 0, out, 0.0) if causal else out


def fire_coeffs(params: dict, seq_len: int) -> jax.Array:
  """Toeplitz coefficients ``[heads, 2n-1]`` of the bidirectional FIRE bias in
  its Toeplitz regime (``n - 1 <= L``): ``t_k = f_θ(ψ(|k|)/ψ(L))``, symmetric.
  Beyond that regime the bias is not Toeplitz and these are not its entries."""
  c, L = fire_constants(params)
  k = jnp.abs(jnp.arange(-(seq_len - 1), seq_len)).astype(jnp.float32)
  return _fire_mlp(params, fire_psi(k, c) / fire_psi(L, c)).T


def _check_heads_matrix(name: str, x, axis_len: Optional[int] = None) -> jax.Array:
  x = jnp.asarray(x)
  if x.ndim != 2 or (axis_len is not None and x.shape[1] != axis_len):
    want = f"[heads, {axis_len}]" if axis_len is not None else "[heads, pairs]"
    raise ValueError(f"{name} must be {want}, got shape {x.shape}")
  return x


def rotary_cos_bias(weights: jax.Array, inv_freq, seq_len: int, *,
                    positions: Optional[jax.Array] = None) -> jax.Array:
  """The additive twin of RoPE: ``bias[h, i, j] = Σ_k w[h, k] cos((p_i - p_j) θ_k)``.

  RoPE multiplies the content Gram by the phases ``e^{i(m-n)θ_k}``; this adds
  a Toeplitz bias built from the same cosines (RoPE's own frequencies
  ``inv_freq [pairs]``) with content-free weights ``weights [heads, pairs]``.

  Returns ``[heads, seq_len, seq_len]`` float32 (symmetric in i, j).
  """
  inv_freq = jnp.asarray(inv_freq, jnp.float32)
  weights = _check_heads_matrix("weights", weights, inv_freq.shape[0])
  pos = jnp.arange(seq_len) if positions is None else positions
  pos = jnp.asarray(pos, jnp.float32)
  if pos.shape != (seq_len,):
    raise ValueError(f"positions must be [seq_len={seq_len}], got shape {pos.shape}")
  delta = pos[:, None] - pos[None, :]                                   # [n, n]
  cos = jnp.cos(delta[..., None] * inv_freq)                            # [n, n, pairs]
  return jnp.einsum("ijk,hk->hij", cos, weights.astype(jnp.float32))


def rotary_cos_coeffs(weights: jax.Array, inv_freq, seq_len: int) -> jax.Array:
  """Toeplitz coefficients ``[heads, 2n-1]`` of :func:`rotary_cos_bias`
  (offset ``k = j - i`` from ``-(n-1)`` to ``n-1``; real and symmetric)."""
  inv_freq = jnp.asarray(inv_freq, jnp.float32)
  weights = _check_heads_matrix("weights", weights, inv_freq.shape[0])
  k = jnp.arange(-(seq_len - 1), seq_len, dtype=jnp.float32)
  return weights.astype(jnp.float32) @ jnp.cos(k[:, None] * inv_freq).T  # [h, 2n-1]


def decay_rates(slopes) -> jax.Array:
  """``ρ_h = exp(-m_h)``: the multiplicative twin of ALiBi slope ``m_h``.

  ALiBi adds ``-m|i-j|`` to the logits, i.e. multiplies the *unnormalised
  attention weights* ``exp(logit)`` by ``e^{-m|i-j|} = ρ^{|i-j|}``; the
  multiplicative twin applies the same factor to the *logits* instead."""
  slopes = jnp.asarray(slopes, jnp.float32)
  if slopes.ndim != 1:
    raise ValueError(f"slopes must be [heads], got shape {slopes.shape}")
  try:
    bad = bool((~jnp.isfinite(slopes) | (slopes < 0)).any())
  except jax.errors.ConcretizationTypeError:
    bad = False  # traced: values are not checked
  if bad:
    raise ValueError(f"slopes must be finite and >= 0 (a decay, ρ <= 1), got {slopes}")
  return jnp.exp(-slopes)


def decay_factor(seq_len: int, rhos: jax.Array, *,
                 positions: Optional[jax.Array] = None) -> jax.Array:
  """Kac-Murdock-Szegő factors ``F[h, i, j] = ρ_h^{|p_i - p_j|}``, ``[heads, n, n]``.

  For ``0 < ρ < 1`` and distinct positions this matrix is positive definite
  with unit diagonal, so the Hadamard product ``F ∘ G`` of a PSD content Gram
  ``G`` has ``λ_max(F ∘ G) <= max_i G_ii`` (Schur). The logits it multiplies
  are the content part only; an additive bias is not scaled.
  """
  rhos = jnp.asarray(rhos, jnp.float32)
  if rhos.ndim != 1:
    raise ValueError(f"rhos must be [heads], got shape {rhos.shape}")
  pos = jnp.arange(seq_len) if positions is None else positions
  if jnp.shape(pos) != (seq_len,):
    raise ValueError(f"positions must be [seq_len={seq_len}], got shape {jnp.shape(pos)}")
  dist = distances(pos)
  return jnp.exp(jnp.log(rhos)[:, None, None] * dist)


def decay_coeffs(seq_len: int, rhos: jax.Array) -> jax.Array:
  """Toeplitz coefficients ``[heads, 2n-1]`` of :func:`decay_factor` (the KMS
  matrix: ``t_k = ρ^{|k|}``)."""
  rhos = jnp.asarray(rhos, jnp.float32)
  k = jnp.abs(jnp.arange(-(seq_len - 1), seq_len)).astype(jnp.float32)
  return jnp.exp(jnp.log(rhos)[:, None] * k)


@dataclasses.dataclass(frozen=True)
class AlibiOptions:
  """``alibi``, ``alibi_multiplicative``: the slope scheme, ``"standard"``
  (Press et al., ``2^(-8h/H)``) or ``"paper"`` (``exp(-h/H)``); None: the
  mode's (paper when faithful)."""
  slopes: Optional[str] = None

  def __post_init__(self):
    if self.slopes not in (None, "standard", "paper"):
      raise ValueError(f"AlibiOptions.slopes must be 'standard' or 'paper', got "
                       f"{self.slopes!r}")


@dataclasses.dataclass(frozen=True)
class FireOptions:
  """``fire``: the width of FIRE's per-layer MLP."""
  hidden: int = 32

  def __post_init__(self):
    _int_field(self, "hidden", 1)


class Relative(PositionalEncoding):
  name = "relative"
  coupling = "additive"
  kinds = (Kind.BIAS,)
  description = ("learned per-layer per-head scalar bias per clipped offset "
                 "(T5 log-buckets optional)")
  toeplitz_label = "symmetric part of the bias"
  reads = ("relative_buckets", "relative_max_distance")

  def layer_params(self, cfg, next_key):
    rows = (cfg.relative_buckets if cfg.relative_buckets is not None
            else 2 * cfg.relative_distance + 1)
    return {"rel_table": 0.02 * jax.random.normal(next_key(), (rows, cfg.num_heads))}

  def table_reach(self, cfg):
    return cfg.relative_distance

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    return relative_bias_from_table(params["rel_table"], seq_len,
                                      max_distance=cfg.relative_distance,
                                      num_buckets=cfg.relative_buckets, positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    # bias[i, j] = table[index(j - i)]: coefficient t_k (k = j - i) per head
    idx = relative_table_index(jnp.arange(-(seq_len - 1), seq_len),
                                 max_distance=cfg.relative_distance,
                                 num_buckets=cfg.relative_buckets)
    return _symmetric(params["rel_table"][idx].T)


class Alibi(PositionalEncoding):
  name = "alibi"
  coupling = "additive"
  kinds = (Kind.BIAS,)
  description = "ALiBi: -m_h |i-j| logit bias (causal variant optional)"
  options_type = AlibiOptions
  toeplitz_label = "symmetric ALiBi bias"

  def slope_scheme(self, cfg) -> str:
    """'paper' (``exp(-h/H)``) in faithful mode unless set, else 'standard'."""
    if cfg.pe_options.slopes is None:
      return "paper" if cfg.faithful else "standard"
    return cfg.pe_options.slopes

  def slopes(self, cfg) -> jax.Array:
    """``[num_heads]``: ``exp(-h/H)`` for the paper's scheme, else Press et al.'s."""
    if self.slope_scheme(cfg) == "paper":
      return alibi_slopes_paper(cfg.num_heads)
    return alibi_slopes(cfg.num_heads)

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    return alibi_bias(seq_len, self.slopes(cfg), causal=cfg.causal, positions=positions)

  def run_label(self, model):
    slopes = (model.get("pe_options") or {}).get("slopes")  # set, not the mode's default
    return self.name if slopes is None else f"{self.name} ({slopes} slopes)"

  def bias_extremes(self, cfg, seq_len):
    if cfg.causal or seq_len < 2:
      return None
    return alibi_extreme_eigs(seq_len, self.slopes(cfg))

  def toeplitz_coeffs(self, cfg, params, seq_len):
    k = jnp.abs(jnp.arange(-(seq_len - 1), seq_len)).astype(jnp.float32)
    return -self.slopes(cfg)[:, None] * k


class Kerple(PositionalEncoding):
  toeplitz_label = "KERPLE bias"
  coupling = "additive"
  kinds = (Kind.BIAS,)

  def __init__(self, kind: str):
    self.kind = kind
    self.name = f"kerple_{kind}"
    self.description = ("KERPLE (log): -r1_h log(1 + r2_h |i-j|), r1, r2 > 0 learned"
                        if kind == "log" else
                        "KERPLE (power): -r1_h |i-j|^r2_h, r1 > 0, 0 < r2 <= 2 learned")

  def layer_params(self, cfg, next_key):
    # unconstrained; r1 = softplus -> 1 and r2 -> 1 at init for every head
    one = inv_softplus(1.0)
    return {"kerple_r1": jnp.full((cfg.num_heads,), one),
            "kerple_r2": jnp.full((cfg.num_heads,), one if self.kind == "log" else 0.0)}

  def _r(self, params):
    return kerple_params(params["kerple_r1"], params["kerple_r2"], kind=self.kind)

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    if positions is not None:
      return kerple_of_distance(distances(positions), *self._r(params), kind=self.kind)
    return kerple_bias(seq_len, *self._r(params), kind=self.kind)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return kerple_coeffs(seq_len, *self._r(params), kind=self.kind)


class Fire(PositionalEncoding):
  name = "fire"
  coupling = "additive"
  kinds = (Kind.BIAS,)
  description = ("FIRE: f_θ(ψ(|i-j|)/ψ(max(L, i))), ψ(x) = log(cx+1), per-layer MLP, "
                 "learned c and L")
  options_type = FireOptions
  toeplitz_label = "FIRE bias (Toeplitz while n - 1 <= L)"

  def layer_params(self, cfg, next_key):
    # The threshold starts at the training length: every training query shares
    # one normaliser (Toeplitz), longer ones are interpolated.
    return fire_init(next_key(), cfg.num_heads, hidden=cfg.pe_options.hidden,
                       threshold=float(cfg.max_len), c=0.1)

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    return fire_bias(params, seq_len, causal=cfg.causal, positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    if cfg.causal:
      return None
    try:
      _, L = fire_constants(params)
      if float(jnp.min(L)) < seq_len - 1:
        return None  # queries beyond L have their own normaliser: not Toeplitz
    except jax.errors.ConcretizationTypeError:
      pass  # traced: the caller vouches for the regime (docstring of fire_coeffs)
    return fire_coeffs(params, seq_len)


class RopeAdditive(PositionalEncoding):
  """RoPE's kernel, coupled additively: ``Σ_k w_{h,k} cos((i-j)θ_k)``.

  The same frequencies ``θ_k`` as :class:`Rotary` (``rope_base``, head width),
  but added to the logits as a content-free Toeplitz bias with learned
  per-layer, per-head weights instead of multiplying the content Gram.

  Initialisation: ``w ~ N(0, σ²)`` with ``σ = s * sqrt(2 / pairs)``, where ``s``
  is the standard deviation of the content logits ``q·k/sqrt(d)`` at
  initialisation (1 for the clean LeCun init on layer-normed inputs, 1/3 for
  PyTorch's U(±1/sqrt(fan_in)) init). Then the bias at a non-zero offset has
  standard deviation ``s`` over draws (``Σ_k cos² ≈ pairs/2``): position enters
  at the same scale as RoPE's logits do at init.
  """
  name = "rope_additive"
  reads = ("rope_base",)
  description = ("RoPE's cosines as an additive bias: sum_k w_hk cos((i-j) θ_k), "
                 "learned per-layer per-head w (the additive twin of rope)")
  coupling = "additive"
  kinds = (Kind.BIAS,)
  takes_positions = True
  toeplitz_label = "additive cosine bias (head 0)"

  def validate(self, cfg):
    if cfg.head_dim % 2:
      raise ValueError(f"rope_additive needs an even head_dim (RoPE's pairs); "
                       f"d_model/num_heads = {cfg.head_dim}")

  def frequencies(self, cfg) -> np.ndarray:
    """RoPE's inverse frequencies ``[head_dim/2]`` for this model."""
    return rope_inverse_frequencies(cfg.head_dim, cfg.rope_base)

  def init_std(self, cfg) -> float:
    logit_std = 1.0 / 3.0 if cfg.init == "torch" else 1.0
    return logit_std * math.sqrt(2.0 / (cfg.head_dim // 2))

  def layer_params(self, cfg, next_key):
    pairs = cfg.head_dim // 2
    return {"rope_cos_w": self.init_std(cfg)
            * jax.random.normal(next_key(), (cfg.num_heads, pairs))}

  def bias(self, cfg, params, seq_len, positions=None):
    return rotary_cos_bias(params["rope_cos_w"], self.frequencies(cfg), seq_len,
                             positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return rotary_cos_coeffs(params["rope_cos_w"], self.frequencies(cfg), seq_len)


class AlibiMultiplicative(Alibi):
  """ALiBi's kernel, coupled multiplicatively: logits ``(q·k/sqrt(d)) ρ_h^{|i-j|}``.

  ``ρ_h = exp(-m_h)`` with ALiBi's own slopes ``m_h`` (the mode's scheme), so
  both members of the pair apply the same distance kernel ``e^{-m_h|i-j|}``:
  ALiBi to the unnormalised attention weights (``exp(logit - m|i-j|)``), this
  PE to the logits. ``F = [ρ^{|i-j|}]`` is a Kac-Murdock-Szegő matrix:
  positive definite with unit diagonal for ``0 < ρ < 1``, so Schur's theorem
  bounds ``λ_max(F ∘ G) <= max_i G_ii`` for a PSD content Gram ``G``.
  Nothing is learned (as ALiBi). Causal attention (a language model) uses the
  factor's lower triangle ``ρ^{i-j}``, ``j <= i``: the masked entries never
  reach a probability. The Toeplitz coefficients and Schur's bound stay those
  of the symmetric factor, which the causal logits are the lower half of.
  """
  name = "alibi_multiplicative"
  description = ("ALiBi's kernel as a Hadamard factor: logits times rho_h^|i-j|, "
                 "rho_h = exp(-m_h) (the multiplicative twin of alibi)")
  coupling = "multiplicative"
  kinds = (Kind.FACTOR,)
  toeplitz_label = "KMS factor ρ^|k| (head 0)"

  def rhos(self, cfg) -> jax.Array:
    """``[num_heads]`` decay rates ``exp(-m_h)``."""
    return decay_rates(self.slopes(cfg))

  def bias(self, cfg, params, seq_len, positions=None):
    return None

  def bias_extremes(self, cfg, seq_len):
    return None

  def logit_factor(self, cfg, params, seq_len, positions=None):
    return decay_factor(seq_len, self.rhos(cfg), positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return decay_coeffs(seq_len, self.rhos(cfg))


ALIBI_B = 1.1996786403  # b tanh b = 1 (Theorem 10)


def alibi_extreme_eigs(n: int, slope):
  """Exact ``(λ_min, λ_max)`` of symmetric ALiBi ``-m|i-j|`` (Theorem 10), ``n >= 2``.

  ``λ_max = m / (2 sin²(π/2n))``; ``λ_min = -m / (2 sinh²(x/2n))`` with ``x = nβ``
  solving ``(n-1) sinh(x/2n) sinh(x/2) = cosh((n-1)x/2n)`` by 8 Newton steps
  from ``2b`` (``b tanh b = 1``). The sinh form avoids the cancellation of
  ``1/(cosh β - 1)`` in float32. Exactly one eigenvalue is negative, and
  ``spread ≈ 0.5500506 m n²``.
  """
  if n < 2:
    raise ValueError("alibi_extreme_eigs needs n >= 2")
  m = jnp.asarray(slope)
  dtype = jnp.result_type(m, jnp.float32)
  nf = jnp.asarray(n, dtype)

  def g(x):
    return (nf - 1) * jnp.sinh(x / (2 * nf)) * jnp.sinh(x / 2) - jnp.cosh(
        (nf - 1) * x / (2 * nf))

  def newton(_, x):
    return x - g(x) / jax.grad(g)(x)

  x = jax.lax.fori_loop(0, 8, newton, jnp.asarray(2 * ALIBI_B, dtype))
  lam_min = -m / (2 * jnp.sinh(x / (2 * nf)) ** 2)
  lam_max = m / (2 * jnp.sin(jnp.pi / (2 * nf)) ** 2)
  return lam_min.astype(dtype), lam_max.astype(dtype)
