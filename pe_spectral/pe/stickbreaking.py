"""Stick-breaking attention (Tan et al. 2024, "Scaling Stick-Breaking
Attention: An Efficient Implementation and In-depth Study", arXiv 2410.17980;
reference shawntan/stickbreaking-attention and fla-org/flash-linear-attention,
``fla/ops/stickbreaking_attn``): no positional encoding at all -- the softmax
is replaced by a sequential break of each query's unit of attention, nearest
key first, so order comes from the normalisation
(:func:`pe_spectral.nn.attention.stick_breaking_weights`). Its registered class.
"""
from __future__ import annotations

import dataclasses

from pe_spectral.pe.base import PositionalEncoding

__all__ = ["StickBreakingOptions", "StickBreaking"]


@dataclasses.dataclass(frozen=True)
class StickBreakingOptions:
  """``stickbreaking``: whether a query also takes a share of its own value
  (the reference kernels' ``attend_current``, False by default there and here:
  the first token's output is then zero)."""
  attend_current: bool = False

  def __post_init__(self):
    if not isinstance(self.attend_current, bool):
      raise ValueError(f"StickBreakingOptions.attend_current must be True or False, "
                       f"got {self.attend_current!r}")


class StickBreaking(PositionalEncoding):
  """Stick-breaking attention: ``A_ij = σ(z_ij) ∏_{j<l<i} (1 - σ(z_il))`` for
  ``j < i`` (``l <= i``, ``j <= i`` with ``attend_current``), ``z = q·k/√d``, the
  output ``Σ_j A_ij v_j``; a row's weights sum to ``1 - ∏_j (1 - σ(z_ij))``
  and the rest of the stick is dropped, as the reference layer drops it. No
  position index enters; with every logit equal to ``c`` the weights are
  ``σ(c) σ(-c)^(i-1-j)``, an exponential recency decay (in log space ALiBi's
  Toeplitz bias with slope ``-log σ(-c)``). Defined causally only."""
  name = "stickbreaking"
  description = ("stick-breaking attention: A_ij = σ(z_ij) Π_{j<l<i} (1 - σ(z_il)) instead "
                 "of softmax, no PE (order from the break; causal)")
  coupling = ""
  kinds = ()
  attention = ("causal",)
  options_type = StickBreakingOptions
  spectral_note = ("stickbreaking has no position term: its order comes from the weights, "
                   "log A_ij = log σ(z_ij) + Σ_{j<l<i} log σ(-z_il), a content-dependent "
                   "additive form over the tokens between (ALiBi's Toeplitz bias when every "
                   "logit is equal)")

  def normalisation(self, cfg) -> str:
    return "stickbreaking_current" if cfg.pe_options.attend_current else "stickbreaking"

  def validate(self, cfg):
    if cfg.attention_block is not None:
      raise ValueError(f"stickbreaking's weights run on the plain path, not the blockwise "
                       f"kernel (attention_block={cfg.attention_block}); leave it unset")
