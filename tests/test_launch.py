"""Launchers: --dry_run prints the expected command lines; bad inputs fail; shellcheck-clean."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
STUDY = "studies/arxiv_2505_13027"
SCRIPTS = ["launch/local.sh", "launch/gpu.sh", "launch/tpu_vm.sh", "launch/slurm.sbatch",
           "launch/gpu_check.sh"] + [
    f"{STUDY}/launch/{name}" for name in (
        "study_gpu.sh", "reproduce_cpu.sh", "reproduce_paper.sh", "lengths_cpu.sh",
        "thesis_cpu.sh", "task2_cpu.sh", "study_cpu.sh", "gpu_decide.sh")] + [
    "studies/ruoss_2023/launch/zoo_cpu.sh", "studies/lm_stdlib/launch/lm_cpu.sh"]


def _copy_launch_trees(root):
  """The launchers of a copy of the repo without its committed results: the
  shared helpers and the study's launchers (which cd to the repo root)."""
  shutil.copytree(os.path.join(ROOT, "launch"), root / "launch")
  shutil.copytree(os.path.join(ROOT, STUDY, "launch"), root / STUDY / "launch")


def _run(*args, **env_extra):
  env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
  return subprocess.run(["bash", *args], cwd=ROOT, capture_output=True, text=True,
                        env={**env, **env_extra})


def test_local_dry_run():
  out = _run("launch/local.sh", "--dry_run", "--seeds", "3")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  assert len(lines) == 4
  assert lines[0].startswith("python -m experiments.sweep --preset=cpu --task=distance")
  assert "--seeds=3" in lines[0] and "--pe=nope,sinusoidal" in lines[0]
  assert "--task=count" in lines[2] and "--rope_heads=1,2" in lines[3]


def test_gpu_dry_run():
  out = _run("launch/gpu.sh", "--dry_run", "--epochs", "5", "rope,nope", "8")
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == ("python -m experiments.sweep --preset=paper "
                                "--task=distance --pe=rope,nope --seeds=8 --epochs=5")


def test_gpu_check_dry_run_writes_nothing():
  out = _run("launch/gpu_check.sh", "--dry_run", "/tmp/never-written.log")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  assert sum("benchmarks.memory --preset=paper" in ln for ln in lines) == 5
  assert any("--seed_group=auto" in ln for ln in lines)
  assert sum("bfloat16" in ln for ln in lines) == 4
  assert any("experiments.ablate --workdir=runs/gpu-check/paper-auto" in ln for ln in lines)
  assert any("benchmarks.run --presets=paper" in ln for ln in lines)
  # two parts, each one device call: part 1 the paper preset, part 2 the rest
  one = _run("launch/gpu_check.sh", "--dry_run", "--part=1", "/tmp/never-written.log")
  two = _run("launch/gpu_check.sh", "--dry_run", "--part=2", "/tmp/never-written.log")
  three = _run("launch/gpu_check.sh", "--dry_run", "--part=3", "/tmp/never-written.log")
  timed = lambda out: [ln for ln in out.stdout.splitlines() if ln.startswith("timeout ")]
  assert len(timed(one)) + len(timed(two)) + len(timed(three)) == len(
      [ln for ln in lines if ln.startswith("timeout ")])
  for part in (one, two, three):  # the timeouts fit 8 minutes per part
    assert sum(int(ln.split()[1]) for ln in timed(part)) <= 480, part.stdout
  assert not any("benchmarks.memory" in ln for ln in timed(two))
  # part 1 times the chunk itself (no sweep: sizing, compiling and evaluating
  # the paper model outlasted a sweep row's timeout on the 2026-12-04 H200)
  assert any("--time_reps=" in ln and "--seed_group=0,1" in ln for ln in timed(one))
  assert not any("experiments.sweep" in ln for ln in timed(one))
  # part 3: the library's attention beside the project's kernel, dropout 0,
  # cudnn among the memory rows, the ratio to PyTorch where torch is installed
  assert all("--dropout=0" in ln for ln in timed(three) if "benchmarks.memory" in ln)
  assert sum("cudnn" in ln for ln in timed(three)) == 2
  assert any("--attention_impls=own,xla" in ln and "--torch" in ln for ln in timed(three))
  assert _run("launch/gpu_check.sh", "--dry_run", "--part=4").returncode == 2
  assert all(ln.startswith(("timeout ", "python", "nvidia-smi", "done:")) for ln in lines)
  assert not os.path.exists("/tmp/never-written.log")


