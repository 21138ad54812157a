import json
import os
import subprocess
import sys


def test_spectra_cli_writes_json_and_figures(tmp_path):
  out = subprocess.run([sys.executable, "-m", "experiments.spectra", "--n=16,64",
                        "--dense_max=32", "--lanczos_steps=20", "--content_samples=1",
                        f"--outdir={tmp_path}"], capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  with open(tmp_path / "spectra.json") as f:
    res = json.load(f)
  assert {r["pe"] for r in res["toeplitz"]} == {"alibi", "relative", "sinusoidal",
                                                 "rope (Re G_θ1)"}
  assert all(r["contained"] for r in res["toeplitz"])
  methods = {(r["pe"], r["n"]): r["exact_method"] for r in res["toeplitz"]}
  assert methods[("sinusoidal", 16)] == "dense"
  assert methods[("sinusoidal", 64)].startswith("lanczos")
  for name in ("bound_tightness.png", "spread_growth.png", "content_contraction.png"):
    assert os.path.getsize(tmp_path / name) > 1000


def test_spectra_cli_rejects_bad_flags(tmp_path):
  for args in (["--pe=learned"], ["--n=1"], ["--d=7"]):
    out = subprocess.run([sys.executable, "-m", "experiments.spectra", *args,
                          f"--outdir={tmp_path}/x"], capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr
    assert not os.path.exists(tmp_path / "x")
