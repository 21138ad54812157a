"""What every PE is built on: the hook interface (:class:`PositionalEncoding`),
the registry (:func:`register`, :func:`get`, :func:`names`, :func:`load_module`),
the checks of a PE's option fields, and the few helpers the families share.

The families live one per module beside this one -- ``absolute`` (NoPE,
sinusoidal, learned tables), ``rotary`` (RoPE and its variants, the
evaluation-time scalings, xPos), ``biases`` (additive and multiplicative
logit biases: T5, ALiBi, KERPLE, FIRE, rope_additive, alibi_multiplicative),
``latent`` (MLA's decoupled rotary channel) and ``contextual`` (PEs whose
position term depends on the tokens: CoPE, PoPE, rope_learned, alibi_data,
CARoPE), ``householder`` (PaTH's accumulated Householder transforms) and
``stickbreaking`` (stick-breaking attention's weights) -- each with its pure
``jnp`` functions and its registered classes together.
:mod:`pe_spectral.pe.encodings` registers them.

An encoding implements the hooks every consumer needs, and nothing outside
the PE modules switches on a PE's name:

* ``input_params`` / ``input_table`` -- a table added to the token embeddings
  (absolute PEs);
* ``layer_params`` / ``bias`` -- a per-layer additive logit bias
  ``[heads, n, n]`` (relative, ALiBi, KERPLE, FIRE);
* ``qk_transform`` / ``rotary_heads`` -- what is done to queries and keys, and
  on how many heads (RoPE, partial RoPE, p-RoPE, xPos, MLA's rotary channel);
* ``content_bias`` -- a logit term computed from the layer's queries and keys
  (CoPE's contextual positions), and from its input where the PE
  ``bias_reads_input`` (PaTH's transforms); it has no Toeplitz form;
* ``logit_factor`` -- a per-layer multiplicative factor ``[heads, n, n]`` on
  the content logits (``alibi_multiplicative``'s decay ``ρ^{|i-j|}``);
* ``layer_qk`` / ``logit_scale`` -- a q/k transform with the layer's PE
  parameters, which may depend on the content (PoPE's softplus magnitudes,
  ``rope_learned``'s trained frequencies);
* ``gate_bias`` -- an additive logit bias computed from the layer's input
  (``alibi_data``'s forget gates);
* ``toeplitz_coeffs`` -- the Hermitian Toeplitz coefficients of the PE's
  position matrix (the bias's symmetric part, the input table's Gram, or one
  rotary frequency's phase matrix), which feed ``spectral.toeplitz_eig_bounds``;
  ``bias_extremes`` where a closed form exists (ALiBi);
* ``validate`` -- the PE's own checks of a :class:`~pe_spectral.nn.model.ModelConfig`.

Hooks take the model config ``cfg`` and, where parameters are involved, a dict
``{name: array}`` of one layer's (or the model's) PE parameters; they are pure
``jnp`` and work under ``jit`` and ``vmap`` (over seeds, e.g.).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.util
import math
import os
import re
import sys
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "inv_softplus", "REGISTRY", "Kind", "KINDS", "COUPLINGS", "ATTENTION_MODES",
    "PositionalEncoding", "register",
    "load_module", "unregister", "names", "get"
]


def _check_count(name: str, value, minimum: int = 1) -> int:
  """A static integer count (sizes, dimensions) >= ``minimum``."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{name} must be an int, got {value!r}")
  if value < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {value}")
  return int(value)


def _check_base(base) -> float:
  """A frequency base: a finite number > 0 (``base ** (-2i/d)``)."""
  try:
    if isinstance(base, (str, bytes, bool)):
      raise TypeError
    b = float(base)
  except (TypeError, ValueError):
    raise TypeError(f"base must be a number, got {base!r}") from None
  if not math.isfinite(b) or b <= 0:
    raise ValueError(f"base must be finite and > 0, got {base!r}")
  return b


def _inverse_freqs(count: int, dim: int, base: float) -> np.ndarray:
  """``base ** (-2i / dim)`` for ``i < count`` in float64 (static: shapes only)."""
  _check_count("dim", dim)
  return _check_base(base) ** (-2.0 * np.arange(_check_count("count", count, 0)) / dim)


