"""Rematerialisation that the XLA:CPU compiler does not undo.

``jax.checkpoint`` marks what to recompute in the backward pass and guards the
recomputation with an ``optimization_barrier``; XLA:CPU drops that barrier and
its common-subexpression elimination then merges the recomputation back into
the forward pass, so the compiled program keeps every activation anyway (a
chain of 6 four-tanh layers: 100 MiB of temporaries without it, 120 MiB with it,
measured by ``memory_analysis``). :func:`checkpoint` recomputes in a custom VJP
whose recomputed inputs depend on the incoming cotangent (``+ 0 * dy[0]``),
which no compiler may merge with the forward pass: the same chain needs 40 MiB.

The price of the tie: a non-finite first cotangent entry makes the recomputed
activations NaN (the gradient is then not finite anyway). Being a custom VJP, it
supports reverse mode only; the model applies it only with the speed layer on
(:mod:`pe_spectral.runtime.speed`), so the plain reference path keeps forward mode.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

__all__ = ["checkpoint"]


def _tie(tree, d_out):
  """``tree``'s floating leaves plus ``0 * d_out``'s first entry: the same
  values, computed only once the cotangent exists."""
  first = jax.tree.leaves(d_out)[0].reshape(-1)[0]
  zero = first * 0.0
  return jax.tree.map(
      lambda x: x + zero.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
      tree)


def checkpoint(f: Callable) -> Callable:
  """``f(diff, aux) -> out``, differentiated with respect to ``diff`` (a
  pytree of float arrays) by recomputing ``f`` in the backward pass; only
  ``diff`` and ``aux`` are kept. ``aux`` (masks, keys, traced positions) gets
  no cotangent. Works under ``jit`` and ``vmap``."""

  @jax.custom_vjp
  def g(diff, aux):
    return f(diff, aux)

  def fwd(diff, aux):
    return f(diff, aux), (diff, aux)

  def bwd(res, d_out):
    diff, aux = res
    _, vjp = jax.vjp(lambda d: f(d, aux), _tie(diff, d_out))
    return vjp(d_out)[0], None

  g.defvjp(fwd, bwd)
  return g
