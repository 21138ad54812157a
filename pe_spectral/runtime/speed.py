"""The CPU speed layer's one switch.

Three pieces make training faster on XLA:CPU without changing what is computed
(beyond float rounding; benchmarks/README.md has the measurements):

* :func:`attention.attention` differentiates through a hand-written VJP;
* :func:`linear.add_bias` (used by :class:`linear.Linear`) gives the
  bias gradient as one matrix-vector product;
* :func:`rng.bernoulli` draws dropout bits equal to ``jax.random.bernoulli``
  without its slower lowering.

A fourth, :func:`xla_config.tune_cpu`, is an XLA:CPU flag that a program sets
when it starts (its argument says whether).

Inside ``with speed.reference():`` every piece takes its plain path: autodiff
through ``jnp`` (so ``jax.jvp`` / ``jax.jacfwd`` work; the custom VJPs do not
support forward mode), ``y + b``, ``jax.random.bernoulli``. The equality tests
(tests/test_attention.py) hold the fast path to the reference. Only code
chooses the path -- no environment variable or import order does.

The switch is read when a function is traced: a function already compiled
keeps the path it was traced with.
"""
from __future__ import annotations

import contextlib
import functools

__all__ = ["enabled", "reference", "cache_per_path"]

_enabled = True


def enabled() -> bool:
  """True when the speed layer is on (the default)."""
  return _enabled


def cache_per_path(maxsize: int = 128):
  """``functools.lru_cache`` for functions that build jitted programs, with the
  switch (:func:`enabled`) in the key: the switch is read while tracing, so a
  program traced on one path is never handed to a caller on the other."""
  def decorate(build):
    cached = functools.lru_cache(maxsize=maxsize)(
        lambda fast, *args, **kwargs: build(*args, **kwargs))

    @functools.wraps(build)
    def wrapper(*args, **kwargs):
      return cached(enabled(), *args, **kwargs)
    wrapper.cache_clear = cached.cache_clear
    return wrapper
  return decorate


@contextlib.contextmanager
def reference():
  """Traces inside this block take the plain reference path."""
  global _enabled
  previous, _enabled = _enabled, False
  try:
    yield
  finally:
    _enabled = previous
