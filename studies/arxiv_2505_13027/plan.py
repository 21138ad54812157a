r"""The converged study: every run the pre-registered claims need, in one list.

  python -m studies.arxiv_2505_13027.plan --list                 # the plan, and what is done
  python -m studies.arxiv_2505_13027.plan                        # run what is missing, in order
  python -m studies.arxiv_2505_13027.plan --workers=8 --deadline_s=480   # GPU: 8 at a time

Each entry is an ``experiments.sweep`` run (8 seeds, the same seeds and data
for every PE, so runs pair seed by seed) followed by its head ablations. A run
whose small outputs are already committed under ``--results`` is skipped, so
the study continues across sessions and machines; a run interrupted here
resumes from its checkpoint under ``runs/``. ``--collect`` copies each
finished run's small files (config, summary, metrics curve, ablation JSON)
into ``--results/<task>/<name>/`` -- never checkpoints -- and ``--git_commit``
commits them (those paths only) as each run finishes. A run whose plan asks
for the paper-style ablation too (all data, leak) is committed twice: once its
test-split ablation, which the verdicts read, is written, and again after the
paper-style one; a session that ends between the two loses no evidence, and
the next one runs that ablation alone if the trained run is still under
``runs/`` (a run already committed is never retrained for it).

With ``--workers`` > 1 the runs go to that many processes at once (on a GPU
the small models leave the device mostly idle, and compilation is CPU-bound);
``--deadline_s`` stops starting runs after that many seconds and ends the
running ones shortly after it, keeping what finished.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from typing import Optional

from absl import app, flags

from experiments import cli
from pe_spectral.training import config as configs
from pe_spectral.training import workdir
from studies.arxiv_2505_13027 import RESULTS, claims, presets
from studies.arxiv_2505_13027.claims import CLAIM_PES

FLAGS = flags.FLAGS
SMALL_FILES = ("config.json", "summary.json", "metrics.jsonl")
# what the verdicts read of a run: training's small files, the test-split ablation
EVIDENCE = SMALL_FILES + ("ablation.json",)
# what `experiments.ablate --split=all --leak` writes (ablate.output_name)
PAPER_ABLATION = "ablation-leak-all.json"


@dataclasses.dataclass(frozen=True)
class Entry:
  priority: int      # 1 = most urgent
  preset: str
  task: str
  pe: str
  faithful: bool = False
  rope_heads: Optional[int] = None
  paper_ablation: bool = False  # also the paper-style ablation (all data, leak)
  # A registered configuration beside the preset's (study.md): its
  # --config.<section>.<field>=<value> settings, and the tag that names it
  overrides: tuple = ()
  tag: str = ""
  epochs: Optional[int] = None  # a registered budget other than the preset's

  @property
  def spec(self) -> configs.RunSpec:
    """This run's identity (the library's RunSpec): what the claims wait
    for, and what names its workdir."""
    settings = dict(self.overrides)
    settings.update({"model.pe_options.heads": self.rope_heads, "train.epochs": self.epochs})
    return configs.RunSpec.of(self.task, self.pe, preset=self.preset, faithful=self.faithful,
                              settings=settings, tag=self.tag)

  @property
  def name(self) -> str:
    return self.spec.name

  @property
  def key(self) -> str:
    return self.spec.run_id()

  def sweep_args(self, runs_root: str, seeds: int) -> list[str]:
    args = cli.sweep_args(self.spec) + [f"--seeds={seeds}",
                                        f"--workdir={os.path.join(runs_root, self.key)}"]
    if self.preset in presets.NAMES:  # the study's own presets
      args.append(f"--presets_from={presets.MODULE}")
    return args


def _entries() -> list[Entry]:
  E = Entry
  t1 = CLAIM_PES["task1"]  # claim (a)'s set: the reference against each of the others
  out = [E(1, "study", "distance", pe, paper_ablation=pe == "rope") for pe in t1]
  out += [E(1, "study", "distance", "partial_rope", rope_heads=k) for k in (1, 2)]
  out += [E(1, "study", "count", pe) for pe in
          ("mla", "nope", "rope", "rope_sinusoidal", "sinusoidal")]
  out += [E(1, "deposit", "distance", pe, paper_ablation=True) for pe in
          ("rope", "nope", "alibi", "mla")]
  # Claims (b) and (d) again without dropout (study.md, "Task 2 without
  # dropout"): the configuration registered after the pilots, judged beside the
  # study preset's rows. NoPE and RoPE first: both claims need them.
  task2 = ("nope", "rope", "mla", "rope_sinusoidal", "sinusoidal")
  out += [E(1, "long", "count", pe, overrides=(("model.dropout", "0"),), tag="dropout0")
          for pe in task2]
  # ... and the CPU-sized one: 80 tokens, counts <= 66, 40 epochs (launch/task2_cpu.sh)
  out += [E(1, "study", "count", pe, epochs=40, tag="len80-dropout0",
            overrides=(("model.dropout", "0"), ("task.seq_len", "80"), ("task.max_len", "80"),
                       ("task.count_max", "66"))) for pe in task2]
  # Claim (g), the thesis study (study.md): the deposit with 8 heads per
  # layer for the multiplicative and additive PEs (rope and alibi are above).
  out += [E(2, "deposit", "distance", pe) for pe in
          ("alibi_multiplicative", "rope_additive", "xpos", "p_rope", "relative",
           "kerple_log")]
  out += [E(3, "study", "distance", pe, faithful=True,
            paper_ablation=pe == "rope_sinusoidal") for pe in
          ("rope_sinusoidal", "rope", "nope", "mla", "alibi", "sinusoidal",
           "learned", "relative")]
  out.append(E(3, "study", "distance", "partial_rope", faithful=True, rope_heads=1))
  out += [E(3, "study", "count", pe, faithful=True) for pe in
          ("mla", "nope", "rope_sinusoidal", "rope", "sinusoidal")]
  out += [E(4, "deposit", "distance", pe, faithful=True, paper_ablation=True)
          for pe in ("rope_sinusoidal", "rope", "nope", "alibi", "mla")]
  out.append(E(4, "deposit", "distance", "partial_rope", rope_heads=1,
               paper_ablation=True))
  out += [E(4, "study", "count", pe) for pe in ("alibi", "learned", "relative")]
  # The same comparisons with 3.3x the study budget, for the groups that had
  # not converged at `study` (study.md: a claim is judged at `long` where
  # its reference run exists there). Most informative first; their core is
  # priority 2, ahead of the remaining study runs.
  out += [E(2, "long", "count", pe) for pe in
          ("mla", "nope", "rope", "rope_sinusoidal", "sinusoidal")]
  # learned is the rival most likely to decide (a) at long on its own: at `study`
  # it beat RoPE on 8/8 seeds, both converged, and one converged refutation
  # decides the claim whatever the slow PEs do
  out += [E(2, "long", "distance", pe, rope_heads=k) for pe, k in
          (("rope", None), ("partial_rope", 1), ("learned", None), ("alibi", None))]
  # (a2) in faithful mode is judged at `long` once rope's faithful long run
  # exists, so partial RoPE's comes with it
  out += [E(2, "long", "distance", pe, faithful=True, rope_heads=k) for pe, k in
          (("rope_sinusoidal", None), ("rope", None), ("partial_rope", 1))]
  # Runs that can no longer change a verdict, last (2026-12-03): clean (a) is
  # refuted at `long` by a converged comparison (learned), and faithful (a) is
  # not testable at this scale because its reference did not converge there
  # (study.md, eighth amendment). They only fill in the table. alibi-long
  # stays above: no verdict needs it either, but it says whether ALiBi learns
  # Task 1 at all at this size, which the decay pair of (f) is waiting to know.
  out += [E(5, "long", "distance", pe) for pe in ("relative", "nope")]
  out += [E(5, "long", "distance", pe, faithful=True) for pe in ("nope", "mla")]
  out += [E(5, "long", "distance", pe, rope_heads=k) for pe, k in
          (("sinusoidal", None), ("rope_sinusoidal", None),
           ("mla", None), ("partial_rope", 2))]
  out += [E(5, "long", "distance", pe, faithful=True) for pe in
          ("alibi", "sinusoidal", "learned", "relative")]
  out += [E(5, "long", "count", pe, faithful=True) for pe in
          ("mla", "nope", "rope_sinusoidal", "rope", "sinusoidal")]
  return out


PLAN = _entries()


def entry_for(spec: configs.RunSpec) -> Optional[Entry]:
  """The plan's entry for a run a claim needs (``claims.run_spec``), or None."""
  return next((e for e in PLAN if e.spec == spec), None)


