import contextlib
import dataclasses
import io
import json
import math
import os
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.data import tasks
from pe_spectral.training import config as configs
from pe_spectral.training import train


def _setup(pe="rope", faithful=False, **kw):
  rc = configs.build("smoke", "distance", pe, faithful=faithful, **kw)
  data = tasks.generate(rc.task)
  return rc, data


def test_schedule_matches_paper_lambda():
  cfg = train.TrainConfig(learning_rate=2.0, warmup_frac=0.06)
  total = 1000
  sched = train.lr_schedule(cfg, total)
  w = int(0.06 * total)
  for s in (0, 1, 30, 59, 60, 61, 500, 999):
    want = s / w if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / (total - w)))
    assert float(sched(s)) == pytest.approx(2.0 * want, rel=1e-5, abs=1e-6)


def test_label_rules():
  task = configs.build("smoke", "distance", "rope").task
  clean = train.label_rule(task, configs.build("smoke", "distance", "rope").model)
  t, v = clean.targets(jnp.asarray([2, 5, 9]))
  np.testing.assert_array_equal(t, [0, 3, 7])
  assert bool(v.all()) and clean.num_classes == task.num_labels
  count = configs.build("smoke", "count", "rope", faithful=True)
  rule = train.label_rule(count.task, count.model)
  t, v = rule.targets(jnp.asarray([0, 3]))
  np.testing.assert_array_equal(t, [0, 3])
  np.testing.assert_array_equal(v, [False, True])
  mla = configs.build("smoke", "count", "mla", faithful=True)
  assert not train.label_rule(mla.task, mla.model).ignore_zero


def _steps(rc, data, **kw):
  return train.make_steps(rc.model, rc.task, rc.train, data.train_ids.shape[0], **kw)


def _train(st, keys, data, num_steps, states=None):
  """``num_steps`` steps of every seed from ``states`` (default: a fresh init)."""
  states = train.jit_init(st)(keys) if states is None else states
  return train.jit_chunk(st)(states, keys, data.train_ids, data.train_labels,
                             num_steps=num_steps)


def _evaluate(st, states, ids, labels):
  return train.jit_evaluate(st)(states["params"], ids, labels)


def test_loss_ignores_label_zero_in_faithful_mode():
  rc = configs.build("smoke", "count", "nope", faithful=True)
  data = tasks.generate(rc.task)
  st = _steps(rc, data)
  state = st.init(train.seed_keys([0]))
  params = jax.tree.map(lambda x: x[0], state["params"])
  ids = data.train_ids[:8]
  labels = jnp.asarray([0, 3, 0, 5, 1, 0, 2, 7])
  loss, (correct, count) = st.loss(params, ids, labels)
  from pe_spectral.nn.model import apply_model
  logits = np.asarray(apply_model(st.graphdef, params, ids), np.float64)
  logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1,
         keepdims=True)) - logits.max(1, keepdims=True)
  keep = np.asarray(labels) != 0
  want = -logp[np.arange(8), np.asarray(labels)][keep].mean()
  assert float(loss) == pytest.approx(want, rel=1e-5)
  assert float(count) == keep.sum()


def test_training_reduces_loss():
  rc, data = _setup(steps=40)
  st = _steps(rc, data)
  keys = train.seed_keys([0, 1])
  states = train.jit_init(st)(keys)
  _, loss0 = _evaluate(st, states, data.test_ids, data.test_labels)
  states, losses = _train(st, keys, data, 40, states)
  _, loss1 = _evaluate(st, states, data.test_ids, data.test_labels)
  assert losses.shape == (2, 40)
  assert (np.asarray(loss1) < np.asarray(loss0) - 0.1).all()
  assert int(states["step"][0]) == 40