def test_tpu_dry_run():
  out = _run("launch/tpu_vm.sh", "--dry_run", "my-tpu", "us-central2-b", "rope", "8")
  assert out.returncode == 0, out.stderr
  line = out.stdout.strip()
  assert line.startswith("gcloud compute tpus tpu-vm ssh my-tpu --zone=us-central2-b "
                         "--worker=all --command=")
  assert "experiments.sweep\\ --distributed" in line


def test_slurm_dry_run():
  out = _run("launch/slurm.sbatch", "--dry_run", "rope", "8")
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip().splitlines() == [
      "srun --kill-on-bad-exit=1 python -m experiments.sweep --distributed --preset=paper "
      "--pe=rope --seeds=8", "# then, if it exits 143 (preempted, saved):",
      "scontrol requeue JOBID"]
  # a grace signal before the time limit, and a job that may come back
  head = open(os.path.join(ROOT, "launch/slurm.sbatch")).read()
  assert "#SBATCH --signal=TERM@" in head and "#SBATCH --requeue" in head
  from experiments import sweep
  assert sweep.PREEMPTED_EXIT == 143  # the status the script requeues on


def test_study_launchers_dry_run():
  out = _run(f"{STUDY}/launch/study_gpu.sh", "--dry_run", "600", "4", "/tmp/o")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  assert "--preset=smoke" in lines[1] and "--seed_group=1" in lines[2]
  # the deadline is the budget less 60 s and the seconds the dry run itself took (0-2)
  plan = "-m studies.arxiv_2505_13027.plan"
  assert any(lines[3].endswith(f"{plan} --workers=4 --deadline_s={d} --grace_s=30 --skip_settled")
             for d in (540, 539, 538)), lines[3]
  assert lines[4] == f"tar czf /tmp/o/study.tgz {STUDY}/results/runs runs/logs"
  out = _run(f"{STUDY}/launch/reproduce_cpu.sh", "--dry_run", "--seeds", "5")
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip().splitlines() == [
      "python -m studies.arxiv_2505_13027.plan --seeds=5 --workers=1",
      "python -m studies.arxiv_2505_13027.report"]


@pytest.mark.parametrize("args", [
    [f"{STUDY}/launch/study_gpu.sh", "--dry_run", "x"],
    [f"{STUDY}/launch/study_gpu.sh", "--dry_run", "600", "0"],
    ["launch/gpu.sh", "--dry_run", "rope", "x"],
    ["launch/gpu.sh", "--dry_run", "rope"],
    ["launch/local.sh", "--dry_run", "--seeds", "0"],
    ["launch/local.sh", "--bogus"],
    ["launch/tpu_vm.sh", "--dry_run", "name"],
    [f"{STUDY}/launch/task2_cpu.sh", "--dry_run", "alibi"],
    [f"{STUDY}/launch/study_cpu.sh", "--dry_run", "count/nope-long-dropout0"],  # not CPU-sized
    [f"{STUDY}/launch/gpu_decide.sh", "--dry_run", "100"],  # below the least budget
    [f"{STUDY}/launch/gpu_decide.sh", "--dry_run", "x"],
    ["launch/slurm.sbatch", "rope", "8"],  # not inside a SLURM job
])
def test_bad_arguments_fail(args):
  out = _run(*args)
  assert out.returncode == 2 and out.stderr.startswith("error:")
  assert out.stdout == ""


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_clean():
  out = subprocess.run(["shellcheck", "-x", *SCRIPTS, "launch/common.sh"], cwd=ROOT,
                       capture_output=True, text=True)
  assert out.returncode == 0, out.stdout


