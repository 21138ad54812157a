import json
import os
import subprocess
import sys

import pytest
from conftest import run_cli_batch


@pytest.mark.long
def test_spectra_cli_writes_json_and_figures(tmp_path):
  out = subprocess.run([sys.executable, "-m", "experiments.spectra", "--n=16,64",
                        "--pe=all",
                        "--faithful", "--preset=smoke",
                        "--dense_max=32", "--lanczos_steps=20", "--content_samples=1",
                        f"--outdir={tmp_path}"], capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  with open(tmp_path / "spectra.json") as f:
    res = json.load(f)
  from pe_spectral.pe import encodings
  analysed = {r["pe"] for r in res["toeplitz"]}
  assert analysed | set(res["no_toeplitz"]) == set(encodings.names())  # the registry's list
  assert {"alibi", "relative", "sinusoidal", "rope", "fire", "kerple_log", "kerple_power",
          "p_rope"} <= analysed
  # said, not faked (faithful MLA: the paper's transform is not a rotation)
  assert set(res["no_toeplitz"]) == {"nope", "learned", "xpos", "cope", "mla", "pope",
                                     "alibi_data", "carope", "dape", "path",
                                     "stickbreaking"}
  assert "not a rotation" in res["no_toeplitz"]["mla"]
  assert "content" in res["no_toeplitz"]["cope"]
  assert "content" in res["no_toeplitz"]["carope"]
  assert all(r["contained"] for r in res["toeplitz"])
  # the PE a faithful run trains: ALiBi head 0 has the paper's slope exp(0) = 1
  alibi = [r for r in res["toeplitz"] if r["pe"] == "alibi"]
  assert all(r["t1"] == -1.0 and r["exact_method"] == "closed form" for r in alibi)
  assert res["config"]["rotary_dim"] == 8  # smoke head_dim
  # the coupling controls: the KMS factor and the cosine bias are bounded too
  assert {"alibi_multiplicative", "rope_additive"} <= analysed
  kms = [r for r in res["toeplitz"] if r["pe"] == "alibi_multiplicative"]
  assert all(r["lam_min"] > 0 for r in kms)  # positive definite (faithful head 0: ρ = 1/e)
  c = res["coupling"]
  assert c["rope"].startswith("multiplicative: Schur") and "Schur" in c["alibi_multiplicative"]
  assert c["alibi"].startswith("additive: Weyl") and c["rope_additive"].startswith("additive")
  assert "no Schur guarantee" in c["xpos"] and c["nope"].startswith("neither")
  methods = {(r["pe"], r["n"]): r["exact_method"] for r in res["toeplitz"]}
  assert methods[("sinusoidal", 16)] == "dense"
  assert methods[("sinusoidal", 64)].startswith("lanczos")
  for name in ("bound_tightness.png", "spread_growth.png", "content_contraction.png"):
    assert os.path.getsize(tmp_path / name) > 1000


def test_spectra_cli_rejects_bad_flags(tmp_path):
  bad = (["--pe=bogus"], ["--n=1"], ["--preset=huge"])  # one process (conftest.run_cli_batch)
  for out in run_cli_batch("experiments.spectra",
                           [([*args, f"--outdir={tmp_path}/x"], tmp_path) for args in bad]):
    assert out.returncode == 2 and "error:" in out.stderr
    assert not os.path.exists(tmp_path / "x")