def test_vmapped_seeds_equal_per_seed_loop():
  rc, data = _setup(steps=12)
  st = _steps(rc, data)
  seeds = [3, 7, 11]
  keys = train.seed_keys(seeds)
  states, losses = _train(st, keys, data, 12)
  acc, _ = _evaluate(st, states, data.test_ids, data.test_labels)
  for i, s in enumerate(seeds):
    k1 = train.seed_keys([s])
    st1, l1 = _train(st, k1, data, 12)
    np.testing.assert_allclose(l1[0], losses[i], rtol=2e-5, atol=2e-5)
    a1, _ = _evaluate(st, st1, data.test_ids, data.test_labels)
    assert abs(float(a1[0]) - float(acc[i])) <= 1.0 / data.test_ids.shape[0] + 1e-7
  # different seeds really differ
  assert float(jnp.abs(losses[0] - losses[1]).max()) > 1e-4


def test_seed_groups_equal_one_vmap():
  """Groups of seeds run one after another (lax.map) give every seed's own run."""
  rc, data = _setup(steps=4)
  seeds = [3, 7, 11, 13]
  out = {}
  for g in (None, 2):
    st = _steps(rc, data, seed_group=g)
    keys = train.seed_keys(seeds)
    states, losses = _train(st, keys, data, 4)
    out[g] = (losses, states["params"],
              _evaluate(st, states, data.test_ids[:300], data.test_labels[:300]))
  np.testing.assert_allclose(out[2][0], out[None][0], rtol=2e-5, atol=2e-5)
  chex.assert_trees_all_close(out[2][1], out[None][1], rtol=1e-4, atol=1e-5)
  # the evaluation runs by groups too: each seed's own accuracy and loss
  np.testing.assert_allclose(out[2][2][0], out[None][2][0], atol=1.5 / 300)
  np.testing.assert_allclose(out[2][2][1], out[None][2][1], rtol=1e-4)
  with pytest.raises(ValueError, match="does not divide"):
    _train(_steps(rc, data, seed_group=3), train.seed_keys(seeds), data, 2)
  with pytest.raises(ValueError, match="seed_group"):
    _steps(rc, data, seed_group=0)


def test_chunks_replay_from_any_step():
  """Two chunks of 6 steps equal one run of 12: batches depend on (seed, step) only."""
  rc, data = _setup(steps=12)
  st = _steps(rc, data)
  keys = train.seed_keys([0, 1])
  a, la = _train(st, keys, data, 12)
  b, lb1 = _train(st, keys, data, 6)
  b, lb2 = _train(st, keys, data, 6, b)
  np.testing.assert_allclose(np.concatenate([lb1, lb2], 1), la, rtol=1e-6, atol=1e-6)


def test_steps_are_cached_on_the_frozen_configs():
  """Equal configs give the same Steps and so the same compiled programs; a
  changed field gives others; the Steps hold no state a call could change."""
  rc, data = _setup(steps=12)
  st = _steps(rc, data)
  assert _steps(rc, data) is st and train.jit_chunk(st) is train.jit_chunk(_steps(rc, data))
  other = train.make_steps(rc.model, rc.task, rc.train.replace(learning_rate=5e-3),
                           data.train_ids.shape[0])
  assert other != st and train.jit_chunk(other) is not train.jit_chunk(st)
  with pytest.raises(dataclasses.FrozenInstanceError):
    st.num_train = 3
  # a program traced on the speed layer's reference path is never reused by
  # the fast path (the switch is read while tracing)
  from pe_spectral.runtime import speed
  with speed.reference():
    ref = train.jit_chunk(st)
  assert ref is not train.jit_chunk(st)


def test_one_compiled_program_for_all_seeds_and_chunks():
  rc, data = _setup(steps=30)
  st = _steps(rc, data)
  # chex counts the traces of the pure chunk under a jit of the test's own ...
  chunk = jax.jit(chex.assert_max_traces(st.chunk, n=1), static_argnames="num_steps")
  keys = train.seed_keys([0, 1, 2, 3])
  states = st.init(keys)
  for _ in range(3):  # same chunk length, new step offsets and states
    states, _ = chunk(states, keys, data.train_ids, data.train_labels, num_steps=5)
  other = train.seed_keys([10, 11, 12, 13])  # other seed values, same program
  chunk(st.init(other), other, data.train_ids, data.train_labels, num_steps=5)
  with pytest.raises(AssertionError):  # a new chunk length is a second trace
    chunk(states, keys, data.train_ids, data.train_labels, num_steps=4)
  # ... and the runner's cached program is traced once for the same calls
  # (counted by JAX's own trace event: the C++ dispatch cache's size,
  # ``_cache_size()``, read 0 in a worker that had run ~700 tests before)
  traced = []

  def listener(event, secs, **kw):
    if event == "/jax/core/compile/jaxpr_trace_duration":
      traced.append(kw.get("fun_name"))
  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    for k in (keys, other, keys):
      _train(st, k, data, 5)
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  assert traced.count("chunk") == 1, traced


