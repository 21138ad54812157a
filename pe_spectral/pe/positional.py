"""Every PE's pure ``jnp`` functions under one name (``positional.apply_rope``,
``positional.alibi_slopes``, ...): each is defined once, in its family's module
(:mod:`~pe_spectral.pe.absolute`, :mod:`~pe_spectral.pe.rotary`,
:mod:`~pe_spectral.pe.biases`, :mod:`~pe_spectral.pe.latent`,
:mod:`~pe_spectral.pe.contextual`, :mod:`~pe_spectral.pe.householder`), beside the
registered classes that use it; this module only gathers them for notebooks and the analyses.

Every function is framework-free and works under ``jax.jit`` and ``jax.vmap``.
The q/k transforms (:class:`Rotation`, :class:`PaperMLARotation`,
:class:`XPos`) are small frozen dataclasses: hashable, so a model's static
structure holds them, and callable as ``transform(q, k, positions) -> (q, k)``.
"""
from __future__ import annotations

from pe_spectral.pe.absolute import (  # noqa: F401
    distances,
    random_positions,
    sinusoidal_at,
    sinusoidal_table,
)
from pe_spectral.pe.base import (  # noqa: F401
    inv_softplus,
)
from pe_spectral.pe.biases import (  # noqa: F401
    alibi_bias,
    alibi_slopes,
    alibi_slopes_paper,
    decay_coeffs,
    decay_factor,
    decay_rates,
    fire_bias,
    fire_coeffs,
    fire_constants,
    fire_init,
    fire_psi,
    kerple_bias,
    kerple_coeffs,
    kerple_of_distance,
    kerple_params,
    relative_bias_from_table,
    relative_offsets,
    relative_position_bucket,
    relative_table_index,
    rotary_cos_bias,
    rotary_cos_coeffs,
)
from pe_spectral.pe.contextual import (  # noqa: F401
    POPE_PHASE_RANGE,
    carope_frequency,
    carope_phases,
    comrope_angles,
    comrope_generators,
    comrope_rotations,
    cope_bias,
    cope_positions,
    forget_gate_bias,
    pope_frequencies,
    pope_transform,
)
from pe_spectral.pe.householder import (  # noqa: F401
    path_betas,
    path_correction,
    path_directions,
    path_transport,
)
from pe_spectral.pe.latent import (  # noqa: F401
    PaperMLARotation,
    paper_mla_rotary,
)
from pe_spectral.pe.rotary import (  # noqa: F401
    PAIRINGS,
    ROPE_SCALINGS,
    RopeScaling,
    Rotation,
    XPos,
    apply_rope,
    dynamic_ntk_base,
    in_pairing,
    llama3_frequencies,
    ntk_base,
    p_rope_frequencies,
    pairs_to_channels,
    pi_frequencies,
    rope_angles,
    rope_inverse_frequencies,
    rotate,
    xpos_scale,
    yarn_attention_factor,
    yarn_correction_range,
    yarn_frequencies,
    yarn_turns_frequencies,
)

__all__ = [
    "sinusoidal_table", "rope_angles", "apply_rope", "PAIRINGS", "in_pairing",
    "pairs_to_channels", "rotate",
    "alibi_slopes",
    "alibi_slopes_paper", "alibi_bias", "relative_position_bucket", "relative_offsets",
    "relative_bias_from_table", "RopeScaling", "ROPE_SCALINGS", "pi_frequencies", "ntk_base",
    "yarn_frequencies", "yarn_correction_range", "yarn_turns_frequencies", "llama3_frequencies",
    "dynamic_ntk_base", "yarn_attention_factor", "rope_inverse_frequencies", "rotary_cos_bias",
    "rotary_cos_coeffs", "decay_rates", "decay_factor", "decay_coeffs", "p_rope_frequencies",
    "kerple_bias", "kerple_coeffs", "kerple_params", "Rotation", "PaperMLARotation",
    "paper_mla_rotary", "xpos_scale", "XPos", "fire_psi", "fire_init", "fire_coeffs",
    "fire_bias", "cope_positions", "cope_bias", "kerple_of_distance", "random_positions",
    "sinusoidal_at", "distances", "relative_table_index", "inv_softplus", "carope_frequency",
    "carope_phases", "fire_constants", "POPE_PHASE_RANGE", "pope_frequencies", "pope_transform",
    "forget_gate_bias",
    "comrope_generators", "comrope_rotations", "comrope_angles",
    "path_directions", "path_betas", "path_correction", "path_transport",
]
