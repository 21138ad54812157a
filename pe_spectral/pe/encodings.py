"""The PE registry: each positional encoding is one object, in one place.

Each family's module holds its pure functions and its registered classes
(:mod:`~pe_spectral.pe.absolute`, :mod:`~pe_spectral.pe.rotary`,
:mod:`~pe_spectral.pe.biases`, :mod:`~pe_spectral.pe.latent`,
:mod:`~pe_spectral.pe.contextual`, :mod:`~pe_spectral.pe.householder`,
:mod:`~pe_spectral.pe.stickbreaking`); the hook
interface and the registry are in :mod:`~pe_spectral.pe.base` (its docstring lists
the hooks). This module registers the built-in PEs and is the one name the rest of the library, the
programs and notebooks use: ``encodings.get("rope")``, ``encodings.names()``,
``encodings.register(MyPE())``. Nothing outside the PE modules switches on a
PE's name.

Adding a PE is one subclass plus :func:`register`:

>>> class Constant(PositionalEncoding):
...   name = "constant"
...   def bias(self, cfg, params, seq_len):
...     return jnp.zeros((cfg.num_heads, seq_len, seq_len))
>>> register(Constant())  # now config.build(..., pe="constant") trains
"""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp  # noqa: F401  (the docstring's example)

from pe_spectral.pe.absolute import (  # noqa: F401
  Learned,
  NoPE,
  Sinusoidal,
)
from pe_spectral.pe.base import (  # noqa: F401
  ATTENTION_MODES,
  COUPLINGS,
  KINDS,
  REGISTRY,
  Kind,
  PositionalEncoding,
  get,
  inv_softplus,
  load_module,
  names,
  register,
  unregister,
)
from pe_spectral.pe.biases import (  # noqa: F401
  Alibi,
  AlibiMultiplicative,
  AlibiOptions,
  Fire,
  FireOptions,
  Kerple,
  Relative,
  RopeAdditive,
)
from pe_spectral.pe.contextual import (  # noqa: F401
  DAPE,
  AlibiData,
  AlibiDataOptions,
  CARoPE,
  ComRoPE,
  ComRoPEOptions,
  CoPE,
  CoPEOptions,
  DAPEOptions,
  PoPE,
  PoPEOptions,
  RopeLearned,
)
from pe_spectral.pe.householder import (  # noqa: F401
  PaTH,
  PaTHOptions,
)
from pe_spectral.pe.latent import (  # noqa: F401
  MLA,
  MLAOptions,
)
from pe_spectral.pe.rotary import (  # noqa: F401
  PartialRopeOptions,
  PRopeOptions,
  Rotary,
  XPosEncoding,
  XPosOptions,
)
from pe_spectral.pe.stickbreaking import (  # noqa: F401
  StickBreaking,
  StickBreakingOptions,
)

__all__ = [
    "PositionalEncoding", "register", "unregister", "get", "names", "load_module", "REGISTRY",
    "Kind", "KINDS", "PartialRopeOptions", "PRopeOptions", "XPosOptions", "AlibiOptions",
    "FireOptions",
    "CoPEOptions", "MLAOptions", "PoPEOptions", "AlibiDataOptions", "ComRoPEOptions", "DAPEOptions",
    "PaTHOptions", "StickBreakingOptions",
    "COUPLINGS",
    "ATTENTION_MODES",
    "SHORTCUT_OPTIONS", "short_option", "rope_heads_option"
]


# config.build()'s shortcut arguments for a PE option: argument -> (options type, field).
SHORTCUT_OPTIONS = {"rope_heads": (PartialRopeOptions, "heads"),
                    "alibi_slopes": (AlibiOptions, "slopes")}


def short_option(pe: str, argument: str) -> Optional[str]:
  """The field of ``pe``'s options that the shortcut ``argument`` sets, or
  None when ``pe`` has no such option (it is then left alone)."""
  kind, name = SHORTCUT_OPTIONS[argument]
  return name if get(pe).options_type is kind else None


def rope_heads_option(cfg) -> Optional[int]:
  """Partial RoPE's head count of a ``ModelConfig``; None for any other PE
  (what summaries and reports record as ``rope_heads``)."""
  opts = cfg.pe_options
  return opts.heads if isinstance(opts, PartialRopeOptions) else None


for _enc in (
    NoPE(), Sinusoidal(), Learned(), Relative(), Alibi(),
    Rotary("rope", "rotary on all heads, interleaved pairs"),
    Rotary("partial_rope", "rotary on the first k heads only (rope_heads, default 1)",
           partial=True),
    Rotary("rope_sinusoidal", "input sinusoid + rotary (what the paper's code calls rope)",
           input_sinusoid=True),
    Kerple("log"), Kerple("power"),
    Rotary("p_rope", "p-RoPE: rotary on the highest fraction (0.75) of the frequency "
           "pairs, the rest unrotated", fraction_option=True),
    MLA(), Fire(), XPosEncoding(), CoPE(), RopeAdditive(), AlibiMultiplicative(),
    PoPE(), RopeLearned(), AlibiData(), CARoPE(), ComRoPE(), DAPE(), PaTH(), StickBreaking(),
):
  register(_enc)
del _enc
