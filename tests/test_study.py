"""The study driver: plan, skipping committed runs, collecting, parallel runs with a deadline."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from conftest import run_cli_batch

from studies.arxiv_2505_13027 import plan as study

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _scratch_repo(path):
  """An empty git repository at ``path``; returns ``git(*args) -> stdout`` there."""
  git = lambda *a: subprocess.run(["git", *a], cwd=path, check=True,
                                  capture_output=True, text=True).stdout
  git("init", "-q")
  git("config", "user.email", "t@t")
  git("config", "user.name", "t")
  return git


def _py(code):
  return [sys.executable, "-c", code]


def test_plan_is_paired_and_complete():
  keys = [e.key for e in study.PLAN]
  assert len(keys) == len(set(keys))
  # every claim has its runs: both modes of Task 1/2 references and the deposit set
  for key in ("distance/rope-study", "distance/rope_sinusoidal-faithful-study",
              "distance/partial_rope-k1-study", "distance/partial_rope-k1-faithful-study",
              "count/mla-study", "count/nope-study", "count/rope-study",
              "count/rope_sinusoidal-faithful-study", "distance/rope-deposit",
              "distance/nope-deposit", "distance/alibi-deposit", "distance/mla-deposit"):
    assert key in keys, key
  e = next(e for e in study.PLAN if e.key == "distance/partial_rope-k1-faithful-study")
  args = e.sweep_args("R", 8)
  assert "--faithful" in args and "--rope_heads=1" in args and "--seeds=8" in args
  assert "--workdir=R/distance/partial_rope-k1-faithful-study" in args


def test_every_run_a_claim_waits_for_is_planned():
  """With nothing committed, every run each verdict row waits for
  (``claims.claims``' "missing") is a plan entry, found by its fields; and a
  spec the plan lacks is not matched to a near neighbour."""
  from studies.arxiv_2505_13027 import claims
  rows = claims.claims([])
  specs = [s for c in rows for s in c["missing"]]
  assert {c["id"] for c in rows if c["missing"]} == {"a", "a2", "b", "c", "d"}
  keys = []
  for spec in specs:
    e = study.entry_for(spec)
    assert e is not None, spec
    assert (e.task, e.pe, e.preset, e.faithful) == (spec.task, spec.pe, spec.preset,
                                                    spec.faithful)
    keys.append(e.key)
  assert "count/nope-long-dropout0" in keys and "count/nope-study-len80-dropout0" in keys
  assert "distance/partial_rope-k1-study" in keys and "count/mla-faithful-study" in keys
  near = claims.run_spec("count", "nope", preset="study", variant={"model.dropout": 0.0})
  assert study.entry_for(near) is None  # dropout 0 at 120 tokens is not a registered run
  assert study.entry_for(claims.run_spec("distance", "partial_rope", preset="study")) is None


def test_collect_copies_small_files_only(tmp_path):
  e = study.Entry(1, "study", "distance", "rope")
  wd = tmp_path / "runs" / "distance" / "rope-study"
  (wd / "ckpt" / "100").mkdir(parents=True)
  assert not study.collect(e, str(tmp_path / "runs"), str(tmp_path / "res"))  # unfinished
  for f in ("config.json", "summary.json", "metrics.jsonl", "ablation.json",
            "ablation-leak-all.json", "accuracy.png"):
    (wd / f).write_text("{}")
  assert not study.committed(e, str(tmp_path / "res"))
  assert study.collect(e, str(tmp_path / "runs"), str(tmp_path / "res"))
  got = sorted(os.listdir(tmp_path / "res" / "distance" / "rope-study"))
  assert got == ["ablation-leak-all.json", "ablation.json", "config.json",
                 "metrics.jsonl", "summary.json"]
  assert study.committed(e, str(tmp_path / "res"))


def test_collect_and_commit_commits_only_the_run(tmp_path, monkeypatch):
  """The run's small files land in one commit; a file staged by someone else
  stays staged and out of it; outside a repository the files are still
  collected and the study goes on."""
  git = _scratch_repo(tmp_path)
  (tmp_path / "other.txt").write_text("mine")
  git("add", "other.txt")
  e = study.Entry(1, "study", "distance", "rope")
  wd = tmp_path / "runs" / "distance" / "rope-study"
  (wd / "ckpt").mkdir(parents=True)
  for f in ("config.json", "summary.json", "metrics.jsonl", "ablation.json"):
    (wd / f).write_text("{}")
  monkeypatch.chdir(tmp_path)
  assert study.collect_and_commit(e, "runs", "res", commit=True)
  assert sorted(git("show", "--name-only", "--format=", "HEAD").split()) == [
      f"res/distance/rope-study/{f}" for f in
      ("ablation.json", "config.json", "metrics.jsonl", "summary.json")]
  assert "distance/rope-study" in git("log", "-1", "--format=%s")
  assert git("diff", "--cached", "--name-only").split() == ["other.txt"]
  # nothing new to commit: already done, no empty commit
  head = git("rev-parse", "HEAD")
  assert study.git_commit(["res"], "again") == "" and git("rev-parse", "HEAD") == head
  # the index locked by someone committing beside the study: waits, then commits
  (wd / "summary.json").write_text('{"changed": 1}')
  study.collect(e, "runs", "res")
  lock = tmp_path / ".git" / "index.lock"
  lock.write_text("")
  timer = threading.Timer(0.5, lock.unlink)
  timer.start()
  try:
    assert study.git_commit(["res"], "after the lock", wait_s=0.2, tries=30) == ""
  finally:
    timer.join()
  assert git("log", "-1", "--format=%s").strip() == "after the lock"
  lock.write_text("")  # held for good: git's complaint comes back, nothing stops
  assert "index.lock" in study.git_commit(["res"], "x", wait_s=0.01, tries=2)
  lock.unlink()
  outside = tmp_path / "outside"
  (outside / "runs").mkdir(parents=True)
  shutil.copytree(wd, outside / "runs" / "distance" / "rope-study")
  monkeypatch.chdir(outside)
  monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
  assert study.collect_and_commit(e, "runs", "res", commit=True)
  assert study.committed(e, "res")
  assert "not a git repository" in study.git_commit(["res"], "x").lower()


def test_commands_share_the_device_between_workers():
  """Each run trains, then ablates (the paper's split and leak too where the
  plan says so); with N runs at once on one device each of these programs
  sizes itself to 1/N of it."""
  e = next(e for e in study.PLAN if e.paper_ablation)
  one = study.commands(e, "R", 8)
  assert [c[2] for c in one] == ["experiments.sweep", "experiments.ablate", "experiments.ablate"]
  assert "--leak" in one[2] and "--split=all" in one[2]
  assert not any(a.startswith(("--memory", "--seed_group", "--mask_chunk"))
                 for c in one[1:] for a in c)
  four = study.commands(e, "R", 8, workers=4)
  assert four[0][:-1] == one[0]
  assert [c[-1] for c in four] == ["--memory_fraction=0.25"] * 3
  assert study.commands(e, "R", 8, workers=3)[1][-1] == "--memory_fraction=0.3333"


def test_run_plan_order_failure_and_deadline(tmp_path):
  entries = [study.Entry(1, "study", "distance", pe) for pe in ("rope", "nope", "alibi")]
  out = tmp_path / "out.txt"
  cmds = {
      # two commands, run one after another
      "distance/rope-study": [_py(f"open({str(out)!r}, 'a').write('a')"),
                              _py(f"open({str(out)!r}, 'a').write('b')")],
      "distance/nope-study": [_py("raise SystemExit(3)"), _py("print('never')")],
      "distance/alibi-study": [_py("import time; time.sleep(60)")],
  }
  done = []
  finished, failed, stopped = study.run_plan(
      entries, lambda e: cmds[e.key], log_dir=str(tmp_path / "logs"), workers=3,
      deadline_s=2.0, grace_s=1.0, on_done=done.append, poll_s=0.05)
  assert finished == ["distance/rope-study"] and out.read_text() == "ab"
  assert failed == ["distance/nope-study"]
  assert stopped == ["distance/alibi-study"]
  assert [e.key for e in done] == ["distance/rope-study"]
  assert "never" not in (tmp_path / "logs" / "distance__nope-study.log").read_text()


def test_list_and_bad_flags(tmp_path):
  bad_flags = (["--seeds=3"], ["--workers=0"], ["--only=distance/bogus"], ["--preset=huge"])
  listed, only, *bads = run_cli_batch("studies.arxiv_2505_13027.plan", [
      (["--list", f"--results={tmp_path}"], ROOT),
      (["--list", "--only=distance/mla-long,distance/rope-study,distance/mla-long",
        f"--results={tmp_path}"], ROOT),
      *[([*bad, f"--results={tmp_path}"], ROOT) for bad in bad_flags]])
  res = listed
  assert res.returncode == 0, res.stderr
  lines = res.stdout.strip().splitlines()
  assert lines[-1] == (f"0 of {len(study.PLAN)} committed; "
                       "0 of the rest cannot change a verdict")
  assert lines[0].split()[:3] == ["P1", "distance/rope-study", "to"]
  prios = [int(line.split()[0][1:]) for line in lines[:-1]]
  assert prios == sorted(prios) and len(prios) == len(study.PLAN)  # most urgent first
  # --only runs the names in the order given (a P5 entry before a P1 one), once each
  res = only
  assert res.returncode == 0, res.stderr
  assert [line.split()[:2] for line in res.stdout.strip().splitlines()[:-1]] == [
      ["P5", "distance/mla-long"], ["P1", "distance/rope-study"]]
  for bad, res in zip(bad_flags, bads):
    assert res.returncode == 2 and res.stderr.startswith("error:"), (bad, res.stderr)


def _summary(results, key, pe, acc, plateaued=8):
  d = os.path.join(results, key)
  os.makedirs(d)
  with open(os.path.join(d, "summary.json"), "w") as f:
    json.dump({"task": key.split("/")[0], "pe": pe, "preset": "study", "faithful": False,
               "rope_heads": None, "seeds": list(range(8)),
               "test_accuracy": [acc + 0.001 * i for i in range(8)],
               "plateau": {"per_seed": [True] * plateaued + [False] * (8 - plateaued)}}, f)


def test_settled_runs_are_listed_and_skipped(tmp_path):
  """A converged rival that beats RoPE refutes (a) at study: the rivals (a)
  still waits for can no longer change a verdict, so --list says so and
  --skip_settled does not run them; a run another row waits for (partial RoPE,
  for (a2)) is not settled. With RoPE winning nothing is settled."""
  results = str(tmp_path / "results")
  _summary(results, "distance/rope-study", "rope", 0.90)
  _summary(results, "distance/learned-study", "learned", 0.95)
  assert study.settled(results)["distance/alibi-study"] == "a refutation"
  assert "distance/partial_rope-k1-study" not in study.settled(results)
  cmd = [sys.executable, "-m", "studies.arxiv_2505_13027.plan", f"--results={results}",
         f"--runs={tmp_path / 'runs'}"]
  res = subprocess.run(cmd + ["--list", "--only=distance/alibi-study,"
                              "distance/partial_rope-k1-study"],
                       cwd=ROOT, capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  assert res.stdout.splitlines() == [
      "P1  distance/alibi-study" + " " * 25 + "to run (no verdict can change: a refutation)",
      "P1  distance/partial_rope-k1-study" + " " * 15 + "to run",
      "0 of 2 committed; 1 of the rest cannot change a verdict"]
  res = subprocess.run(cmd + ["--skip_settled", "--only=distance/alibi-study,distance/nope-study"],
                       cwd=ROOT, capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  assert "skip distance/alibi-study: no verdict can change (a refutation)" in res.stderr
  assert "skip distance/nope-study" in res.stderr and "0 of 0 run(s) finished" in res.stderr
  assert not os.path.exists(tmp_path / "runs" / "distance")  # nothing trained
  shutil.rmtree(os.path.join(results, "distance", "learned-study"))
  _summary(results, "distance/learned-study", "learned", 0.50)
  assert study.settled(results) == {}


def test_registered_configurations_reach_the_sweep_and_the_report():
  """A plan entry with overrides: its own name, its --config flags, and a
  config whose (preset, variant) the report judges at (claims.TASK2_CONFIGS)."""
  from pe_spectral.training import config as configs
  from studies.arxiv_2505_13027 import claims
  registered = [e for e in study.PLAN if e.overrides]
  assert {e.pe for e in registered} >= {"nope", "rope", "mla", "rope_sinusoidal", "sinusoidal"}
  judged = set()
  for e in registered:
    assert e.tag and e.key == f"{e.task}/{e.pe}-{e.preset}-{e.tag}"
    args = e.sweep_args("R", 5)
    assert f"--workdir=R/{e.key}" in args
    over = {}
    given = dict(a[len("--config."):].split("=", 1) for a in args if a.startswith("--config."))
    for field, value in e.overrides:
      sec, name = field.split(".", 1)
      over.setdefault(sec, {})[name] = configs.parse_override(sec, name, value)
      assert configs.parse_override(sec, name, given[field]) == over[sec][name]
    rc = configs.build(e.preset, e.task, e.pe, epochs=e.epochs, overrides=over)
    if e.epochs is not None:
      assert f"--epochs={e.epochs}" in args
    r = {"task": e.task, "pe": e.pe, "preset": e.preset, "faithful": e.faithful,
         "config": {"run": rc.to_dict()}}
    config = (e.preset, claims.config_variant(r))
    assert config in claims.TASK2_CONFIGS, config
    assert e.spec.variant == config[1]  # the entry's own reading matches the report's
    judged.add(claims.variant_label(config[1]) + "@" + e.preset)
  assert len(judged) == len(claims.TASK2_CONFIGS)  # every registered configuration is planned
  # the preset's own entries stay untagged
  assert "count/nope-long" in [e.key for e in study.PLAN if not e.overrides]


def test_evidence_is_committed_before_the_paper_ablation(tmp_path, monkeypatch):
  """A run whose plan asks for the paper-style ablation is committed once its
  test-split ablation exists (the verdicts' evidence), then again with the
  paper-style one; before the test-split ablation nothing is collected. A
  committed run missing only that ablation gets it alone, never a retraining."""
  git = _scratch_repo(tmp_path)
  e = next(e for e in study.PLAN if e.paper_ablation)
  wd = tmp_path / "runs" / e.key
  (wd / "ckpt").mkdir(parents=True)
  for f in study.SMALL_FILES:
    (wd / f).write_text("{}")
  monkeypatch.chdir(tmp_path)
  assert not study.collect_and_commit(e, "runs", "res", commit=True, partial=True)
  assert not (tmp_path / "res").exists()  # trained, not yet ablated: nothing
  (wd / "ablation.json").write_text("{}")
  assert study.collect_and_commit(e, "runs", "res", commit=True, partial=True)
  assert "paper-style one to follow" in git("log", "-1", "--format=%s")
  assert study.committed(e, "res") and study.paper_ablation_missing(e, "res")
  (wd / study.PAPER_ABLATION).write_text("{}")
  assert study.collect_and_commit(e, "runs", "res", commit=True)
  assert git("show", "--name-only", "--format=", "HEAD").split() == [
      f"res/{e.key}/{study.PAPER_ABLATION}"]
  assert not study.paper_ablation_missing(e, "res")
  plain = next(p for p in study.PLAN if not p.paper_ablation)
  assert not study.paper_ablation_missing(plain, "res")
  only = study.commands(e, "runs", 8, paper_only=True)
  assert only == study.commands(e, "runs", 8)[2:] and len(only) == 1
  with pytest.raises(ValueError, match=plain.key):  # no paper-style ablation to run alone
    study.commands(plain, "runs", 8, paper_only=True)


def test_paper_ablation_file_is_what_ablate_writes():
  res = subprocess.run([sys.executable, "-c", "from experiments.ablate import output_name; "
                        "print(output_name('single', True, 'all'))"], cwd=ROOT,
                       capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  assert res.stdout.strip() + ".json" == study.PAPER_ABLATION


def test_run_plan_steps_between_commands(tmp_path):
  """on_step runs after every command of an entry but its last (and not after
  a failing one); on_done once, at the end."""
  entries = [study.Entry(1, "study", "distance", pe) for pe in ("rope", "nope")]
  cmds = {"distance/rope-study": [_py("pass")] * 3,
          "distance/nope-study": [_py("pass"), _py("raise SystemExit(1)"), _py("pass")]}
  steps, done = [], []
  finished, failed, _ = study.run_plan(
      entries, lambda e: cmds[e.key], log_dir=str(tmp_path / "logs"), workers=2,
      on_done=lambda e: done.append(e.key), on_step=lambda e: steps.append(e.key),
      poll_s=0.02)
  assert sorted(steps) == ["distance/nope-study"] + ["distance/rope-study"] * 2
  assert done == finished == ["distance/rope-study"] and failed == ["distance/nope-study"]


def test_list_names_a_missing_paper_ablation(tmp_path):
  e = next(e for e in study.PLAN if e.paper_ablation)
  res_dir, runs_dir = tmp_path / "res" / e.key, tmp_path / "runs" / e.key
  _summary(str(tmp_path / "res"), e.key, e.pe, 0.9)
  for f in ("config.json", "metrics.jsonl", "ablation.json"):
    (res_dir / f).write_text("{}")
  def listed():
    res = subprocess.run([sys.executable, "-m", "studies.arxiv_2505_13027.plan", "--list",
                          f"--results={tmp_path / 'res'}", f"--runs={tmp_path / 'runs'}",
                          f"--only={e.key}"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()[0]
  assert "committed (no paper-style ablation: the trained run is not under" in listed()
  runs_dir.mkdir(parents=True)
  (runs_dir / "summary.json").write_text("{}")
  assert listed().endswith("committed (its paper-style ablation to run)")


@pytest.mark.long
def test_study_commits_the_evidence_then_the_paper_ablation(tmp_path):
  """End to end at the smoke preset, in a scratch repository: a run whose plan
  asks for the paper-style ablation lands in two commits, the first with the
  test-split ablation and without the paper-style one."""
  git = _scratch_repo(tmp_path)
  # --preset=smoke keeps the first plan entry of each name: rope's study run
  e = next(e for e in sorted(study.PLAN, key=lambda e: e.priority)
           if (e.task, e.pe, e.faithful, e.tag) == ("distance", "rope", False, ""))
  assert e.paper_ablation
  e = dataclasses.replace(e, preset="smoke")
  res = subprocess.run([sys.executable, "-m", "studies.arxiv_2505_13027.plan", "--preset=smoke",
                        f"--only={e.key}", "--seeds=5", "--git_commit", "--runs=runs",
                        "--results=res"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
  assert res.returncode == 0, res.stderr[-3000:]
  first, second = git("log", "--reverse", "--format=%H").split()
  in_first = git("show", "--name-only", "--format=", first).split()
  assert f"res/{e.key}/ablation.json" in in_first
  assert f"res/{e.key}/summary.json" in in_first
  assert not any(f.endswith(study.PAPER_ABLATION) for f in in_first)
  assert "paper-style one to follow" in git("log", "-1", "--format=%s", first)
  assert git("show", "--name-only", "--format=", second).split() == [
      f"res/{e.key}/{study.PAPER_ABLATION}"]


def test_import_results_from_another_machine(tmp_path, monkeypatch):
  """--import_from: runs with complete evidence elsewhere and none here are
  committed here (checkpoints and files outside the evidence left behind);
  incomplete ones are not; a run committed here is never replaced, and takes
  its missing paper-style ablation only from the same run."""
  git = _scratch_repo(tmp_path)
  monkeypatch.chdir(tmp_path)
  paper = [e for e in study.PLAN if e.paper_ablation]
  new, partial, same, other = paper[:4]

  def write(root, e, files, summary="{}"):
    d = tmp_path / root / e.key
    d.mkdir(parents=True, exist_ok=True)
    for f in files:
      (d / f).write_text(summary if f == "summary.json" else "{}")
  for e in (new, same, other):
    write("gpu", e, study.EVIDENCE + (study.PAPER_ABLATION, "steps.jsonl"),
          summary='{"backend": "gpu"}')
  (tmp_path / "gpu" / new.key / "ckpt").mkdir()
  write("gpu", partial, study.SMALL_FILES)                # not ablated: not evidence
  write("res", same, study.EVIDENCE, summary='{"backend": "gpu"}')  # this run, no paper ablation
  write("res", other, study.EVIDENCE, summary='{"backend": "cpu"}')  # another run of the entry
  git("add", "res")
  git("commit", "-qm", "before")
  assert study.import_results("gpu", "res", commit=False, entries=[partial, other]) == []
  assert not (tmp_path / "res" / new.key).exists()       # outside the entries given
  got = study.import_results("gpu", "res", commit=True)
  assert got == [e.key for e in study.PLAN if e in (new, same)]
  assert study.committed(new, "res") and not study.paper_ablation_missing(new, "res")
  assert sorted(os.listdir(tmp_path / "res" / new.key)) == sorted(
      study.EVIDENCE + (study.PAPER_ABLATION,))
  assert not (tmp_path / "res" / partial.key).exists()
  assert not study.paper_ablation_missing(same, "res")
  assert study.paper_ablation_missing(other, "res")       # not taken from another run
  assert (tmp_path / "res" / other.key / "summary.json").read_text() == '{"backend": "cpu"}'
  log = git("log", "--format=%s")
  assert log.count("imported from gpu") == 2
  assert git("status", "--porcelain", "res") == ""    # all of it committed
  assert study.import_results("gpu", "res", commit=True) == []  # nothing new the second time


def test_the_plan_names_every_committed_run_as_it_was_named():
  """The run identity (config.RunSpec) keeps the names the committed runs
  carry: each one under results/runs/ is a plan entry's key."""
  from studies.arxiv_2505_13027 import RESULTS
  root = os.path.join(RESULTS, "runs")
  committed = {f"{t}/{n}" for t in os.listdir(root) for n in os.listdir(os.path.join(root, t))}
  assert len(committed) >= 40
  assert committed <= {e.key for e in study.PLAN}


def test_the_sweep_reads_a_plan_entry_back_into_the_same_run():
  """A plan entry's flags (experiments.cli.sweep_args), parsed by the sweep
  itself, build the entry's configs, and its default workdir is the entry's
  name (unless a tag names the entry's settings in one word)."""
  from absl.testing import flagsaver

  from experiments import sweep
  checked = 0
  for e in study.PLAN:
    args = e.sweep_args("R", 2)
    args = [a for a in args if not a.startswith("--workdir=")]
    with flagsaver.flagsaver():
      sweep.FLAGS(["sweep", *args])
      [(rc, workdir)] = sweep.plan_runs()
      sweep.FLAGS.unparse_flags()
    assert rc == e.spec.build(), e.key
    if not e.tag:
      assert workdir == os.path.join("runs", e.key)
      checked += 1
  assert checked > 30
