from pe_spectral import xla_config

# Before any test touches JAX: the measured-faster XLA:CPU settings.
xla_config.tune_cpu()

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

# The end-to-end reference run several test files compare against (smoke preset).
SWEEP_COMMON = ["--preset=smoke", "--seeds=2", "--steps=24", "--eval_every=6"]


def run_sweep(*args, env=None, check=True):
  """``python -m experiments.sweep ARGS`` in a subprocess."""
  full_env = dict(os.environ, **(env or {}))
  out = subprocess.run([sys.executable, "-m", "experiments.sweep", *args],
                       capture_output=True, text=True, env=full_env)
  if check and out.returncode != 0:
    raise AssertionError(f"sweep failed ({out.returncode}):\n{out.stderr[-3000:]}")
  return out


@pytest.fixture(scope="session")
def sweep_reference(tmp_path_factory):
  """``(workdir, CompletedProcess)`` of one uninterrupted sweep with SWEEP_COMMON."""
  wd = str(tmp_path_factory.mktemp("ref") / "run")
  return wd, run_sweep(*SWEEP_COMMON, f"--workdir={wd}")