def settled(results: str) -> dict:
  """``{entry key: reason}``: the plan's runs whose verdicts are settled. Every
  verdict-table row that still waits for such a run has a verdict it cannot
  change (``claims.cannot_change``: a refutation, a label a run that did not
  converge has fixed, or a ``study`` row whose ``long`` row now judges), judged
  on the runs committed under ``results``.
  A run no row waits for is not listed. (Pilots only move a faithful Task 2
  row between "not run" and "not testable", neither settled, so they are not
  read.)"""
  why: dict = {}
  for spec, reason in claims.waiting(workdir.load_runs(results)):
    e = entry_for(spec)
    if e is not None:
      why.setdefault(e.key, []).append(reason)
  return {k: "; ".join(dict.fromkeys(rs)) for k, rs in why.items() if all(rs)}


def committed(e: Entry, results: str) -> bool:
  """The run's evidence is under ``results``: training's small files and the
  test-split ablation, which the verdicts read (the paper-style ablation,
  where the plan asks for one, is descriptive: ``paper_ablation_missing``)."""
  d = os.path.join(results, e.key)
  return all(os.path.exists(os.path.join(d, f)) for f in EVIDENCE)


def paper_ablation_missing(e: Entry, results: str) -> bool:
  """Committed, but without the paper-style ablation the plan asks for (the
  session ended while it ran, after the run's evidence was committed)."""
  return (e.paper_ablation and committed(e, results)
          and not os.path.exists(os.path.join(results, e.key, PAPER_ABLATION)))


