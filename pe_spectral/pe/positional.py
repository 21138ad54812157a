"""Positional encodings as pure ``jnp`` functions.

Every function here is framework-free, works under ``jax.jit`` and ``jax.vmap``
and is the single definition of its formula. How each registered PE uses them
(its input table, logit bias, q/k transform and parameters) is said once, in
the PE registry (``pe_spectral.pe.encodings``); the model, the decomposition, the
ablation and the spectral CLI call only the registry's hooks.

The q/k transforms (:class:`Rotation`, :class:`PaperMLARotation`,
:class:`XPos`) are small frozen dataclasses: hashable, so a model's static
structure holds them, and callable as ``transform(q, k, positions) -> (q, k)``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "sinusoidal_table", "rope_angles", "apply_rope", "rotate", "alibi_slopes",
    "alibi_slopes_paper", "alibi_bias", "relative_position_bucket",
    "relative_offsets", "relative_bias_from_table",
    "RopeScaling", "ROPE_SCALINGS", "pi_frequencies", "ntk_base", "yarn_frequencies",
    "yarn_correction_range", "yarn_turns_frequencies", "llama3_frequencies",
    "dynamic_ntk_base",
    "yarn_attention_factor", "rope_inverse_frequencies", "rotary_cos_bias",
    "rotary_cos_coeffs", "decay_rates", "decay_factor", "decay_coeffs", "p_rope_frequencies",
    "kerple_bias", "kerple_coeffs", "kerple_params",
    "Rotation", "PaperMLARotation", "paper_mla_rotary", "xpos_scale", "XPos",
    "fire_psi", "fire_init", "fire_coeffs", "fire_bias",
    "cope_positions", "cope_bias", "kerple_of_distance",
    "random_positions", "sinusoidal_at", "distances", "relative_table_index",
    "inv_softplus", "carope_frequency", "carope_phases",
]


# ----------------------------------------------------------------------------
# Argument checks: one-line errors for what a formula cannot compute.
# ----------------------------------------------------------------------------

def _check_count(name: str, value, minimum: int = 1) -> int:
  """A static integer count (sizes, dimensions) >= ``minimum``."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{name} must be an int, got {value!r}")
  if value < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {value}")
  return int(value)


def _check_base(base) -> float:
  """A frequency base: a finite number > 0 (``base ** (-2i/d)``)."""
  try:
    if isinstance(base, (str, bytes, bool)):
      raise TypeError
    b = float(base)
  except (TypeError, ValueError):
    raise TypeError(f"base must be a number, got {base!r}") from None
  if not math.isfinite(b) or b <= 0:
    raise ValueError(f"base must be finite and > 0, got {base!r}")
  return b


# ----------------------------------------------------------------------------
# Sinusoidal absolute table.
# ----------------------------------------------------------------------------

def sinusoidal_table(num_positions: int, dim: int, base: float = 10000.0,
                     dtype=jnp.float32) -> jax.Array:
  """Fixed sinusoidal table ``[num_positions, dim]`` (interleaved layout).

  ``table[p, 2i] = sin(p * w_i)``, ``table[p, 2i+1] = cos(p * w_i)`` with
  ``w_i = base ** (-2i / dim)``. For odd ``dim`` the last column is a sine.
  The paper's 'rope' input table uses the block layout ``[sin | cos]``; it holds
  the same values up to a fixed permutation of columns, which is a symmetry of
  the model's initial distribution.
  """
  # Computed in NumPy (float64) so that under jit it is a constant, not sin/cos
  # re-evaluated inside the fused embedding add for every batch row.
  _check_count("num_positions", num_positions, 0)
  half = (_check_count("dim", dim) + 1) // 2
  pos = np.arange(num_positions, dtype=np.float64)[:, None]
  angles = pos * _inverse_freqs(half, dim, base)[None, :]
  table = np.stack([np.sin(angles), np.cos(angles)], axis=-1)
  return jnp.asarray(table.reshape(num_positions, 2 * half)[:, :dim], dtype)


# ----------------------------------------------------------------------------
# Rotary position embedding.
# ----------------------------------------------------------------------------

def _inverse_freqs(count: int, dim: int, base: float) -> np.ndarray:
  """``base ** (-2i / dim)`` for ``i < count`` in float64 (static: shapes only)."""
  _check_count("dim", dim)
  return _check_base(base) ** (-2.0 * np.arange(_check_count("count", count, 0)) / dim)


# Eval-time context extension: pure functions of the frequency table.

def pi_frequencies(inv_freq, factor: float):
  """Position interpolation (Chen et al. 2023, arXiv 2306.15595): positions are
  squeezed by ``factor = L_test / L_train``, i.e. every frequency divided by it."""
  return inv_freq / factor