def inv_softplus(y: float) -> float:
  """``softplus⁻¹(y) = y + log(1 - e^-y)`` for ``y > 0``: the raw value a
  softplus-constrained parameter starts from. Written so that it does not
  overflow for large ``y`` (``log(expm1(y))`` is inf past ~709)."""
  return float(y + np.log(-np.expm1(-y)))


REGISTRY: dict[str, "PositionalEncoding"] = {}


# The ways a PE can enter attention (``PositionalEncoding.kinds``).
class Kind(enum.StrEnum):
  """A way a PE enters attention (``PositionalEncoding.kinds``). Members equal
  their strings, so a PE written elsewhere may still declare ``("bias",)``."""
  INPUT = "input"
  BIAS = "bias"
  ROTARY = "rotary"
  CONTEXTUAL = "contextual"
  FACTOR = "factor"
  DYNAMIC = "dynamic"
  GATED = "gated"


KINDS = tuple(Kind)


# How a PE couples position with content (``PositionalEncoding.coupling``):
# static additive / multiplicative, the same with a position term that
# depends on the tokens, or "" (none, absolute, or neither form).
COUPLINGS = ("", "additive", "multiplicative", "content_additive", "content_multiplicative")

# The attention masks a PE can be defined for (``PositionalEncoding.attention``).
ATTENTION_MODES = ("causal", "bidirectional")


def _int_field(obj, name: str, low: int, label: str = "") -> None:
  """Refuses a field of an options dataclass that is not an int >= ``low``
  (None passes: the field's default is resolved later)."""
  value = getattr(obj, name)
  if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                            or value < low):
    raise ValueError(f"{type(obj).__name__}.{name}{label} must be an int >= {low}, "
                     f"got {value!r}")


def _float_field(obj, name: str, ok: Callable[[float], bool], want: str) -> None:
  """Refuses a field that is not a real number with ``ok(value)`` (``want``
  says which); stores it as a float, so equal options hash equal."""
  value = getattr(obj, name)
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
    raise ValueError(f"{type(obj).__name__}.{name} must be {want}, got {value!r}")
  object.__setattr__(obj, name, float(value))


def _bool_field(obj, name: str) -> None:
  value = getattr(obj, name)
  if value is not None and not isinstance(value, bool):
    raise ValueError(f"{type(obj).__name__}.{name} must be True, False or None, got {value!r}")