def collect(e: Entry, runs_root: str, results: str) -> bool:
  """Copies a finished run's small files into ``results``; False if unfinished."""
  src = os.path.join(runs_root, e.key)
  if not os.path.exists(os.path.join(src, "summary.json")):
    return False
  dst = os.path.join(results, e.key)
  os.makedirs(dst, exist_ok=True)
  for f in sorted(os.listdir(src)):
    if f in SMALL_FILES or (f.startswith("ablation") and f.endswith(".json")):
      shutil.copy2(os.path.join(src, f), os.path.join(dst, f))
  return True


def git_commit(paths: list[str], message: str, cwd: str = ".", *, tries: int = 6,
               wait_s: float = 5.0) -> str:
  """Commits ``paths`` (and nothing else the index holds) to the repository at
  ``cwd``; returns "" on success or when they are already committed unchanged,
  else git's complaint (the files stay, ready to commit by hand: a study must
  not stop because git was busy). A git command that finds the index locked
  (someone committing beside the study) is retried up to ``tries`` times,
  ``wait_s`` apart."""
  def git(cmd):
    for attempt in range(max(tries, 1)):
      if attempt:
        time.sleep(wait_s)
      res = subprocess.run(["git", *cmd], cwd=cwd, capture_output=True, text=True)
      if res.returncode == 0 or "index.lock" not in res.stderr:
        break
    return res
  def complaint(res, what):
    return (res.stderr or res.stdout).strip() or f"git {what} exited {res.returncode}"
  try:
    res = git(["add", "--", *paths])
    if res.returncode != 0:
      return complaint(res, "add")
    if git(["diff", "--cached", "--quiet", "--", *paths]).returncode == 0:
      return ""  # nothing new under paths: already committed
    res = git(["commit", "--quiet", "-m", message, "--only", "--", *paths])
    if res.returncode != 0:
      return complaint(res, "commit")
  except OSError as err:
    return str(err)
  return ""


