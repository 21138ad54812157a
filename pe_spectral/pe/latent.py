"""MLA (DeepSeek-style latent attention) with its decoupled rotary channel:
the paper's rotary layout and the registered class."""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from pe_spectral.pe.absolute import _table_rows
from pe_spectral.pe.base import Kind, PositionalEncoding, _bool_field, _int_field, _phase_coeffs
from pe_spectral.pe.rotary import _ROPE_SCALING, Rotation, _turn_pairs, rope_angles

__all__ = [
    "paper_mla_rotary", "PaperMLARotation", "MLAOptions", "MLA"
]


def paper_mla_rotary(x: jax.Array, positions: jax.Array, *,
                     base: float = 10000.0) -> jax.Array:
  """The paper's MLA 'rotary' transform, bug included (faithful mode only).

  Its cache row for position p is ``[sin(p theta_0..) | cos(p theta_0..)]`` and
  the code reads the even columns as sines and the odd columns as cosines, so
  the sine and cosine of one pair come from different frequencies. It is not
  a rotation (norms change; scores are not relative). See docs/protocol.md.
  """
  d = x.shape[-1]
  angles = rope_angles(positions, d, base)  # [..., d/2]
  cache = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., d]
  sin, cos = cache[..., 0::2], cache[..., 1::2]  # one pair's sine and cosine differ in angle
  out = _turn_pairs(x, jnp.repeat(cos, 2, axis=-1), jnp.repeat(sin, 2, axis=-1))
  return out.astype(x.dtype)


@dataclasses.dataclass(frozen=True)
class PaperMLARotation:
  """The paper's MLA transform (:func:`paper_mla_rotary`) on q and k; not a rotation."""
  base: float = 10000.0
  is_rotation = False

  def __call__(self, q, k, positions):
    return (paper_mla_rotary(q, positions, base=self.base),
            paper_mla_rotary(k, positions, base=self.base))


@dataclasses.dataclass(frozen=True)
class MLAOptions:
  """``mla`` (DeepSeek-style latent attention; its options are the
  attention's): ``latent_dim``, the width of the shared key/value latent;
  ``rope_dim``, the width of the decoupled rotary channel; ``shared_rope_query``,
  one rotary query for all heads (the paper) instead of one per head;
  ``paper_rotary``, the paper's transform (not a rotation). None for a width:
  ``d_model // 2`` and the head width (the paper's ratios), filled in when the
  ``ModelConfig`` is built, so a record states the widths that ran; None for
  a switch: on in faithful mode, off in clean mode."""
  latent_dim: Optional[int] = None
  rope_dim: Optional[int] = None
  shared_rope_query: Optional[bool] = None
  paper_rotary: Optional[bool] = None

  def __post_init__(self):
    _int_field(self, "latent_dim", 1)
    _int_field(self, "rope_dim", 1)
    if self.rope_dim is not None and self.rope_dim % 2:
      raise ValueError(f"MLAOptions.rope_dim must be even, got {self.rope_dim}")
    _bool_field(self, "shared_rope_query")
    _bool_field(self, "paper_rotary")


class MLA(PositionalEncoding):
  name = "mla"
  description = "DeepSeek-style multi-head latent attention with decoupled RoPE"
  latent_attention = True
  # the faithful model's zero-initialised absolute table is not declared: the
  # paper's MLA is a rotary PE (decompose and the report treat it so)
  kinds = (Kind.ROTARY,)
  options_type = MLAOptions
  reads = ("rope_base",) + _ROPE_SCALING
  spectral_note = ("faithful mode: the paper's MLA transform is not a rotation (its sines and "
                   "cosines come from different frequencies), so it has no phase matrix")
  toeplitz_label = "Re of one frequency's phase matrix (θ_1) of the rotary channel"

  def complete_options(self, cfg, options):
    if options.rope_dim is None and cfg.head_dim % 2:
      raise ValueError(f"MLA's rotary width defaults to the head width, d_model/num_heads = "
                       f"{cfg.head_dim}, which is odd: set an even pe_options.rope_dim")
    return dataclasses.replace(
        options,
        latent_dim=cfg.d_model // 2 if options.latent_dim is None else options.latent_dim,
        rope_dim=cfg.head_dim if options.rope_dim is None else options.rope_dim)

  def shared_rope_query(self, cfg) -> bool:
    """One rotary query for all heads (the paper; default in faithful mode)."""
    opt = cfg.pe_options.shared_rope_query
    return cfg.faithful if opt is None else opt

  def paper_rotary(self, cfg) -> bool:
    """The paper's non-rotation transform (default in faithful mode)."""
    opt = cfg.pe_options.paper_rotary
    return cfg.faithful if opt is None else opt

  def validate(self, cfg):
    if cfg.rope_scaling is not None and self.paper_rotary(cfg):
      raise ValueError("rope_scaling does not apply to the paper's MLA transform "
                       "(it is not a rotation)")

  takes_positions = True

  def input_params(self, cfg, next_key, std):
    # the paper's MLA model has a zero-initialised learned absolute table
    if cfg.faithful:
      return {"pos_table": jnp.zeros((cfg.position_range, cfg.d_model))}
    return {}

  def input_table(self, cfg, params, seq_len, positions=None):
    if "pos_table" not in params:
      return None
    return _table_rows(params["pos_table"], seq_len, positions)

  def qk_transform(self, cfg):
    if self.paper_rotary(cfg):
      return PaperMLARotation(base=cfg.rope_base)
    return Rotation(base=cfg.rope_base, scaling=cfg.rope_scaling_spec)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return _phase_coeffs(self.rotary_frequencies(cfg), seq_len)