class PositionalEncoding:
  """A PE that does nothing (NoPE); subclasses override the hooks they need.

  Class attributes:
    name: the registry name (``config.build``'s ``pe``).
    description: one line for ``--help``, the README and reports.
    latent_attention: the model uses DeepSeek-style latent attention (MLA).
    options_type: the frozen dataclass of this PE's own options (e.g.
      :class:`XPosOptions`), or None; ``ModelConfig.pe_options`` holds one
      (options for another PE are an error), and build()'s shortcut
      arguments (``rope_heads``, ``alibi_slopes``) are routed by it
      (:data:`SHORTCUT_OPTIONS`).
    reads: the shared PE-scoped ``ModelConfig`` fields (``model.PE_SCOPED``)
      this PE reads, e.g. ``rope_base``; with ``pe_options`` they make
      :attr:`config_fields`, and a run's ``config.json`` records no other
      scoped field.
    spectral_note: said by the spectral CLI when the PE has no Toeplitz form.
    kinds: the ways the PE enters attention, declared (a subset of
      :data:`KINDS`, e.g. ``("input", "rotary")``): ``input`` (a table added
      to the embeddings), ``bias`` (an additive logit bias), ``rotary`` (a
      q/k transform), ``contextual`` (a content-dependent logit term),
      ``factor`` (a multiplicative logit factor), ``dynamic`` (a q/k
      transform with the layer's parameters: :meth:`layer_qk`), ``gated`` (a
      bias computed from the layer's input: :meth:`gate_bias`). The model calls every hook
      whatever is declared; analyses (decomposition, length generalisation,
      the report) read ``kinds``.
    takes_positions: ``input_table`` and ``bias`` accept ``positions=`` (an
      int ``[seq]`` array, given only when they are not ``0..seq-1``), so the
      PE can train with randomized positions.
    attention: the masks the PE is defined for, a subset of
      :data:`ATTENTION_MODES` (``"causal"``, ``"bidirectional"``); a config
      whose ``causal`` asks for another is refused in one line. Every
      built-in PE has both forms (docs/encodings.md says which causal form);
      a PE defined by a sequential process over the prefix declares
      ``("causal",)``.
  """
  name: str = ""
  description: str = ""
  latent_attention: bool = False
  # the hooks accept ``positions=`` (arbitrary token positions): the PE can be
  # trained with randomized positions (``ModelConfig.random_positions``)
  takes_positions: bool = False
  options_type: Optional[type] = None
  reads: tuple[str, ...] = ()
  spectral_note: str = ""
  # How position couples with content in the logits, declared (COUPLINGS):
  # "multiplicative" (a Hadamard product with a PSD unit-diagonal Toeplitz
  # matrix: Schur contraction), "additive" (a Toeplitz bias: Weyl can widen),
  # "content_multiplicative" / "content_additive" (the same forms, with a
  # position term that depends on the tokens: no Toeplitz matrix), or ""
  # (none, absolute, or neither form).
  coupling: str = ""
  kinds: tuple[Kind, ...] = ()
  attention: tuple[str, ...] = ("causal", "bidirectional")
  # the θ = 0 logits are q·k (+ bias), so the decomposition's content and
  # position Grams add up to them (not PoPE's softplus magnitudes)
  bilinear_logits: bool = True
  # layer_qk also takes the layer's normed input ``x=`` (CARoPE's per-token
  # frequencies); other ``dynamic`` PEs are called without it
  qk_reads_input: bool = False
  # content_bias also takes the layer's normed input ``x=`` (PaTH's
  # Householder directions); other ``contextual`` PEs are called without it
  bias_reads_input: bool = False
  # the layer parameter ``[heads, frequencies]`` that holds trained
  # frequencies (rope_learned's θ): recorded at every evaluation
  # (``frequencies.jsonl``) and compared with ``frequencies(cfg)``
  frequency_param: str = ""

  # --- what it is ---------------------------------------------------------
  @property
  def causal_only(self) -> bool:
    """Defined for causal attention only (PaTH, stick-breaking): a run of it
    is built causal (``config.build``)."""
    return "bidirectional" not in self.attention

  @property
  def config_fields(self) -> tuple[str, ...]:
    """The PE-scoped ``ModelConfig`` fields that apply to this PE."""
    return (("pe_options",) if self.options_type is not None else ()) + self.reads

  def validate(self, cfg) -> None:
    """Raises ``ValueError`` for a config this PE cannot run."""

  def complete_options(self, cfg, options):
    """``options`` (of :attr:`options_type`) with the defaults that depend on
    the rest of ``cfg`` filled in (called once, when ``cfg`` is built)."""
    return options

  # --- input (absolute) ---------------------------------------------------
  def input_params(self, cfg, next_key: Callable[[], jax.Array], std: float) -> dict:
    """Model-level PE parameters (``std``: the token embedding's init scale);
    ``next_key()`` draws a key (call it only if needed)."""
    return {}

  def input_table(self, cfg, params: dict, seq_len: int,
                  positions=None) -> Optional[jax.Array]:
    """``[seq_len, d_model]`` added to the token embeddings, or None.
    ``positions`` (int ``[seq_len]``) is passed only to a PE that
    ``takes_positions``, and only when they are not ``0..seq_len-1``."""
    return None

  # --- additive bias ------------------------------------------------------
  def layer_params(self, cfg, next_key: Callable[[], jax.Array]) -> dict:
    """One layer's PE parameters (drawn in layer order)."""
    return {}

  def bias(self, cfg, params: dict, seq_len: int, positions=None) -> Optional[jax.Array]:
    """One layer's logit bias ``[heads, seq_len, seq_len]``, or None
    (``positions``: as for :meth:`input_table`)."""
    return None

  def bias_extremes(self, cfg, seq_len: int):
    """Exact ``(λ_min, λ_max)`` per head of the bias's symmetric part where a
    closed form exists, else None."""
    return None

  def content_bias(self, cfg, params: dict, q, k, mask) -> Optional[jax.Array]:
    """A logit term ``[batch, heads, q, k]`` from the layer's (transformed)
    queries/keys ``[batch, seq, heads, d]`` and its attention ``mask``, or None.
    A PE with :attr:`bias_reads_input` gets ``x=``, the layer's normed input
    ``[batch, seq, d_model]``, as one more keyword."""
    return None

  def logit_factor(self, cfg, params: dict, seq_len: int,
                   positions=None) -> Optional[jax.Array]:
    """One layer's multiplicative factor ``[heads, seq_len, seq_len]`` on the
    content logits ``q k^T / sqrt(d)`` (applied before any bias), or None."""
    return None

  # --- a layer's own q/k transform, and a bias from its input -------------
  def layer_qk(self, cfg, params: dict, q, k, positions, freq_mask=None):
    """``(q', k')`` from one layer's queries/keys ``[batch, seq, heads, d]``
    with its PE ``params`` (``positions`` broadcast against ``[batch, seq,
    heads]``; ``freq_mask [heads, frequencies]``: 0 turns that frequency's
    position off). Declared by kind ``dynamic``; the outputs may be wider.
    A PE with :attr:`qk_reads_input` gets ``x=``, the layer's normed input
    ``[batch, seq, d_model]``, as one more keyword."""
    raise NotImplementedError(f"PE {self.name!r} declares no layer q/k transform")

  def logit_scale(self, cfg) -> Optional[float]:
    """The logit scale when it is not ``1/sqrt`` of the transformed width."""
    return None

  def frequency_count(self, cfg) -> int:
    """Frequencies per head that ``freq_mask`` switches (``layer_qk`` PEs)."""
    return 0

  def frequencies(self, cfg) -> Optional[np.ndarray]:
    """A ``layer_qk`` PE's ``[frequency_count]`` frequencies (at
    initialisation where they are trained), or None."""
    return None

  def gate_bias(self, cfg, params: dict, x, mask=None):
    """``[batch, heads, seq, seq]`` additive bias from one layer's (normed)
    input ``x [batch, seq, d_model]``. Declared by kind ``gated``."""
    raise NotImplementedError(f"PE {self.name!r} declares no gate bias")

  # --- how logits become weights ---------------------------------------------
  def normalisation(self, cfg) -> str:
    """How the attention turns logits into weights: ``"softmax"``, or
    stick-breaking (``"stickbreaking"``, ``"stickbreaking_current"``:
    ``attention.NORMALISATIONS``), for a PE whose order comes from there."""
    return "softmax"

  # --- q/k transform --------------------------------------------------------
  def qk_transform(self, cfg):
    """A hashable ``transform(q, k, positions) -> (q, k)``, or None."""
    return None

  def rotary_heads(self, cfg) -> int:
    """Heads (of a standard attention layer) the transform applies to."""
    return 0

  def rotary_dim(self, cfg) -> int:
    """Width of the transformed q/k channel."""
    return cfg.pe_options.rope_dim if self.latent_attention else cfg.head_dim

  def rotary_frequencies(self, cfg) -> Optional[np.ndarray]:
    """``[rotary_dim/2]`` inverse frequencies when the transform is a pure
    rotation (the logits then have the Hadamard form), else None."""
    t = self.qk_transform(cfg)
    if t is None or not t.is_rotation:
      return None
    return t.frequencies(self.rotary_dim(cfg))

  # --- spectral view --------------------------------------------------------
  def toeplitz_coeffs(self, cfg, params: dict, seq_len: int) -> Optional[jax.Array]:
    """``[..., 2n-1]`` Hermitian Toeplitz coefficients of the PE's position
    matrix at length ``seq_len`` (see module docstring), or None."""
    return None

  toeplitz_label: str = ""  # what toeplitz_coeffs describe, for tables

  def table_reach(self, cfg) -> Optional[int]:
    """The largest offset the PE's parameters tell apart (a clipped relative
    table's distance), or None when unbounded."""
    return None

  def run_label(self, model: dict) -> str:
    """How a run of this PE with model config dict ``model`` is labelled."""
    return self.name

  def __repr__(self) -> str:
    return f"<PE {self.name}>"


