"""What a CPU without AVX-512 costs: the same measurements with XLA's code
generation capped at a lower instruction set, side by side in one run.

Each ISA is measured in its own subprocess (XLA reads ``XLA_FLAGS`` once, at
start-up), with ``--xla_cpu_max_isa=<ISA>`` added; ``native`` adds nothing.
The cap is an emulation, and only of XLA's own code: kernels that pick their
instruction set at run time on their own (the matmul library's, NumPy's) may
still use AVX-512, and a real machine without it also differs in its caches
and clock. The matmul peak row shows how much of the cap reaches the matmuls.

  python -m benchmarks.isa                      # training throughput per ISA (~2 min)
  python -m benchmarks.isa --suite              # ... and the test suite's wall time per
                                                # ISA, each with a fresh (cold) JAX
                                                # compilation cache, as CI has it
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from benchmarks.one_seed import one_seed_training
from pe_spectral.runtime.xla_config import isa_env

FLAGS = flags.FLAGS
flags.DEFINE_list("isas", ["native", "AVX2"],
                  "ISAs to compare: native (no cap) or an --xla_cpu_max_isa value "
                  "(SSE4_2, AVX, AVX2, AVX512, ...).")
flags.DEFINE_integer("steps", 10, "Timed steps per measurement (cpu preset, one seed).")
flags.DEFINE_bool("suite", False, "Also time `python -m pytest -q` under each ISA.")
flags.DEFINE_string("out", "benchmarks/out/isa.json", "JSON output.")

_KNOWN = ("SSE4_2", "AVX", "AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _suite(isa, log):
  cache = tempfile.mkdtemp(prefix=f"isa-cache-{isa}-")  # cold, as on a fresh machine
  env = isa_env(isa)
  env["PE_SPECTRAL_TEST_JAX_CACHE"] = cache
  env.pop("JAX_COMPILATION_CACHE_DIR", None)  # would take precedence (tests/conftest.py)
  log(f"[{isa}] python -m pytest -q (compilation cache {cache}, empty)")
  t = time.time()
  res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                       cwd=_ROOT, env=env, capture_output=True, text=True)
  wall = time.time() - t
  tail = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
  log(f"[{isa}] {wall / 60:.1f} min: {tail}")
  return {"seconds": wall, "returncode": res.returncode, "summary": tail}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  bad = [i for i in FLAGS.isas if i != "native" and i not in _KNOWN]
  if bad or not FLAGS.isas:
    raise app.UsageError(f"--isas: unknown {bad}; use native or one of {', '.join(_KNOWN)}")
  log = lambda m: print(m, flush=True)
  res = {"date": time.strftime("%Y-%m-%d"), "isas": {}}
  # an ISA named twice is measured twice (the spread between the two is the noise)
  labels = [isa if FLAGS.isas[:i].count(isa) == 0 else f"{isa} #{FLAGS.isas[:i].count(isa) + 1}"
            for i, isa in enumerate(FLAGS.isas)]
  for label, isa in zip(labels, FLAGS.isas):
    res["isas"][label] = {"isa": isa,
                          "train": one_seed_training(isa, isa_env(isa), FLAGS.steps, log)}
  if FLAGS.suite:
    for label, isa in zip(labels, FLAGS.isas):
      res["isas"][label]["suite"] = _suite(isa, log)
  ref = res["isas"][labels[0]]
  log(f"\n{'ISA':<10} {'matmul GFLOP/s':>15} {'train seed-ex/s':>16} {'ratio':>6} "
      f"{'compile s':>10}" + (f" {'suite min':>10} {'ratio':>6}" if FLAGS.suite else ""))
  for isa, r in res["isas"].items():
    t = r["train"]
    line = (f"{isa:<10} {t['matmul_peak_gflops']:>15.1f} {t['seed_examples_per_s']:>16.1f} "
            f"{t['seed_examples_per_s'] / ref['train']['seed_examples_per_s']:>6.2f} "
            f"{t['first_chunk_compile_s']:>10.1f}")
    if FLAGS.suite:
      line += (f" {r['suite']['seconds'] / 60:>10.1f} "
               f"{r['suite']['seconds'] / ref['suite']['seconds']:>6.2f}")
    log(line)
  log(f"(ratios against {labels[0]}, measured in this run)")
  os.makedirs(os.path.dirname(FLAGS.out) or ".", exist_ok=True)
  with open(FLAGS.out, "w") as f:
    json.dump(res, f, indent=1)
  log(f"wrote {FLAGS.out}")
  return 0


if __name__ == "__main__":
  app.run(main)
