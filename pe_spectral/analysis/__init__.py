"""Analyses of trained runs, pure functions of (steps, params, data): head and frequency
knock-outs (``ablation``), logit decomposition (``decompose``), curvature, extrapolation,
statistics (``stats``), Bayes ceilings (``ceilings``) and figures (``plotting``).
Imports ``pe``, ``nn``, ``data`` and ``runtime``; never ``training``.
"""