def ntk_base(base: float, factor: float, head_dim: int) -> float:
  """NTK-aware scaling: the base ``b · s^(d/(d-2))``, which keeps the highest
  frequency and stretches the lowest one's wavelength by ``s``."""
  return float(base) * float(factor) ** (head_dim / (head_dim - 2))


def yarn_correction_range(head_dim: int, base: float, original_len: int, *,
                          beta_fast: float = 32.0, beta_slow: float = 1.0,
                          truncate: bool = True) -> tuple[float, float]:
  """YaRN's correction range: the pair indices ``(low, high)`` whose
  frequency turns ``beta_fast`` and ``beta_slow`` times over ``original_len``
  positions, ``i(r) = d · ln(L / (2π r)) / (2 ln b)``; floored and ceiled
  (``truncate``, as the YaRN authors' code and Hugging Face do), then clipped
  to ``[0, d - 1]``."""
  def index(turns):
    return head_dim * math.log(original_len / (turns * 2 * math.pi)) / (2 * math.log(base))
  low, high = index(beta_fast), index(beta_slow)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  return max(low, 0), min(high, head_dim - 1)


def yarn_frequencies(inv_freq, factor: float, original_len: int, *, head_dim: int,
                     base: float = 10000.0, beta_fast: float = 32.0, beta_slow: float = 1.0,
                     truncate: bool = True):
  """YaRN's "NTK-by-parts" frequencies as the YaRN authors' code and Hugging
  Face ``rope_utils`` compute them (Peng et al. 2023, arXiv 2309.00071): a
  ramp that is linear in the pair index ``i`` between the correction range
  ``(low, high)`` of :func:`yarn_correction_range`,
  ``γ_i = clip((i − low) / (high − low), 0, 1)``, and
  ``θ'_i = γ_i θ_i / s + (1 − γ_i) θ_i``: pairs below ``low`` (many turns over
  the training context) keep their frequency, pairs above ``high`` are
  interpolated like PI. ``inv_freq``: the ``[head_dim/2]`` table (p-RoPE's
  zeros stay zero). The paper's equation, linear in the number of turns
  instead, is :func:`yarn_turns_frequencies`; the two differ."""
  low, high = yarn_correction_range(head_dim, base, original_len, beta_fast=beta_fast,
                                    beta_slow=beta_slow, truncate=truncate)
  if high == low:
    high += 0.001  # the reference code's guard against a zero-width ramp
  ramp = np.clip((np.arange(len(inv_freq)) - low) / (high - low), 0.0, 1.0)
  return ramp * inv_freq / factor + (1.0 - ramp) * inv_freq


def yarn_turns_frequencies(inv_freq, factor: float, original_len: int, *,
                           beta_fast: float = 32.0, beta_slow: float = 1.0):
  """YaRN's ramp as the paper's equation is written: linear in the number of
  turns ``r_i = original_len · θ_i / (2π)``,
  ``γ_i = clip((r_i − β_slow) / (β_fast − β_slow), 0, 1)``,
  ``θ'_i = (1 − γ_i) θ_i / s + γ_i θ_i``. Not what the reference
  implementations compute (:func:`yarn_frequencies`): at head dim 128,
  base 10⁴, training length 2,048 and factor 10 single frequencies differ by
  up to 61 %. Kept (as ``"yarn_turns"``) because earlier results used it."""
  turns = original_len * inv_freq / (2 * np.pi)
  ramp = np.clip((turns - beta_slow) / (beta_fast - beta_slow), 0.0, 1.0)
  return (1.0 - ramp) * inv_freq / factor + ramp * inv_freq


