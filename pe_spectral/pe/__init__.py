"""The positional encodings: pure ``jnp`` tables and transforms (``positional``), the registry
of PE objects and their hooks (``encodings``), and the Toeplitz/Hadamard spectral bounds with
the PEs' closed forms (``spectral``). Imports ``runtime`` only.
"""
