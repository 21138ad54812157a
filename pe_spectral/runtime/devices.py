"""Device placement of seed-stacked state, apart from training.

Seeds are the one parallel axis: with several devices (or processes, through
``jax.distributed``) the seed axis is sharded over a 1-D ``('seeds',)`` mesh
and everything else (the dataset) is replicated; XLA propagates the sharding
through ``jit``/``vmap``/``scan``. On one device every function here is the
identity, or a plain host copy.
"""
from __future__ import annotations

import time
from typing import Optional

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

__all__ = ["seed_mesh", "seed_sharding", "shard", "replicate", "fetch", "wait_ready"]


def seed_mesh(num_seeds: int, devices=None) -> Optional[jax.sharding.Mesh]:
  """A 1-D ``('seeds',)`` mesh over the largest device count dividing ``num_seeds``.

  Returns None on a single device. Seeds are never padded: with 8 devices and
  6 seeds, 6 devices are used (documented in the README).
  """
  devices = jax.devices() if devices is None else devices
  n = max(d for d in range(1, len(devices) + 1) if num_seeds % d == 0)
  if n == 1:
    return None
  # Auto axes: XLA propagates the seed sharding through jit/vmap/scan.
  return jax.make_mesh((n,), ("seeds",), devices=devices[:n],
                       axis_types=(jax.sharding.AxisType.Auto,))


def _place(tree, mesh, spec):
  if mesh is None:
    return tree
  sharding = NamedSharding(mesh, spec)
  if jax.process_count() == 1:
    return jax.device_put(tree, sharding)

  def put(x):  # every process holds the same host value; each places its shards
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return x  # already a global array
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

  return jax.tree.map(put, tree)


def seed_sharding(mesh) -> NamedSharding:
  """The seed axis split over ``mesh``: the sharding of every seed-stacked array."""
  return NamedSharding(mesh, PartitionSpec("seeds"))


def shard(tree, mesh):
  """Places a seed-leading pytree on ``mesh`` (no-op without one)."""
  return _place(tree, mesh, PartitionSpec("seeds"))


def replicate(tree, mesh):
  """Places a pytree (e.g. the dataset) on every device of ``mesh``."""
  return _place(tree, mesh, PartitionSpec())


def wait_ready(tree, *, max_poll_s: float = 0.05) -> None:
  """Returns once every array in ``tree`` is computed. Unlike a blocking
  read, the wait sleeps in short steps (1 ms growing to ``max_poll_s``), so
  signal handlers run at once while an asynchronous computation is running."""
  pause = 1e-3
  for leaf in jax.tree.leaves(tree):
    if not isinstance(leaf, jax.Array):
      continue
    while not leaf.is_ready():
      time.sleep(pause)
      pause = min(2 * pause, max_poll_s)


def fetch(x) -> np.ndarray:
  """A (possibly multi-process sharded) array as a full host NumPy array.

  Waits by polling (:func:`wait_ready`), so that Python -- a Ctrl-C
  handler -- keeps running while the device computes."""
  wait_ready(x)
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)
