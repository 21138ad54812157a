"""pe-spectral: positional encodings, content-position coupling, spectral analysis."""
__version__ = "0.1.0"
