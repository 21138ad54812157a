"""Executes notebooks/spectral_bounds.ipynb headless so it never rots."""
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "notebooks",
                        "spectral_bounds.ipynb")


@pytest.mark.long
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


@pytest.mark.long
def test_inspect_notebook_opens_a_tiny_run():
  """notebooks/inspect_run.ipynb on the tiny run it trains itself: no error,
  and its four figures drawn (curves, attention maps, ablation, spectra)."""
  path = os.path.join(os.path.dirname(NOTEBOOK), "inspect_run.ipynb")
  nb = nbformat.read(path, as_version=4)
  env_run = os.environ.pop("PE_SPECTRAL_RUN", None)  # the notebook's own tiny run
  try:
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={
        "metadata": {"path": os.path.dirname(path)}}).execute()
  finally:
    if env_run is not None:
      os.environ["PE_SPECTRAL_RUN"] = env_run
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  assert len(images) == 4
  text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
  assert "deposit score per layer" in text and "analysing the checkpoint of step 24" in text
