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

__all__ = ["threefry2x32", "random_bits32", "bernoulli"]

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


def random_bits32(key: jax.Array, shape) -> jax.Array:
  """``jax.random.bits(key, shape, uint32)``, bit for bit (see module docstring)."""
  shape = tuple(int(d) for d in shape)
  kd = _raw_key(key)
  if kd is None or not _exact_possible(shape):
    return jax.random.bits(key, shape, jnp.uint32)
  lo = jnp.zeros(shape, jnp.uint32)
  stride = 1
  for d in reversed(range(len(shape))):
    if shape[d] > 1:
      lo = lo + lax.broadcasted_iota(jnp.uint32, shape, d) * np.uint32(stride)
    stride *= shape[d]
  y0, y1 = threefry2x32(kd[0], kd[1], jnp.zeros(shape, jnp.uint32), lo)
  return y0 ^ y1


def bernoulli(key: jax.Array, p: float, shape) -> jax.Array:
  """``jax.random.bernoulli(key, p, shape)`` for a Python-float ``p``, bit for bit."""
  shape = tuple(int(d) for d in shape)
  if (not isinstance(p, (int, float)) or _raw_key(key) is None
      or not _exact_possible(shape)):
    return jax.random.bernoulli(key, p, shape)
  bits = random_bits32(key, shape)
  # jax.random.uniform's float32 construction: 23 mantissa bits in [1, 2), minus 1.
  u = lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000),
                               jnp.float32) - np.float32(1.0)
  return u < np.float32(p)
