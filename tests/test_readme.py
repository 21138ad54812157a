"""The README's Python examples run as written, and say what they claim: the
Toeplitz bounds enclose the dense spectrum (numpy.linalg.eigvalsh), the
registered PE trains, the pure steps lower the loss."""
import os
import re

import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _blocks():
  text = open(os.path.join(ROOT, "README.md")).read()
  return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_has_its_three_python_examples():
  blocks = _blocks()
  assert len(blocks) == 3
  assert any("class HalfAlibi" in b for b in blocks)


def test_spectral_example_encloses_the_dense_spectrum():
  block = next(b for b in _blocks() if "toeplitz_eig_bounds" in b)
  ns = {}
  exec(block, ns)  # noqa: S102 -- the README's own code
  c = np.asarray(ns["first_col"], np.float64)  # symmetric: T[i, j] = c[|i - j|]
  n = len(c)
  dense = c[np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])]
  eig = np.linalg.eigvalsh(dense)
  assert float(ns["lo"]) <= eig[0] + 1e-6 and eig[-1] - 1e-6 <= float(ns["hi"])


def test_new_pe_example_registers_and_builds():
  from pe_spectral.pe import encodings
  from pe_spectral.training import config
  block = next(b for b in _blocks() if "class HalfAlibi" in b)
  try:
    exec(block, {})  # noqa: S102
    rc = config.build("smoke", "distance", "half_alibi")
    assert rc.model.pe == "half_alibi"
    assert encodings.get("half_alibi").coupling == "additive"
  finally:
    encodings.unregister("half_alibi")


def test_training_example_runs_and_lowers_the_loss():
  block = next(b for b in _blocks() if "make_steps" in b)
  block = block.replace('config.build("cpu"', 'config.build("smoke"')  # test-sized
  ns = {}
  exec(block, ns)  # noqa: S102
  losses = np.asarray(ns["losses"])  # [seeds, steps] or [steps, seeds]
  assert losses.size == 30 and np.all(np.isfinite(losses))
  first, last = (losses[:, 0], losses[:, -1]) if losses.shape[0] == 3 else (losses[0], losses[-1])
  assert np.all(last < first)


def test_the_readme_counts_and_lists_every_registered_pe():
  """The README's "registry of N PEs" and its PE table name exactly the
  registry's PEs (a new PE that is not listed, or a count that is stale, fails)."""
  from pe_spectral.pe import encodings
  text = open(os.path.join(ROOT, "README.md")).read()
  count = int(re.search(r"a registry of (\d+) PEs", text).group(1))
  table = text[text.index("## Positional encodings"):]
  table = table[:table.index("\n\n", table.index("| `--pe`"))]
  listed = set(re.findall(r"^\| `([a-z0-9_]+)`", table, re.M))
  for row in re.findall(r"^\| `([a-z0-9_]+)`, `([a-z0-9_]+)` \|", table, re.M):
    listed.update(row)
  assert listed == set(encodings.names())
  assert count == len(encodings.names())
