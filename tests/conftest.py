from pe_spectral.runtime import gc_tuning, xla_config

# Before any test touches JAX: the measured-faster XLA:CPU settings, and the
# garbage collector's thresholds the programs run with (the tests trace as
# much as the programs do).
xla_config.tune_cpu()
gc_tuning.tune_gc()

import os  # noqa: E402

# Tests run tiny programs, so compiling dominates them: XLA's backend at -O0
# (inherited by the CLI subprocesses) took test_train.py from 170 to 98 s and
# test_ablation.py from 158 to 99 s on the 2-core CPU. Every comparison a test
# makes is between runs under the same flags. PE_SPECTRAL_TEST_XLA_O0=0 keeps
# the default optimisation level.
if os.environ.get("PE_SPECTRAL_TEST_XLA_O0", "1") != "0" and \
    "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_backend_optimization_level=0").strip()
# With it, XLA:CPU's older fusion emitter: jaxlib 0.10's MLIR fusion emitters
# spend most of a tiny program's compile time (measured on test_library_attention.py,
# no compilation cache: 77 s -> 41 s of CPU at -O0; at the default level the
# old emitter is slower, 158 s, hence only together). Only for the jaxlib
# versions that know the flag (an unknown flag aborts XLA).
# PE_SPECTRAL_TEST_XLA_EMITTERS=1 keeps the default emitters.
if os.environ.get("PE_SPECTRAL_TEST_XLA_EMITTERS", "0") != "1" and \
    "xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", "") and \
    "xla_cpu_use_fusion_emitters" not in os.environ["XLA_FLAGS"] and \
    (0, 10) <= xla_config._jaxlib_version() < (0, 12):
  os.environ["XLA_FLAGS"] += " --xla_cpu_use_fusion_emitters=false"
