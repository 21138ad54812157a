"""How many bytes a compiled program needs, and how many this process may use.

Generic pieces of memory sizing, for any compiled program: XLA's own
``memory_analysis`` (:func:`needed_bytes`), the first candidate that fits a
budget (:func:`first_fit`, :func:`choose_seed_group`), and the budget itself
(:func:`memory_budget`: a size given, or a share of the device's free memory).
Training's seed groups (``training/sizing.py``) and the head ablation's batch
both size themselves with these.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

import jax

__all__ = ["needed_bytes", "first_fit", "choose_seed_group", "device_memory_limit",
           "device_memory_available", "memory_budget_error", "memory_budget"]


def needed_bytes(compiled) -> int:
  """Temporaries plus arguments of a compiled program (XLA's ``memory_analysis``)."""
  m = compiled.memory_analysis()
  return int(m.temp_size_in_bytes) + int(m.argument_size_in_bytes)


def first_fit(candidates, needs: Callable, limit_bytes: int) -> tuple:
  """The first of ``candidates`` (widest first) with ``needs(c) <= limit_bytes``,
  and the bytes measured ``{c: bytes}``; the last candidate if none fits (the
  caller warns). Each measurement compiles once, so the first fit ends the search."""
  measured = {}
  for c in candidates:
    measured[c] = int(needs(c))
    if measured[c] <= limit_bytes:
      return c, measured
  return c, measured


def choose_seed_group(num_seeds: int, needs: Callable[[int], int],
                      limit_bytes: int) -> tuple[int, dict]:
  """The largest divisor ``g`` of ``num_seeds`` with ``needs(g) <= limit_bytes``
  (tried from the widest down, so the first fit ends the search), and the
  bytes measured ``{g: bytes}``. If not even 1 fits, 1 (the caller warns)."""
  if num_seeds < 1:
    raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
  return first_fit([d for d in range(num_seeds, 0, -1) if num_seeds % d == 0], needs,
                   limit_bytes)


def device_memory_limit(device=None) -> Optional[int]:
  """The device's allocatable bytes (``memory_stats()['bytes_limit']`` on a
  GPU/TPU), the machine's physical memory on a CPU, or None if unknown."""
  device = device or jax.devices()[0]
  stats = None
  try:
    stats = device.memory_stats()
  except Exception:  # noqa: BLE001 -- backends without memory stats
    stats = None
  if stats and stats.get("bytes_limit"):
    return int(stats["bytes_limit"])
  if device.platform == "cpu":
    try:
      return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
      return None
  return None


def device_memory_available(device=None) -> Optional[int]:
  """Bytes a new program may still use: on a CPU the kernel's ``MemAvailable``
  (other processes share the machine's memory), capped by
  :func:`device_memory_limit`; elsewhere :func:`device_memory_limit`."""
  device = device or jax.devices()[0]
  limit = device_memory_limit(device)
  if device.platform != "cpu":
    return limit
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          avail = int(line.split()[1]) * 1024
          return avail if limit is None else min(avail, limit)
  except (OSError, ValueError, IndexError):
    pass
  return limit


def memory_budget_error(memory_gib: Optional[float], fraction: float) -> Optional[str]:
  """What is wrong with a :func:`memory_budget`'s ``memory_gib`` / ``fraction``
  (named as the programs' ``memory_gib`` / ``memory_fraction``), or None."""
  if memory_gib is not None and not memory_gib > 0:
    return f"memory_gib must be > 0, got {memory_gib}"
  if not 0 < fraction <= 1:
    return f"memory_fraction must be in (0, 1], got {fraction}"
  return None


def memory_budget(*, memory_gib: Optional[float] = None, fraction: float = 1.0,
                  margin: float = 0.9, device=None) -> tuple[Optional[int], str]:
  """The bytes a program of this process may use, and where the number comes
  from: ``memory_gib`` if given, else ``margin`` x ``fraction`` of the device's
  free memory (:func:`device_memory_available`; ``fraction`` is this process's
  share when several share one device). ``(None, reason)`` when unknown."""
  if err := memory_budget_error(memory_gib, fraction):
    raise ValueError(err)
  if memory_gib is not None:
    return int(memory_gib * 1024 ** 3), "memory_gib"
  free = device_memory_available(device)
  if free is None:
    return None, "the device's free memory is unknown (memory_gib says it)"
  share = f" x memory_fraction={fraction:g}" if fraction < 1 else ""
  return int(margin * fraction * free), f"{margin:.0%} of {free / 1024 ** 3:.2f} GiB free{share}"
