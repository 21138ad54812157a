"""TensorBoard events (pe_spectral.training.events): the scalars of each evaluation,
written while training and by the converter, read back with TensorBoard's own
loader and compared with metrics.jsonl -- also across an interruption between
an evaluation and its checkpoint."""
import json
import os
import shutil

import numpy as np
import pytest

from pe_spectral.training import config as configs
from pe_spectral.training import events, runner

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_scalars_per_seed_and_mean_leave_out_what_is_not_finite():
  metrics = {"step": 6, "train_loss": [1.0, 3.0], "test_loss": [2.0, None],
             "test_accuracy": [0.5, 0.25], "train_accuracy": [0.75, float("nan")]}
  spectra = {"step": 6, "contraction_ratio": [[[1.0, 3.0, 2.0]], [[4.0, 4.0, 5.0]]]}
  curvature = {"step": 6, "top_eigs": [[9.0, 1.0], [7.0, 2.0]], "grad_norm": [0.5, None]}
  out = events.scalars([3, 5], metrics, spectra, curvature)
  assert out["seed3"] == {"loss/train": 1.0, "loss/test": 2.0, "accuracy/train": 0.75,
                          "accuracy/test": 0.5, "spectra/contraction_ratio/layer0": 2.0,
                          "curvature/top_eigs": 9.0, "curvature/grad_norm": 0.5}
  assert out["seed5"] == {"loss/train": 3.0, "accuracy/test": 0.25,
                          "spectra/contraction_ratio/layer0": 4.0, "curvature/top_eigs": 7.0}
  assert out["mean"]["loss/train"] == 2.0 and out["mean"]["loss/test"] == 2.0
  assert out["mean"]["accuracy/train"] == 0.75 and out["mean"]["curvature/top_eigs"] == 8.0


def _compare(wd, seeds, steps):
  """Every seed's and the mean's events equal metrics.jsonl, each step once."""
  rows = runner.read_jsonl(os.path.join(wd, "metrics.jsonl"))
  assert [r["step"] for r in rows] == steps
  for i, s in enumerate(seeds):
    got = events.read_scalars(os.path.join(wd, events.SUBDIR, f"seed{s}"))
    for key, tag in (("train_loss", "loss/train"), ("test_accuracy", "accuracy/test"),
                     ("train_accuracy", "accuracy/train"), ("test_loss", "loss/test")):
      assert [step for step, _ in got[tag]] == steps, (s, tag)  # each step once, in order
      np.testing.assert_allclose([v for _, v in got[tag]], [r[key][i] for r in rows],
                                 rtol=1e-6)
  mean = events.read_scalars(os.path.join(wd, events.SUBDIR, "mean"))["accuracy/test"]
  assert [step for step, _ in mean] == steps
  np.testing.assert_allclose([v for _, v in mean], [np.mean(r["test_accuracy"]) for r in rows],
                             rtol=1e-6)


class _Crash(runner.Recorder):
  """Raises at one step, after the events of that evaluation are written and
  before its checkpoint: a kill between an evaluation and a checkpoint."""

  def __init__(self, step):
    self.step = step

  def record(self, ev):
    if ev.step == self.step:
      raise KeyboardInterrupt("killed before the checkpoint")


def test_events_while_training_equal_the_metrics_across_a_resume(tmp_path):
  pytest.importorskip("tensorboardX")
  pytest.importorskip("tensorboard")
  rc = configs.build("smoke", "distance", "rope", steps=24)
  wd = str(tmp_path / "run")
  opts = runner.RunOptions(eval_every=6, seed_group=1)
  quiet = runner.Hooks(notify=lambda m: None)
  with pytest.raises(KeyboardInterrupt):
    runner.run(rc, [0, 1], wd, opts, quiet,
               recorders=[events.TensorBoardRecorder(), _Crash(12)])
  # step 12 is in the events but not in a checkpoint: the resume redoes it
  written = events.read_scalars(os.path.join(wd, events.SUBDIR, "seed0"))["loss/train"]
  assert [step for step, _ in written] == [6, 12]
  runner.run(rc, [0, 1], wd, opts, quiet, recorders=[events.TensorBoardRecorder()])
  _compare(wd, [0, 1], [6, 12, 18, 24])


def test_the_converter_writes_a_committed_runs_events(tmp_path):
  pytest.importorskip("tensorboardX")
  pytest.importorskip("tensorboard")
  src = os.path.join(ROOT, "studies", "arxiv_2505_13027", "results", "runs", "distance",
                     "rope-study")
  wd = str(tmp_path / "rope-study")
  shutil.copytree(src, wd)
  n = events.convert(wd)
  with open(os.path.join(wd, "config.json")) as f:
    seeds = json.load(f)["seeds"]
  steps = [r["step"] for r in runner.read_jsonl(os.path.join(wd, "metrics.jsonl"))]
  assert n == len(steps) > 0
  _compare(wd, seeds, steps)
  assert events.convert(wd) == n  # again: written afresh, not appended
  _compare(wd, seeds, steps)


def test_a_sweep_without_the_writer_says_so_in_one_line_and_trains(tmp_path):
  """No tensorboardX (blocked here through sitecustomize): one note line, the
  run trains and writes everything else, and no tb/ directory."""
  import subprocess
  import sys
  block = tmp_path / "block"
  block.mkdir()
  (block / "sitecustomize.py").write_text("import sys\nsys.modules['tensorboardX'] = None\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(block), os.path.abspath(ROOT)]))
  wd = tmp_path / "run"
  out = subprocess.run([sys.executable, "-m", "experiments.sweep", "--preset=smoke",
                        "--pe=rope", "--seeds=1", "--steps=4", "--eval_every=2",
                        f"--workdir={wd}"], capture_output=True, text=True, env=env, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-2000:]
  notes = [line for line in out.stderr.splitlines() if "tensorboardX" in line]
  assert len(notes) == 1 and notes[0].startswith("note: no TensorBoard event files")
  assert (wd / "summary.json").exists() and not (wd / events.SUBDIR).exists()
