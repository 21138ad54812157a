"""Rotary PEs: RoPE and what is built on it -- partial RoPE, p-RoPE,
``rope_sinusoidal``, xPos -- and the evaluation-time frequency scalings (PI,
NTK, dynamic NTK, YaRN, Llama 3), with the q/k transforms the model applies.
Pure ``jnp`` functions and the registered classes together."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.pe.absolute import _sinusoid_input
from pe_spectral.pe.base import (
  Kind,
  PositionalEncoding,
  _float_field,
  _int_field,
  _inverse_freqs,
  _phase_coeffs,
)

__all__ = [
    "pi_frequencies", "ntk_base", "yarn_correction_range", "yarn_frequencies",
    "yarn_turns_frequencies", "llama3_frequencies", "dynamic_ntk_base", "yarn_attention_factor",
    "ROPE_SCALINGS", "RopeScaling", "p_rope_frequencies", "rope_inverse_frequencies",
    "rope_angles", "apply_rope", "PAIRINGS", "in_pairing", "pairs_to_channels",
    "rotate", "Rotation", "xpos_scale",
    "XPos",
    "PartialRopeOptions", "PRopeOptions", "XPosOptions", "Rotary", "XPosEncoding"
]


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
               fraction: Optional[float] = None,
               pairing: str = "interleaved") -> jax.Array:
  """Rotates pair ``i`` of ``x`` by ``positions * theta_i``: the interleaved
  pairs ``(2i, 2i+1)`` (the original RoPE and this codebase's default) or,
  with ``pairing="half"``, ``(i, i + head_dim/2)`` (GPT-NeoX, Llama, HF).

  Args:
    x: ``[..., seq, head_dim]`` with even ``head_dim`` (any leading axes; the
      model passes ``[batch, seq, heads, head_dim]`` with positions ``[seq, 1]``).
    positions: integer or float positions broadcasting against ``x.shape[:-1]``.
    base: frequency base; ``theta_i = base ** (-2i / head_dim)``.
    scaling: an eval-time context extension (:class:`RopeScaling`): its
      frequencies, and for YaRN its attention factor on the output.
    fraction: p-RoPE's ``p`` (:func:`p_rope_frequencies`); None = every pair.
    pairing: ``"interleaved"`` or ``"half"`` (see above): the same rotation of
      channels permuted the same way, so the logits of one layout equal the
      other's on queries and keys permuted to match.

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
  return in_pairing(lambda y: _turn_pairs(y, cos.astype(x.dtype), sin.astype(x.dtype)),
                    x, pairing)


PAIRINGS = ("interleaved", "half")


def _check_pairing(pairing: str) -> None:
  if pairing not in PAIRINGS:
    raise ValueError(f"pairing must be 'interleaved' or 'half', got {pairing!r}")


def _half_to_pairs(d: int) -> np.ndarray:
  """The channel order that puts the half layout's pairs ``(j, j + d/2)`` at
  ``(2j, 2j+1)``."""
  return np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], -1).reshape(-1)


def in_pairing(fn, x, pairing: str):
  """``fn`` (written for interleaved pairs ``(2j, 2j+1)``) applied to ``x``
  whose pairs are laid out as ``pairing``: ``"half"`` pairs ``(j, j + d/2)``
  are permuted into the interleaved layout, turned, and permuted back (a
  permutation: exact)."""
  _check_pairing(pairing)
  if pairing == "interleaved":
    return fn(x)
  order = _half_to_pairs(x.shape[-1])
  return fn(x[..., order])[..., np.argsort(order)]


def pairs_to_channels(values, pairing: str):
  """Per-pair ``values [..., d/2]`` spread onto the channels ``[..., d]`` of
  each pair in the ``pairing`` layout (a frequency mask onto q/k)."""
  _check_pairing(pairing)
  per_channel = jnp.repeat(values, 2, axis=-1)  # interleaved: (2j, 2j+1)
  if pairing == "interleaved":
    return per_channel
  return per_channel[..., np.argsort(_half_to_pairs(per_channel.shape[-1]))]


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
  angles = jnp.asarray(angles)
  cos = jnp.repeat(jnp.cos(angles), 2, axis=-1).astype(x.dtype)
  sin = jnp.repeat(jnp.sin(angles), 2, axis=-1).astype(x.dtype)
  return in_pairing(lambda y: _turn_pairs(y, cos, sin), x, pairing)


@dataclasses.dataclass(frozen=True)
class Rotation:
  """RoPE as a q/k transform: both rotated by :func:`apply_rope` (base,
  eval-time ``scaling``, p-RoPE ``fraction``). A pure rotation: logits are
  the Hadamard form ``Re Σ_j (z_j w_j*) ∘ G_θj`` with :meth:`frequencies`."""
  base: float = 10000.0
  scaling: Optional[RopeScaling] = None
  fraction: Optional[float] = None
  pairing: str = "interleaved"
  is_rotation = True

  def __call__(self, q, k, positions):
    rot = lambda x: apply_rope(x, positions, base=self.base, scaling=self.scaling,
                               fraction=self.fraction, pairing=self.pairing)
    return rot(q), rot(k)

  def frequencies(self, head_dim: int) -> np.ndarray:
    return rope_inverse_frequencies(head_dim, self.base, self.scaling, self.fraction)


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
  pairing: str = "interleaved"
  is_rotation = False

  def __call__(self, q, k, positions):
    d = q.shape[-1]
    rot = lambda x: apply_rope(x, positions, base=self.base, scaling=self.scaling)
    s = xpos_scale(positions, d, gamma=self.gamma, scale_base=self.scale_base)
    if isinstance(s, np.ndarray):
      s = s.astype(np.float32)
    s = jnp.repeat(jnp.asarray(s), 2, axis=-1)
    return (in_pairing(lambda x: rot(x) * s.astype(q.dtype), q, self.pairing),
            in_pairing(lambda x: rot(x) / s.astype(k.dtype), k, self.pairing))

  def frequencies(self, head_dim: int) -> np.ndarray:
    return rope_inverse_frequencies(head_dim, self.base, self.scaling)


