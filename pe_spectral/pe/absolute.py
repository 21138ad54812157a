"""Absolute PEs: no PE at all, the fixed sinusoid and a learned table added to
the token embeddings -- their functions and registered classes together
(and the random-position draw of Ruoss et al., which indexes them)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.pe.base import Kind, PositionalEncoding, _check_count, _inverse_freqs

__all__ = [
    "sinusoidal_gram_coeffs",
    "sinusoidal_table", "random_positions", "sinusoidal_at", "distances", "NoPE", "Sinusoidal",
    "Learned"
]


def sinusoidal_table(num_positions: int, dim: int, base: float = 10000.0,
                     dtype=jnp.float32) -> jax.Array:
  """Fixed sinusoidal table ``[num_positions, dim]`` (interleaved layout).

  ``table[p, 2i] = sin(p * w_i)``, ``table[p, 2i+1] = cos(p * w_i)`` with
  ``w_i = base ** (-2i / dim)``. For odd ``dim`` the last column is a sine.
  The paper's 'rope' input table uses the block layout ``[sin | cos]``; it holds
  the same values up to a fixed permutation of columns, which is a symmetry of
  the model's initial distribution.
  """
  # Computed in NumPy (float64) so that under jit it is a constant, not sin/cos
  # re-evaluated inside the fused embedding add for every batch row.
  _check_count("num_positions", num_positions, 0)
  half = (_check_count("dim", dim) + 1) // 2
  pos = np.arange(num_positions, dtype=np.float64)[:, None]
  angles = pos * _inverse_freqs(half, dim, base)[None, :]
  table = np.stack([np.sin(angles), np.cos(angles)], axis=-1)
  return jnp.asarray(table.reshape(num_positions, 2 * half)[:, :dim], dtype)


def random_positions(key: jax.Array, seq_len: int, position_range: int) -> jax.Array:
  """Randomized positions (Ruoss et al. 2023, arXiv 2305.16843): ``seq_len``
  distinct integers drawn uniformly from ``[0, position_range)``, sorted --
  the order of the tokens is kept, their spacing is random. int32 ``[seq_len]``."""
  if seq_len > position_range:
    raise ValueError(f"cannot draw {seq_len} distinct positions from a range of "
                     f"{position_range}")
  pick = jax.random.choice(key, position_range, (seq_len,), replace=False)
  return jnp.sort(pick).astype(jnp.int32)


def sinusoidal_at(positions: jax.Array, dim: int, base: float = 10000.0) -> jax.Array:
  """:func:`sinusoidal_table` rows at arbitrary ``positions [seq]`` -> ``[seq, dim]``."""
  half = (dim + 1) // 2
  angles = (jnp.asarray(positions, jnp.float32)[:, None]
            * jnp.asarray(_inverse_freqs(half, dim, base), jnp.float32)[None, :])
  table = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)
  return table.reshape(angles.shape[0], 2 * half)[:, :dim]


def distances(positions: jax.Array, *, causal: bool = False) -> jax.Array:
  """``|p_i - p_j|`` as float32 ``[seq, seq]``; causal: 0 above the diagonal."""
  pos = jnp.asarray(positions, jnp.float32)
  d = jnp.abs(pos[:, None] - pos[None, :])
  if causal:
    n = pos.shape[0]
    d = jnp.where(jnp.arange(n)[None, :] <= jnp.arange(n)[:, None], d, 0.0)
  return d


def _sinusoid_input(cfg, seq_len: int, positions=None) -> jax.Array:
  """The fixed sinusoid ``[seq_len, d_model]`` at ``0..seq_len-1`` or ``positions``."""
  if positions is not None:
    return sinusoidal_at(positions, cfg.d_model, cfg.rope_base)
  return sinusoidal_table(seq_len, cfg.d_model, cfg.rope_base)


def _table_rows(table, seq_len: int, positions=None) -> jax.Array:
  """Rows ``0..seq_len-1`` (or ``positions``) of a learned position table."""
  rows = table.shape[0]
  if seq_len > rows:
    raise ValueError(f"sequence length {seq_len} exceeds max_len {rows} of the "
                     f"learned position table")
  if positions is not None:  # drawn below the range by construction
    return table[positions]
  return table[:seq_len]


class NoPE(PositionalEncoding):
  name = "nope"
  description = "no positional encoding"
  spectral_note = "no positional term: nothing to bound"


class Sinusoidal(PositionalEncoding):
  name = "sinusoidal"
  description = "fixed sinusoid added to the input (paper: absolute)"
  toeplitz_label = "Gram P Pᵀ of the input table"
  reads = ("rope_base",)
  kinds = (Kind.INPUT,)

  takes_positions = True

  def input_table(self, cfg, params, seq_len, positions=None):
    return _sinusoid_input(cfg, seq_len, positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    if cfg.d_model % 2:
      return None
    return sinusoidal_gram_coeffs(seq_len, cfg.d_model, cfg.rope_base)[None]


class Learned(PositionalEncoding):
  name = "learned"
  description = "learned absolute table added to the input (paper: random)"
  spectral_note = "a learned absolute table is not Toeplitz"
  kinds = (Kind.INPUT,)

  takes_positions = True

  def input_params(self, cfg, next_key, std):
    rows = cfg.position_range  # max_len, or the randomized positions' range
    return {"pos_table": std * jax.random.normal(next_key(), (rows, cfg.d_model))}

  def input_table(self, cfg, params, seq_len, positions=None):
    return _table_rows(params["pos_table"], seq_len, positions)


def sinusoidal_gram_coeffs(n: int, d: int, base: float = 10000.0):
  """``t_k = Σ_j cos(k ω_j)``: coefficients of the Toeplitz Gram ``P Pᵀ``."""
  if d % 2:
    raise ValueError("sinusoidal_gram_coeffs needs an even d")
  k = jnp.arange(-(n - 1), n, dtype=jnp.int32)
  omega = jnp.asarray(_inverse_freqs(d // 2, d, base), jnp.float32)  # RoPE's frequencies
  return jnp.cos(k[:, None].astype(jnp.float32) * omega).sum(-1)