def llama3_frequencies(inv_freq, factor: float, original_len: int, *,
                       low_freq_factor: float = 1.0, high_freq_factor: float = 4.0):
  """Llama 3.1's RoPE scaling (as Hugging Face ``rope_utils`` computes it):
  with wavelengths ``λ_i = 2π / θ_i``, pairs shorter than
  ``original_len / high_freq_factor`` keep ``θ_i``, pairs longer than
  ``original_len / low_freq_factor`` get ``θ_i / s``, and between them
  ``θ'_i = (1 − g) θ_i / s + g θ_i`` with
  ``g = (original_len / λ_i − low_freq_factor) / (high_freq_factor − low_freq_factor)``.
  A zero frequency (p-RoPE) stays zero."""
  if not high_freq_factor > low_freq_factor > 0:
    raise ValueError(f"llama3 scaling needs high_freq_factor > low_freq_factor > 0, got "
                     f"{high_freq_factor} and {low_freq_factor}")
  inv_freq = np.asarray(inv_freq, np.float64)
  rotating = inv_freq > 0
  wavelen = 2 * np.pi / np.where(rotating, inv_freq, 1.0)
  long_, short = original_len / low_freq_factor, original_len / high_freq_factor
  g = (original_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
  between = (1.0 - g) * inv_freq / factor + g * inv_freq
  scaled = np.where(wavelen > long_, inv_freq / factor,
                    np.where(wavelen < short, inv_freq, between))
  return np.where(rotating, scaled, 0.0)


def dynamic_ntk_base(base: float, factor: float, head_dim: int, seq_len: int,
                     original_len: int) -> float:
  """Dynamic NTK scaling (Hugging Face's ``dynamic`` rope type): the base
  ``b · (s · L / L₀ − (s − 1))^(d/(d−2))`` for a sequence of ``L =
  max(seq_len, original_len)`` positions, i.e. the base that grows with the
  sequence instead of being fixed by one factor; ``b`` itself up to ``L₀``.
  With ``s = 1`` it is :func:`ntk_base` at factor ``L / L₀``."""
  length = max(int(seq_len), int(original_len))
  grown = factor * length / original_len - (factor - 1)
  return float(base) * grown ** (head_dim / (head_dim - 2))


def yarn_attention_factor(factor: float) -> float:
  """YaRN's ``sqrt(1/t) = 0.1 ln s + 1``, applied to queries and keys alike
  (so logits are multiplied by its square); 1 for ``s <= 1``."""
  return 1.0 if factor <= 1.0 else 0.1 * math.log(factor) + 1.0


# The eval-time rotary context extensions (RopeScaling.kind).
ROPE_SCALINGS = ("pi", "ntk", "yarn", "yarn_turns", "llama3")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """An eval-time rotary context extension: ``kind`` in :data:`ROPE_SCALINGS`
  (``pi``, ``ntk``, ``yarn`` as the reference implementations compute it,
  ``yarn_turns`` as the YaRN paper's equation is written, ``llama3``);
  ``factor = L_test / L_train``; ``original_len`` (YaRN's and Llama 3's
  ranges) is the training length. Evaluated at each length with its own
  factor, ``ntk`` is also Hugging Face's dynamic NTK at factor 1
  (:func:`dynamic_ntk_base`)."""
  kind: str
  factor: float
  original_len: int

  def __post_init__(self):
    if self.kind not in ROPE_SCALINGS:
      raise ValueError(f"rope scaling must be one of {', '.join(ROPE_SCALINGS)}, "
                       f"got {self.kind!r}")
    if not (math.isfinite(self.factor) and self.factor >= 1.0):
      raise ValueError(f"rope scaling factor must be >= 1, got {self.factor}")
    if self.original_len < 1:
      raise ValueError(f"original_len must be >= 1, got {self.original_len}")

  @property
  def attention_factor(self) -> float:
    return yarn_attention_factor(self.factor) if self.kind.startswith("yarn") else 1.0


def p_rope_frequencies(head_dim: int, p: float, *, base: float = 10000.0) -> np.ndarray:
  """p-RoPE (Barbero et al. 2024, arXiv 2410.06205): the ``[head_dim/2]``
  inverse frequencies with only the highest ``round(p · head_dim/2)`` pairs
  rotating (``base^(-2i/d)``, ``i`` small) and the lowest-frequency pairs set to
  0 -- unrotated, free to carry content. ``p = 1`` is RoPE, ``p = 0`` NoPE."""
  if not 0.0 <= p <= 1.0:
    raise ValueError(f"p must be in [0, 1], got {p}")
  freqs = _inverse_freqs(head_dim // 2, head_dim, base)
  keep = int(round(p * (head_dim // 2)))
  return np.where(np.arange(head_dim // 2) < keep, freqs, 0.0)


def rope_inverse_frequencies(head_dim: int, base: float = 10000.0,
                             scaling: Optional[RopeScaling] = None,
                             fraction: Optional[float] = None) -> np.ndarray:
  """``θ_i = base^(-2i/head_dim)``, ``i < head_dim/2`` (float64), with
  ``scaling`` applied when given and, for p-RoPE, only the highest
  ``fraction`` of the pairs rotating (:func:`p_rope_frequencies`)."""
  if scaling is not None and scaling.kind == "ntk":
    base = ntk_base(base, scaling.factor, head_dim)
  freqs = (_inverse_freqs(head_dim // 2, head_dim, base) if fraction is None
           else p_rope_frequencies(head_dim, fraction, base=base))
  if scaling is None or scaling.kind == "ntk":
    return freqs
  if scaling.kind == "pi":
    return pi_frequencies(freqs, scaling.factor)
  if scaling.kind == "yarn_turns":
    return yarn_turns_frequencies(freqs, scaling.factor, scaling.original_len)
  if scaling.kind == "llama3":
    return llama3_frequencies(freqs, scaling.factor, scaling.original_len)
  return yarn_frequencies(freqs, scaling.factor, scaling.original_len, head_dim=head_dim,
                          base=base)


def rope_angles(positions: jax.Array, head_dim: int,
                base: float = 10000.0,
                scaling: Optional[RopeScaling] = None,
                fraction: Optional[float] = None) -> jax.Array:
  """Angles ``positions[..., None] * θ_i``, shape ``[..., head_dim/2]``
  (:func:`rope_inverse_frequencies`).

  NumPy positions give float64 NumPy angles: a constant under ``jit``.
  """
  freqs = rope_inverse_frequencies(head_dim, base, scaling, fraction)
  if isinstance(positions, np.ndarray):
    return positions.astype(np.float64)[..., None] * freqs
  return jnp.asarray(positions, jnp.float32)[..., None] * freqs.astype(np.float32)


def _rope_tables(positions, head_dim: int, base: float, scaling=None, fraction=None):
  """``cos``/``sin`` of the angles, each repeated to ``[..., head_dim]`` (pairs share one).

  Concrete (NumPy) positions -- what the model passes -- give NumPy constants
  computed in float64: XLA then reads a table instead of evaluating sin/cos
  inside the fused rotation for every batch row and head (measured: the
  fusion was the single most expensive op of a forward pass).
  """
  angles = rope_angles(positions, head_dim, base, scaling, fraction)  # [..., head_dim/2]
  if isinstance(angles, np.ndarray):  # float64 NumPy angles -> float32 constants
    return (np.repeat(np.cos(angles), 2, axis=-1).astype(np.float32),
            np.repeat(np.sin(angles), 2, axis=-1).astype(np.float32))
  return (jnp.repeat(jnp.cos(angles), 2, axis=-1), jnp.repeat(jnp.sin(angles), 2, axis=-1))


def apply_rope(x: jax.Array, positions: jax.Array, *,
               base: float = 10000.0,
               scaling: Optional[RopeScaling] = None,
               fraction: Optional[float] = None) -> jax.Array:
  """Rotates interleaved pairs ``(2i, 2i+1)`` of ``x`` by ``positions * theta_i``.

  Args:
    x: ``[..., seq, head_dim]`` with even ``head_dim`` (any leading axes; the
      model passes ``[batch, seq, heads, head_dim]`` with positions ``[seq, 1]``).
    positions: integer or float positions broadcasting against ``x.shape[:-1]``.
    base: frequency base; ``theta_i = base ** (-2i / head_dim)``.
    scaling: an eval-time context extension (:class:`RopeScaling`): its
      frequencies, and for YaRN its attention factor on the output.
    fraction: p-RoPE's ``p`` (:func:`p_rope_frequencies`); None = every pair.

  Returns:
    An array of ``x``'s shape and dtype. ``<apply_rope(q, m), apply_rope(k, n)>``
    depends on positions only through ``m - n``.
  """
  x = jnp.asarray(x) if not isinstance(x, jax.Array) else x
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(f"apply_rope needs floating-point x (a rotation of integers is not "
                    f"an integer), got {x.dtype}")
  if x.ndim < 1:
    raise ValueError("apply_rope needs x of shape [..., head_dim]")
  head_dim = x.shape[-1]
  if head_dim % 2:
    raise ValueError(f"apply_rope needs an even head_dim, got {head_dim}")
  try:
    fits = np.broadcast_shapes(np.shape(positions), x.shape[:-1]) == x.shape[:-1]
  except ValueError:
    fits = False
  if not fits:
    raise ValueError(f"positions of shape {np.shape(positions)} do not broadcast against "
                     f"x's leading axes {x.shape[:-1]} (x is [..., seq, head_dim])")
  cos, sin = _rope_tables(positions, head_dim, base, scaling, fraction)
  if scaling is not None and scaling.attention_factor != 1.0:
    cos, sin = cos * scaling.attention_factor, sin * scaling.attention_factor
  return _turn_pairs(x, cos.astype(x.dtype), sin.astype(x.dtype))


def _turn_pairs(x, cos, sin):
  """The one RoPE rotation of this codebase: each interleaved pair
  ``(x_2j, x_2j+1)`` turned by the angle whose cosine and sine ``cos``/``sin``
  hold, repeated per pair (``[..., head_dim]``, broadcasting against ``x``).
  :func:`apply_rope`, :func:`rotate` (and so ``spectral.rope_rotate``) and
  the paper's MLA transform all come here."""
  # (x_even, x_odd) -> (-x_odd, x_even), interleaved back into place.
  x_pairs = x.reshape(x.shape[:-1] + (x.shape[-1] // 2, 2))
  rotated_half = jnp.stack([-x_pairs[..., 1], x_pairs[..., 0]], axis=-1)
  rotated_half = rotated_half.reshape(x.shape)
  return x * cos + rotated_half * sin


def rotate(x: jax.Array, angles: jax.Array, *, pairing: str = "interleaved") -> jax.Array:
  """Turns pair ``j`` of ``x`` (``[..., head_dim]``) by ``angles[..., j]``
  (broadcasting against ``x.shape[:-1] + (head_dim // 2,)``): pairs
  ``(2j, 2j+1)`` (``"interleaved"``, the model's layout) or ``(j, j + d/2)``
  (``"half"``, the rotate-half layout of GPT-NeoX and HF). :func:`apply_rope`
  is this with RoPE's angles; ``spectral.rope_rotate`` is this with any
  ``theta``."""
  x = jnp.asarray(x)
  d = x.shape[-1]
  if d % 2:
    raise ValueError(f"RoPE needs an even dimension, got {d}")
  if pairing not in ("interleaved", "half"):
    raise ValueError(f"pairing must be 'interleaved' or 'half', got {pairing!r}")
  half_to_pairs = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], -1).reshape(-1)
  if pairing == "half":  # a permutation into the interleaved layout, exact
    x = x[..., half_to_pairs]
  angles = jnp.asarray(angles)
  cos = jnp.repeat(jnp.cos(angles), 2, axis=-1).astype(x.dtype)
  sin = jnp.repeat(jnp.sin(angles), 2, axis=-1).astype(x.dtype)
  out = _turn_pairs(x, cos, sin)
  if pairing == "half":
    out = out[..., np.argsort(half_to_pairs)]
  return out


# ----------------------------------------------------------------------------
# KERPLE (Chi et al. 2022): kernelized relative positional biases.
# ----------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------
# ALiBi.
# ----------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------
# Relative (T5-style) biases.
# ----------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------
# q/k transforms: what a rotary PE does to queries and keys.
# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Rotation:
  """RoPE as a q/k transform: both rotated by :func:`apply_rope` (base,
  eval-time ``scaling``, p-RoPE ``fraction``). A pure rotation: logits are
  the Hadamard form ``Re Σ_j (z_j w_j*) ∘ G_θj`` with :meth:`frequencies`."""
  base: float = 10000.0
  scaling: Optional[RopeScaling] = None
  fraction: Optional[float] = None
  is_rotation = True

  def __call__(self, q, k, positions):
    rot = lambda x: apply_rope(x, positions, base=self.base, scaling=self.scaling,
                               fraction=self.fraction)
    return rot(q), rot(k)

  def frequencies(self, head_dim: int) -> np.ndarray:
    return rope_inverse_frequencies(head_dim, self.base, self.scaling, self.fraction)


def paper_mla_rotary(x: jax.Array, positions: jax.Array, *,
                     base: float = 10000.0) -> jax.Array:
  """The paper's MLA 'rotary' transform, bug included (faithful mode only).

  Its cache row for position p is ``[sin(p theta_0..) | cos(p theta_0..)]`` and
  the code reads the even columns as sines and the odd columns as cosines, so
  the sine and cosine of one pair come from different frequencies. It is not
  a rotation (norms change; scores are not relative). See docs/protocol.md.
  """
  d = x.shape[-1]
  angles = rope_angles(positions, d, base)  # [..., d/2]
  cache = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., d]
  sin, cos = cache[..., 0::2], cache[..., 1::2]  # one pair's sine and cosine differ in angle
  out = _turn_pairs(x, jnp.repeat(cos, 2, axis=-1), jnp.repeat(sin, 2, axis=-1))
  return out.astype(x.dtype)


@dataclasses.dataclass(frozen=True)
class PaperMLARotation:
  """The paper's MLA transform (:func:`paper_mla_rotary`) on q and k; not a rotation."""
  base: float = 10000.0
  is_rotation = False

  def __call__(self, q, k, positions):
    return (paper_mla_rotary(q, positions, base=self.base),
            paper_mla_rotary(k, positions, base=self.base))


def xpos_scale(positions, head_dim: int, *, gamma: float = 0.4,
               scale_base: float = 512.0) -> jax.Array:
  """xPos (Sun et al. 2022) query scale ``[..., head_dim/2]``: pair ``i`` of a
  query at position ``n`` is scaled by ``ζ_i^(n/scale_base)``, with
  ``ζ_i = (2i/head_dim + γ)/(1 + γ)`` (< 1); a key's scale is the reciprocal,
  so the logit of query ``n`` and key ``m`` carries ``ζ_i^((n-m)/scale_base)``:
  decay with distance for keys in the past, growth for keys in the future."""
  if head_dim % 2:
    raise ValueError(f"xpos_scale needs an even head_dim, got {head_dim}")
  zeta = (2.0 * np.arange(head_dim // 2) / head_dim + gamma) / (1.0 + gamma)
  if isinstance(positions, np.ndarray):
    return zeta ** (positions.astype(np.float64)[..., None] / scale_base)
  pos = jnp.asarray(positions, jnp.float32)[..., None]
  return jnp.asarray(zeta, jnp.float32) ** (pos / scale_base)


@dataclasses.dataclass(frozen=True)
class XPos:
  """xPos as a q/k transform: RoPE, then queries scaled by :func:`xpos_scale`
  and keys by its reciprocal (each pair's two entries share one scale).

  The logits are a Hadamard form with the Toeplitz factors
  ``ζ_j^((n-m)/scale_base) e^{i(n-m)θ_j}``, which are not unit-modulus: no
  Schur contraction is claimed for it (``is_rotation`` is False)."""
  base: float = 10000.0
  gamma: float = 0.4
  scale_base: float = 512.0
  scaling: Optional[RopeScaling] = None
  is_rotation = False

  def __call__(self, q, k, positions):
    d = q.shape[-1]
    rot = lambda x: apply_rope(x, positions, base=self.base, scaling=self.scaling)
    s = xpos_scale(positions, d, gamma=self.gamma, scale_base=self.scale_base)
    if isinstance(s, np.ndarray):
      s = s.astype(np.float32)
    s = jnp.repeat(jnp.asarray(s), 2, axis=-1)
    return (rot(q) * s.astype(q.dtype), rot(k) / s.astype(k.dtype))

  def frequencies(self, head_dim: int) -> np.ndarray:
    return rope_inverse_frequencies(head_dim, self.base, self.scaling)


# ----------------------------------------------------------------------------
# FIRE (Li et al. 2023, arXiv 2310.04418): functional interpolation.
# ----------------------------------------------------------------------------

def inv_softplus(y: float) -> float:
  """``softplus⁻¹(y) = y + log(1 - e^-y)`` for ``y > 0``: the raw value a
  softplus-constrained parameter starts from. Written so that it does not
  overflow for large ``y`` (``log(expm1(y))`` is inf past ~709)."""
  return float(y + np.log(-np.expm1(-y)))


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


# ----------------------------------------------------------------------------
# CoPE (Golovneva et al. 2024, arXiv 2405.18719): contextual positions.
# ----------------------------------------------------------------------------

def cope_positions(gates: jax.Array, *, causal: bool = False) -> jax.Array:
  """Contextual positions ``p[..., i, j]``: the gated count of tokens from key
  ``j`` to query ``i``, both included, from gates ``[..., q, k]`` in [0, 1].

  Causal (the paper): ``p_ij = Σ_{t=j}^{i} g_it`` for ``j <= i``, 0 above the
  diagonal. Bidirectional (this classifier's default): the count runs over
  the tokens between the two, whichever comes first,
  ``p_ij = Σ_{t=min(i,j)}^{max(i,j)} g_it``. With every gate 1 this is
  ``|i - j| + 1``: CoPE then sees plain relative positions.
  """
  c = jnp.cumsum(gates, axis=-1)                       # C[i, t] = Σ_{u<=t} g_iu
  c_ii = jnp.diagonal(c, axis1=-2, axis2=-1)[..., :, None]
  g_ii = jnp.diagonal(gates, axis1=-2, axis2=-1)[..., :, None]
  n = gates.shape[-1]
  behind = jnp.arange(n)[None, :] <= jnp.arange(gates.shape[-2])[:, None]
  before = c_ii - c + gates                             # Σ_{t=j}^{i}, j <= i
  if causal:
    return jnp.where(behind, before, 0.0)
  after = c - c_ii + g_ii                               # Σ_{t=i}^{j}, j >= i
  return jnp.where(behind, before, after)


def cope_bias(q: jax.Array, k: jax.Array, pos_emb: jax.Array, *,
              scale: float, mask: Optional[jax.Array] = None,
              causal: bool = False) -> jax.Array:
  """CoPE's logit term ``[batch, heads, q, k]`` for q/k ``[batch, seq, heads, d]``.

  Gates ``g_ij = σ(q_i·k_j · scale)`` (0 for masked keys), contextual positions
  :func:`cope_positions` clipped to ``[0, npos - 1]``, and the term
  ``q_i · e[p_ij]`` with ``e`` = ``pos_emb [npos, d]`` linearly interpolated
  between the integer positions around ``p_ij`` (the paper computes
  ``z_i[p] = q_i·e[p]`` for integer ``p`` first, as here). It depends on the
  content through the gates: there is no Toeplitz form.
  """
  npos = pos_emb.shape[0]
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
  gates = jax.nn.sigmoid(logits)
  if mask is not None:
    gates = jnp.where(mask, gates, 0.0)
  p = jnp.clip(cope_positions(gates, causal=causal), 0.0, npos - 1)
  z = jnp.einsum("bqhd,pd->bhqp", q, pos_emb)              # [b, h, q, npos]
  lo = jnp.floor(p)
  w = p - lo
  lo = lo.astype(jnp.int32)
  hi = jnp.minimum(lo + 1, npos - 1)
  z_lo = jnp.take_along_axis(z, lo, axis=-1)
  z_hi = jnp.take_along_axis(z, hi, axis=-1)
  return w * z_hi + (1.0 - w) * z_lo


# ----------------------------------------------------------------------------
# Positions other than 0..n-1 (randomized positions, Ruoss et al. 2023).
# ----------------------------------------------------------------------------

def random_positions(key: jax.Array, seq_len: int, position_range: int) -> jax.Array:
  """Randomized positions (Ruoss et al. 2023, arXiv 2305.16843): ``seq_len``
  distinct integers drawn uniformly from ``[0, position_range)``, sorted --
  the order of the tokens is kept, their spacing is random. int32 ``[seq_len]``."""
  if seq_len > position_range:
    raise ValueError(f"cannot draw {seq_len} distinct positions from a range of "
                     f"{position_range}")
  pick = jax.random.choice(key, position_range, (seq_len,), replace=False)
  return jnp.sort(pick).astype(jnp.int32)


def sinusoidal_at(positions: jax.Array, dim: int, base: float = 10000.0) -> jax.Array:
  """:func:`sinusoidal_table` rows at arbitrary ``positions [seq]`` -> ``[seq, dim]``."""
  half = (dim + 1) // 2
  angles = (jnp.asarray(positions, jnp.float32)[:, None]
            * jnp.asarray(_inverse_freqs(half, dim, base), jnp.float32)[None, :])
  table = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)
  return table.reshape(angles.shape[0], 2 * half)[:, :dim]


def distances(positions: jax.Array, *, causal: bool = False) -> jax.Array:
  """``|p_i - p_j|`` as float32 ``[seq, seq]``; causal: 0 above the diagonal."""
  pos = jnp.asarray(positions, jnp.float32)
  d = jnp.abs(pos[:, None] - pos[None, :])
  if causal:
    n = pos.shape[0]
    d = jnp.where(jnp.arange(n)[None, :] <= jnp.arange(n)[:, None], d, 0.0)
  return d


# ----------------------------------------------------------------------------
# The coupling controls: one kernel, coupled the other way.
# ----------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------
# Content-dependent coupling: PoPE, forget-gate ALiBi, learned frequencies.
# ----------------------------------------------------------------------------

# PoPE's key phase bias is kept in [-2π, 0], as the reference implementation
# (x-transformers / PoPE-pytorch) clamps it.
POPE_PHASE_RANGE = (-2.0 * math.pi, 0.0)


def pope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
  """PoPE's ``head_dim`` inverse frequencies ``θ_c = base^(-c/d)``, ``c = 0..d-1``
  (one per channel: RoPE has ``d/2``, one per pair)."""
  head_dim = _check_count("head_dim", head_dim)
  return _check_base(base) ** (-np.arange(head_dim, dtype=np.float64) / head_dim)


def pope_transform(q: jax.Array, k: jax.Array, positions, inv_freq, phase=None):
  """PoPE (Gopalakrishnan et al. 2025): each channel ``c`` of a query (key)
  becomes the complex number ``softplus(x_c) e^{i φ_c}``, ``φ_c = pos θ_c``
  for a query and ``pos θ_c + δ_c`` for a key, written as its real and
  imaginary parts interleaved, so that a real dot product of the outputs is

      q'·k' = Σ_c softplus(q_c) softplus(k_c) cos((j - i) θ_c + δ_c)

  for a query at ``i`` and a key at ``j``.

  Args:
    q, k: ``[..., seq, heads, d]``.
    positions: broadcasting against ``q.shape[:-1]`` (the model passes ``[seq, 1]``).
    inv_freq: ``[d]`` or ``[heads, d]`` frequencies (zero turns a channel's
      position off).
    phase: ``[heads, d]`` key phase biases ``δ`` (clamped to
      :data:`POPE_PHASE_RANGE`), or None for ``δ = 0``.

  Returns:
    ``(q', k')``, each ``[..., seq, heads, 2d]`` in ``q``'s dtype.
  """
  q, k = jnp.asarray(q), jnp.asarray(k)
  d = q.shape[-1]
  ang = jnp.asarray(positions, jnp.float32)[..., None] * jnp.asarray(inv_freq, jnp.float32)
  ang_k = ang if phase is None else ang + jnp.clip(jnp.asarray(phase, jnp.float32),
                                                    *POPE_PHASE_RANGE)

  def polar(x, a):
    m = jax.nn.softplus(x.astype(jnp.float32))
    out = jnp.stack(jnp.broadcast_arrays(m * jnp.cos(a), m * jnp.sin(a)), axis=-1)
    return out.reshape(out.shape[:-2] + (2 * d,)).astype(x.dtype)

  return polar(q, ang), polar(k, ang_k)


def forget_gate_bias(log_gates: jax.Array, *, causal: bool = False) -> jax.Array:
  """Data-dependent ALiBi (forgetting attention, Lin et al. 2025; x-transformers'
  ``DataDependentAlibi``): an additive bias that sums log forget gates
  ``log f_t <= 0`` over the tokens between query and key.

  Args:
    log_gates: ``[batch, seq, heads]`` (causal) or ``[batch, seq, 2 * heads]``
      (bidirectional: the first ``heads`` gate keys behind the query, the rest
      keys ahead of it).

  Returns:
    ``[batch, heads, seq, seq]``: ``bias[i, j] = Σ_{t=j+1}^{i} log f_t`` for
    ``j <= i`` and, bidirectional, ``Σ_{t=i+1}^{j} log f'_t`` for ``j > i``
    (causal: 0 above the diagonal, which the causal mask removes). With every
    ``log f_t = -m`` this is ALiBi's ``-m |i - j|``.
  """
  c = jnp.cumsum(jnp.moveaxis(log_gates, -1, 1), axis=-1)  # [b, H, n], inclusive
  n = c.shape[-1]
  i, j = np.arange(n)[:, None], np.arange(n)[None, :]
  if causal:
    return jnp.where(j <= i, c[..., :, None] - c[..., None, :], 0.0)
  h = c.shape[1] // 2
  back, ahead = c[:, :h], c[:, h:]
  return jnp.where(j <= i, back[..., :, None] - back[..., None, :],
                   ahead[..., None, :] - ahead[..., :, None])


def carope_frequency(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
  """CARoPE's per-token, per-head base frequency (Veisi et al. 2025, arXiv
  2507.23083, section 2): ``f(x_t) = 1 / (softplus(x_t W + b) + 1)``, in
  (0, 1). ``x [..., d_model]``, ``w [d_model, heads]``, ``b [heads]``; the
  paper's ``W`` has no bias ``b`` (it is how this codebase starts CARoPE at
  RoPE, which the paper says it does without saying how)."""
  return 1.0 / (jax.nn.softplus(x.astype(jnp.float32) @ w + b) + 1.0)


def carope_phases(f: jax.Array, positions, pairs: int, freq_mask=None) -> jax.Array:
  """CARoPE's accumulated phases ``φ_i^(h)(m) = Σ_{t: p_t <= p_m} f(x_t)_h^i``
  for pairs ``i = 0 .. pairs-1`` (the paper's sum over ``t = 1..m``: RoPE's
  ``m θ_1^i`` when every ``f = θ_1``).

  Args:
    f: ``[batch, seq, heads]`` from :func:`carope_frequency`.
    positions: the tokens' positions ``[seq]`` (any shape that flattens to it).
      In order (``0..seq-1``) the sum is a cumulative sum; with every position
      equal every token gets the same phase, so the rotation cancels in
      ``q·k`` (the θ = 0 counterpart of ``decompose``).
    freq_mask: ``[heads, pairs]``; 0 stops that pair's phase.

  Returns:
    ``[batch, seq, heads, pairs]`` angles for :func:`rotate`.
  """
  pos = jnp.reshape(jnp.asarray(positions), (-1,))
  if pos.shape[0] != f.shape[1]:
    raise ValueError(f"carope_phases: {pos.shape[0]} positions for {f.shape[1]} tokens")
  steps = f[..., None] ** jnp.arange(pairs, dtype=f.dtype)  # [b, n, H, pairs]
  if freq_mask is not None:
    steps = steps * freq_mask
  upto = (pos[None, :] <= pos[:, None]).astype(f.dtype)  # [m, t]: t counts toward m
  return jnp.einsum("mt,bthi->bmhi", upto, steps)
