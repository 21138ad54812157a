"""Public functions refuse what they cannot compute, with one-line errors
(each case here once returned wrong numbers, NaN or a raw Python error)."""
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.pe import positional as P
from pe_spectral.pe import spectral as S
from pe_spectral.training.train import TrainConfig


def test_apply_rope_refuses_integer_input_and_misfit_positions():
  x = jnp.ones((4, 8))
  with pytest.raises(TypeError, match="floating-point"):
    P.apply_rope(jnp.ones((4, 8), jnp.int32), np.arange(4))
  with pytest.raises(ValueError, match="do not broadcast"):
    P.apply_rope(x, np.arange(5))
  with pytest.raises(ValueError, match="do not broadcast"):  # broadcasts, but grows x
    P.apply_rope(x, np.arange(4)[:, None, None])
  # What fits still rotates: [batch, seq, heads, dim] with [seq, 1] positions.
  y = P.apply_rope(jnp.ones((2, 4, 3, 8)), np.arange(4)[:, None])
  assert y.shape == (2, 4, 3, 8) and np.isfinite(np.asarray(y)).all()


@pytest.mark.parametrize("base", [0.0, -2.0, float("nan"), float("inf")])
def test_bases_must_be_finite_and_positive(base):
  with pytest.raises(ValueError, match="base must be finite and > 0"):
    P.apply_rope(jnp.ones((4, 8)), np.arange(4), base=base)
  with pytest.raises(ValueError, match="base must be finite and > 0"):
    P.sinusoidal_table(4, 8, base=base)
  with pytest.raises(ValueError, match="base must be finite and > 0"):
    P.rope_inverse_frequencies(8, base=base)
  with pytest.raises(TypeError, match="base must be a number"):
    P.rope_inverse_frequencies(8, base="10000")


def test_counts_must_be_integers():
  with pytest.raises(TypeError, match="num_positions must be an int"):
    P.sinusoidal_table(4.0, 8)
  with pytest.raises(TypeError, match="num_heads must be an int"):
    P.alibi_slopes(2.5)
  with pytest.raises(ValueError, match="num_heads must be >= 1"):
    P.alibi_slopes(0)
  with pytest.raises(TypeError, match="num_points must be an int"):
    S.toeplitz_eig_bounds(jnp.ones(7), num_points=8.0)
  # A sequence of grid sizes (tuple or array) is still accepted.
  lo, hi = S.toeplitz_eig_bounds(jnp.ones(7), num_points=np.array([8, 16]))
  t = S.toeplitz_from_coeffs(jnp.ones(7))
  eig = np.linalg.eigvalsh(np.asarray(t, np.float64))
  assert lo <= eig.min() + 1e-6 and eig.max() <= hi + 1e-6


def test_decay_rates_refuse_a_growth():
  with pytest.raises(ValueError, match=">= 0"):
    P.decay_rates(jnp.array([0.5, -1.0]))
  with pytest.raises(ValueError, match="finite"):
    P.decay_rates(jnp.array([np.nan]))
  np.testing.assert_allclose(P.decay_rates(jnp.array([0.0, 1.0])), [1.0, np.exp(-1.0)],
                             rtol=1e-6)


def test_learning_rate_checks():
  with pytest.raises(ValueError, match="learning_rate"):
    TrainConfig(learning_rate=float("nan"))
  with pytest.raises(ValueError, match="learning_rate"):
    TrainConfig(learning_rate=-1e-3)
  with pytest.warns(UserWarning, match="underflows in float32"):
    TrainConfig(learning_rate=1e-300)
  assert np.float32(1e-300) == 0  # the reason for the warning
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    TrainConfig(learning_rate=1e-3)
    TrainConfig(learning_rate=0.0)  # a deliberate frozen run: no warning


def test_analysis_launchers_check_every_workdir_first(tmp_path):
  """``cli.checked_workdirs``: a comma list (ablate, decompose) or a list flag
  (lengths) is split, and the first path that is not a sweep workdir is named."""
  from experiments import cli
  good, other = tmp_path / "a", tmp_path / "b"
  for d in (good, other):
    d.mkdir()
    (d / "config.json").write_text("{}")
  wds, err = cli.checked_workdirs(f" {good}, {other} ,")
  assert wds == [str(good), str(other)] and err is None
  assert cli.checked_workdirs([str(good), str(other)]) == ([str(good), str(other)], None)
  wds, err = cli.checked_workdirs(f"{good},{tmp_path / 'missing'}")
  assert "missing" in err and "config.json" in err
  assert "config.json" in cli.checked_workdirs(None)[1]
  assert "config.json" in cli.checked_workdirs("")[1]


def test_every_remedy_of_the_library_has_a_flag_hint():
  """experiments.cli maps each Remedy of the library's run errors to flags: a
  new Remedy without a hint would print a KeyError instead of a hint."""
  from experiments import cli
  from pe_spectral.runtime.errors import Remedy, RunError
  assert set(cli.REMEDY_HINTS) == set(Remedy)
  for remedy in Remedy:
    line = cli.error_line(RunError("it broke", remedy))
    assert line.startswith("it broke; ") and "--" in line and "resume=False" not in line
  assert cli.error_line(RunError("plain")) == "plain"
  assert cli.error_line(ValueError("v")) == "v"