def register(encoding: PositionalEncoding, *, replace: bool = False) -> PositionalEncoding:
  """Adds ``encoding`` to the registry under ``encoding.name``."""
  if not encoding.name or not encoding.name.replace("_", "").isalnum():
    raise ValueError(f"a PE name must be a non-empty identifier, got {encoding.name!r}")
  unknown = [k for k in encoding.kinds if k not in KINDS]
  if unknown or len(set(encoding.kinds)) != len(encoding.kinds):
    raise ValueError(f"PE {encoding.name!r} declares kinds {encoding.kinds!r}; each must be "
                     f"one of {', '.join(KINDS)}, once")
  if encoding.coupling not in COUPLINGS:
    raise ValueError(f"PE {encoding.name!r} declares coupling {encoding.coupling!r}; it must "
                     f"be one of {', '.join(map(repr, COUPLINGS))}")
  modes = encoding.attention
  if not modes or any(m not in ATTENTION_MODES for m in modes) or len(set(modes)) != len(modes):
    raise ValueError(f"PE {encoding.name!r} declares attention {modes!r}; it must be one or "
                     f"both of {', '.join(map(repr, ATTENTION_MODES))}")
  opts = encoding.options_type
  if opts is not None and not (dataclasses.is_dataclass(opts) and isinstance(opts, type)
                               and opts.__dataclass_params__.frozen):
    raise ValueError(f"PE {encoding.name!r}: options_type must be a frozen dataclass, "
                     f"got {opts!r}")
  if encoding.name in REGISTRY and not replace:
    raise ValueError(f"PE {encoding.name!r} is already registered; choose another name")
  REGISTRY[encoding.name] = encoding
  return encoding