@dataclasses.dataclass(frozen=True)
class PartialRopeOptions:
  """``partial_rope``: RoPE on the first ``heads`` heads (``0..num_heads``)."""
  heads: int = 1

  def __post_init__(self):
    _int_field(self, "heads", 0, " (rope_heads)")


@dataclasses.dataclass(frozen=True)
class PRopeOptions:
  """``p_rope``: the share of frequency pairs that rotate (the highest ones)."""
  fraction: float = 0.75

  def __post_init__(self):
    _float_field(self, "fraction", lambda f: 0.0 <= f <= 1.0, "in [0, 1]")


@dataclasses.dataclass(frozen=True)
class XPosOptions:
  """``xpos``: the per-pair decay ``γ`` and its scale base (Sun et al. 2023)."""
  gamma: float = 0.4
  scale_base: float = 512.0

  def __post_init__(self):
    for name in ("gamma", "scale_base"):
      _float_field(self, name, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


# The eval-time rotary context extension's fields (ModelConfig.rope_scaling_spec).
_ROPE_SCALING = ("rope_scaling", "rope_scaling_factor", "rope_scaling_original_len")


class Rotary(PositionalEncoding):
  """RoPE on ``rotary_heads`` heads (all of them unless partial)."""
  toeplitz_label = "Re of one frequency's phase matrix (θ_1)"

  def __init__(self, name: str, description: str, *, partial: bool = False,
               fraction_option: bool = False, input_sinusoid: bool = False):
    self.name = name
    self.description = description
    self.partial = partial
    self.fraction_option = fraction_option
    self.input_sinusoid = input_sinusoid
    self.options_type = (PRopeOptions if fraction_option else
                         PartialRopeOptions if partial else None)
    self.reads = ("rope_base", "rope_pairing") + _ROPE_SCALING
    # the input sinusoid adds absolute terms: neither pure form
    self.coupling = "" if input_sinusoid else "multiplicative"
    self.kinds = (Kind.INPUT, Kind.ROTARY) if input_sinusoid else (Kind.ROTARY,)

  def validate(self, cfg):
    if self.partial and not cfg.pe_options.heads <= cfg.num_heads:
      raise ValueError(f"partial_rope's heads (rope_heads) must be in [0, num_heads="
                       f"{cfg.num_heads}], got {cfg.pe_options.heads}")
    if cfg.head_dim % 2:
      raise ValueError(f"rotary PE {self.name!r} needs an even head_dim; "
                       f"d_model/num_heads = {cfg.head_dim}")

  def fraction(self, cfg) -> Optional[float]:
    """p-RoPE's share of rotating pairs (default 0.75); None = every pair."""
    if not self.fraction_option:
      return None
    return cfg.pe_options.fraction

  def qk_transform(self, cfg):
    return Rotation(base=cfg.rope_base, scaling=cfg.rope_scaling_spec,
                    fraction=self.fraction(cfg), pairing=cfg.pairing)

  def rotary_heads(self, cfg):
    return cfg.pe_options.heads if self.partial else cfg.num_heads

  def run_label(self, model):
    if not self.partial:
      return self.name
    return f"{self.name} (k={(model.get('pe_options') or {}).get('heads')})"

  takes_positions = True

  def input_table(self, cfg, params, seq_len, positions=None):
    if self.input_sinusoid:
      return _sinusoid_input(cfg, seq_len, positions)
    return None

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return _phase_coeffs(self.rotary_frequencies(cfg), seq_len)


class XPosEncoding(Rotary):
  """xPos: RoPE with a per-pair exponential scale (queries ζ^n, keys ζ^-m)."""

  def __init__(self):
    super().__init__("xpos", "xPos: RoPE with per-pair decay ζ_i^((n-m)/scale_base) "
                     "(one-sided: keys ahead are amplified in bidirectional attention)")
    self.options_type = XPosOptions
    self.coupling = "multiplicative"  # a Hadamard form, but not unit-modulus
    self.spectral_note = ("xPos' phase factors ζ^(n-m) e^{i(n-m)θ} are not unit-modulus: "
                          "no Schur contraction, and no Hadamard form is checked")

  def qk_transform(self, cfg):
    return XPos(base=cfg.rope_base,
                gamma=cfg.pe_options.gamma, scale_base=cfg.pe_options.scale_base,
                scaling=cfg.rope_scaling_spec, pairing=cfg.pairing)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return None