def test_lengths_study_skips_committed_pes():
  out = _run(f"{STUDY}/launch/lengths_cpu.sh", "rope", "mla")
  assert out.returncode == 0, out.stderr[-2000:]
  assert f"{STUDY}/results/lengths/rope-cpu is committed: skipping rope" in out.stderr
  assert f"{STUDY}/results/lengths/mla-cpu is committed: skipping mla" in out.stderr


def test_thesis_study_skips_committed_pes():
  out = _run(f"{STUDY}/launch/thesis_cpu.sh", "rope_additive")
  assert out.returncode == 0, out.stderr[-2000:]
  assert f"{STUDY}/results/thesis/rope_additive is committed: skipping rope_additive" in out.stderr


def test_thesis_long_budget_skips_committed_pes():
  out = _run(f"{STUDY}/launch/thesis_cpu.sh", "--long", "rope_additive")
  assert out.returncode == 0, out.stderr[-2000:]
  assert (f"{STUDY}/results/thesis-32ep/rope_additive is committed: skipping rope_additive"
          in out.stderr)


def test_thesis_last_rung_runs_rope_only_after_rope_additive_converged(tmp_path):
  """--last_rung (seventh amendment): 128 epochs, 5 seeds; rope is skipped
  until rope_additive's committed 128-epoch summary says it converged."""
  import json
  # a copy of the repo's launch tree with its own results/ (none committed yet)
  root = tmp_path / "repo"
  _copy_launch_trees(root)
  env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT), PYTHON=sys.executable)
  run = lambda *pes: subprocess.run(["bash", f"{STUDY}/launch/thesis_cpu.sh", "--dry_run",
                                     "--last_rung",
                                     *pes], cwd=root, capture_output=True, text=True, env=env)
  out = run()
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  assert len(lines) == 1 and "--pe=rope_additive" in lines[0]
  for arg in ("--seeds=5", "--epochs=128", "--record_curvature=64",
              "--workdir=runs/thesis-128ep/rope_additive"):
    assert arg in lines[0].split()
  assert "skipping rope" in out.stderr and "seventh amendment" in out.stderr
  # a committed rope_additive: converged or not
  gate = root / STUDY / "results" / "thesis-128ep" / "rope_additive"
  gate.mkdir(parents=True)
  for per_seed, runs_rope in (([True] * 4 + [False], True), ([True] * 3 + [False] * 2, False)):
    (gate / "summary.json").write_text(json.dumps({"plateau": {"per_seed": per_seed}}))
    out = run("rope")
    assert out.returncode == 0, out.stderr
    assert ("--pe=rope " in out.stdout) == runs_rope, (per_seed, out.stdout, out.stderr)