_SHARD_SCRIPT = r"""
import json, sys
import jax
from pe_spectral.training import config as configs
from pe_spectral.data import tasks
from pe_spectral.runtime import devices
from pe_spectral.training import train
rc = configs.build("smoke", "distance", "rope", steps=10)
data = tasks.generate(rc.task)
mesh = train.seed_mesh(4)
st = train.make_steps(rc.model, rc.task, rc.train, data.train_ids.shape[0])
keys = devices.shard(train.seed_keys([0, 1, 2, 3]), mesh)
states = train.jit_init(st)(keys)
ids, labels = devices.replicate((data.train_ids, data.train_labels), mesh)
states, losses = train.jit_chunk(st)(states, keys, ids, labels, num_steps=10)
acc, loss = train.jit_evaluate(st)(states["params"], data.test_ids, data.test_labels)
print(json.dumps({"devices": jax.device_count(),
                  "sharded": None if mesh is None else len(mesh.devices.flat),
                  "losses": losses.tolist(), "acc": acc.tolist(),
                  "loss": loss.tolist()}))
"""


def _run_script(devices):
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                      f" --xla_force_host_platform_device_count={devices}")
  out = subprocess.run([sys.executable, "-c", _SHARD_SCRIPT], env=env,
                       capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_sharded_over_four_devices_equals_one_device():
  # this process has one CPU device: the unsharded baseline runs here
  assert jax.device_count() == 1
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    exec(_SHARD_SCRIPT, {})
  one = json.loads(buf.getvalue().strip().splitlines()[-1])
  four = _run_script(4)
  assert one["sharded"] is None and four["sharded"] == 4
  np.testing.assert_allclose(four["losses"], one["losses"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(four["acc"], one["acc"], atol=1e-7)


def test_seed_mesh_uses_a_divisor_of_the_seed_count():
  devs = jax.devices() * 8  # stand-in list; only its length matters
  assert train.seed_mesh(1, devs) is None
  assert train.seed_mesh(7, devs[:4]) is None  # 7 is prime and > 4


def test_bad_train_config():
  with pytest.raises(ValueError, match="steps"):
    train.TrainConfig(steps=0)
  with pytest.raises(ValueError, match="exceeds"):
    train.TrainConfig(batch_size=1000).steps_per_epoch(100)


def test_train_settings_faithful_optimiser_and_mla_ratio():
  clean = configs.train_settings("cpu", "rope", False)
  faithful = configs.train_settings("cpu", "rope", True)
  assert (clean["b1"], clean["b2"]) == (0.9, 0.98)
  assert (faithful["b1"], faithful["b2"], faithful["weight_decay"]) == (0.98, 0.9, 1e-5)
  assert faithful["learning_rate"] == clean["learning_rate"]
  # clean MLA: the same budget as every clean PE; faithful MLA: 1.5x examples, 0.75x steps
  assert configs.train_settings("cpu", "mla", False) == configs.train_settings(
      "cpu", "rope", False)
  fm, fr = (configs.train_settings("cpu", pe, True) for pe in ("mla", "rope"))
  assert fm["epochs"] == 1.5 * fr["epochs"]  # examples seen, same training split
  assert fm["epochs"] / fm["batch_size"] == 0.75 * fr["epochs"] / fr["batch_size"]  # steps
  paper = configs.train_settings("paper", "mla", True)
  assert (paper["epochs"], paper["batch_size"]) == (150, 1024)
  assert configs.train_settings("paper", "mla", False)["epochs"] == 100
  with pytest.raises(ValueError, match="unknown preset"):
    configs.train_settings("huge", "rope", False)
