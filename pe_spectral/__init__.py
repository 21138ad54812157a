"""pe-spectral: positional encodings, content-position coupling, spectral analysis.

The library lives in rooms by role (docs/architecture.md):

=============  ==============================================================
``pe``         the PEs: pure tables and transforms, the registry, the
               Toeplitz/Hadamard spectral bounds and the PEs' closed forms
``nn``         attention kernels and the Transformer (Flax NNX, thin)
``data``       the tasks' data
``training``   configs and presets, the pure steps, the run loop, checkpoints,
               workdirs, recorders, TensorBoard events
``analysis``   knock-outs, logit decomposition, curvature, extrapolation,
               statistics, plots
``runtime``    the machine: devices, memory budgets, XLA flags, the speed switch
=============  ==============================================================

``import pe_spectral`` imports no JAX (a program may still set XLA's flags
after it). The names below load their room on first use:

>>> import pe_spectral as pes
>>> rc = pes.build("smoke", "distance", "rope")        # training.config.build
>>> pes.encodings.names()[:3]                          # the PE registry
('nope', 'sinusoidal', 'learned')

Each former top-level module (``pe_spectral.encodings``, ``pe_spectral.spectral``,
...) is reachable under its old name too, so ``from pe_spectral import spectral``
keeps working in notebooks written before the rooms.
"""
import importlib

__version__ = "0.1.0"

# module name -> its room (the former flat layout's names)
_MODULES = {
    "positional": "pe", "encodings": "pe", "spectral": "pe",
    "attention": "nn", "model": "nn", "remat": "nn", "rng": "nn",
    "tasks": "data",
    "train": "training", "runner": "training", "checkpoint": "training",
    "workdir": "training", "events": "training", "config": "training", "sizing": "training",
    "ablation": "analysis", "decompose": "analysis", "curvature": "analysis",
    "extrapolation": "analysis", "stats": "analysis", "plotting": "analysis",
    "ceilings": "analysis",
    "devices": "runtime", "speed": "runtime", "xla_config": "runtime", "errors": "runtime",
    "timefmt": "runtime", "memory": "runtime",
}

# the curated functions: name -> "module:attribute"
_FUNCTIONS = {
    # configs and runs
    "build": "training.config:build",
    "RunSpec": "training.config:RunSpec",
    "register_preset": "training.config:register_preset",
    "run": "training.runner:run",
    "load_run": "training.runner:load_run",
    # the PE registry
    "PositionalEncoding": "pe.encodings:PositionalEncoding",
    "register": "pe.encodings:register",
    "get_pe": "pe.encodings:get",
    "pe_names": "pe.encodings:names",
    # the spectral bounds
    "toeplitz": "pe.spectral:toeplitz",
    "toeplitz_eig_bounds": "pe.spectral:toeplitz_eig_bounds",
    "hadamard_bounds": "pe.spectral:hadamard_bounds",
    "lanczos_ritz": "pe.spectral:lanczos_ritz",
}

ROOMS = ("pe", "nn", "data", "training", "analysis", "runtime")

__all__ = sorted(_FUNCTIONS) + list(ROOMS)


def __getattr__(name):
  if name in ROOMS:
    return importlib.import_module(f"{__name__}.{name}")
  if name in _MODULES:
    return importlib.import_module(f"{__name__}.{_MODULES[name]}.{name}")
  if name in _FUNCTIONS:
    module, attr = _FUNCTIONS[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(_MODULES) | set(_FUNCTIONS) | set(ROOMS))
