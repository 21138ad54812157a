"""Executes notebooks/spectral_bounds.ipynb headless so it never rots."""
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "notebooks",
                        "spectral_bounds.ipynb")


def test_spectral_notebook_runs():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                   resources={"metadata": {"path": os.path.dirname(
                                       NOTEBOOK)}})
  client.execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
  assert "outer [" in text and "negative eigenvalues: 1" in text
