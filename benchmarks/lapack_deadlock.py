r"""Reproduces the XLA:CPU deadlock that two LAPACK calls in one program cause.

  python -m benchmarks.lapack_deadlock [--iters=1000] [--stall_s=20] [--workdirs=A,B]

jaxlib 0.10's batched LAPACK kernels split their batch over XLA:CPU's
intra-op thread pool from inside a pool thread and block until it is done.
Two of them side by side in one program (here ``eigvalsh`` beside ``svd``)
can each take one of a 2-core machine's two pool threads and wait for work
only the other could run: every thread idle, for ever.

Each variant runs in its own subprocess, at XLA ``-O0`` as the test suite
compiles (where it was caught): the decomposition of one layer of a trained
sweep's checkpoint (2 seeds, 8 test examples), each layer of each workdir in
turn, one program at a time, with fresh examples each time; a wait longer
than ``--stall_s`` counts as a deadlock and ends that subprocess. It is a
race: it needs both calls to start together on the pool's threads, so it
depends on the program's whole shape (a cut-down program of the same two
calls, or untrained models, did not deadlock in 300-400 programs here).
Variants:

* ``two_calls``: :func:`pe_spectral.analysis.decompose._layer_summary` with the
  decomposition it used before: ``eigvalsh`` of the symmetric parts beside
  ``svd`` of the row-centred logits;
* ``one_call``: the same summary as it is now (``decompose._spectra``: one
  batched ``eigvalsh`` for both).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_integer("iters", 1000, "Programs run per variant.")
flags.DEFINE_float("stall_s", 20.0, "A wait this long counts as a deadlock.")
flags.DEFINE_string("variant", None, "Internal: run one variant in this process.")
flags.DEFINE_string("workdirs", None, "Comma list of trained sweep workdirs to decompose "
                    "(default: a 6-step smoke sweep of the PEs below, trained first into "
                    "a temporary folder, about 90 s).")

VARIANTS = ("two_calls", "one_call")
# One PE per code path of the end-to-end test where the deadlock was caught.
PES = ("fire", "cope", "p_rope", "alibi_multiplicative")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(variant: str, iters: int, stall_s: float, workdirs) -> int:
  import jax
  import jax.numpy as jnp

  from pe_spectral.analysis import decompose as D
  from pe_spectral.pe import spectral as S
  from pe_spectral.training import runner

  def two_calls(masked, centred):  # the decomposition decompose used up to 2026-12-02
    eig = jnp.linalg.eigvalsh(S.symmetric_part(masked))
    sv = jnp.linalg.svd(centred, compute_uv=False)
    return eig, sv[..., 0], (sv ** 2).sum(-1)

  spectra = {"two_calls": two_calls, "one_call": D._spectra}[variant]
  programs = []
  for wd in workdirs:
    _, rc, steps, states, data, _, _ = runner.load_run(wd)
    for layer in range(rc.model.num_layers):
      programs.append((jax.jit(jax.vmap(
          lambda p, ids, g=steps.graphdef, l=layer: D._layer_summary(g, p, ids, l, spectra),
          in_axes=(0, None))),
          states["params"], data.test_ids))
  t0 = time.time()
  for i in range(iters):
    fn, params, test_ids = programs[i % len(programs)]
    off = (8 * i) % (test_ids.shape[0] - 8)
    ids = test_ids[off:off + 8]
    out = fn(params, ids)
    start = time.time()
    for leaf in jax.tree.leaves(out):
      while not leaf.is_ready():
        time.sleep(1e-3)
        if time.time() - start > stall_s:
          print(f"{variant}: DEADLOCK at program {i + 1} (no result after {stall_s:.0f} s)",
                flush=True)
          os._exit(3)
  print(f"{variant}: {iters} programs, no deadlock ({time.time() - t0:.1f} s)", flush=True)
  return 0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS.iters < 1 or FLAGS.stall_s <= 0:
    raise app.UsageError("--iters must be >= 1 and --stall_s > 0")
  if FLAGS.variant is not None:
    if FLAGS.variant not in VARIANTS:
      raise app.UsageError(f"--variant must be one of {VARIANTS}")
    return _child(FLAGS.variant, FLAGS.iters, FLAGS.stall_s, FLAGS.workdirs.split(","))
  tmp = None
  if FLAGS.workdirs is None:
    tmp = tempfile.mkdtemp(prefix="lapack-deadlock-")
    print(f"training a 6-step smoke sweep of {','.join(PES)} in {tmp} ...", flush=True)
    subprocess.run([sys.executable, "-m", "experiments.sweep", f"--pe={','.join(PES)}",
                    "--preset=smoke", "--seeds=2", "--steps=6", "--eval_every=6"],
                   cwd=tmp, check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=_ROOT))
    FLAGS.workdirs = ",".join(os.path.join(tmp, "runs", "distance", f"{pe}-smoke")
                              for pe in PES)
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
  import jax
  print(f"{os.cpu_count()} CPUs; jax {jax.__version__}; "
        f"XLA_FLAGS={env['XLA_FLAGS']!r}", flush=True)
  for v in VARIANTS:
    budget = FLAGS.iters * 2.0 + FLAGS.stall_s + 120
    try:
      out = subprocess.run([sys.executable, "-m", "benchmarks.lapack_deadlock",
                            f"--variant={v}", f"--iters={FLAGS.iters}",
                            f"--stall_s={FLAGS.stall_s}",
                            f"--workdirs={FLAGS.workdirs}"], env=env, cwd=_ROOT, text=True,
                           capture_output=True, timeout=budget)
      lines = [l for l in out.stdout.splitlines() if l.startswith(v)]
      print(lines[-1] if lines else f"{v}: exit {out.returncode}\n{out.stderr[-2000:]}",
            flush=True)
    except subprocess.TimeoutExpired:
      print(f"{v}: still running after {budget:.0f} s (slow machine?)", flush=True)
  if tmp is not None:
    shutil.rmtree(tmp, ignore_errors=True)
  return 0


if __name__ == "__main__":
  cli.run(main, compile_cache=False)  # sets XLA's CPU flags first