def collect_and_commit(e: Entry, runs_root: str, results: str, *, commit: bool,
                       partial: bool = False, imported: bool = False) -> bool:
  """``collect``, then (with ``commit``) a git commit of just that run's small
  files, so that a session that ends mid-queue loses no finished run.
  ``partial``: the run's evidence (``EVIDENCE``) is ready and its paper-style
  ablation still to come; nothing is done for a run without one, or before
  the evidence is written. ``imported``: ``runs_root`` is another machine's
  results (``import_results``), which the commit message says."""
  if partial and not (e.paper_ablation and committed(e, runs_root)):
    return False  # (committed() checks EVIDENCE under any root: here the workdirs)
  if not collect(e, runs_root, results):
    return False
  if commit:
    dst = os.path.join(results, e.key)
    what = ("its test-split ablation done, the paper-style one to follow" if partial
            else f"imported from {runs_root}, where it finished" if imported
            else "as the run finished")
    err = git_commit([dst], f"results: {e.key}, {e.preset} preset (committed by "
                     f"studies.arxiv_2505_13027.plan, {what})")
    if err:
      _log(f"could not commit {dst}: {err}")
  return True


def commands(e: Entry, runs_root: str, seeds: int, workers: int = 1, *,
             paper_only: bool = False) -> list[list[str]]:
  """The run's programs: train (or resume), the test-split ablation, and the
  paper-style one where the plan asks; ``paper_only``: that last one alone."""
  py = [sys.executable, "-m"]
  wd = os.path.join(runs_root, e.key)
  # training (where its seed groups are sized: GPU/TPU) and the ablation size
  # themselves to the free memory (the deposit model's all-at-once ablation of
  # 8 seeds wanted 39 GB); with several runs on one device, each to its share
  share = [f"--memory_fraction={1 / workers:.4g}"] if workers > 1 else []
  cmds = [py + ["experiments.sweep"] + e.sweep_args(runs_root, seeds) + share,
          py + ["experiments.ablate", f"--workdir={wd}"] + share]
  if e.paper_ablation:
    cmds.append(py + ["experiments.ablate", f"--workdir={wd}", "--split=all", "--leak"]
                + share)
  if paper_only:
    if not e.paper_ablation:
      raise ValueError(f"{e.key}: the plan asks for no paper-style ablation")
    return cmds[2:]
  return cmds


