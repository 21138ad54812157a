"""PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via
Accumulating Householder Transformations", arXiv 2505.16381; reference
fla-org/flash-linear-attention, ``fla/layers/path_attn.py`` and
``fla/ops/path_attn``): the position operator between a query and a key is
the product of data-dependent Householder-like transforms of the tokens in
between -- its pure functions and its registered class.

For a causal head with queries ``q_i``, keys ``k_j`` and, from each token
``x_t``, a unit direction ``w_t`` and a strength ``β_t ∈ (0, 2)``:

    logit(i, j) = q_iᵀ H_i H_{i-1} ⋯ H_{j+1} k_j / √d,   H_t = I - β_t w_t w_tᵀ,

for ``j <= i`` (the empty product at ``j = i``). Written as the reference's
KV cache does it: when token ``t`` arrives every cached key ``k_j`` (``j < t``)
becomes ``H_t k_j``. Here the whole ``[n, n]`` matrix is computed at once by the
UT transform of the paper's section 3 (one block as long as the sequence):
``lower(Q Kᵀ) - lower(Q Wᵀ) T⁻¹ strictLower(W Kᵀ)`` with
``T⁻¹ = (I + strictLower(D W Wᵀ))⁻¹ D``, ``D = diag(β)`` -- a triangular
solve, ``O(n² d + n³)`` per head: right for this project's sequences (tens to
hundreds of tokens); the paper's blockwise kernel is what makes it linear in
memory at thousands.

Why written here: no JAX library has PaTH (fla is PyTorch/Triton).
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from pe_spectral.pe.base import Kind, PositionalEncoding, _int_field

__all__ = ["path_directions", "path_betas", "path_correction", "path_transport",
           "PaTHOptions", "PaTH"]


def path_directions(x: jax.Array, w_down: jax.Array, w_up: jax.Array, conv: jax.Array,
                    heads: int, eps: float = 1e-6) -> jax.Array:
  """The reference's Householder directions ``[batch, seq, heads, d]``: a
  low-rank projection ``x W_down W_up`` (no biases), a causal depthwise
  convolution of width ``K`` (``conv [K, heads·d]``; position ``t`` reads
  ``t-K+1 .. t``, zeros before the start; torch's ``Conv1d`` with ``K-1``
  left padding), SiLU, then each head's vector over ``sqrt(|·|² + eps)``
  (a zero vector stays zero: that token's ``H_t`` is the identity).
  ``x``: ``[batch, seq, d_model]``."""
  u = (x @ w_down) @ w_up  # [batch, seq, heads*d]
  width, n = conv.shape[0], u.shape[1]
  padded = jnp.pad(u, ((0, 0), (width - 1, 0), (0, 0)))
  y = sum(conv[s] * padded[:, s:s + n] for s in range(width))
  y = jax.nn.silu(y).reshape(u.shape[:2] + (heads, -1))
  return y * jax.lax.rsqrt(jnp.sum(y * y, axis=-1, keepdims=True) + eps)


def path_betas(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
  """``β_t = 2 σ(x_t w + b)`` ``[batch, seq, heads]`` (the reference's
  ``bt_proj``: "allowing negative eigenvalues", ``1 - β`` in ``(-1, 1)``)."""
  return 2.0 * jax.nn.sigmoid(x @ w + b)


def _unit_lower_inverse(l: jax.Array) -> jax.Array:
  """``(I + l)⁻¹`` for a strictly lower-triangular ``l [..., b, b]`` by the
  finite Neumann series in product form, ``(I - l)(I + l²)(I + l⁴)⋯``
  (exact: ``l^b = 0``); matmuls only, for the small diagonal blocks of
  :func:`_unit_lower_solve` (float32 error ~1e-7 at ``b = 16``; at ``b = 256``
  the powers overflow before they cancel, hence the blocks)."""
  b = l.shape[-1]
  eye = jnp.eye(b, dtype=l.dtype)
  inv, power, reach = eye - l, l @ l, 2
  while reach < b:
    inv, power, reach = inv @ (eye + power), power @ power, 2 * reach
  return inv


def _unit_lower_solve(l: jax.Array, rhs: jax.Array, block: int = 16) -> jax.Array:
  """``x`` with ``(I + l) x = rhs`` (``l`` strictly lower ``[..., n, n]``) by
  forward substitution over blocks of ``block`` rows, each block's diagonal
  inverted by :func:`_unit_lower_inverse`. Matmuls only, differentiated by
  plain autodiff: ``jax.lax.linalg.triangular_solve`` (a LAPACK call on CPU)
  left the ablation program's execution waiting forever under XLA:CPU at
  ``--xla_backend_optimization_level=0`` (jaxlib 0.10; the tests' flags)."""
  n, parts = l.shape[-1], []
  for s in range(0, n, block):
    e = min(s + block, n)
    r = rhs[..., s:e, :]
    if parts:
      r = r - l[..., s:e, :s] @ jnp.concatenate(parts, axis=-2)
    parts.append(_unit_lower_inverse(l[..., s:e, s:e]) @ r)
  return jnp.concatenate(parts, axis=-2)


def path_correction(q: jax.Array, k: jax.Array, w: jax.Array, beta: jax.Array) -> jax.Array:
  """PaTH's logits minus the content logits, unscaled, ``[batch, heads, n, n]``:
  ``q_iᵀ (H_i ⋯ H_{j+1} - I) k_j`` for ``j <= i``, 0 above the diagonal, by the
  UT transform ``-lower(Q Wᵀ) (I + strictLower(D W Wᵀ))⁻¹ D strictLower(W Kᵀ)``.

  Args:
    q, k, w: ``[batch, n, heads, d]`` (``w`` need not be unit: ``H_t = I -
      β_t w_t w_tᵀ`` whatever its norm).
    beta: ``[batch, n, heads]``.

  Computed in float32 at least (a blocked triangular solve); returned in ``q``'s dtype.
  """
  dt = jnp.promote_types(q.dtype, jnp.float32)
  q, k, w, beta = (a.astype(dt) for a in (q, k, w, beta))
  n = q.shape[1]
  lower = jnp.tril(jnp.ones((n, n), dt))
  strict = jnp.tril(jnp.ones((n, n), dt), -1)
  b = jnp.moveaxis(beta, -1, 1)[..., :, None]  # [batch, heads, n, 1]: D's rows
  qw = jnp.einsum("bihd,bshd->bhis", q, w) * lower
  ww = jnp.einsum("bshd,bthd->bhst", w, w)
  wk = jnp.einsum("bthd,bjhd->bhtj", w, k) * strict
  # T⁻¹ strictLower(W Kᵀ) = (I + strictLower(D W Wᵀ))⁻¹ (D strictLower(W Kᵀ))
  solved = _unit_lower_solve(strict * b * ww, b * wk)
  return (-(qw @ solved)).astype(q.dtype)


def path_transport(w: jax.Array, beta: jax.Array) -> jax.Array:
  """The dense position operators ``P[i, j] = H_i ⋯ H_{j+1}`` (identity for
  ``j >= i``) of one head, ``[n, n, d, d]``, from ``w [n, d]`` and ``beta [n]``
  -- ``O(n² d²)`` memory, for the spectral view of short sequences: each
  ``H_t`` has eigenvalues 1 (``d-1`` times) and ``1 - β_t``, so with unit
  ``w_t`` every ``P[i, j]`` has spectral norm ≤ 1 (a contraction, not a
  rotation: orthogonal only at ``β = 2``)."""
  n, d = w.shape
  eye = jnp.eye(d, dtype=w.dtype)
  h = eye - beta[:, None, None] * w[:, :, None] * w[:, None, :]  # [n, d, d]

  def row(i):
    # P[i, j] for j = i, i-1, ..., 0: P[i, j-1] = P[i, j] H_j
    def step(p, j):
      nxt = jnp.where(j < i, p @ h[jnp.minimum(j + 1, n - 1)], p)
      return nxt, nxt
    _, ps = jax.lax.scan(step, eye, jnp.arange(n - 1, -1, -1))
    return ps[::-1]  # [n (j), d, d]

  # P[i, j] = H_i ⋯ H_{j+1}: going from j+1 down, each step multiplies on the right
  return jax.vmap(row)(jnp.arange(n))


@dataclasses.dataclass(frozen=True)
class PaTHOptions:
  """``path``: the direction projection's rank (the reference's 32) and the
  width of its causal short convolution (the reference's 3; 1 is none)."""
  rank: int = 32
  conv: int = 3

  def __post_init__(self):
    _int_field(self, "rank", 1)
    _int_field(self, "conv", 1)


class PaTH(PositionalEncoding):
  """PaTH (:func:`path_correction`): the logit between query ``i`` and key
  ``j`` is ``q_iᵀ H_i ⋯ H_{j+1} k_j / √d`` with ``H_t = I - β_t w_t w_tᵀ``
  computed from each layer's (normed) input as the reference does: ``w_t``
  a rank-32 projection, a causal width-3 depthwise convolution, SiLU and
  unit norm per head (:func:`path_directions`), ``β_t = 2σ(x_t u + b)``
  per head (:func:`path_betas`). No position index enters: order comes from
  the product over the tokens between, so it is defined causally only.
  With every ``w_t = 0`` it is NoPE; with one fixed ``w`` and ``β`` it is
  ``q·k - (1 - (1-β)^{i-j}) (q·w)(w·k)``: a lower-triangular Toeplitz factor
  on a rank-one content Gram. The reference's optional forget gate (PaTH-FoX)
  and QK-norm are not part of it. Projections initialised as torch's
  ``Linear`` (uniform ``±1/√fan_in``), the convolution as torch's ``Conv1d``
  (``±1/√K``)."""
  name = "path"
  description = ("PaTH: q_iᵀ H_i⋯H_{j+1} k_j, H_t = I - β_t w_t w_tᵀ from each token "
                 "(accumulated Householder transforms; causal)")
  coupling = "content_multiplicative"
  kinds = (Kind.CONTEXTUAL,)
  attention = ("causal",)
  bias_reads_input = True
  options_type = PaTHOptions
  spectral_note = ("path's position operator H_i⋯H_{j+1} depends on the tokens between "
                   "query and key: no Toeplitz form; each H_t is a contraction (eigenvalues "
                   "1 and 1-β_t, |1-β_t| < 1), so |logit| <= |q_i||k_j|/√d per head "
                   "(docs/spectral.md)")

  def layer_params(self, cfg, next_key):
    o = cfg.pe_options
    dm, hd = cfg.d_model, cfg.num_heads * cfg.head_dim
    u = lambda shape, fan_in: jax.random.uniform(next_key(), shape, minval=-1 / math.sqrt(fan_in),
                                                 maxval=1 / math.sqrt(fan_in))
    return {"path_w_down": u((dm, o.rank), dm), "path_w_up": u((o.rank, hd), o.rank),
            "path_conv": u((o.conv, hd), o.conv),
            "path_beta_w": u((dm, cfg.num_heads), dm), "path_beta_b": u((cfg.num_heads,), dm)}

  def transforms(self, cfg, params, x):
    """``(w [batch, seq, heads, d], β [batch, seq, heads])`` of one layer
    from its normed input ``x``."""
    x = x.astype(jnp.float32)
    w = path_directions(x, params["path_w_down"], params["path_w_up"], params["path_conv"],
                        cfg.num_heads)
    return w, path_betas(x, params["path_beta_w"], params["path_beta_b"])

  def content_bias(self, cfg, params, q, k, mask, x=None):
    if x is None:
      raise ValueError("path's logit term needs the layer's input x")
    w, beta = self.transforms(cfg, params, x)
    return path_correction(q, k, w, beta) / math.sqrt(q.shape[-1])
