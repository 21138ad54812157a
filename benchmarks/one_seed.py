"""The one-seed training row of ``benchmarks.run`` measured in a subprocess, so
that each measurement gets its own ``XLA_FLAGS`` (read once, at start-up):
shared by ``benchmarks.isa`` (instruction sets) and ``benchmarks.xla_flags``
(XLA:CPU settings). No flags of its own."""
import json
import os
import subprocess
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_seed_training(label: str, env: dict, steps: int, log, args=()) -> dict:
  """``benchmarks.run``'s one-seed ``cpu`` RoPE row in a subprocess under
  ``env`` (XLA reads its flags once, at start-up), with ``args`` added to its
  command line; RuntimeError if it fails
  (e.g. an XLA flag this jaxlib does not know)."""
  out = os.path.join(tempfile.mkdtemp(prefix="one-seed-"), "run.json")
  cmd = [sys.executable, "-m", "benchmarks.run", "--presets=cpu", "--pes=rope",
         "--seeds=1", "--torch=false", "--ablation=false", "--seed_groups=",
         "--overhead_batches=", "--small_batch=0", "--attention_impls=",
         f"--steps={steps}", f"--out={out}", *args]
  log(f"[{label}] {' '.join(cmd[1:])}")
  res = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True)
  if res.returncode != 0:
    raise RuntimeError(f"[{label}] benchmarks.run failed:\n{res.stderr[-2000:]}")
  with open(out) as f:
    r = json.load(f)
  row = r["train"]["cpu/rope"]["1 seed"]
  return {"matmul_peak_gflops": r["matmul_peak_gflops"],
          "seed_examples_per_s": row["seed_examples_per_s"], "mfu": row["mfu"],
          "first_chunk_compile_s": row["first_chunk_compile_s"],
          "xla_flags": r["xla_flags"]}