def _log(msg: str) -> None:
  print(f"[study {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_plan(entries, commands_of, *, log_dir: str, workers: int = 1,
             deadline_s: float = 0.0, grace_s: float = 60.0, on_done=None,
             on_step=None, poll_s: float = 0.5):
  """Runs each entry's command list (one after another) in ``workers``
  processes at once; a failing command ends its entry.
  ``on_step(entry)`` runs after each of an entry's commands but its last.

  With ``deadline_s`` > 0 no entry starts after ``deadline_s`` seconds and
  running ones are killed at ``deadline_s + grace_s`` (their checkpoints stay;
  a rerun resumes them). ``on_done(entry)`` runs for each finished entry.
  Returns the keys ``(finished, failed, stopped)``.
  """
  t0 = time.time()
  queue = list(entries)
  running: dict = {}  # Entry -> (Popen, remaining commands, log file)
  finished, failed, stopped = [], [], []
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  os.makedirs(log_dir, exist_ok=True)

  def start(e, cmds):
    log = open(os.path.join(log_dir, e.key.replace("/", "__") + ".log"), "a")
    log.write(f"$ {' '.join(cmds[0])}\n")
    log.flush()
    proc = subprocess.Popen(cmds[0], stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, cmds[1:], log

  while queue or running:
    late = deadline_s > 0 and time.time() - t0 > deadline_s
    while queue and len(running) < workers and not late:
      e = queue.pop(0)
      _log(f"start {e.key}")
      running[e] = start(e, commands_of(e))
    if late and queue:
      _log(f"deadline: {len(queue)} run(s) not started")
      queue.clear()
    for e, (proc, rest, log) in list(running.items()):
      rc = proc.poll()
      if rc is None:
        if deadline_s > 0 and time.time() - t0 > deadline_s + grace_s:
          proc.kill()
          proc.wait()
          stopped.append(e.key)
          _log(f"stopped {e.key} at the deadline (rerun to resume it)")
          log.close()
          del running[e]
        continue
      log.close()
      del running[e]
      if rc != 0:
        _log(f"FAILED {e.key} (exit {rc}); see {log.name}")
        failed.append(e.key)
      elif rest:
        if on_step:
          on_step(e)
        running[e] = start(e, rest)
      else:
        finished.append(e.key)
        done = on_done(e) if on_done else False
        _log(f"done {e.key} ({time.time() - t0:.0f} s)"
             + (" -> committed files" if done else ""))
    if queue or running:
      time.sleep(poll_s)
  _log(f"{len(finished)} of {len(entries)} run(s) finished; failed: {failed or 'none'}; "
       f"stopped at the deadline: {stopped or 'none'}; {time.time() - t0:.0f} s")
  return finished, failed, stopped


def import_results(src: str, results: str, *, commit: bool, entries=None) -> list[str]:
  """Brings in runs that finished on another machine (a lent GPU's
  ``results/runs``, back as a tarball): each plan entry whose evidence is
  complete under ``src`` and missing under ``results`` is collected from there
  and committed like a run finished here. A run committed here is never
  replaced; only its missing paper-style ablation is taken, and only from the
  same run (identical ``summary.json``). Runs incomplete under ``src`` are left
  alone. ``entries``: the plan entries to consider (default: all). Returns
  the keys imported."""
  def same_run(e):
    a, b = (os.path.join(d, e.key, "summary.json") for d in (src, results))
    with open(a, "rb") as fa, open(b, "rb") as fb:
      return fa.read() == fb.read()
  done = []
  for e in PLAN if entries is None else entries:
    if not committed(e, src):
      continue
    if committed(e, results) and not (
        paper_ablation_missing(e, results) and not paper_ablation_missing(e, src)
        and same_run(e)):
      continue
    if collect_and_commit(e, src, results, commit=commit, imported=True):
      done.append(e.key)
  return done


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS.seeds < 5:
    print("error: --seeds must be >= 5 (the pre-registered tests need it)",
          file=sys.stderr)
    return 2
  if FLAGS.workers < 1:
    print("error: --workers must be >= 1", file=sys.stderr)
    return 2
  # most urgent first; within a priority, the plan's order
  plan = sorted((e for e in PLAN if e.priority <= FLAGS.priority_max),
                key=lambda e: e.priority)
  if FLAGS.preset:
    if FLAGS.preset not in configs.PRESET_NAMES:
      print(f"error: unknown --preset {FLAGS.preset!r}", file=sys.stderr)
      return 2
    seen, swapped = set(), []
    for e in plan:  # presets collapse: keep the first entry of each name
      e = dataclasses.replace(e, preset=FLAGS.preset)
      if e.key not in seen:
        seen.add(e.key)
        swapped.append(e)
    plan = swapped
  if FLAGS.only:
    want = list(dict.fromkeys(w.strip() for w in FLAGS.only.split(",") if w.strip()))
    by_key = {e.key: e for e in plan}
    unknown = [w for w in want if w not in by_key]
    if unknown:
      print(f"error: unknown --only entries {sorted(unknown)}; see --list",
            file=sys.stderr)
      return 2
    plan = [by_key[w] for w in want]  # the order given
  if FLAGS.import_from:
    if not os.path.isdir(FLAGS.import_from):
      print(f"error: --import_from {FLAGS.import_from!r} is not a directory", file=sys.stderr)
      return 2
    got = import_results(FLAGS.import_from, FLAGS.results, commit=FLAGS.git_commit,
                         entries=plan)  # --only / --priority_max narrow it
    _log(f"imported {len(got)} run(s) from {FLAGS.import_from}: {', '.join(got) or 'none'}")
    return 0
  todo = [e for e in plan if not committed(e, FLAGS.results)]
  # committed before its paper-style ablation ran: that ablation alone, where
  # the trained run is still here (else it is gone with its checkpoint)
  trained = lambda e: os.path.exists(os.path.join(FLAGS.runs, e.key, "summary.json"))
  paper_todo = [e for e in plan if paper_ablation_missing(e, FLAGS.results)]
  done = settled(FLAGS.results) if FLAGS.list or FLAGS.skip_settled else {}
  if FLAGS.list:
    for e in plan:
      state = "committed" if committed(e, FLAGS.results) else "to run"
      if e.key in done and state == "to run":
        state += f" (no verdict can change: {done[e.key]})"
      if e in paper_todo:
        state += (" (its paper-style ablation to run)" if trained(e) else
                  f" (no paper-style ablation: the trained run is not under {FLAGS.runs})")
      print(f"P{e.priority}  {e.key:<44} {state}")
    print(f"{len(plan) - len(todo)} of {len(plan)} committed; "
          f"{sum(e.key in done for e in todo)} of the rest cannot change a verdict")
    return 0
  if FLAGS.skip_settled:
    for e in todo:
      if e.key in done:
        _log(f"skip {e.key}: no verdict can change ({done[e.key]})")
    todo = [e for e in todo if e.key not in done]
  paper_only = {e.key for e in paper_todo if trained(e)}
  todo += [e for e in paper_todo if e.key in paper_only]
  on_done = on_step = None
  if FLAGS.collect:
    on_done = lambda e: collect_and_commit(e, FLAGS.runs, FLAGS.results,
                                           commit=FLAGS.git_commit)
    # the evidence is committed before the (long, descriptive) paper-style
    # ablation, so a session that ends during it loses no verdict
    on_step = lambda e: collect_and_commit(e, FLAGS.runs, FLAGS.results,
                                           commit=FLAGS.git_commit, partial=True)
  _, failed, _ = run_plan(
      todo, lambda e: commands(e, FLAGS.runs, FLAGS.seeds, FLAGS.workers,
                               paper_only=e.key in paper_only),
      log_dir=os.path.join(FLAGS.runs, "logs"), workers=FLAGS.workers,
      deadline_s=FLAGS.deadline_s, grace_s=FLAGS.grace_s, on_done=on_done,
      on_step=on_step)
  return 1 if failed else 0


def define_flags() -> None:
  """The CLI's flags (defined on use, so that tests can import this module
  beside ``experiments.sweep``, whose flag names overlap)."""
  flags.DEFINE_bool("list", False, "Print the plan and each run's state, then exit.")
  flags.DEFINE_bool("collect", True, "Copy finished runs' small files into --results.")
  flags.DEFINE_bool("git_commit", False, "With --collect: git-commit each finished run's "
                    "small files (only those paths) as it finishes.")
  flags.DEFINE_string("runs", "runs", "Where workdirs (with checkpoints) live.")
  flags.DEFINE_string("import_from", None, "Import the runs that finished elsewhere: a "
                      "results/runs tree from another machine (e.g. launch/gpu_decide.sh's "
                      "study-results.tgz, unpacked); with --git_commit each is committed. "
                      "Trains nothing.")
  flags.DEFINE_string("results", os.path.join(RESULTS, "runs"),
                      "Where finished runs' small files are committed.")
  flags.DEFINE_integer("seeds", 8, "Seeds per run (the claims need >= 5).")
  flags.DEFINE_integer("workers", 1, "Runs at once.")
  flags.DEFINE_float("deadline_s", 0, "If > 0: start no run after this many seconds, "
                     "and stop running ones at deadline + grace.")
  flags.DEFINE_float("grace_s", 60, "See --deadline_s.")
  flags.DEFINE_string("only", None, "Comma list of run names (task/name) to run, in "
                      "that order (default: the plan's, most urgent first).")
  flags.DEFINE_integer("priority_max", 99, "Run only entries of this priority or more urgent.")
  flags.DEFINE_bool("skip_settled", False, "Skip a run when every verdict that waits for it "
                    "is settled by the committed runs (a refutation, a label an "
                    "unconverged run has fixed, or a study row the long row replaced): "
                    "it cannot change a verdict. Runs no verdict waits for still run.")
  flags.DEFINE_string("preset", None, "Replace every entry's preset (e.g. smoke, to "
                      "check the machinery in seconds).")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
