"""Speed of the spectral bounds: certified enclosure + Lanczos vs dense eigvalsh.

  python -m benchmarks.spectral [--out=benchmarks/out/spectral.json]

Prints a table (seconds per call, best of 3, compile excluded) for
n = 2^10 .. 2^20, and the ratio to dense float64 ``numpy.linalg.eigvalsh`` where
that is feasible (n <= 4096). Never part of the test suite.
"""
from __future__ import annotations

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.pe import spectral as S
from pe_spectral.runtime import xla_config


def _best(f, *args, reps=3):
  jax.block_until_ready(f(*args))
  best = float("inf")
  for _ in range(reps):
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    best = min(best, time.perf_counter() - t)
  return best


def main(out="benchmarks/out/spectral.json"):
  rows = []
  bounds = jax.jit(S.toeplitz_eig_bounds)
  for steps in (20, 40):
    lanczos = jax.jit(lambda c, v, s=steps: S.lanczos_ritz(S.make_toeplitz_matvec(c), v, s))
    for p in (10, 12, 14, 16, 18, 20):
      n = 2 ** p
      col = (0.9 ** jnp.arange(n, dtype=jnp.float32)) * jnp.cos(0.3 * jnp.arange(n))
      coeffs = S.toeplitz_coeffs(col)
      v0 = jax.random.normal(jax.random.key(0), (n,))
      tb = _best(bounds, coeffs)
      tl = _best(lanczos, col, v0)
      row = {"n": n, "lanczos_steps": steps, "bounds_s": tb, "lanczos_s": tl,
             "total_s": tb + tl}
      if n <= 4096 and steps == 40:
        dense = np.asarray(S.toeplitz_from_coeffs(coeffs), np.float64)
        t = time.perf_counter()
        np.linalg.eigvalsh(dense)
        row["dense_eigvalsh_s"] = time.perf_counter() - t
        row["dense_over_bounds_plus_lanczos"] = row["dense_eigvalsh_s"] / row["total_s"]
      rows.append(row)
      print(f"n=2^{p:<2} steps={steps:<3} bounds {tb * 1e3:8.2f} ms  lanczos "
            f"{tl * 1e3:9.2f} ms  total {row['total_s']:.3f} s"
            + (f"  dense eigvalsh {row['dense_eigvalsh_s']:.3f} s  "
               f"(ratio {row['dense_over_bounds_plus_lanczos']:.0f}x)"
               if "dense_eigvalsh_s" in row else ""), flush=True)
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with open(out, "w") as f:
    json.dump({"jax": jax.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
  xla_config.tune_cpu()  # before the first computation
  main(*sys.argv[1:2])
