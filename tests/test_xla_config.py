"""xla_config.tune_cpu: a program's entry point sets XLA's CPU flag before JAX
starts its backend; only its argument chooses (no environment variable), and a
call that comes too late says so instead of being ignored."""
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from pe_spectral.runtime import xla_config

_FLAG = "xla_cpu_experimental_ynn_fusion_type"
_KNOWS_FLAG = (0, 10) <= xla_config._jaxlib_version() < (0, 12)
_PROBE = ("import os, sys; from pe_spectral.runtime import xla_config as x; "
          "r = x.tune_cpu({arg}); print(r, os.environ.get('XLA_FLAGS', ''), "
          "'jax' in sys.modules)")


def _probe(arg: str) -> str:
  env = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0")
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return subprocess.run([sys.executable, "-c", _PROBE.format(arg=arg)], env=env, cwd=repo,
                        capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not _KNOWS_FLAG, reason="this jaxlib does not know the flag")
def test_before_jax_starts_the_flag_is_set_and_false_leaves_xla_flags_alone():
  on = _probe("")
  assert on.startswith("True ") and _FLAG in on and "--xla_backend_optimization_level=0" in on
  assert on.rstrip().endswith("False")  # nothing imported JAX to set it
  off = _probe("False")
  assert off.split() == ["False", "--xla_backend_optimization_level=0", "False"]


@pytest.mark.skipif(not _KNOWS_FLAG, reason="this jaxlib does not know the flag")
def test_after_the_backend_started_a_change_is_refused_in_one_line(monkeypatch):
  jnp.zeros(1).block_until_ready()  # the backend has read XLA_FLAGS
  monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
  with pytest.raises(RuntimeError, match="after JAX started its backend"):
    xla_config.tune_cpu()
  assert os.environ["XLA_FLAGS"] == "--xla_backend_optimization_level=0"
  assert xla_config.tune_cpu(False) is False  # nothing to set, nothing refused
  monkeypatch.setenv("XLA_FLAGS", f"--{_FLAG}=")  # already set (by the test entry point)
  assert xla_config.tune_cpu() is True