# PE modules loaded by load_module: spec -> the PE names it registered.
_LOADED: dict[str, tuple[str, ...]] = {}


def load_module(spec: str) -> tuple[str, ...]:
  """Imports a researcher's module that registers PEs, once, and returns the
  names it registered: ``spec`` is a dotted module name (importable from the
  current directory or ``sys.path``) or the path of a ``.py`` file. What
  ``ModelConfig.pe_module`` records, so that every analysis of a run loads
  the module again. A module that registers a name already taken fails with
  one line naming it (ValueError), as does one that cannot be imported."""
  if not isinstance(spec, str) or not spec.strip():
    raise ValueError(f"a PE module must be a module name or a .py path, got {spec!r}")
  if spec in _LOADED:
    return _LOADED[spec]
  before = set(REGISTRY)
  try:
    if spec.endswith(".py") or os.sep in spec:
      path = os.path.abspath(spec)
      if not os.path.isfile(path):
        raise ValueError(f"PE module {spec!r}: no such file")
      name = "pe_spectral_user_" + re.sub(r"\W", "_", path)
      if name not in sys.modules:
        loader = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        try:
          loader.loader.exec_module(module)
        except BaseException:
          del sys.modules[name]
          raise
    else:
      importlib.import_module(spec)
  except ImportError as e:
    raise ValueError(f"PE module {spec!r} cannot be imported: {e}") from None
  except ValueError as e:
    if str(e).startswith("PE module"):
      raise
    raise ValueError(f"PE module {spec!r}: {e}") from None
  added = tuple(n for n in REGISTRY if n not in before)
  _LOADED[spec] = added
  return added


def unregister(name: str) -> None:
  """Removes ``name``; a PE module that registered it counts as not loaded
  (:func:`load_module` runs it again; a ``.py`` file is re-executed)."""
  REGISTRY.pop(name, None)
  for spec, added in list(_LOADED.items()):
    if name in added:
      del _LOADED[spec]
      for key in [k for k, m in sys.modules.items()
                  if getattr(m, "__file__", None) == os.path.abspath(spec)]:
        del sys.modules[key]


def names() -> tuple[str, ...]:
  return tuple(REGISTRY)


def get(name: str) -> PositionalEncoding:
  """The registered encoding ``name``; a clear error lists the valid names."""
  try:
    return REGISTRY[name]
  except KeyError:
    raise ValueError(f"unknown positional encoding {name!r}; valid names: "
                     f"{', '.join(REGISTRY)}") from None


def _symmetric(coeffs):
  """Symmetric part of Toeplitz coefficients ``[..., 2n-1]`` (Hermitian, real)."""
  return 0.5 * (coeffs + coeffs[..., ::-1])


def _phase_coeffs(freqs, seq_len: int) -> Optional[jax.Array]:
  """``[1, 2n-1]`` coefficients ``cos(k θ_1)``: the real part of one
  frequency's phase matrix (None with fewer than two frequencies)."""
  if freqs is None or len(freqs) < 2:
    return None
  k = jnp.arange(-(seq_len - 1), seq_len, dtype=jnp.float32)
  return jnp.cos(k * float(freqs[1]))[None]
