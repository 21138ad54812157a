"""Dropout bits, bit-identical to ``jax.random.bernoulli`` but fast on CPU.

On CPU, jaxlib lowers the ``threefry2x32`` primitive with *rolled* loops: a
``while`` over the five round groups whose rotation amounts are runtime values,
so each group writes the whole counter array to memory and no fusion sees
constant shifts. For the attention-dropout mask of the ``paper`` preset
(``[64, 16, 128, 128]`` per layer) that is ~170 ms per layer, a third of a
training step (measured in ``benchmarks/``). The same hash written out here as
straight-line ``jnp`` code (20 rounds, rotation amounts as constants) fuses into
one loop: ~26 ms for the same mask, memory-bound.

:func:`bernoulli` reproduces ``jax.random.bernoulli(key, p, shape)`` bit for bit
(the partitionable threefry counter layout: counter = flat element index split
into hi/lo 32-bit words; 32 bits = ``y0 ^ y1``; uniform float from the top 23
bits), so switching to it changes no result. Whenever that exact reproduction is
not guaranteed -- a non-threefry key, ``jax_threefry_partitionable`` off,
``jax_enable_x64`` on, 2**32 elements or more -- it simply calls
``jax.random.bernoulli``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["threefry2x32", "random_bits32", "bernoulli", "bernoulli_rows"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotl(v: jax.Array, r: int) -> jax.Array:
  return lax.shift_left(v, np.uint32(r)) | lax.shift_right_logical(v, np.uint32(32 - r))


def threefry2x32(k0, k1, x0, x1):
  """Threefry-2x32 (20 rounds) of counters ``(x0, x1)`` under key ``(k0, k1)``,
  all uint32, straight-line code. Returns ``(y0, y1)``."""
  ks = (k0, k1, k0 ^ k1 ^ _PARITY)
  x0 = x0 + ks[0]
  x1 = x1 + ks[1]
  for group in range(5):
    for r in _ROTATIONS[group % 2]:
      x0 = x0 + x1
      x1 = x0 ^ _rotl(x1, r)
    x0 = x0 + ks[(group + 1) % 3]
    x1 = x1 + ks[(group + 2) % 3] + np.uint32(group + 1)
  return x0, x1


def _raw_key(key: jax.Array):
  """``[2]`` uint32 threefry key data, or None if ``key`` is not a threefry key."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    if "threefry" not in str(jax.random.key_impl(key)):
      return None
    return jax.random.key_data(key)
  if (key.dtype == jnp.uint32 and key.shape == (2,)
      and "threefry" in str(jax.config.jax_default_prng_impl)):
    return key
  return None


def _exact_possible(shape) -> bool:
  return (jax.config.jax_threefry_partitionable and not jax.config.jax_enable_x64
          and math.prod(shape) < 2 ** 32)


def random_bits32(key: jax.Array, shape, *, full_shape=None, axis: int = 0,
                  start=0) -> jax.Array:
  """``jax.random.bits(key, shape, uint32)``, bit for bit (see module docstring).

  With ``full_shape``: the bits of the slice ``[start : start + shape[axis]]``
  along ``axis`` of ``jax.random.bits(key, full_shape, uint32)`` (``shape``
  equals ``full_shape`` elsewhere; ``start`` may be traced), computed without
  the rest of the array. Rows past ``full_shape[axis]`` get bits too (those
  of other elements): callers discard them."""
  shape = tuple(int(d) for d in shape)
  full = shape if full_shape is None else tuple(int(d) for d in full_shape)
  kd = _raw_key(key)
  if kd is None or not _exact_possible(full):
    bits = jax.random.bits(key, full, jnp.uint32)
    return bits if full_shape is None else _rows_of(bits, axis, start, shape[axis])
  lo = jnp.zeros(shape, jnp.uint32)
  stride = 1
  for d in reversed(range(len(shape))):
    if shape[d] > 1:
      lo = lo + lax.broadcasted_iota(jnp.uint32, shape, d) * np.uint32(stride)
    if d == axis and full_shape is not None:
      lo = lo + jnp.asarray(start, jnp.uint32) * np.uint32(stride)
    stride *= full[d]
  y0, y1 = threefry2x32(kd[0], kd[1], jnp.zeros(shape, jnp.uint32), lo)
  return y0 ^ y1


def _rows_of(whole: jax.Array, axis: int, start, size: int) -> jax.Array:
  """``whole[start : start + size]`` along ``axis`` (``start`` may be traced);
  rows past the end read padding."""
  pad = [(0, 0)] * whole.ndim
  pad[axis] = (0, size)  # rows past the end stay addressable
  return lax.dynamic_slice_in_dim(jnp.pad(whole, pad), start, size, axis)


def _uniform(bits: jax.Array) -> jax.Array:
  # jax.random.uniform's float32 construction: 23 mantissa bits in [1, 2), minus 1.
  return lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000),
                                  jnp.float32) - np.float32(1.0)


def bernoulli(key: jax.Array, p: float, shape) -> jax.Array:
  """``jax.random.bernoulli(key, p, shape)`` for a Python-float ``p``, bit for bit."""
  shape = tuple(int(d) for d in shape)
  if (not isinstance(p, (int, float)) or _raw_key(key) is None
      or not _exact_possible(shape)):
    return jax.random.bernoulli(key, p, shape)
  return _uniform(random_bits32(key, shape)) < np.float32(p)


def bernoulli_rows(key: jax.Array, p: float, full_shape, axis: int, start,
                   size: int) -> jax.Array:
  """Rows ``[start : start + size]`` along ``axis`` of
  ``jax.random.bernoulli(key, p, full_shape)``, bit for bit, without drawing
  the rest (``start`` may be traced; rows past the end are drawn too and are
  the caller's to drop). The blockwise attention kernel regenerates its
  dropout mask block by block with it."""
  full_shape = tuple(int(d) for d in full_shape)
  shape = full_shape[:axis] + (int(size),) + full_shape[axis + 1:]
  if not isinstance(p, (int, float)):
    raise TypeError(f"p must be a Python float, got {type(p).__name__}")
  if _raw_key(key) is None or not _exact_possible(full_shape):
    # jax.random.bernoulli's own bits, then the slice (memory of the whole mask)
    return _rows_of(jax.random.bernoulli(key, p, full_shape), axis, start, int(size))
  bits = random_bits32(key, shape, full_shape=full_shape, axis=axis, start=start)
  return _uniform(bits) < np.float32(p)