def test_gpu_decide_trains_what_can_still_decide(tmp_path):
  """launch/gpu_decide.sh: the thesis's 128-epoch runs exactly as thesis_cpu.sh
  would run them, under a timeout inside the budget -- rope without waiting
  (GATE=0) while rope_additive is uncommitted, behind the gate once it is --
  beside the study's priority-1 runs (or RUNS); tarballs only with OUT_DIR."""
  import json
  root = tmp_path / "repo"   # the launch tree without any committed thesis run
  _copy_launch_trees(root)
  env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT), PYTHON=sys.executable)

  def run(script, *args, **extra):
    out = subprocess.run(["bash", script, "--dry_run", *args], cwd=root, capture_output=True,
                         text=True, env=dict(env, **extra))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()

  def sweeps(lines):
    return [line for line in lines if "experiments.sweep" in line]
  lines = run(f"{STUDY}/launch/gpu_decide.sh", "600", "/tmp/o")
  assert len(sweeps(lines)) == 2
  for pe, line in zip(("rope_additive", "rope"), sweeps(lines)):
    cpu = run(f"{STUDY}/launch/thesis_cpu.sh", "--last_rung", pe, GATE="0")
    assert line == "timeout 570 " + cpu[0]
  study = [line.split() for line in lines if "studies.arxiv_2505_13027.plan" in line]
  assert len(study) == 1
  for arg in ("--priority_max=1", "--deadline_s=450", "--skip_settled", "--seeds=8"):
    assert arg in study[0]
  assert sum(line.startswith("tar czf /tmp/o/") for line in lines) >= 3
  assert not any(line.startswith("tar ") for line in run(f"{STUDY}/launch/gpu_decide.sh", "600"))
  only = [line for line in run(f"{STUDY}/launch/gpu_decide.sh", "600",
                               RUNS="count/nope-long-dropout0")
          if "studies.arxiv_2505_13027.plan" in line]
  assert "--only=count/nope-long-dropout0" in only[0].split()
  # rope_additive committed: not trained again, and rope only if it converged
  gate = root / STUDY / "results" / "thesis-128ep" / "rope_additive"
  gate.mkdir(parents=True)
  for per_seed, runs_rope in (([True] * 2 + [False] * 3, False), ([True] * 4 + [False], True)):
    (gate / "summary.json").write_text(json.dumps({"plateau": {"per_seed": per_seed}}))
    got = sweeps(run(f"{STUDY}/launch/gpu_decide.sh", "600"))
    assert [("--pe=rope" in line.split()) for line in got] == ([True] if runs_rope else [])


def test_thesis_count_configuration_dry_run():
  """--count: the registered Task 2 configuration of the 2x2 design (fourth
  amendment): the four PEs, count task, dropout 0, 5 seeds, 24 epochs."""
  # committed ones too
  out = _run(f"{STUDY}/launch/thesis_cpu.sh", "--dry_run", "--count", FORCE="1")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  pes = [line.split("--pe=")[1].split()[0] for line in lines]
  assert sorted(pes) == ["alibi", "alibi_multiplicative", "rope", "rope_additive"]
  for pe, line in zip(pes, lines):
    assert line.startswith("python3 -m experiments.sweep --preset=cpu --task=count ")
    for arg in ("--seeds=5", "--epochs=24", "--record_spectra=16", "--record_curvature=64",
                "--config.model.dropout=0", f"--workdir=runs/thesis-count/{pe}"):
      assert arg in line.split(), (arg, line)


def test_grid_dry_run_is_the_count_configuration_with_the_new_pes():
  """--grid (tenth amendment): the --count runs' exact configuration for the
  content-dependent PEs, each followed by its decomposition (and rope_learned
  by its head ablation)."""
  out = _run(f"{STUDY}/launch/thesis_cpu.sh", "--dry_run", "--grid", FORCE="1")
  count = _run(f"{STUDY}/launch/thesis_cpu.sh", "--dry_run", "--count", "rope", FORCE="1")
  assert out.returncode == 0 and count.returncode == 0, out.stderr + count.stderr
  lines = out.stdout.strip().splitlines()
  sweeps = [line for line in lines if "experiments.sweep" in line]
  assert [line.split("--pe=")[1].split()[0] for line in sweeps] == [
      "pope", "alibi_data", "rope_learned", "carope"]
  # the same flags as the committed count runs, but the PE and the workdir
  ref = count.stdout.strip().split()
  for line in sweeps:
    pe = line.split("--pe=")[1].split()[0]
    as_rope = (line.replace(f"--pe={pe}", "--pe=rope")
               .replace(f"runs/grid-count/{pe}", "runs/thesis-count/rope"))
    assert as_rope.split() == ref, (line, ref)
  assert [line.split("--workdir=")[1] for line in lines if "experiments.decompose" in line] \
      == [f"runs/grid-count/{pe}" for pe in ("pope", "alibi_data", "rope_learned", "carope")]
  # rope_learned alone gets the head ablation: where its deposit head's frequencies went
  assert [line.split("--workdir=")[1] for line in lines if "experiments.ablate" in line] \
      == ["runs/grid-count/rope_learned"]


