"""Attention kernels and dropout bits (``attention``, ``rng``), remat that XLA:CPU keeps
(``remat``), and the Transformer (``model``: ``ModelConfig``, ``init_model``, ``apply_model``).
Imports ``pe`` and ``runtime``.
"""
