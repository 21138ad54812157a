"""benchmarks/isa.py's XLA cap (xla_config.isa_env): it replaces any earlier
cap and keeps the other flags, and it reaches XLA's code generation (the
machine code of a fused kernel, compiled in a subprocess, loses the
AVX-512-only registers)."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from pe_spectral.runtime.xla_config import isa_env


def test_isa_env_sets_one_cap_and_keeps_the_rest():
  base = {"XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_cpu_max_isa=SSE4_2",
          "OTHER": "1"}
  env = isa_env("AVX2", base)
  assert env["XLA_FLAGS"].split() == ["--xla_backend_optimization_level=0",
                                      "--xla_cpu_max_isa=AVX2"]
  assert env["OTHER"] == "1" and base["XLA_FLAGS"].endswith("SSE4_2")  # a copy
  assert isa_env("native", base)["XLA_FLAGS"] == "--xla_backend_optimization_level=0"
  assert isa_env("native", {})["XLA_FLAGS"] == ""


_KERNEL = ("import jax, jax.numpy as jnp; "
           "print(jax.jit(lambda a: jnp.tanh(a) * 3 + a)(jnp.ones(4096)).sum())")
# registers only AVX-512 has: zmm*, ymm16-31/xmm16-31 (EVEX), the mask registers
_AVX512_ONLY = re.compile(r"%zmm\d|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[1-7]\b")


def _kernel_asm(isa, tmp):
  dump = os.path.join(tmp, isa)
  env = isa_env(isa)
  env["XLA_FLAGS"] += f" --xla_dump_to={dump}"
  env["JAX_ENABLE_COMPILATION_CACHE"] = "false"  # compile here, do not read a cache
  subprocess.run([sys.executable, "-c", _KERNEL], env=env, check=True,
                 capture_output=True, text=True)
  objs = glob.glob(os.path.join(dump, "*lambda*.o"))
  assert objs, os.listdir(dump)
  return "".join(subprocess.run(["objdump", "-d", o], capture_output=True, text=True,
                                check=True).stdout for o in objs)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump not installed")
def test_the_cap_reaches_xla_codegen(tmp_path):
  native = _kernel_asm("native", str(tmp_path))
  if not _AVX512_ONLY.search(native):
    pytest.skip("XLA uses no AVX-512 register here: nothing for the cap to remove")
  assert not _AVX512_ONLY.search(_kernel_asm("AVX2", str(tmp_path)))