def test_grid_distance_dry_run_is_each_static_partners_task1_configuration():
  """--grid_distance (the tenth amendment's descriptive Task 1 table): each new
  PE runs exactly as its static partner's committed Task 1 run (the default
  thesis launcher: pope and rope_learned as rope, alibi_data as alibi), in
  runs/grid-distance/, followed by the same decomposition and ablation as --grid."""
  out = _run(f"{STUDY}/launch/thesis_cpu.sh", "--dry_run", "--grid_distance", FORCE="1")
  thesis = _run(f"{STUDY}/launch/thesis_cpu.sh", "--dry_run", "rope", "alibi", FORCE="1")
  assert out.returncode == 0 and thesis.returncode == 0, out.stderr + thesis.stderr
  ref = {line.split("--pe=")[1].split()[0]: line.split()
         for line in thesis.stdout.strip().splitlines()}
  lines = out.stdout.strip().splitlines()
  sweeps = [line for line in lines if "experiments.sweep" in line]
  partner = {"pope": "rope", "alibi_data": "alibi", "rope_learned": "rope", "carope": "rope"}
  assert [line.split("--pe=")[1].split()[0] for line in sweeps] == list(partner)
  for line in sweeps:
    pe = line.split("--pe=")[1].split()[0]
    as_static = (line.replace(f"--pe={pe}", f"--pe={partner[pe]}")
                 .replace(f"runs/grid-distance/{pe}", f"runs/thesis/{partner[pe]}"))
    assert as_static.split() == ref[partner[pe]], (line, ref[partner[pe]])
  assert [line.split("--workdir=")[1] for line in lines if "experiments.decompose" in line] \
      == [f"runs/grid-distance/{pe}" for pe in partner]
  assert [line.split("--workdir=")[1] for line in lines if "experiments.ablate" in line] \
      == ["runs/grid-distance/rope_learned"]


def test_task2_cpu_runs_the_plans_dropout0_entries():
  from studies.arxiv_2505_13027 import plan as study
  out = _run(f"{STUDY}/launch/task2_cpu.sh", "--dry_run")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  keys = [line.split("--only=")[1].split()[0] for line in lines]
  assert keys == [e.key for e in study.PLAN if e.tag == "len80-dropout0"]  # the plan's order
  assert all(line.startswith("nice -n 10 ") and line.endswith("--seeds=5") for line in lines)


def test_study_cpu_queue_is_plan_entries_in_its_own_order():
  """Every name of the CPU queue is a plan entry, run one at a time in the
  queue's order (not the plan's: learned-long first, it alone can decide (a))."""
  from studies.arxiv_2505_13027 import plan as study
  out = _run(f"{STUDY}/launch/study_cpu.sh", "--dry_run")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  # the coupling study's last rung rides in the queue (the study's study.md, seventh amendment)
  thesis = [line for line in lines if f"{STUDY}/launch/thesis_cpu.sh" in line]
  assert [line.split()[-1] for line in thesis] == ["rope_additive", "rope"]
  assert all(line.startswith("env GIT_COMMIT=1 ") and " nice -n 10 " in line
             and "--last_rung" in line for line in thesis)
  lines = [line for line in lines if line not in thesis]
  keys = [line.split("--only=")[1].split()[0] for line in lines]
  plan = {e.key: e for e in study.PLAN}
  assert keys and all(k in plan for k in keys) and len(set(keys)) == len(keys)
  assert keys[0] == "distance/learned-long"
  assert all(plan[k].preset in ("long", "deposit") and plan[k].task == "distance"
             for k in keys)
  assert all(line.startswith("nice -n 10 ") and "--seeds=8 --git_commit" in line
             for line in lines)
  # runs no verdict can use are skipped, except the trailing ones run to describe:
  # the (g) deposits (its label is fixed, ninth amendment) and the clean long rivals
  skip = [k for k, line in zip(keys, lines) if line.endswith("--git_commit --skip_settled")]
  describe = [k for k, line in zip(keys, lines) if line.endswith("--git_commit")]
  assert len(skip) + len(describe) == len(keys) and keys[:len(skip)] == skip
  assert "distance/rope_sinusoidal-faithful-deposit" in skip
  assert "distance/nope-faithful-deposit" in skip
  assert all(k.endswith("-deposit") or k.endswith("-long") for k in describe)
  assert sum(k.endswith("-deposit") for k in describe) == 6
  one = _run(f"{STUDY}/launch/study_cpu.sh", "--dry_run", keys[3], keys[1])
  assert [line.split("--only=")[1].split()[0]
          for line in one.stdout.strip().splitlines()] == [keys[3], keys[1]]


