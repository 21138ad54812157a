"""Curvature of a training loss by Hessian-vector products.

Plain functions of ``(loss_fn, params, ...)`` where ``loss_fn(params) ->
scalar`` closes over a fixed batch; every estimate needs only Hessian-vector
products (``jax.jvp`` of ``jax.grad``: forward-over-reverse), so nothing of
size ``[P, P]`` is ever formed. All of them are pure and work under ``jit``
and ``vmap`` (over seeds: one compiled call for every seed).

* :func:`top_hessian_eigs` -- the top-k eigenvalues by Lanczos with full
  reorthogonalisation;
* :func:`hutchinson_trace` -- ``tr(H)`` from Rademacher probes;
* :func:`preconditioned_sharpness` -- ``λ_max(P⁻¹ H)`` for a diagonal
  preconditioner ``P``, e.g. Adam's (:func:`adam_preconditioner`; Cohen et
  al. 2022, "Adaptive gradient methods at the edge of stability").

The model's fast attention kernel is a ``jax.custom_vjp``: plain ``jax.jvp``
of the loss fails on it, while forward-over-reverse (``jvp`` of ``grad``)
passes and gives the reference path's products to float rounding (tested).
``runner.run(record_curvature=N)`` traces on the reference path
(``with pe_spectral.runtime.speed.reference():``), the plain-autodiff definition.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from pe_spectral.pe import spectral

__all__ = ["hvp", "lanczos", "top_hessian_eigs", "hutchinson_trace",
           "preconditioned_sharpness", "adam_preconditioner", "curvature_summary"]


def hvp(loss_fn: Callable, params, vector):
  """``H v``: the Hessian of ``loss_fn`` at ``params`` times ``vector`` (a
  pytree shaped like ``params``), by forward-over-reverse differentiation."""
  return jax.jvp(jax.grad(loss_fn), (params,), (vector,))[1]


def _flat_operator(loss_fn, params, scale=None):
  """``(matvec on flat [P] vectors, P, dtype)``; with ``scale`` (a pytree
  like ``params``), the operator ``S H S`` with ``S = diag(scale)``."""
  flat, unravel = ravel_pytree(params)
  s = None if scale is None else ravel_pytree(scale)[0].astype(flat.dtype)

  def matvec(v):
    if s is not None:
      v = v * s
    out = ravel_pytree(hvp(loss_fn, params, unravel(v)))[0]
    return out if s is None else out * s

  return matvec, flat.shape[0], flat.dtype


def lanczos(matvec: Callable, dim: int, num_iters: int, key: jax.Array,
            dtype=jnp.float32):
  """Lanczos tridiagonalisation of a symmetric ``[dim, dim]`` operator from a
  random start (``key``): :func:`pe_spectral.pe.spectral.lanczos`, the
  package's one Lanczos (full reorthogonalisation; an exhausted Krylov space
  restarts from a fresh random vector orthogonal to the basis, with ``β = 0``
  in ``T``).

  Returns ``(alphas [m], betas [m-1], basis [m, dim])`` with
  ``m = min(num_iters, dim)``.
  """
  m = int(min(num_iters, dim))
  if m < 1:
    raise ValueError(f"num_iters must be >= 1, got {num_iters}")
  start, restarts = jax.random.split(key)
  return spectral.lanczos(matvec, jax.random.normal(start, (dim,), dtype), m, key=restarts)


def _tridiagonal(alphas, betas):
  return jnp.diag(alphas) + jnp.diag(betas, 1) + jnp.diag(betas, -1)


def _ritz_values(alphas, betas):
  """Eigenvalues of the tridiagonal ``T`` (ascending)."""
  return jnp.linalg.eigvalsh(_tridiagonal(alphas, betas))


def _check_k(k, num_iters):
  if not isinstance(k, int) or isinstance(k, bool) or k < 1:
    raise ValueError(f"k must be an int >= 1, got {k!r}")
  if not isinstance(num_iters, int) or isinstance(num_iters, bool) or num_iters < k:
    raise ValueError(f"num_iters must be an int >= k={k}, got {num_iters!r}")


def top_hessian_eigs(loss_fn: Callable, params, *, k: int = 1, num_iters: int = 20,
                     key: jax.Array) -> jax.Array:
  """The ``k`` largest Hessian eigenvalues (descending), ``[k]``.

  Lanczos with full reorthogonalisation over ``num_iters`` Hessian-vector
  products (``num_iters >= k``; extreme eigenvalues converge first, so 20
  steps resolve the top few of a 10⁵-parameter model well; with
  ``num_iters >= P`` the result is exact).
  """
  return _ritz_values(*_top_lanczos(loss_fn, params, k, num_iters, key))[::-1][:k]


def _top_lanczos(loss_fn, params, k, num_iters, key):
  _check_k(k, num_iters)
  matvec, dim, dtype = _flat_operator(loss_fn, params)
  if k > dim:
    raise ValueError(f"k={k} exceeds the {dim} parameters")
  return lanczos(matvec, dim, num_iters, key, dtype)[:2]


def hutchinson_trace(loss_fn: Callable, params, *, num_samples: int = 8,
                     key: jax.Array):
  """``(estimate, standard error)`` of ``tr(H)`` from ``num_samples``
  Rademacher probes ``z`` (``E[zᵀ H z] = tr H``)."""
  if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
    raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
  matvec, dim, dtype = _flat_operator(loss_fn, params)
  z = jax.random.rademacher(key, (num_samples, dim), dtype)
  quad = jax.vmap(lambda v: jnp.vdot(v, matvec(v)))(z)
  se = (jnp.std(quad, ddof=1) / jnp.sqrt(num_samples) if num_samples > 1
        else jnp.full((), jnp.nan, dtype))
  return quad.mean(), se


def preconditioned_sharpness(loss_fn: Callable, params, precond, *,
                             num_iters: int = 20, key: jax.Array) -> jax.Array:
  """``λ_max(P⁻¹ H)`` for a diagonal preconditioner ``precond`` (a pytree
  like ``params``, entries > 0).

  ``P⁻¹ H`` is similar to the symmetric ``P^{-1/2} H P^{-1/2}``, whose top
  eigenvalue Lanczos finds (the same spectrum).
  """
  return _ritz_values(*_preconditioned_lanczos(loss_fn, params, precond, num_iters,
                                              key))[-1]


def _preconditioned_lanczos(loss_fn, params, precond, num_iters, key):
  _check_k(1, num_iters)
  scale = jax.tree.map(lambda p: jax.lax.rsqrt(p), precond)
  matvec, dim, dtype = _flat_operator(loss_fn, params, scale)
  return lanczos(matvec, dim, num_iters, key, dtype)[:2]


def _adam_state(opt_state):
  found = [s for s in jax.tree.leaves(
      opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
           if isinstance(s, optax.ScaleByAdamState)]
  if len(found) != 1:
    raise ValueError(f"expected one Adam state in the optimiser state, found {len(found)}")
  return found[0]


def adam_preconditioner(opt_state, *, b1: float, b2: float, eps: float):
  """Adam's diagonal preconditioner ``P = (1 - β1^t) (sqrt(ν̂_t) + ε)`` from an
  optax Adam/AdamW state (Cohen et al. 2022: the update is ``-η P⁻¹ m_t``
  with ``m_t`` the uncorrected first moment, and gradient descent on the
  preconditioned problem is stable while ``λ_max(P⁻¹H) < (2 + 2β1) / ((1 - β1) η)``).

  At ``t = 0`` (no update yet) ``ν = 0`` and ``P = 0``: the preconditioned
  sharpness is undefined; callers skip that step. Returns a pytree like the
  parameters.
  """
  st = _adam_state(opt_state)
  t = jnp.maximum(st.count, 1).astype(jnp.float32)
  corr1 = 1.0 - b1 ** t
  corr2 = 1.0 - b2 ** t
  return jax.tree.map(lambda nu: corr1 * (jnp.sqrt(nu / corr2) + eps), st.nu)


def curvature_summary(loss_fn: Callable, params, opt_state, *, b1: float, b2: float,
                      eps: float, key: jax.Array, k: int = 1, num_iters: int = 20,
                      trace_samples: int = 8,
                      precondition: Optional[bool] = True) -> dict:
  """Everything ``runner.run(record_curvature=N)`` logs for one seed, in one function:
  ``top_eigs [k]``, ``trace`` (Hutchinson) and its ``trace_se`` (only when
  ``trace_samples > 0``),
  ``precond_sharpness`` (Adam, None if ``precondition`` is False) and
  ``grad_norm``.

  Both Lanczos runs' tridiagonals go through one batched ``eigvalsh``: two
  LAPACK calls side by side in one XLA:CPU program can deadlock its thread
  pool on a 2-core machine (``decompose.summarize`` explains)."""
  k1, k2, k3 = jax.random.split(key, 3)
  tris = [_tridiagonal(*_top_lanczos(loss_fn, params, k, num_iters, k1))]
  out = {}
  if trace_samples:
    out["trace"], out["trace_se"] = hutchinson_trace(loss_fn, params,
                                                     num_samples=trace_samples, key=k2)
  if precondition:
    p = adam_preconditioner(opt_state, b1=b1, b2=b2, eps=eps)
    tris.append(_tridiagonal(*_preconditioned_lanczos(loss_fn, params, p, num_iters, k3)))
  ritz = jnp.linalg.eigvalsh(jnp.stack(tris))  # [1 or 2, m], ascending
  out["top_eigs"] = ritz[0][::-1][:k]
  if precondition:
    out["precond_sharpness"] = ritz[1][-1]
  grads = jax.tree.leaves(jax.grad(loss_fn)(params))
  out["grad_norm"] = jnp.sqrt(sum(jnp.vdot(g, g).real for g in grads))
  return out
