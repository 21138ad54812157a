"""Configs and presets (``config``), the pure steps (``train``), seed groups sized by compiling
(``sizing``), a run's life (``runner``), checkpoints, workdirs and TensorBoard events.
The top room: it may import every other.
"""
