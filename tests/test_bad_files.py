"""Bad files, not only bad flags: a run's own files cut off, garbled, edited by
hand or deleted. Each gives one line that says what is wrong and what to do,
and nothing that was valid is lost (the file is left as it was, or a resume
ends where the uninterrupted run did). Copies of the session's reference sweep
(conftest.SWEEP_COMMON: checkpoints at steps 18 and 24 kept)."""
import json
import os
import shutil

import pytest
from conftest import SWEEP_COMMON, run_cli_batch


def _rows(path, drop=("elapsed",)):
  with open(path) as f:
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in f]


def _cut_last_line(path):
  """The last row cut off half-way, as a kill during its append leaves it."""
  with open(path) as f:
    lines = f.readlines()
  with open(path, "w") as f:
    f.writelines(lines[:-1] + [lines[-1][:len(lines[-1]) // 2]])


def _unfinished_copy(ref, wd):
  shutil.copytree(ref, wd)
  os.remove(os.path.join(wd, "summary.json"))
  return wd


def _one_error_line(out):
  errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
  return errors[0]


@pytest.fixture(scope="module")
def sweep_cases(sweep_reference, tmp_path_factory):
  """Every sweep case of this file, run in one process (tests/cli_batch.py):
  ``{name: (workdir, CompletedProcess, the bytes of the file it concerns before)}``."""
  ref, _ = sweep_reference
  root = tmp_path_factory.mktemp("bad-files")
  cases = {}

  # a kill between step 24's two appends and its checkpoint: both rows cut
  wd = _unfinished_copy(ref, str(root / "cut-rows"))
  shutil.rmtree(os.path.join(wd, "ckpt", "24"))
  for name in ("metrics.jsonl", "steps.jsonl"):
    _cut_last_line(os.path.join(wd, name))
  cases["cut_rows"] = wd

  wd = _unfinished_copy(ref, str(root / "garbage-row"))  # a row garbled mid-file
  path = os.path.join(wd, "metrics.jsonl")
  lines = open(path).readlines()
  open(path, "w").writelines(lines[:1] + ["\x00\x00garbage\n"] + lines[1:])
  cases["garbage_row"] = wd

  wd = _unfinished_copy(ref, str(root / "lost-row"))  # the checkpoint's row gone
  path = os.path.join(wd, "metrics.jsonl")
  open(path, "w").writelines(open(path).readlines()[:-1])
  cases["lost_row"] = wd

  wd = _unfinished_copy(ref, str(root / "bad-config"))  # a hand edit that broke it
  path = os.path.join(wd, "config.json")
  open(path, "w").write(open(path).read().replace('"seeds": [', '"seeds": [,', 1))
  cases["bad_config"] = wd

  wd = _unfinished_copy(ref, str(root / "no-ckpt"))  # ckpt/ deleted
  shutil.rmtree(os.path.join(wd, "ckpt"))
  cases["no_ckpt"] = wd

  concerns = {"cut_rows": "metrics.jsonl", "garbage_row": "metrics.jsonl",
              "lost_row": "metrics.jsonl", "bad_config": "config.json",
              "no_ckpt": "metrics.jsonl"}
  before = {k: open(os.path.join(wd, concerns[k]), "rb").read() for k, wd in cases.items()}
  outs = run_cli_batch("experiments.sweep",
                       [([*SWEEP_COMMON, f"--workdir={wd}"], root) for wd in cases.values()])
  return {k: (wd, out, before[k]) for (k, wd), out in zip(cases.items(), outs)}


def test_cut_off_last_rows_are_left_out_in_one_line_each_and_the_resume_equals_the_run(
    sweep_cases, sweep_reference):
  wd, out, _ = sweep_cases["cut_rows"]
  assert out.returncode == 0, out.stderr[-2000:]
  for name in ("metrics.jsonl", "steps.jsonl"):
    notices = [line for line in out.stderr.splitlines() if f"{name}: its last line was cut off"
               in line]
    assert len(notices) == 1, out.stderr[-2000:]
    assert _rows(os.path.join(wd, name)) == _rows(os.path.join(sweep_reference[0], name))
  assert "resuming" in out.stderr and "from step 18 of 24" in out.stderr
  assert "Traceback" not in out.stderr


@pytest.mark.parametrize("case, says", [
    ("garbage_row", "metrics.jsonl, line 2, is not a row this code wrote"),
    ("lost_row", "metrics.jsonl lacks the evaluation of step 24, which the checkpoint has passed"),
    ("bad_config", "config.json is not valid JSON"),
    ("no_ckpt", "ckpt is gone, but"),
])
def test_a_bad_file_is_one_line_and_nothing_is_changed(sweep_cases, case, says):
  wd, out, before = sweep_cases[case]
  assert out.returncode == 1, out.stderr[-2000:]
  line = _one_error_line(out)
  assert says in line and "pass --noresume" in line, line
  name = "config.json" if case == "bad_config" else "metrics.jsonl"
  assert open(os.path.join(wd, name), "rb").read() == before  # left as it was
  assert not os.path.exists(os.path.join(wd, "summary.json"))
  if case != "no_ckpt":
    assert sorted(os.listdir(os.path.join(wd, "ckpt"))) == ["18", "24"]


def test_analyses_say_in_one_line_when_config_or_checkpoints_do_not_fit(sweep_reference,
                                                                         tmp_path):
  """decompose (as every analysis, through runner.load_run) on a config.json
  edited into another model, one that is not JSON, and a deleted ckpt/."""
  ref, _ = sweep_reference
  edited, garbled, no_ckpt = (str(tmp_path / n) for n in ("edited", "garbled", "no-ckpt"))
  for wd in (edited, garbled, no_ckpt):
    shutil.copytree(ref, wd)
  path = os.path.join(edited, "config.json")
  config = json.load(open(path))
  config["run"]["model"]["d_model"] *= 2
  json.dump(config, open(path, "w"))
  open(os.path.join(garbled, "config.json"), "w").write("{")
  shutil.rmtree(os.path.join(no_ckpt, "ckpt"))
  outs = run_cli_batch("experiments.decompose",
                       [([f"--workdir={wd}"], tmp_path) for wd in (edited, garbled, no_ckpt)])
  says = ("describes another model than its checkpoints hold", "is not valid JSON",
          "no checkpoint under")
  for out, text in zip(outs, says):
    assert out.returncode == 2, out.stderr[-2000:]
    assert text in _one_error_line(out), out.stderr[-2000:]


def test_a_reader_whose_checkpoints_a_training_run_deletes_lists_them_again(sweep_reference,
                                                                            tmp_path,
                                                                            monkeypatch):
  """The race of an analysis beside a run that trains, made deterministic: the
  reader lists steps 18 and 24, and while it reads 24 the writer saves step 30
  and deletes both older ones (keep-last-N). Every step it listed is gone, so
  the read fails; the run still holds its lock, so load_run lists the
  checkpoints again and reads step 30, saying so (it failed with 'no usable
  checkpoint' before the readers commit, e04ec9d)."""
  import fcntl

  from pe_spectral.training import checkpoint, runner
  ref, _ = sweep_reference
  wd = str(tmp_path / "training")
  shutil.copytree(ref, wd)
  os.remove(os.path.join(wd, "summary.json"))
  ckpt = os.path.join(wd, "ckpt")
  lock = open(os.path.join(wd, ".lock"), "w")  # the training process's lock
  lock.write("pid 1 on the-trainer")
  lock.flush()
  fcntl.flock(lock, fcntl.LOCK_EX)
  restore, saved = checkpoint.Checkpointer.restore, []

  def writer_meanwhile(self, step, abstract_state):
    if not saved:  # the writer's save of step 30 (renamed when complete), then keep-last-N
      shutil.copytree(os.path.join(ckpt, "24"), os.path.join(ckpt, "30.tmp"))
      os.rename(os.path.join(ckpt, "30.tmp"), os.path.join(ckpt, "30"))
      for old in ("18", "24"):
        shutil.rmtree(os.path.join(ckpt, old))
      saved.append(30)
    return restore(self, step, abstract_state)

  monkeypatch.setattr(checkpoint.Checkpointer, "restore", writer_meanwhile)
  said = []
  try:
    run = runner.load_run(wd, notify=said.append)
  finally:
    lock.close()
  assert saved == [30] and run.step == 30
  assert len(said) == 1 and "analysing the checkpoint of step 30" in said[0], said
  assert "the run is still training (pid 1 on the-trainer)" in said[0], said
