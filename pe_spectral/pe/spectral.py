"""Spectral tools for attention logits: Toeplitz bounds, Hadamard/Weyl bounds, PE closed forms.

Everything is a pure ``jax.numpy`` function: no Python branching on traced
values, shape-defining arguments static, leading batch axes and ``jax.vmap``
supported, float32/complex64 by default and float64 when x64 is enabled.
The mathematics (statements, proofs, oracles, float32 tolerances) is in
docs/spectral.md; the section names below refer to it.

Conventions. ``T = [t_{i-j}]``; the canonical array is ``coeffs`` of length
``2n-1`` with ``coeffs[k + n - 1] = t_k``, ``k = -(n-1) .. n-1``. The first
column is ``(t_0, .., t_{n-1})``, the first row ``(t_0, t_{-1}, ..)`` (as
``scipy.linalg.toeplitz(c, r)``). Eigenvalues are returned in ascending order.

What the bounds do and do not say (docs/spectral.md, "Hadamard products and RoPE"):

* A Hadamard product with a correlation matrix ``C`` (PSD, unit diagonal)
  *contracts* the spectrum in the majorisation sense: ``λ(A∘C) ≺ λ(A)``.
* But a single RoPE frequency ``G_θ = u u*`` with ``|u_m| = 1`` is a unitary
  similarity: ``A∘G_θ = D A D*`` keeps the spectrum exactly -- no contraction.
* The provable envelope of the full RoPE logit (Theorem 6, :func:`rope_envelope`)
  does not depend on θ: it is the same for RoPE and for no PE. Whether RoPE
  actually contracts relative to NoPE depends on the content (Prop. 8: about
  equal for isotropic content, smaller for persistent content, *larger* for
  content that counter-rotates with position).
* Additive PEs can provably widen the spread (Weyl lower bound); symmetric
  ALiBi has ``spread ≈ 0.55 m n²`` (:func:`alibi_extreme_eigs`).
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.pe import absolute, biases, rotary
from pe_spectral.pe.absolute import sinusoidal_gram_coeffs  # noqa: F401  (its closed form lives with it)
from pe_spectral.pe.biases import ALIBI_B, alibi_extreme_eigs  # noqa: F401  (likewise)

__all__ = [
    "pope_cosine_eigs", "pope_symmetric_bounds", "pope_norm_bound", "frequency_drift",
    # Toeplitz core
    "toeplitz", "toeplitz_coeffs", "toeplitz_from_coeffs", "toeplitz_matvec",
    "make_toeplitz_matvec",
    "symbol", "symbol_grid", "toeplitz_eig_bounds", "toeplitz_gershgorin_bounds",
    "gershgorin_bounds", "gershgorin_discs", "power_iteration", "lanczos", "lanczos_ritz",
    # bounds
    "hadamard_bounds", "hadamard_bounds_dense", "hadamard_norm_bound",
    "weyl_bounds", "spread_bounds",
    # PE constructors and closed forms
    "rope_frequencies", "rope_toeplitz", "rope_rotate", "rope_logits",
    "rope_envelope", "rope_min_base", "alibi_toeplitz", "alibi_extreme_eigs", "t5_bias_coeffs",
    "sinusoidal_pe", "sinusoidal_gram_coeffs", "sinusoidal_gram",
    # measures
    "spectral_spread", "condition_number", "stable_rank", "contraction_ratio",
    "hadamard_contraction_ratio", "majorization_gap", "symmetric_part",
    "hermitian_part", "row_center", "row_range", "toeplitz_projection",
    "toeplitz_defect", "numerical_range_support", "synthetic_content",
]

def _n_from_coeffs(coeffs) -> int:
  m = coeffs.shape[-1]
  if m % 2 == 0:
    raise ValueError(f"coeffs must have odd length 2n-1, got {m}")
  return (m + 1) // 2


def _checked_hermitian(coeffs) -> jax.Array:
  """``coeffs`` as a float/complex array ``[..., 2n-1]``, refusing what
  ``toeplitz_eig_bounds`` cannot bound: a scalar, NaN/inf, and (for concrete
  values; under ``jit``/``vmap`` the values are not visible and are not
  checked) coefficients that are not Hermitian, ``t_{-k} != conj(t_k)``."""
  coeffs = jnp.asarray(coeffs)
  if coeffs.ndim == 0:
    raise ValueError("coeffs must have shape [..., 2n-1], got a scalar")
  if not jnp.issubdtype(coeffs.dtype, jnp.inexact):
    coeffs = coeffs.astype(jnp.float32)
  _n_from_coeffs(coeffs)
  if isinstance(coeffs, jax.core.Tracer):
    return coeffs
  c = np.asarray(coeffs)
  if not np.isfinite(c).all():
    raise ValueError("coeffs contain NaN or inf: no eigenvalue bound exists")
  tol = 16 * np.finfo(np.real(c).dtype).eps * max(1.0, float(np.abs(c).max()))
  if np.abs(c[..., ::-1] - np.conj(c)).max(initial=0.0) > tol:
    raise ValueError(
        "coeffs are not Hermitian (t_{-k} != conj(t_k)), so T is not Hermitian and "
        "its eigenvalues need not be real; bound a general matrix with "
        "gershgorin_discs, or pass (coeffs + conj(flip(coeffs))) / 2 for the "
        "Hermitian part")
  return coeffs


def _complex_dtype(x):
  return jnp.result_type(x, jnp.complex64)


# ----------------------------------------------------------------------------
# Toeplitz core (docs/spectral.md, "Toeplitz bounds")
# ----------------------------------------------------------------------------

def toeplitz_coeffs(first_col, first_row=None):
  """``coeffs[..., k + n - 1] = t_k`` from the first column/row (row[0] ignored).

  ``first_row=None`` means ``conj(first_col)`` (Hermitian).
  """
  first_col = jnp.asarray(first_col)
  if first_row is None:
    first_row = jnp.conj(first_col)
  first_row = jnp.asarray(first_row)
  return jnp.concatenate([jnp.flip(first_row[..., 1:], -1), first_col], axis=-1)


def toeplitz_from_coeffs(coeffs):
  """Dense ``[..., n, n]`` Toeplitz matrix with ``T[i, j] = coeffs[i - j + n - 1]``."""
  coeffs = jnp.asarray(coeffs)
  n = _n_from_coeffs(coeffs)
  i = jnp.arange(n)
  return coeffs[..., i[:, None] - i[None, :] + n - 1]


def toeplitz(first_col, first_row=None):
  """Dense Toeplitz matrix; agrees with ``scipy.linalg.toeplitz(c, r)``."""
  return toeplitz_from_coeffs(toeplitz_coeffs(first_col, first_row))


def _default_points(n: int) -> int:
  return 1 << (2 * n - 2).bit_length()  # next power of two >= 2n-1


def _check_points(n: int, num_points: int) -> int:
  if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)):
    raise TypeError(f"num_points must be an int, got {num_points!r}")
  if num_points < 2 * n - 1:
    raise ValueError(
        f"num_points={num_points} < 2n-1={2 * n - 1}: the circulant embedding "
        f"would alias coefficients (docs/spectral.md, circulant enclosure)")
  return num_points


def _circulant_column(coeffs, num_points: int):
  """c with c_k = t_k (k >= 0), c_{M-k} = t_{-k}, zeros in between."""
  n = _n_from_coeffs(coeffs)
  pos = coeffs[..., n - 1:]             # t_0 .. t_{n-1}
  neg = jnp.flip(coeffs[..., :n - 1], -1)  # t_{-1} .. t_{-(n-1)}
  zeros = jnp.zeros(coeffs.shape[:-1] + (num_points - 2 * n + 1,), coeffs.dtype)
  return jnp.concatenate([pos, zeros, jnp.flip(neg, -1)], axis=-1)


def make_toeplitz_matvec(first_col, first_row=None, *,
                         num_points: Optional[int] = None) -> Callable:
  """Returns ``x -> T @ x`` with the circulant's FFT computed once (for Krylov loops).

  Same contract as :func:`toeplitz_matvec`; real inputs use real FFTs.
  """
  first_col = jnp.asarray(first_col)
  n = first_col.shape[-1]
  m = _check_points(n, num_points or _default_points(n))
  coeffs = toeplitz_coeffs(first_col, first_row)
  c = _circulant_column(coeffs, m)
  complex_t = jnp.iscomplexobj(coeffs)
  spec = jnp.fft.fft(c) if complex_t else jnp.fft.rfft(c)

  def matvec(x):
    x = jnp.asarray(x)
    xp = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (m - n,), x.dtype)], -1)
    if complex_t or jnp.iscomplexobj(x):
      full = jnp.fft.fft(c) if not complex_t else spec
      return jnp.fft.ifft(full * jnp.fft.fft(xp))[..., :n]
    y = jnp.fft.irfft(spec * jnp.fft.rfft(xp), n=m)[..., :n]
    return y.astype(jnp.result_type(coeffs, x))

  return matvec


def toeplitz_matvec(first_col, x, first_row=None, *, num_points: Optional[int] = None):
  """``T @ x`` in O(M log M) by circulant embedding; works for non-Hermitian T.

  Args:
    first_col, first_row: as :func:`toeplitz` (``first_row=None``: Hermitian).
    x: ``[..., n]``.
    num_points: circulant size M >= 2n-1 (default next power of two); smaller
      raises ``ValueError``.
  Returns ``[..., n]``, real when all inputs are real. For many products with
  the same matrix use :func:`make_toeplitz_matvec`.
  """
  return make_toeplitz_matvec(first_col, first_row, num_points=num_points)(x)


def symbol_grid(num_points: int):
  """Grid ``ω_m = 2πm/M``, ``m = 0..M-1``."""
  return 2.0 * jnp.pi * jnp.arange(num_points) / num_points


def symbol(coeffs, num_points: Optional[int] = None):
  """Values ``f_n(ω_m) = Σ_k t_k e^{ikω_m}`` on the grid of ``M`` points (default 2n).

  Real (up to rounding) for Hermitian coefficients. Returns complex ``[..., M]``.
  """
  coeffs = jnp.asarray(coeffs)
  n = _n_from_coeffs(coeffs)
  m = _check_points(n, 2 * n if num_points is None else num_points)
  c = _circulant_column(coeffs, m).astype(_complex_dtype(coeffs))
  return m * jnp.fft.ifft(c)


def _eps(x) -> float:
  return float(jnp.finfo(jnp.real(jnp.zeros((), x.dtype)).dtype).eps)


def toeplitz_eig_bounds(coeffs, num_points: Union[None, int, Sequence[int]] = None,
                        *, fp_margin: bool = True):
  """Guaranteed ``lo <= λ_min(T) <= λ_max(T) <= hi`` for Hermitian Toeplitz ``T``.

  Theorem 2 (circulant enclosure): for any ``M >= 2n-1`` the grid values of the
  symbol are the eigenvalues of a Hermitian circulant whose leading n×n block
  is ``T``, so by interlacing its min/max enclose the spectrum. Several ``M``
  (a tuple) are intersected. ``fp_margin`` widens the interval by
  ``2ε⌈log2 M⌉‖t‖₁`` so the guarantee survives float32 rounding.

  Args:
    coeffs: ``[..., 2n-1]`` Hermitian coefficients ``t_{-(n-1)}, ..., t_0, ...,
      t_{n-1}`` (``t_0`` at index ``n-1``, the middle; ``T[i, j] = t_{j-i}``;
      ``t_{-k} = conj(t_k)``).
    num_points: ``M`` or a tuple of ``M``'s, each >= 2n-1 (default 2n).
  Returns:
    ``(lo, hi)`` with the batch shape of ``coeffs``.

  Raises:
    ValueError: a scalar or even-length ``coeffs``, NaN/inf, non-Hermitian
      coefficients (concrete values only: under ``jit``/``vmap`` the values are
      not checked, and NaN input gives NaN bounds), or an ``M < 2n-1``.
  """
  coeffs = _checked_hermitian(coeffs)
  n = _n_from_coeffs(coeffs)
  if num_points is None:
    points = (2 * n,)
  elif not isinstance(num_points, (tuple, list, np.ndarray)):
    points = (num_points,)  # a scalar; _check_points says what is wrong with it
  else:
    points = tuple(num_points)
  if not points:
    raise ValueError("num_points must name at least one grid size")
  for m in points:
    _check_points(n, m)
  los, his = [], []
  l1 = jnp.abs(coeffs).sum(-1)
  for m in points:
    f = symbol(coeffs, m).real
    lo, hi = f.min(-1), f.max(-1)
    if fp_margin:
      margin = 2.0 * _eps(coeffs) * math.ceil(math.log2(m)) * l1
      lo, hi = lo - margin, hi + margin
    los.append(lo)
    his.append(hi)
  return jnp.max(jnp.stack(los), 0), jnp.min(jnp.stack(his), 0)


def toeplitz_gershgorin_bounds(coeffs):
  """Gershgorin interval of a Hermitian Toeplitz matrix in O(n) (prefix sums).

  Row i holds ``t_k`` for ``k = i-n+1 .. i``; ``R_i = Σ|t_k| - |t_0|``.
  """
  coeffs = jnp.asarray(coeffs)
  n = _n_from_coeffs(coeffs)
  a = jnp.abs(coeffs)
  csum = jnp.concatenate([jnp.zeros(a.shape[:-1] + (1,), a.dtype),
                          jnp.cumsum(a, -1)], -1)
  windows = csum[..., n:] - csum[..., :n]  # window i covers coeffs[i : i+n]
  radius = windows.max(-1) - a[..., n - 1]
  center = jnp.real(coeffs[..., n - 1])
  return center - radius, center + radius


def gershgorin_discs(a):
  """``(centers, radii)`` of the Gershgorin discs of any square ``a``."""
  a = jnp.asarray(a)
  d = jnp.diagonal(a, axis1=-2, axis2=-1)
  radii = jnp.abs(a).sum(-1) - jnp.abs(d)
  return d, radii


def gershgorin_bounds(a):
  """``(lo, hi)`` enclosing the eigenvalues of a Hermitian ``a`` (uses Re diag)."""
  d, r = gershgorin_discs(a)
  d = jnp.real(d)
  return (d - r).min(-1), (d + r).max(-1)


# ----------------------------------------------------------------------------
# Krylov inner bounds
# ----------------------------------------------------------------------------

def _vdot(a, b):
  return jnp.sum(jnp.conj(a) * b)


def power_iteration(matvec: Callable, v0, num_steps: int):
  """``num_steps`` power iterations; returns ``(rayleigh quotient, unit vector)``.

  Every Rayleigh quotient lies in ``[λ_min, λ_max]`` (an inner bound).
  """
  v = v0 / jnp.linalg.norm(v0)

  def body(_, v):
    w = matvec(v)
    return w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(jnp.real(w).dtype).tiny)

  v = jax.lax.fori_loop(0, num_steps, body, v)
  return jnp.real(_vdot(v, matvec(v))), v


def lanczos(matvec: Callable, v0, num_steps: int, *, key: Optional[jax.Array] = None):
  """Lanczos tridiagonalisation of a Hermitian operator, full reorthogonalisation.

  ``matvec`` maps ``[n] -> [n]``; ``v0 [n]`` starts the Krylov space
  (normalised here); ``1 <= num_steps <= n``. Each step is the three-term
  recurrence followed by two Gram-Schmidt passes against the whole basis
  (twice is enough: Kahan-Parlett). On breakdown (an invariant subspace found:
  ``β`` below ``100 ε`` of the largest ``|α| + β`` seen) the basis continues
  from a pseudo-random vector (``fold_in(key, j)``, default ``key(0)``)
  orthogonal to it, with ``β = 0`` in ``T``: the Ritz values stay eigenvalues
  of the operator's restriction to an orthonormal basis, never artefacts of a
  zero vector. The one Lanczos of the package (the Toeplitz spectra here, the
  Hessian's in ``analysis/curvature.py``).

  Returns ``(alphas [m], betas [m-1], basis [m, n])``, ``m = num_steps``:
  ``T = tridiag(betas, alphas, betas)``, and ``basis`` is orthonormal.
  """
  v0 = jnp.asarray(v0)
  n = v0.shape[-1]
  if not 1 <= num_steps <= n:
    raise ValueError(f"num_steps must be in [1, n={n}], got {num_steps}")
  key = jax.random.key(0) if key is None else key
  dtype = v0.dtype
  real_dtype = jnp.real(jnp.zeros((), dtype)).dtype
  tiny = 100 * jnp.finfo(real_dtype).eps

  def orthogonalise(w, basis):  # rows not yet filled are 0
    for _ in range(2):
      w = w - basis.T @ (jnp.conj(basis) @ w)
    return w

  def unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x), jnp.finfo(real_dtype).tiny)

  basis = jnp.zeros((num_steps, n), dtype).at[0].set(unit(v0))

  def body(j, carry):
    basis, alphas, betas, scale = carry
    v = basis[j]
    w = matvec(v)
    alpha = jnp.real(_vdot(v, w))
    prev_beta = jnp.where(j > 0, betas[jnp.maximum(j - 1, 0)], 0.0)
    w = w - alpha * v - prev_beta * basis[jnp.maximum(j - 1, 0)]
    w = orthogonalise(w, basis)
    beta = jnp.linalg.norm(w)
    scale = jnp.maximum(scale, jnp.abs(alpha) + beta)
    broke = beta <= tiny * jnp.maximum(scale, 1e-30)
    w_next = jax.lax.cond(broke, lambda: unit(orthogonalise(jax.random.normal(
        jax.random.fold_in(key, j), (n,), real_dtype).astype(dtype), basis)),
                          lambda: w / jnp.where(broke, 1.0, beta))
    beta = jnp.where(broke, 0.0, beta)
    basis = jnp.where(j + 1 < num_steps,
                      basis.at[jnp.minimum(j + 1, num_steps - 1)].set(w_next), basis)
    return basis, alphas.at[j].set(alpha), betas.at[j].set(beta), scale

  alphas = jnp.zeros((num_steps,), real_dtype)
  betas = jnp.zeros((num_steps,), real_dtype)
  basis, alphas, betas, _ = jax.lax.fori_loop(
      0, num_steps, body, (basis, alphas, betas, jnp.zeros((), real_dtype)))
  return alphas, betas[:-1], basis


def lanczos_ritz(matvec: Callable, v0, num_steps: int):
  """Ritz values (ascending) of ``num_steps`` Lanczos steps (:func:`lanczos`).

  The Ritz values are eigenvalues of ``V* T V`` with orthonormal ``V``, so they
  lie in ``[λ_min, λ_max]`` (Poincaré separation): inner bounds that, with
  :func:`toeplitz_eig_bounds`, bracket the extremes using only mat-vecs.
  ``matvec`` maps ``[n] -> [n]`` (e.g. ``make_toeplitz_matvec(col)``);
  ``num_steps <= n``; a breakdown keeps the guarantee.
  """
  alphas, betas, _ = lanczos(matvec, v0, num_steps)
  tri = jnp.diag(alphas) + jnp.diag(betas, 1) + jnp.diag(betas, -1)
  return jnp.linalg.eigvalsh(tri)


# ----------------------------------------------------------------------------
# Hadamard (Schur) and Weyl bounds
# ----------------------------------------------------------------------------

def hadamard_bounds(lam_min_a, lam_max_a, diag_c):
  """Theorem 3: ``spec(A∘C) ⊂ [lo, hi]`` for Hermitian A and PSD C.

  ``lo = min(λ_min c₋, λ_min c₊)``, ``hi = max(λ_max c₊, λ_max c₋)`` with
  ``c± = max/min diag(C)``; for a correlation matrix ``[λ_min(A), λ_max(A)]``.
  Precondition (not checked under jit): ``C ⪰ 0``.
  """
  diag_c = jnp.real(jnp.asarray(diag_c))
  c_lo, c_hi = diag_c.min(-1), diag_c.max(-1)
  lo = jnp.minimum(lam_min_a * c_lo, lam_min_a * c_hi)
  hi = jnp.maximum(lam_max_a * c_hi, lam_max_a * c_lo)
  return lo, hi


def hadamard_bounds_dense(a, c):
  """:func:`hadamard_bounds` from dense ``A`` (``eigvalsh``) and ``diag(C)``."""
  eigs = jnp.linalg.eigvalsh(a)
  return hadamard_bounds(eigs[..., 0], eigs[..., -1],
                         jnp.diagonal(c, axis1=-2, axis2=-1))


def hadamard_norm_bound(norm_a, diag_c):
  """Theorem 12(c): ``‖A∘C‖₂ <= max_i C_ii ‖A‖₂`` for PSD C."""
  return jnp.real(jnp.asarray(diag_c)).max(-1) * norm_a


def weyl_bounds(eigs_a, lo_b, hi_b):
  """Theorem 9, per index: ``λ_k(A) + λ_min(B) <= λ_k(A+B) <= λ_k(A) + λ_max(B)``."""
  eigs_a = jnp.asarray(eigs_a)
  lo_b = jnp.asarray(lo_b)[..., None]
  hi_b = jnp.asarray(hi_b)[..., None]
  return eigs_a + lo_b, eigs_a + hi_b


def spread_bounds(spread_a, spread_b):
  """``|sA - sB| <= spread(A+B) <= sA + sB`` (the lower bound forces widening)."""
  return jnp.abs(spread_a - spread_b), spread_a + spread_b


# ----------------------------------------------------------------------------
# RoPE
# ----------------------------------------------------------------------------

def rope_frequencies(d: int, base: float = 10000.0, dtype=jnp.float32):
  """``θ_j = base^(-2j/d)``, ``j < d/2`` -- the frequencies of ``rotary.apply_rope``."""
  return rotary.rope_angles(jnp.ones(()), d, base).astype(dtype)


def rope_toeplitz(n: int, theta, dtype=jnp.complex64):
  """``G[m, k] = exp(i (m - k) θ)`` with leading batch axes of ``theta``.

  A rank-one correlation matrix ``u u*`` (``u_m = e^{imθ}``): ``A∘G`` is a
  unitary similarity of ``A`` and keeps its spectrum exactly.
  """
  theta = jnp.asarray(theta)
  diff = (jnp.arange(n, dtype=jnp.int32)[:, None]
          - jnp.arange(n, dtype=jnp.int32)[None, :])
  phase = diff.astype(jnp.real(jnp.zeros((), dtype)).dtype) * theta[..., None, None]
  return jnp.exp(1j * phase).astype(dtype)


def _pairs(x, pairing: str):
  d = x.shape[-1]
  if d % 2:
    raise ValueError(f"RoPE needs an even dimension, got {d}")
  if pairing == "interleaved":
    return x[..., 0::2], x[..., 1::2]
  if pairing == "half":
    return x[..., :d // 2], x[..., d // 2:]
  raise ValueError(f"pairing must be 'interleaved' or 'half', got {pairing!r}")


def _complex_blocks(x, pairing):
  a, b = _pairs(x, pairing)
  return a + 1j * b  # [..., n, d/2]


def rope_rotate(x, theta, positions=None, pairing: str = "interleaved"):
  """Rotates block j of row m by ``positions[m] * theta[j]``; ``x`` is ``[..., n, d]``.

  The model's rotation (:func:`rotary.rotate`) with any ``theta``: with
  the standard ``theta`` and interleaved pairing this is
  ``rotary.apply_rope``.
  """
  x = jnp.asarray(x)
  n = x.shape[-2]
  pos = jnp.arange(n) if positions is None else jnp.asarray(positions)
  angles = pos[:, None].astype(jnp.real(x).dtype) * jnp.asarray(theta)
  return rotary.rotate(x, angles, pairing=pairing)


def rope_logits(q, k, theta, pairing: str = "interleaved"):
  """RoPE logits in Hadamard form ``Re Σ_j (z_j w_j*) ∘ G_{θ_j}`` (Theorem 6(a)).

  ``q, k``: ``[..., n, d]``; equals ``rope_rotate(q) @ rope_rotate(k).T``
  (the 1/sqrt(d) scale is not applied).
  """
  z = _complex_blocks(jnp.asarray(q), pairing)  # [..., n, d/2]
  w = _complex_blocks(jnp.asarray(k), pairing)
  n = z.shape[-2]
  g = rope_toeplitz(n, jnp.asarray(theta), dtype=z.dtype)  # [d/2, n, n]
  gram = jnp.einsum("...mj,...nj,jmn->...mn", z, jnp.conj(w), g)
  return jnp.real(gram)


def rope_envelope(q, k, pairing: str = "interleaved"):
  """Theorem 6 envelope ``(N, P, nuclear_bound)`` of the RoPE logit ``L``.

  ``λ(S(L)) ≺ (P, 0, .., 0, N)``: the positive eigenvalues of the symmetric
  part sum to at most ``P`` (so ``λ_max <= P``), the negative ones to at least
  ``N``; ``‖L‖_* <= nuclear_bound``. **None of these depend on θ**: they hold
  for the same q, k without any PE, so they cannot show that RoPE contracts
  relative to NoPE -- only that position cannot widen the envelope.
  """
  qa, qb = _pairs(jnp.asarray(q), pairing)
  ka, kb = _pairs(jnp.asarray(k), pairing)
  inner = (qa * ka + qb * kb).sum(-2)               # ⟨Q_j, K_j⟩_F  [..., d/2]
  nq = jnp.sqrt((qa ** 2 + qb ** 2).sum(-2))        # ‖Q_j‖_F
  nk = jnp.sqrt((ka ** 2 + kb ** 2).sum(-2))
  p = ((inner + nq * nk) / 2).sum(-1)
  neg = ((inner - nq * nk) / 2).sum(-1)
  return neg, p, (nq * nk).sum(-1)


# ----------------------------------------------------------------------------
# Additive PEs
# ----------------------------------------------------------------------------

def alibi_toeplitz(n: int, slope, causal: bool = False):
  """One head of ``biases.alibi_bias``: ``-slope |i - j|`` (causal: 0 above the diagonal)."""
  return biases.alibi_bias(n, jnp.asarray(slope), causal=causal)


def rope_min_base(context_len: int, head_dim: int, *, max_base: float = 1e12,
                  tol: float = 1e-10) -> float:
  """The smallest RoPE base ``b`` with ``B(b) = min_{0<=m<L} Σ_i cos(m b^(-2i/d)) >= 0``
  (Men et al. 2024, arXiv 2405.14591: below it, some relative distance within
  the context gets a negative similarity sum and long-range discrimination fails).

  The feasible set is not an interval: narrow feasible windows open below the
  point from which every larger base works, so a coarse scan or a bisection can
  return a base that is too large. This search cannot step over a window: in
  ``u = ln b``, ``B`` is Lipschitz with constant at most
  ``K(u) = (L-1) Σ_i (2i/d) e^(-2iu/d)`` on ``[u, ∞)`` (the derivative of each
  term, bounded; ``K`` decreases in ``u``), so from an infeasible ``u`` the
  whole step ``[u, u - B(u)/K(u))`` is infeasible. Steps are taken until
  ``B >= 0`` (float64 throughout); a step below ``tol`` (relative) means a
  boundary within ``tol`` and ends the search there.

  Args:
    context_len: ``L``; distances ``m = 0..L-1`` are checked.
    head_dim: ``d`` (even); pairs ``i = 0..d/2-1``.
    max_base: give up (``ValueError``) beyond this base.
  Returns:
    ``b`` as a Python float; 1.0 when ``L <= 1`` (only distance 0 is checked,
    where every base gives ``B = d/2 > 0``).
  """
  if head_dim < 2 or head_dim % 2:
    raise ValueError(f"head_dim must be even and >= 2, got {head_dim}")
  if context_len < 1:
    raise ValueError(f"context_len must be >= 1, got {context_len}")
  m = np.arange(context_len, dtype=np.float64)[:, None]
  expo = 2.0 * np.arange(head_dim // 2, dtype=np.float64) / head_dim
  worst = lambda u: float(np.cos(m * np.exp(-expo * u)).sum(1).min())
  lipschitz = lambda u: (context_len - 1) * float((expo * np.exp(-expo * u)).sum())
  u, u_max = 0.0, math.log(max_base)
  while u <= u_max:
    b = worst(u)
    if b >= 0.0:
      return math.exp(u)
    k = lipschitz(u)
    step = -b / k
    if step < tol * max(1.0, u):
      return math.exp(u + step)
    u += step
  raise ValueError(f"no base <= {max_base:g} keeps every distance below "
                   f"{context_len} non-negative for head_dim {head_dim}")


def t5_bias_coeffs(n: int, bucket_values, bidirectional: bool = True,
                   max_distance: int = 128):
  """Toeplitz coefficients ``t_k = β[bucket(-k)]`` of a T5 relative bias.

  ``rel = key_pos - query_pos = -k``; ``bucket_values`` is ``[..., num_buckets]``.
  Same bucketing as ``biases.relative_position_bucket`` (the model's).
  """
  bucket_values = jnp.asarray(bucket_values)
  k = jnp.arange(-(n - 1), n)
  idx = biases.relative_position_bucket(
      -k, num_buckets=bucket_values.shape[-1], max_distance=max_distance,
      bidirectional=bidirectional)
  return bucket_values[..., idx]


def sinusoidal_pe(n: int, d: int, base: float = 10000.0):
  """``absolute.sinusoidal_table`` (interleaved sin, cos)."""
  return absolute.sinusoidal_table(n, d, base)


def sinusoidal_gram(n: int, d: int, base: float = 10000.0):
  """``P Pᵀ`` as a dense Toeplitz matrix (PSD, rank <= min(n, d))."""
  return toeplitz_from_coeffs(sinusoidal_gram_coeffs(n, d, base))


# ----------------------------------------------------------------------------
# Measures and helpers
# ----------------------------------------------------------------------------

def spectral_spread(eigs):
  """``λ_max - λ_min`` along the last axis."""
  eigs = jnp.asarray(eigs)
  return eigs.max(-1) - eigs.min(-1)


def condition_number(eigs, *, psd: bool = True, eps=None):
  """PSD: ``λ_max / max(λ_min, eps λ_max)``; else ``max|λ| / max(min|λ|, eps max|λ|)``."""
  eigs = jnp.asarray(eigs)
  eps = _eps(eigs) if eps is None else eps
  if psd:
    top = eigs.max(-1)
    return top / jnp.maximum(eigs.min(-1), eps * top)
  mag = jnp.abs(eigs)
  top = mag.max(-1)
  return top / jnp.maximum(mag.min(-1), eps * top)


def stable_rank(a):
  """``‖A‖_F² / ‖A‖₂²`` (in [1, rank])."""
  s = jnp.linalg.svd(a, compute_uv=False)
  return (s ** 2).sum(-1) / (s[..., 0] ** 2)


def contraction_ratio(eigs_after, eigs_before, kind: str = "spread"):
  """Ratio of a spectral size after/before: ``spread``, ``max`` (max |λ|) or ``frobenius``."""
  if kind == "spread":
    f = spectral_spread
  elif kind == "max":
    f = lambda e: jnp.abs(jnp.asarray(e)).max(-1)
  elif kind == "frobenius":
    f = lambda e: jnp.sqrt((jnp.abs(jnp.asarray(e)) ** 2).sum(-1))
  else:
    raise ValueError(f"kind must be spread, max or frobenius, got {kind!r}")
  return f(eigs_after) / f(eigs_before)


def hadamard_contraction_ratio(a, c):
  """``spread(A∘C) / spread(A)`` for a Hermitian content matrix ``a`` and a
  positional matrix ``c`` (both ``[..., n, n]``; e.g. ``a`` a Gram ``Q Kᵀ``
  made Hermitian and ``c`` RoPE's phases or the KMS decay). In ``[0, 1]`` when
  ``c`` is a correlation matrix, i.e. PSD with unit diagonal (Thm 4).

  Both spectra come from one batched ``eigvalsh``: two LAPACK calls side by
  side in one XLA:CPU program can deadlock its thread pool on a 2-core
  machine (``pe_spectral.analysis.decompose.summarize`` explains)."""
  ac = jnp.asarray(a) * jnp.asarray(c)
  both = jnp.stack([ac, jnp.broadcast_to(jnp.asarray(a), ac.shape).astype(ac.dtype)])
  eigs = jnp.linalg.eigvalsh(both)
  return contraction_ratio(eigs[0], eigs[1])


def majorization_gap(x, y):
  """``(max_k Σ_{i<=k} (x↓ - y↓)_i, |Σx - Σy|)``; ``x ≺ y`` iff both are <= tol."""
  xs = -jnp.sort(-jnp.asarray(x), -1)
  ys = -jnp.sort(-jnp.asarray(y), -1)
  partial = jnp.cumsum(xs - ys, -1)
  return partial[..., :-1].max(-1, initial=-jnp.inf), jnp.abs(partial[..., -1])


def symmetric_part(a):
  """``(A + Aᵀ)/2``."""
  return 0.5 * (a + jnp.swapaxes(a, -1, -2))


def hermitian_part(a):
  """``(A + A*)/2``."""
  return 0.5 * (a + jnp.conj(jnp.swapaxes(a, -1, -2)))


def row_center(logits, mask=None):
  """Subtracts each row's mean over allowed entries (softmax-invariant representative).

  Masked entries are set to 0. Singular values of the result do not change
  under ``L -> L + r 1ᵀ`` (docs/spectral.md, conventions).
  """
  logits = jnp.asarray(logits)
  if mask is None:
    return logits - logits.mean(-1, keepdims=True)
  w = jnp.asarray(mask, logits.dtype)
  mean = (logits * w).sum(-1, keepdims=True) / jnp.maximum(w.sum(-1, keepdims=True), 1)
  return (logits - mean) * w


def row_range(logits, mask=None):
  """``max_j L_ij - min_j L_ij`` over allowed entries (what saturates the softmax)."""
  logits = jnp.asarray(logits)
  if mask is None:
    return logits.max(-1) - logits.min(-1)
  big = jnp.finfo(logits.dtype).max
  return (jnp.where(mask, logits, -big).max(-1) - jnp.where(mask, logits, big).min(-1))


def toeplitz_projection(a):
  """Frobenius-orthogonal projection onto Toeplitz matrices: diagonal means as ``coeffs``."""
  a = jnp.asarray(a)
  n = a.shape[-1]
  i = jnp.arange(n)
  k = i[:, None] - i[None, :] + n - 1  # coeffs index of entry (i, j)
  onehot = jax.nn.one_hot(k, 2 * n - 1, dtype=jnp.real(a).dtype)  # [n, n, 2n-1]
  sums = jnp.einsum("...ij,ijk->...k", a, onehot.astype(a.dtype))
  counts = n - jnp.abs(jnp.arange(-(n - 1), n))
  return sums / counts


def toeplitz_defect(a):
  """``‖A - Π_T A‖_F / ‖A‖_F``: 0 for Toeplitz A, up to 1 for none of it."""
  a = jnp.asarray(a)
  resid = a - toeplitz_from_coeffs(toeplitz_projection(a))
  return jnp.linalg.norm(resid, axis=(-2, -1)) / jnp.linalg.norm(a, axis=(-2, -1))


def numerical_range_support(a, angles):
  """Support function of the numerical range: ``λ_max(H(e^{-iφ} A))`` per angle."""
  a = jnp.asarray(a).astype(_complex_dtype(jnp.asarray(a)))
  rot = jnp.exp(-1j * jnp.asarray(angles))[:, None, None] * a
  return jnp.linalg.eigvalsh(hermitian_part(rot))[..., -1]


def synthetic_content(kind: str, n: int, d: int, key, *, theta=None):
  """Content sequences ``[n, d]`` for Prop. 8 (when does RoPE contract?).

  * ``isotropic``: i.i.d. N(0, 1) tokens -- RoPE and NoPE logits equal in law;
  * ``persistent``: one random vector repeated (DC content) -- RoPE contracts;
  * ``mean_noise``: a random mean plus N(0, 0.5²) noise;
  * ``counter_rotating``: ``R(-m θ) a`` -- content that undoes the rotation,
    for which RoPE *expands* λ_max.
  """
  k1, k2 = jax.random.split(key)
  if kind == "isotropic":
    return jax.random.normal(k1, (n, d))
  a = jax.random.normal(k1, (d,))
  if kind == "persistent":
    return jnp.broadcast_to(a, (n, d))
  if kind == "mean_noise":
    return a + 0.5 * jax.random.normal(k2, (n, d))
  if kind == "counter_rotating":
    theta = rope_frequencies(d) if theta is None else theta
    return rope_rotate(jnp.broadcast_to(a, (n, d)), -jnp.asarray(theta))
  raise ValueError(f"unknown content kind {kind!r}")


# ----------------------------------------------------------------------------
# PoPE (docs/spectral.md, "PoPE"): each channel's logit matrix is D_q T_c D_k,
# with non-negative diagonals D (softplus magnitudes) and the Toeplitz
# T_c[i, j] = cos((j - i) θ_c + δ_c). Closed forms, float64 NumPy.
# ----------------------------------------------------------------------------

def pope_cosine_eigs(n: int, theta) -> tuple[np.ndarray, np.ndarray]:
  """The two non-zero eigenvalues of ``C[i, j] = cos((j - i) θ)`` (n x n, PSD,
  rank <= 2), per ``θ``: ``(n - |g|)/2`` and ``(n + |g|)/2`` with
  ``|g| = |Σ_j e^{2ijθ}| = |sin(nθ) / sin θ|`` (``n`` at multiples of π); the other ``n - 2``
  are 0. ``C = (u u* + ū ūᵀ)/2`` with ``u_j = e^{ijθ}``, and the Gram of
  ``u, ū`` is ``[[n, g], [ḡ, n]]``."""
  theta = np.asarray(theta, np.float64)
  # g = Σ_j e^{2ijθ}, summed directly: the Dirichlet-kernel ratio loses all
  # precision near multiples of π, where |g| -> n
  g = np.abs(np.exp(2j * theta[..., None] * np.arange(n)).sum(-1))
  g = np.minimum(g, n)
  return (n - g) / 2.0, (n + g) / 2.0


def pope_symmetric_bounds(mag, theta, delta=None, *, scale: float = 1.0):
  """Certified ``(λ_min, λ_max)`` bounds of the symmetric part of PoPE's logits
  ``L = scale Σ_c D_c T_c D_c`` when queries and keys have the same magnitudes
  ``mag [n, d]`` (``D_c = diag(mag[:, c])``, e.g. tied projections).

  The symmetric part of ``T_c`` is ``cos δ_c C_c`` (the sine part is
  antisymmetric), so ``sym(L_c) = cos δ_c D_c C_c D_c``. Ostrowski's theorem
  puts each eigenvalue of ``D C D`` at ``t_k λ_k(C)`` with ``t_k`` between the
  extremes of ``D²`` (Sylvester: same inertia as ``C``: PSD, rank <= 2), and
  Weyl's inequality sums the channels. Needs ``mag > 0`` (softplus is)."""
  mag = np.asarray(mag, np.float64)
  n, d = mag.shape
  theta = np.asarray(theta, np.float64)
  cos_d = np.ones(d) if delta is None else np.cos(np.asarray(delta, np.float64))
  _, big = pope_cosine_eigs(n, theta)
  top = (mag ** 2).max(axis=0) * big  # λ_max(D C D) <= max D² λ_max(C)
  hi = scale * np.sum(np.maximum(cos_d, 0.0) * top)
  lo = scale * np.sum(np.minimum(cos_d, 0.0) * top)
  return float(lo), float(hi)


def pope_norm_bound(mag_q, mag_k, *, scale: float = 1.0) -> float:
  """``‖L‖₂ <= scale Σ_c max_i mag_q[i, c] · max_j mag_k[j, c] · n`` for any
  queries and keys (``‖T_c‖₂ <= n``: two rank-one terms of norm n/2), hence a
  bound on ``|λ|`` of the symmetric part. The only certificate when the
  magnitudes differ: no inertia or ordering holds for ``D_q T D_k``."""
  mag_q, mag_k = np.asarray(mag_q, np.float64), np.asarray(mag_k, np.float64)
  n = mag_q.shape[0]
  return float(scale * np.sum(mag_q.max(axis=0) * mag_k.max(axis=0) * n))


def frequency_drift(theta, theta0) -> np.ndarray:
  """How far trained frequencies moved from their initial ones: ``|log(θ/θ₀)|``
  per frequency (``theta [..., F]``, ``theta0 [F]``; a frequency that reached
  0 or changed sign counts as infinitely far). ``log 2`` is a factor of 2."""
  theta = np.asarray(theta, np.float64)
  theta0 = np.asarray(theta0, np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    r = theta / theta0
    return np.where(r > 0, np.abs(np.log(np.where(r > 0, r, 1.0))), np.inf)
