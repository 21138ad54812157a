from pe_spectral import xla_config

# Before any test touches JAX: the measured-faster XLA:CPU settings.
xla_config.tune_cpu()