def test_study_cpu_queue_goes_on_after_a_failed_run(tmp_path):
  """A run that fails does not stop the queue: the next one still starts, and
  the script exits 1 at the end naming the failed run."""
  calls = tmp_path / "calls.txt"
  stub = tmp_path / "python"
  stub.write_text("#!/usr/bin/env bash\n"
                  f"echo \"$*\" >> {calls}\n"
                  "case \"$*\" in *nope-faithful-deposit*) exit 1 ;; esac\n")
  stub.chmod(0o755)
  out = _run(f"{STUDY}/launch/study_cpu.sh", "distance/nope-faithful-deposit",
             "distance/alibi-faithful-deposit", PYTHON=str(stub))
  assert out.returncode == 1, out.stderr
  ran = calls.read_text().splitlines()
  assert [line.split("--only=")[1].split()[0] for line in ran] == [
      "distance/nope-faithful-deposit", "distance/alibi-faithful-deposit"]
  assert "distance/nope-faithful-deposit failed" in out.stderr
  assert out.stderr.strip().splitlines()[-1] == (
      "error: 1 run(s) failed: distance/nope-faithful-deposit")


def test_ruoss_zoo_dry_run_is_the_registered_design():
  """studies/ruoss_2023/study.md: five PEs x 5 seeds at the cpu preset, the
  length tool at 1, 2, 4, 8x, and Q3's ablation + decomposition on even_pairs'
  rope and nope only."""
  out = _run("studies/ruoss_2023/launch/zoo_cpu.sh", "--dry_run", "even_pairs", "parity_check",
             FORCE="1")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  sweeps = [line for line in lines if "experiments.sweep" in line]
  assert len(sweeps) == 10
  assert all("--preset=cpu" in line and "--seeds=5" in line for line in sweeps)
  assert sum("--pe=rope --random_positions=320" in line for line in sweeps) == 2
  assert all(line.endswith("--factors=1,2,4,8") for line in lines if "experiments.lengths" in line)
  q3 = [line.split("--workdir=")[1] for line in lines
        if "experiments.ablate" in line or "experiments.decompose" in line]
  assert q3 == ["runs/ruoss_2023/even_pairs/nope"] * 2 + ["runs/ruoss_2023/even_pairs/rope"] * 2


def test_lm_study_dry_run_is_the_registered_design():
  """studies/lm_stdlib/study.md: ten PEs x 5 seeds of --task=lm at the cpu
  preset, each with the length tool (its defaults: 1-16x, RoPE's scalings),
  the decomposition and the head ablation."""
  out = _run("studies/lm_stdlib/launch/lm_cpu.sh", "--dry_run", FORCE="1")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.strip().splitlines()
  sweeps = [line for line in lines if "experiments.sweep" in line]
  pes = [line.split("--pe=")[1].split()[0] for line in sweeps]
  assert pes == ["nope", "sinusoidal", "learned", "alibi", "rope", "fire", "kerple_log",
                 "pope", "alibi_data", "carope"]
  assert all("--task=lm --preset=cpu" in line and "--seeds=5" in line for line in sweeps)
  for tool in ("lengths", "decompose", "ablate"):
    assert sum(f"experiments.{tool} " in line for line in lines) == 10, tool
  assert _run("studies/lm_stdlib/launch/lm_cpu.sh", "--bad").returncode != 0