# Tests compile the same small programs many times (a dozen CLI subprocesses
# train the same smoke run): JAX's persistent compilation cache, shared by
# every test process, turns each repeat into a cache read (measured: a
# smoke sweep's compilation 20 s -> 4 s). Compiled code is the same either
# way. PE_SPECTRAL_TEST_JAX_CACHE=0 turns it off; =<dir> picks the folder.
_cache = os.environ.get("PE_SPECTRAL_TEST_JAX_CACHE", "1")
if _cache != "0" and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  import tempfile  # noqa: E402
  os.environ["JAX_COMPILATION_CACHE_DIR"] = (
      _cache if _cache != "1" else
      os.path.join(tempfile.gettempdir(), f"pe-spectral-test-jax-cache-{os.getuid()}"))
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  import jax  # noqa: E402
  jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")))
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
  """The tests marked ``long`` (end-to-end runs of 15 s and more) spread over
  the xdist workers' first chunks, the rest in file order. pytest-xdist's
  load scheduling sends worker k the k-th block of ``len(items) // workers //
  4`` consecutive tests first, then the rest a few at a time as workers free
  up: the long ones at the head of each block start at once on every worker,
  and the suite ends on short tests, not one worker finishing a long one
  while the other waits. Every worker sorts its own collection the same way
  (xdist requires it); where xdist splits otherwise the order is only less
  good, never wrong."""
  workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
  long = [item for item in items if item.get_closest_marker("long")]
  rest = [item for item in items if not item.get_closest_marker("long")]
  block = max(len(items) // max(workers, 1) // 4, 2)
  # a module's long tests go to one worker together, where they share its
  # module-scoped fixtures (the two-process run): whole modules, the largest
  # first, each to the worker with the fewest long tests so far
  modules = {}
  for item in long:
    modules.setdefault(item.module.__name__, []).append(item)
  per_worker = [[] for _ in range(max(workers, 1))]
  for group in sorted(modules.values(), key=len, reverse=True):
    min(per_worker, key=len).extend(group)
  ordered = []
  for k in range(workers):
    heads = per_worker[k]
    take = max(block - len(heads), 0)
    ordered += heads + rest[:take]
    rest = rest[take:]
  items[:] = ordered + rest


# The end-to-end reference run several test files compare against (smoke preset).
SWEEP_COMMON = ["--preset=smoke", "--seeds=2", "--steps=24", "--eval_every=6"]


def run_sweep(*args, env=None, check=True, cwd=None):
  """``python -m experiments.sweep ARGS`` in a subprocess (in ``cwd``)."""
  full_env = dict(os.environ, **(env or {}))
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  if cwd is not None:  # the package stays importable from another folder
    full_env["PYTHONPATH"] = repo + os.pathsep + full_env.get("PYTHONPATH", "")
  out = subprocess.run([sys.executable, "-m", "experiments.sweep", *args], cwd=cwd,
                       capture_output=True, text=True, env=full_env)
  if check and out.returncode != 0:
    raise AssertionError(f"sweep failed ({out.returncode}):\n{out.stderr[-3000:]}")
  return out


def run_cli_batch(module: str, cases, *, env=None) -> list:
  """Several command lines of one program (``cases``: ``(args, cwd)`` pairs) in
  ONE process (tests/cli_batch.py): a ``subprocess.CompletedProcess`` for each,
  with the exit status, stdout and stderr that ``python -m module *args`` in
  ``cwd`` gives. For the command lines that fail fast, which would each pay a
  fresh interpreter and JAX's import."""
  import json
  import tempfile
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  full_env = dict(os.environ, **(env or {}))
  full_env["PYTHONPATH"] = repo + os.pathsep + full_env.get("PYTHONPATH", "")
  payload = [{"module": module, "args": list(args), "cwd": str(cwd)} for args, cwd in cases]
  with tempfile.TemporaryDirectory() as tmp:
    answers = os.path.join(tmp, "answers.json")
    out = subprocess.run([sys.executable, os.path.join(repo, "tests", "cli_batch.py"), answers],
                         input=json.dumps(payload), capture_output=True, text=True,
                         env=full_env, cwd=repo)
    if out.returncode != 0:
      raise AssertionError(f"cli_batch failed ({out.returncode}):\n{out.stderr[-3000:]}")
    with open(answers) as f:
      got = json.load(f)
  return [subprocess.CompletedProcess([sys.executable, "-m", module, *args], a["returncode"],
                                      a["stdout"], a["stderr"])
          for (args, _), a in zip(cases, got)]


def assert_fast_matches_reference(loss, params, *, rtol, atol):
  """``jax.value_and_grad(loss)`` on the fast attention kernel (custom VJP)
  equals the plain-autodiff reference path (``speed.reference()``)."""
  import jax
  import numpy as np

  from pe_spectral.runtime import speed
  l_fast, g_fast = jax.value_and_grad(loss)(params)
  with speed.reference():
    l_ref, g_ref = jax.value_and_grad(loss)(params)
  np.testing.assert_allclose(l_fast, l_ref, rtol=rtol)
  for a, b in zip(jax.tree.leaves(g_fast), jax.tree.leaves(g_ref)):
    np.testing.assert_allclose(a, b, atol=atol, rtol=10 * rtol)


@pytest.fixture(scope="session")
def sweep_reference(tmp_path_factory):
  """``(workdir, CompletedProcess)`` of one uninterrupted sweep with SWEEP_COMMON,
  trained once for the whole session: under pytest-xdist the first worker
  that asks trains it while the others wait on a lock (pytest-xdist's recipe
  for session data), and they read its workdir and its output. Tests read it
  or copy it, never change it."""
  import fcntl
  import json
  base = tmp_path_factory.getbasetemp()
  root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
  wd, saved = root / "sweep-reference" / "run", root / "sweep-reference.json"
  with open(root / "sweep-reference.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not saved.exists():
      out = run_sweep(*SWEEP_COMMON, f"--workdir={wd}")
      saved.write_text(json.dumps([out.args, out.returncode, out.stdout, out.stderr]))
  return str(wd), subprocess.CompletedProcess(*json.loads(saved.read_text()))
