"""PEs with a layer's own q/k transform or content-dependent position terms:
CoPE (contextual positions), PoPE (softplus magnitudes), ``rope_learned``
(trained frequencies), ComRoPE (trained commuting rotation generators),
``alibi_data`` (forget-gate biases) and CARoPE (token-dependent frequencies)
-- their functions and registered classes together."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.pe.base import (
  Kind,
  PositionalEncoding,
  _check_base,
  _check_count,
  _float_field,
  _int_field,
  inv_softplus,
)
from pe_spectral.pe.biases import alibi_bias, alibi_slopes
from pe_spectral.pe.rotary import rope_inverse_frequencies, rotate

__all__ = [
    "cope_positions", "cope_bias", "POPE_PHASE_RANGE", "pope_frequencies", "pope_transform",
    "forget_gate_bias", "carope_frequency", "carope_phases", "CoPEOptions", "PoPEOptions",
    "AlibiDataOptions", "CoPE", "PoPE", "RopeLearned", "AlibiData", "CARoPE",
    "comrope_generators", "comrope_rotations", "comrope_angles", "ComRoPEOptions", "ComRoPE",
    "dape_term", "DAPEOptions", "DAPE"
]


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


@dataclasses.dataclass(frozen=True)
class CoPEOptions:
  """``cope``: the number of position embeddings; None: ``max_len``
  (contextual positions are clipped below it)."""
  positions: Optional[int] = None

  def __post_init__(self):
    _int_field(self, "positions", 2)


@dataclasses.dataclass(frozen=True)
class PoPEOptions:
  """``pope``: ``learned_phase``, a trained per-layer, per-head, per-channel key
  phase bias ``δ`` (initialised at 0, kept in [-2π, 0]); False fixes ``δ = 0``."""
  learned_phase: bool = True

  def __post_init__(self):
    if not isinstance(self.learned_phase, bool):
      raise ValueError(f"PoPEOptions.learned_phase must be True or False, got "
                       f"{self.learned_phase!r}")


@dataclasses.dataclass(frozen=True)
class AlibiDataOptions:
  """``alibi_data``: ``gate_bias_init``, the forget gates' initial bias (5, as
  x-transformers: ``log σ(5) ≈ -0.0067`` per token, almost no decay at first)."""
  gate_bias_init: float = 5.0

  def __post_init__(self):
    _float_field(self, "gate_bias_init", math.isfinite, "a finite number")


class CoPE(PositionalEncoding):
  name = "cope"
  description = ("CoPE: q_i·e[p_ij] with contextual positions p_ij = gated counts "
                 "σ(q·k) between key and query, interpolated e (per layer)")
  options_type = CoPEOptions
  kinds = (Kind.CONTEXTUAL,)
  spectral_note = ("CoPE's positions are gated counts of the content (σ(q·k)): the "
                   "position term depends on the tokens, so it has no Toeplitz form")

  def npos(self, cfg) -> int:
    return cfg.pe_options.positions or cfg.max_len

  def layer_params(self, cfg, next_key):
    # zero, as the paper: a CoPE model starts as NoPE and learns its table
    return {"cope_pos_emb": jnp.zeros((self.npos(cfg), cfg.head_dim))}

  def content_bias(self, cfg, params, q, k, mask):
    return cope_bias(q, k, params["cope_pos_emb"], scale=1.0 / math.sqrt(q.shape[-1]),
                       mask=mask, causal=cfg.causal)


class PoPE(PositionalEncoding):
  """PoPE (Gopalakrishnan et al. 2025, arXiv 2509.10534): polar coordinates.

  Each query/key channel ``c`` of a ``d``-wide head is ``softplus(x_c)
  e^{i pos θ_c}`` (``d`` frequencies ``θ_c = base^(-c/d)``), keys with an
  extra learned phase ``δ_c`` per layer and head; the logit is
  ``Σ_c softplus(q_c) softplus(k_c) cos((j-i) θ_c + δ_c) / sqrt(d)``
  (:func:`positional.pope_transform`). Per channel a Hadamard product of a
  non-negative rank-one content term with a Toeplitz cosine: position and
  content are coupled multiplicatively, but the content can no longer turn
  the phase. Scale ``1/sqrt(d)`` of the head width, as the reference."""
  name = "pope"
  description = ("PoPE: softplus(q_c) softplus(k_c) cos((j-i) θ_c + δ_c), d frequencies, "
                 "learned key phase δ (polar coordinates)")
  coupling = "content_multiplicative"
  kinds = (Kind.DYNAMIC,)
  bilinear_logits = False
  options_type = PoPEOptions
  reads = ("rope_base",)
  takes_positions = True
  spectral_note = ("PoPE's channel c is D_q T_c D_k with content-dependent non-negative "
                   "diagonals D: no Toeplitz form of the logits; for q = k Ostrowski bounds "
                   "each channel's eigenvalues by T_c's times the extremes of D² "
                   "(docs/spectral.md)")

  def frequencies(self, cfg) -> np.ndarray:
    return pope_frequencies(cfg.head_dim, cfg.rope_base)

  def frequency_count(self, cfg):
    return cfg.head_dim

  def layer_params(self, cfg, next_key):
    if not cfg.pe_options.learned_phase:
      return {}
    return {"pope_phase": jnp.zeros((cfg.num_heads, cfg.head_dim))}

  def layer_qk(self, cfg, params, q, k, positions, freq_mask=None):
    theta = jnp.asarray(self.frequencies(cfg), jnp.float32)
    if freq_mask is not None:
      theta = theta * freq_mask  # [heads, d]
    return pope_transform(q, k, positions, theta, params.get("pope_phase"))

  def logit_scale(self, cfg):
    return 1.0 / math.sqrt(cfg.head_dim)


class _RotaryPairs(PositionalEncoding):
  """A ``dynamic`` PE that turns RoPE's ``head_dim/2`` pairs and starts from
  RoPE's frequencies (rope_learned, carope): the even-width check, the
  frequency count a mask switches, and the initial frequencies."""
  kinds = (Kind.DYNAMIC,)
  reads = ("rope_base",)

  def validate(self, cfg):
    if cfg.head_dim % 2:
      raise ValueError(f"{self.name} needs an even head_dim; d_model/num_heads = "
                       f"{cfg.head_dim}")

  def frequency_count(self, cfg):
    return cfg.head_dim // 2

  def frequencies(self, cfg) -> np.ndarray:
    """RoPE's ``[head_dim/2]`` frequencies: every head's at initialisation."""
    return rope_inverse_frequencies(cfg.head_dim, cfg.rope_base)


class RopeLearned(_RotaryPairs):
  """RoPE with trainable per-layer, per-head frequencies ``θ_{h,j}``,
  initialised at RoPE's (the one-dimensional form of LieRE / ComRoPE /
  STRING, whose extra rotation the query/key projections absorb). The phases
  stay content-free, so each head's logits keep the Hadamard form with a
  unit-modulus Toeplitz phase matrix; only the spectrum moves in training."""
  name = "rope_learned"
  description = "RoPE with trained per-layer per-head frequencies θ (initialised at RoPE's)"
  coupling = "multiplicative"
  frequency_param = "rope_theta"
  takes_positions = True
  toeplitz_label = "Re of each head's phase matrix at its trained θ_1"

  def layer_params(self, cfg, next_key):
    theta = jnp.asarray(self.frequencies(cfg), jnp.float32)
    return {"rope_theta": jnp.tile(theta, (cfg.num_heads, 1))}

  def layer_qk(self, cfg, params, q, k, positions, freq_mask=None):
    theta = params["rope_theta"]  # [heads, d/2]
    if freq_mask is not None:
      theta = theta * freq_mask
    angles = jnp.asarray(positions, jnp.float32)[..., None] * theta
    return (rotate(q, angles).astype(q.dtype), rotate(k, angles).astype(k.dtype))

  def toeplitz_coeffs(self, cfg, params, seq_len):
    k = jnp.arange(-(seq_len - 1), seq_len, dtype=jnp.float32)
    theta = params["rope_theta"][..., 1]  # [..., heads]
    return jnp.cos(k * theta[..., None])


def comrope_generators(p: jax.Array, scale: jax.Array) -> jax.Array:
  """ComRoPE-LD's angle matrices (Yu et al. 2025, arXiv 2506.03737; the
  reference code's ``ComRoPELDAttention``) for one position axis:
  ``A_{h,j} = s_j (P_{h,j} - P_{h,j}^T)``, skew-symmetric ``b x b`` blocks.

  Args:
    p: ``[..., heads, blocks, b, b]`` trained matrices.
    scale: ``[..., blocks]`` trained multipliers, shared by the heads.
  """
  return (p - jnp.swapaxes(p, -1, -2)) * scale[..., None, :, None, None]


def comrope_rotations(generators: jax.Array, positions: jax.Array) -> jax.Array:
  """``R(x) = exp(x A)`` per position: ``[seq, heads, blocks, b, b]`` from
  generators ``[heads, blocks, b, b]`` and positions ``[seq]`` (orthogonal:
  ``A`` is skew). Blocks commute (block-diagonal), so ``R(x)^T R(y) =
  exp((y - x) A)``: the logits depend on positions only through their
  difference."""
  x = jnp.asarray(positions, jnp.float32)[:, None, None, None, None]
  return jax.scipy.linalg.expm(x * generators[None])


def comrope_angles(generators: jax.Array) -> jax.Array:
  """The rotation angles per unit position of each block: the eigenvalues of a
  real skew-symmetric ``A`` are ``±iω``, those of the Hermitian ``iA`` are
  ``∓ω`` (read with one Hermitian solver, to the absolute precision of ``A``
  itself; ``-A²`` would square it away for the slow angles). ``[..., blocks,
  b]`` ascending, each ``ω`` twice (odd ``b`` adds a 0)."""
  return jnp.sort(jnp.abs(jnp.linalg.eigvalsh(1j * generators)), axis=-1)


@dataclasses.dataclass(frozen=True)
class ComRoPEOptions:
  """``comrope``: the generators' block width ``b`` (``head_dim`` must be a
  multiple; 2 is a learned-frequency RoPE; default 4 where it divides
  ``head_dim``, else 2) and the trained matrices' initial standard deviation
  (the reference's ``init_std``; its multipliers start ``N(0, 1)``)."""
  block: Optional[int] = None
  init_std: float = 1.0

  def __post_init__(self):
    if self.block is not None:
      _int_field(self, "block", 2)
    _float_field(self, "init_std", lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


class ComRoPE(PositionalEncoding):
  """ComRoPE-LD on token positions (Yu et al. 2025, "ComRoPE: Scalable and
  Robust Rotary Position Embedding Parameterized by Trainable Commuting Angle
  Matrices", arXiv 2506.03737; reference Longin-Yu/ComRoPE): each head's
  query and key are cut into blocks of width ``b`` and block ``j`` is turned
  by ``exp(x A_{h,j})``, ``A = s_j (P - Pᵀ)`` trained per layer (``P`` per
  head, ``s`` shared by the heads). The reference normalises image
  coordinates into [0, 1]; here ``x`` is the token position over ``max_len``
  (a relative encoding: only differences matter). With ``b = 2`` it is RoPE
  with the trained frequencies ``s_j (P_10 - P_01)``; a wider block is RoPE in
  a trained orthogonal basis of the block (``A = U diag(ω) Uᵀ``, which the
  query/key projections could absorb in one dimension: the class of
  functions is ``rope_learned``'s, the parametrisation and training differ).
  The logits are Toeplitz per head at the angles :func:`comrope_angles`."""
  name = "comrope"
  description = ("ComRoPE: blocks of q/k turned by exp(x·A), trained commuting skew "
                 "generators A = s(P - Pᵀ) per layer and head (LieRE/STRING family)")
  coupling = "multiplicative"
  kinds = (Kind.DYNAMIC,)
  options_type = ComRoPEOptions
  takes_positions = True
  toeplitz_label = "Re of each head's phase matrix at its slowest trained angle"

  def complete_options(self, cfg, options):
    if options.block is None:
      return dataclasses.replace(options, block=4 if cfg.head_dim % 4 == 0 else 2)
    return options

  def validate(self, cfg):
    b = cfg.pe_options.block
    if cfg.head_dim % b:
      raise ValueError(f"comrope's block ({b}) must divide head_dim = d_model/num_heads = "
                       f"{cfg.head_dim}")

  def _blocks(self, cfg) -> int:
    return cfg.head_dim // cfg.pe_options.block

  def layer_params(self, cfg, next_key):
    b, n = cfg.pe_options.block, self._blocks(cfg)
    return {"comrope_p": cfg.pe_options.init_std
            * jax.random.normal(next_key(), (cfg.num_heads, n, b, b)),
            "comrope_scale": jax.random.normal(next_key(), (n,))}

  def generators(self, params) -> jax.Array:
    """``[..., heads, blocks, b, b]``: one layer's angle matrices."""
    return comrope_generators(params["comrope_p"], params["comrope_scale"])

  def layer_qk(self, cfg, params, q, k, positions, freq_mask=None):
    a = self.generators(params)
    pos = jnp.asarray(positions, jnp.float32).reshape(-1) / cfg.max_len  # [seq]
    rot = comrope_rotations(a, pos)  # [seq, heads, blocks, b, b]
    b = cfg.pe_options.block

    def turn(x):
      xb = x.reshape(x.shape[:-1] + (x.shape[-1] // b, b))  # [batch, seq, heads, blocks, b]
      out = jnp.einsum("shnij,bshnj->bshni", rot.astype(x.dtype), xb)
      return out.reshape(x.shape)

    return turn(q), turn(k)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    # each block is RoPE in its own orthogonal basis: its phase matrices are
    # cos((i - j) ω / max_len) at the block's angles; the slowest one's, as
    # rope_learned reports θ_1
    k = jnp.arange(-(seq_len - 1), seq_len, dtype=jnp.float32)
    w = comrope_angles(self.generators(params))  # [..., heads, blocks, b]
    slowest = jnp.min(jnp.where(w > 0, w, jnp.inf), axis=(-2, -1))
    slowest = jnp.where(jnp.isfinite(slowest), slowest, 0.0) / cfg.max_len
    return jnp.cos(k * slowest[..., None])


def dape_term(logits: jax.Array, bias: jax.Array, w1, b1, w2, b2) -> jax.Array:
  """DAPE's learned term (Zheng et al. 2024, arXiv 2405.14722; the reference
  code's ``AliBi_DAPE``): at every (query, key) an MLP over the heads'
  content logits and static biases together, ``Linear(2H -> W)``,
  LeakyReLU (slope 0.01, torch's default), ``Linear(W -> H)``.

  Args:
    logits: ``[batch, heads, q, k]`` content logits ``q·k/√d``.
    bias: ``[heads, q, k]`` the static bias (ALiBi).
    w1, b1, w2, b2: ``[2H, W]``, ``[W]``, ``[W, H]``, ``[H]``.

  Returns ``[batch, heads, q, k]``; the logits are ``logits + bias + term``.
  """
  both = jnp.concatenate([logits, jnp.broadcast_to(bias, logits.shape)], axis=1)
  hidden = jax.nn.leaky_relu(jnp.einsum("bcqk,cw->bqkw", both, w1) + b1, 0.01)
  return jnp.moveaxis(hidden @ w2 + b2, -1, 1)


@dataclasses.dataclass(frozen=True)
class DAPEOptions:
  """``dape``: the MLP's hidden width (the reference's ``mlp_width``, 32)."""
  width: int = 32

  def __post_init__(self):
    _int_field(self, "width", 1)


class DAPE(PositionalEncoding):
  """DAPE, data-adaptive positional encoding (Zheng et al. 2024, "DAPE:
  Data-Adaptive Positional Encoding for Length Extrapolation", arXiv
  2405.14722; reference chuanyang-Zheng/DAPE, ``AliBi_DAPE``): ALiBi's bias
  ``B`` (Press et al.'s slopes) plus, per layer, an MLP of the content logits
  and ``B`` across the heads at every (query, key) (:func:`dape_term`). The
  position term depends on the content: no Toeplitz form. With a zero MLP it
  is ALiBi. Bidirectionally ``B`` is the symmetric ``-m|i - j|``; causally
  the paper's lower triangle. MLP layers initialised as torch's ``Linear``."""
  name = "dape"
  description = ("DAPE: ALiBi's bias plus a per-layer MLP over the heads' content "
                 "logits and that bias at each (query, key)")
  coupling = "content_additive"
  kinds = (Kind.BIAS, Kind.CONTEXTUAL)
  options_type = DAPEOptions
  spectral_note = ("dape's learned term is an MLP of the content logits: no Toeplitz form "
                   "(ALiBi's bias alone when the MLP is zero)")

  def layer_params(self, cfg, next_key):
    h, w = cfg.num_heads, cfg.pe_options.width
    lim1, lim2 = 1.0 / math.sqrt(2 * h), 1.0 / math.sqrt(w)
    u = lambda shape, lim: jax.random.uniform(next_key(), shape, minval=-lim, maxval=lim)
    return {"dape_w1": u((2 * h, w), lim1), "dape_b1": u((w,), lim1),
            "dape_w2": u((w, h), lim2), "dape_b2": u((h,), lim2)}

  def bias(self, cfg, params, seq_len, positions=None):
    return alibi_bias(seq_len, alibi_slopes(cfg.num_heads), causal=cfg.causal)

  def content_bias(self, cfg, params, q, k, mask):
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    static = self.bias(cfg, params, q.shape[1]).astype(logits.dtype)
    return dape_term(logits, static, params["dape_w1"], params["dape_b1"],
                     params["dape_w2"], params["dape_b2"]).astype(logits.dtype)


class AlibiData(PositionalEncoding):
  """Data-dependent ALiBi (forgetting attention, Lin et al. 2025, "Forgetting
  Transformer"; x-transformers' ``DataDependentAlibi``): forget gates
  ``f_t = σ(w_h·x_t + b_h)`` from each layer's (normed) input, and the bias
  ``Σ log f_t`` over the tokens between query and key
  (:func:`positional.forget_gate_bias`); bidirectional attention has a second
  gate set for keys ahead. ALiBi whose slope the tokens set: with constant
  gates it is ALiBi with slope ``-log f``. Gate weights ``N(0, 1/d_model)``."""
  name = "alibi_data"
  description = ("data-dependent ALiBi: sum of log forget gates σ(w·x_t + b) between "
                 "query and key (forgetting attention)")
  coupling = "content_additive"
  kinds = (Kind.GATED,)
  options_type = AlibiDataOptions
  spectral_note = ("alibi_data's bias sums gates computed from the tokens: it has no "
                   "Toeplitz form (ALiBi's only when the gates are constant)")

  def gates(self, cfg) -> int:
    return cfg.num_heads * (1 if cfg.causal else 2)

  def layer_params(self, cfg, next_key):
    g = self.gates(cfg)
    return {"gate_w": jax.random.normal(next_key(), (cfg.d_model, g)) / math.sqrt(cfg.d_model),
            "gate_b": jnp.full((g,), cfg.pe_options.gate_bias_init)}

  def gate_bias(self, cfg, params, x, mask=None):
    logits = x.astype(jnp.float32) @ params["gate_w"] + params["gate_b"]
    return forget_gate_bias(jax.nn.log_sigmoid(logits), causal=cfg.causal)


class CARoPE(_RotaryPairs):
  """CARoPE (Veisi et al. 2025, arXiv 2507.23083): RoPE whose base frequency
  each token sets, per head. ``f(x_t)_h = 1 / (softplus(x_t W + b)_h + 1)``
  from the layer's (normed) input, and pair ``i`` of head ``h`` turned by
  the accumulated phase ``φ_i^(h)(m) = Σ_{t<=m} f(x_t)_h^i``
  (:func:`positional.carope_phases`). With every ``f = θ_1 = base^(-2/d)``
  it is RoPE. The phase between a query and a key sums the tokens between
  them, so the logits are a Hadamard product with a content-dependent phase
  matrix: no Toeplitz form.

  The paper's ``W`` has no bias and the paper says CARoPE starts from RoPE
  without saying how; here ``W = 0`` and a per-head bias
  ``b = softplus⁻¹(1/θ_1 - 1)`` make step 0 exactly RoPE (the bias is this
  codebase's addition)."""
  name = "carope"
  description = ("CARoPE: RoPE with per-token per-head base f(x_t) = 1/(softplus(x_t W + b) + 1), "
                 "phases Σ_{t<=m} f(x_t)^i (context-aware)")
  coupling = "content_multiplicative"
  qk_reads_input = True
  spectral_note = ("CARoPE's phase between two tokens sums f(x_t)^i over the tokens between "
                   "them: the phase matrix depends on the content, so it has no Toeplitz "
                   "form (RoPE's only when f is constant)")

  def layer_params(self, cfg, next_key):
    theta1 = cfg.rope_base ** (-2.0 / cfg.head_dim)  # RoPE's ratio θ_{i+1}/θ_i
    return {"carope_w": jnp.zeros((cfg.d_model, cfg.num_heads)),
            "carope_b": jnp.full((cfg.num_heads,), inv_softplus(1.0 / theta1 - 1.0))}

  def layer_qk(self, cfg, params, q, k, positions, freq_mask=None, x=None):
    if x is None:
      raise ValueError("carope's q/k transform needs the layer's input x")
    f = carope_frequency(x, params["carope_w"], params["carope_b"])
    angles = carope_phases(f, positions, cfg.head_dim // 2, freq_mask)
    return (rotate(q, angles).astype(q.dtype), rotate(k, angles).astype(k.dtype))
