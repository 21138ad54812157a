"""Linear layers as PyTorch builds them, with XLA:CPU-friendly gradients.

:func:`torch_linear` is an ``nnx.Linear`` initialised like ``torch.nn.Linear``
(docs/protocol.md); its :class:`Linear` keeps nnx's parameters and forward and,
with the speed layer on (:mod:`pe_spectral.runtime.speed`), takes its bias
gradient as a matrix-vector product (:func:`add_bias`) and its kernel gradient
through one chosen transpose (:func:`matmul`): both measured faster on the CPU
(benchmarks/README.md), both equal to autodiff's.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from pe_spectral.runtime import speed

__all__ = ["torch_linear_init", "torch_linear", "Linear", "add_bias", "matmul"]


# ----------------------------------------------------------------------------
# Initialisers (PyTorch defaults; docs/protocol.md).
# ----------------------------------------------------------------------------

def torch_linear_init(fan_in: int):
  """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: torch.nn.Linear's weight and bias init."""
  bound = 1.0 / math.sqrt(fan_in)

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  return init


def add_bias(y: jax.Array, bias: jax.Array) -> jax.Array:
  """``y + bias`` over the last axis. With the speed layer on
  (:mod:`pe_spectral.runtime.speed`) the bias gradient is a matrix-vector product:
  autodiff's equivalent sum over all leading axes becomes a reduce-window on
  XLA:CPU, ~7x slower for a ``[64, 128, 256]`` gradient, and there is one per
  linear layer."""
  return _add_bias_fast(y, bias) if speed.enabled() else y + bias


@jax.custom_vjp
def _add_bias_fast(y: jax.Array, bias: jax.Array) -> jax.Array:
  return y + bias


def _add_bias_fwd(y, bias):
  return y + bias, None


def _add_bias_bwd(_, d_y):
  rows = d_y.reshape(-1, d_y.shape[-1])
  return d_y, jnp.ones((rows.shape[0],), rows.dtype) @ rows


_add_bias_fast.defvjp(_add_bias_fwd, _add_bias_bwd)


def matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
  """``x @ kernel`` over the last axis of ``x``. With the speed layer on the
  kernel's gradient transposes the smaller of its two operands: XLA:CPU
  materialises the transpose of one operand of a weight-gradient dot, and left
  to itself it picked the larger (the ``[tokens, d_ff]`` gradient of the first
  feed-forward layer: 2 x 11.7 ms of a 140 ms ``lm`` step; benchmarks/README.md)."""
  return _matmul_fast(x, kernel) if speed.enabled() else x @ kernel


@jax.custom_vjp
def _matmul_fast(x, kernel):
  return x @ kernel


def _matmul_fwd(x, kernel):
  return x @ kernel, (x, kernel)


def _matmul_bwd(res, d_y):
  x, kernel = res
  rows, d_rows = x.reshape(-1, x.shape[-1]), d_y.reshape(-1, d_y.shape[-1])
  d_x = d_y @ kernel.T
  if rows.shape[1] <= d_rows.shape[1]:  # [in, out] = x^T dy, x^T the smaller copy
    d_k = jax.lax.optimization_barrier(rows.T) @ d_rows
  else:  # [out, in] = dy^T x, dy^T the smaller copy, then the small result turned
    d_k = (jax.lax.optimization_barrier(d_rows.T) @ rows).T
  return d_x, d_k


_matmul_fast.defvjp(_matmul_fwd, _matmul_bwd)


class Linear(nnx.Linear):
  """``nnx.Linear`` (same parameters, same forward) whose bias is added by
  :func:`add_bias` and whose product is :func:`matmul`."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    inputs, kernel = self.promote_dtype((inputs, self.kernel[...]), dtype=self.dtype)
    if self.precision is not None or self.dot_general is not jax.lax.dot_general:
      y = self.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())),
                           precision=self.precision)
    else:
      y = matmul(inputs, kernel)
    if self.bias is None:
      return y
    (bias,) = self.promote_dtype((self.bias[...],), dtype=self.dtype)
    return add_bias(y, bias)


def torch_linear(in_features: int, out_features: int, *, rngs: nnx.Rngs,
                 use_bias: bool = True, init_scheme: str = "torch") -> nnx.Linear:
  """An ``nnx.Linear`` initialised like ``torch.nn.Linear`` (``init_scheme="torch"``).

  ``init_scheme="lecun"``: LeCun-normal kernel (std ``1/sqrt(fan_in)``), zero bias.
  """
  if init_scheme == "torch":
    init = torch_linear_init(in_features)
    return Linear(in_features, out_features, use_bias=use_bias,
                  kernel_init=init, bias_init=init, rngs=rngs)
  if init_scheme == "lecun":
    return Linear(in_features, out_features, use_bias=use_bias,
                  kernel_init=jax.nn.initializers.lecun_normal(),
                  bias_init=jax.nn.initializers.zeros, rngs=rngs)
  raise ValueError(f"unknown init_scheme {init_scheme!r}")
