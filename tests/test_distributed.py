"""Two local processes with jax.distributed on CPU agree with one process (the
session's reference sweep, conftest.SWEEP_COMMON: its 2 seeds, one per process)."""
import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import SWEEP_COMMON as ARGS


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_match_one(sweep_reference, tmp_path):
  env = dict(os.environ)
  port = _free_port()
  multi = str(tmp_path / "multi")
  procs = [subprocess.Popen(
      [sys.executable, "-m", "experiments.sweep", *ARGS, f"--workdir={multi}",
       "--distributed", f"--coordinator_address=127.0.0.1:{port}",
       "--num_processes=2", f"--process_id={i}"],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
      for i in range(2)]
  try:  # one process waiting on a dead peer would wait forever: bound both
    outs = [p.communicate(timeout=600) for p in procs]
  finally:
    for p in procs:
      p.kill()
  if any(p.returncode != 0 for p in procs):
    err = outs[0][1] + outs[1][1]
    if "collectives" in err.lower() or "not supported" in err.lower():
      pytest.skip("this jaxlib has no multi-process CPU support: " + err[-300:])
    raise AssertionError(err[-3000:])
  assert "process 0/2" in outs[0][1] and "process 1/2" in outs[1][1]
  assert "per-seed" in outs[0][0] and "per-seed" not in outs[1][0]  # only process 0 reports
  with open(os.path.join(multi, "metrics.jsonl")) as f:
    steps = [json.loads(line)["step"] for line in f]
  assert steps == [6, 12, 18, 24]  # written once, not once per process
  load = lambda d: json.load(open(os.path.join(d, "summary.json")))
  a, b = load(multi), load(sweep_reference[0])
  assert a["num_devices"] == 2 and b["num_devices"] == 1
  assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-6)
  assert a["train_accuracy"] == pytest.approx(b["train_accuracy"], abs=1e-6)
