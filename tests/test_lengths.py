"""Length generalisation: RoPE context-extension formulas, rope_min_base against
a brute-force scan, lengthened tasks against the parse oracle, and the
``experiments.lengths`` CLI end to end (smoke preset)."""
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.data import tasks
from pe_spectral.pe import positional as P
from pe_spectral.pe import spectral as S

D = 16
BASE = 10000.0
THETA = BASE ** (-2.0 * np.arange(D // 2) / D)


def test_position_interpolation_is_rope_at_squeezed_positions():
  """PI (Chen et al. 2023): position m of the extended context is position
  m / s of the original one."""
  s = 2.5
  x = jax.random.normal(jax.random.key(0), (1, 12, 2, D))
  pos = np.arange(12)[:, None]
  got = P.apply_rope(x, pos, base=BASE, scaling=P.RopeScaling("pi", s, 12))
  want = P.apply_rope(x, pos / s, base=BASE)
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_ntk_base_keeps_highest_and_stretches_lowest_frequency():
  """NTK-aware scaling: b' = b s^(d/(d-2)); pair 0 keeps its frequency, the
  lowest pair's is divided by s."""
  s = 4.0
  got = P.rope_inverse_frequencies(D, BASE, P.RopeScaling("ntk", s, 48))
  assert got[0] == 1.0
  np.testing.assert_allclose(got[-1], THETA[-1] / s, rtol=1e-12)
  np.testing.assert_allclose(P.ntk_base(BASE, s, D), BASE * s ** (D / (D - 2)))


def test_yarn_turns_frequencies_follow_the_papers_ramp():
  """YaRN as the paper's eq. 17-19 is written ("yarn_turns"), with wavelengths: λ = 2π/θ,
  r = L/λ; γ = 0 below r = 1, 1 above r = 32, linear between;
  θ' = (1-γ) θ/s + γ θ. Attention: logits times (0.1 ln s + 1)^2."""
  s, L = 3.0, 48
  want = []
  for theta in THETA:
    r = L / (2 * math.pi / theta)
    gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
    want.append((1 - gamma) * theta / s + gamma * theta)
  sc = P.RopeScaling("yarn_turns", s, L)
  np.testing.assert_allclose(P.rope_inverse_frequencies(D, BASE, sc), want, rtol=1e-12)
  q = jax.random.normal(jax.random.key(1), (1, 6, 1, D))
  k = jax.random.normal(jax.random.key(2), (1, 6, 1, D))
  pos = np.arange(6)[:, None]
  logits = lambda a, b: jnp.einsum("bqhd,bkhd->bhqk", a, b)
  got = logits(P.apply_rope(q, pos, scaling=sc), P.apply_rope(k, pos, scaling=sc))
  # the same rotation by hand: angles m θ'_i on interleaved pairs, times the factor
  def rot(x):
    x = np.asarray(x, np.float64).copy()
    for m in range(6):
      for i, th in enumerate(want):
        c, sn = math.cos(m * th), math.sin(m * th)
        a, b = x[0, m, 0, 2 * i], x[0, m, 0, 2 * i + 1]
        x[0, m, 0, 2 * i], x[0, m, 0, 2 * i + 1] = c * a - sn * b, sn * a + c * b
    return x * (0.1 * math.log(s) + 1)
  np.testing.assert_allclose(got, logits(rot(q), rot(k)), rtol=1e-4, atol=1e-4)
  assert P.yarn_attention_factor(1.0) == 1.0


# Hugging Face transformers 5.25.0 ``modeling_rope_utils`` (float32), computed
# once and carried over: {pair index: inverse frequency}.
HF_YARN_128 = {0: 1.0, 10: 0.23713736236095428, 16: 0.10000000149011612, 20: 0.04813641682267189,
               24: 0.022515418007969856, 28: 0.01010062638670206, 32: 0.004240000154823065,
               40: 0.00043006986379623413, 63: 1.15478187581175e-05}  # d 128, b 1e4, L 2048, s 10
HF_YARN_16 = [1.0, 0.21081849932670593, 0.03333333507180214, 0.010540924966335297,
              0.0033333334140479565, 0.0010540926596149802, 0.00033333332976326346,
              0.00010540925723034889]  # d 16, b 1e4, L 48, s 3 (the cpu preset's rope)
HF_LLAMA3_128 = {0: 1.0, 10: 0.12868738174438477, 16: 0.03760603070259094,
                 20: 0.016560440883040428, 24: 0.00729266507551074, 28: 0.0032114461064338684,
                 32: 0.0005248460220173001, 40: 3.428102354519069e-05,
                 63: 3.068925877869333e-07}  # d 128, b 5e5, L 8192, s 8, low 1, high 4
HF_DYNAMIC_64 = {0: 1.0, 8: 0.07531334459781647, 16: 0.0056721000000834465,
                 31: 4.445071317604743e-05}  # d 64, b 1e4, max_pos 2048, s 2, seq_len 4096


def _at(freqs, golden):
  return np.asarray(freqs)[list(golden)], np.asarray(list(golden.values()))


def test_yarn_llama3_and_dynamic_ntk_equal_the_reference_implementation():
  """YaRN (ramp over the pair index between floor/ceil correction dims), Llama
  3.1 scaling and dynamic NTK give Hugging Face's frequencies to float32
  rounding, and YaRN its attention factor; the paper-equation ramp
  ("yarn_turns") is a different method: up to 61 % apart at d 128."""
  theta = P.rope_inverse_frequencies(128, 1e4)
  yarn = P.rope_inverse_frequencies(128, 1e4, P.RopeScaling("yarn", 10.0, 2048))
  np.testing.assert_allclose(*_at(yarn, HF_YARN_128), rtol=1e-6)
  assert P.RopeScaling("yarn", 10.0, 2048).attention_factor == pytest.approx(1.2302585092994045)
  turns = P.yarn_turns_frequencies(theta, 10.0, 2048)
  assert np.max(np.abs(turns - yarn) / yarn) == pytest.approx(0.609, abs=1e-3)
  np.testing.assert_allclose(
      P.rope_inverse_frequencies(16, 1e4, P.RopeScaling("yarn", 3.0, 48)), HF_YARN_16, rtol=1e-6)
  llama = P.rope_inverse_frequencies(128, 5e5, P.RopeScaling("llama3", 8.0, 8192))
  np.testing.assert_allclose(*_at(llama, HF_LLAMA3_128), rtol=1e-6)
  assert P.RopeScaling("llama3", 8.0, 8192).attention_factor == 1.0
  base = P.dynamic_ntk_base(1e4, 2.0, 64, seq_len=4096, original_len=2048)
  np.testing.assert_allclose(*_at(P.rope_inverse_frequencies(64, base), HF_DYNAMIC_64), rtol=1e-6)
  # up to the training length dynamic NTK is plain RoPE; at factor 1 it is NTK at L / L0
  assert P.dynamic_ntk_base(1e4, 2.0, 64, seq_len=1000, original_len=2048) == 1e4
  assert P.dynamic_ntk_base(1e4, 1.0, 64, 6144, 2048) == pytest.approx(P.ntk_base(1e4, 3.0, 64))
  with pytest.raises(ValueError, match="rope scaling must be one of pi, ntk, yarn, yarn_turns"):
    P.RopeScaling("dynamic", 2.0, 48)


def _worst(bases, L, d):
  m = np.arange(L, dtype=np.float64)[:, None, None]
  e = 2.0 * np.arange(d // 2) / d
  return np.cos(m * bases[None, :, None] ** (-e)[None, None, :]).sum(-1).min(0)


@pytest.mark.parametrize("L,d", [(32, 8), (48, 16), (100, 16)])
def test_rope_min_base_against_brute_force_scan(L, d):
  """A float64 scan of 150k bases (log-spaced up to 3× the answer): none below
  the answer is feasible, the first feasible one is within one grid step, and
  for these (L, d) the feasible set is not an interval -- infeasible bases lie
  far above the answer, where a bisection would have stopped."""
  ans = S.rope_min_base(L, d)
  u = np.linspace(0.0, math.log(3 * ans), 150_001)
  feasible = _worst(np.exp(u), L, d) >= 0
  assert not feasible[np.exp(u) < ans * (1 - 1e-8)].any()
  first = np.exp(u[feasible.argmax()])
  assert ans <= first <= ans * math.exp(u[1] - u[0]) * (1 + 1e-9)
  assert _worst(np.array([ans * (1 + 1e-8)]), L, d)[0] >= -1e-6
  if (L, d) != (48, 16):
    last_bad = np.exp(u[np.where(~feasible)[0].max()])
    assert last_bad > 1.5 * ans


def test_shift_right_moves_content():
  ids = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
  out = tasks.shift_right(ids, [2, 0])
  np.testing.assert_array_equal(out, [[0, 0, 1, 2, 3, 0], [4, 5, 0, 0, 0, 0]])


def _lengths(*args):
  return subprocess.run([sys.executable, "-m", "experiments.lengths", *args],
                        capture_output=True, text=True)


def test_lengths_cli_end_to_end(sweep_reference, tmp_path):
  """On a finished smoke run: at 1x the accuracies are the run's own final test
  accuracies (same split, same parameters); longer lengths are evaluated for
  every seed, with RoPE's rope_min_base beside them; bad flags fail in one
  line (the scalings themselves are tested as functions above)."""
  import shutil
  wd = str(tmp_path / "run")
  shutil.copytree(sweep_reference[0], wd)
  out = _lengths(f"--workdir={wd}", "--factors=1,2", f"--out={tmp_path}/all.png")
  assert out.returncode == 0, out.stderr[-2000:]
  with open(os.path.join(wd, "lengths.json")) as f:
    res = json.load(f)
  with open(os.path.join(wd, "summary.json")) as f:
    summary = json.load(f)
  one, two = res["lengths"]
  assert res["train_len"] == 20 and (one["seq_len"], two["seq_len"]) == (20, 40)
  np.testing.assert_allclose(one["accuracy"], summary["test_accuracy"], atol=1e-6)
  assert len(two["accuracy"]) == 2 and two["input_len"] == 40
  assert two["ci95"][0] <= two["mean"] <= two["ci95"][1]
  assert two["prediction"]["rope_min_base"] == pytest.approx(S.rope_min_base(40, 8))
  for name in ("lengths.png", "../all.png"):
    assert os.path.getsize(os.path.join(wd, name)) > 1000
  for bad, msg in ((["--factors=0.5"], "--factors must be finite numbers >= 1"),
                   (["--examples=0"], "--examples must be >= 1")):
    out = _lengths(f"--workdir={wd}", *bad)
    assert out.returncode == 2 and msg in out.stderr and "Traceback" not in out.stderr


def test_learned_table_is_never_clamped_beyond_its_length():
  """JAX clamps out-of-range gathers silently; a learned position table asked
  for more positions than it has must raise instead."""
  from pe_spectral.nn.model import ModelConfig, apply_model, init_model
  from pe_spectral.training.config import MODEL_PRESETS as PRESETS
  cfg = ModelConfig(pe="learned", **dict(PRESETS["smoke"], vocab_size=11, num_classes=3))
  graphdef, params = init_model(cfg, jax.random.key(0))
  apply_model(graphdef, params, jnp.ones((1, cfg.max_len), jnp.int32))
  with pytest.raises(ValueError, match="exceeds max_len"):
    apply_model(graphdef, params, jnp.ones((1, cfg.max_len + 1), jnp.int32))


def _stacked_params(cfg, seeds=(0, 1)):
  from pe_spectral.nn.model import init_model
  trees = [init_model(cfg, jax.random.key(s))[1] for s in seeds]
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def _dense_spread(bias):
  """Spread of the symmetric part of ``[n, n]`` bias (float64 eigvalsh: the oracle)."""
  b = np.asarray(bias, np.float64)
  e = np.linalg.eigvalsh(0.5 * (b + b.T))
  return e[-1] - e[0]


def test_prediction_records_against_dense_eigenvalues():
  """``extrapolation.predict``: ALiBi's closed form equals the dense spread per
  head; a learned relative bias's symbol bound contains it (per seed, widest
  over layers and heads); a rotation gets rope_min_base; the record
  round-trips through JSON and is rendered from its fields."""
  from pe_spectral.analysis.extrapolation import Prediction, predict
  from pe_spectral.training import config as configs
  n, train = 30, 12
  cfg = configs.build("smoke", "distance", "alibi").model
  p = predict(cfg, _stacked_params(cfg), n, train)
  slopes = np.asarray(cfg.encoding.slopes(cfg), np.float64)
  k = np.abs(np.arange(n)[:, None] - np.arange(n)[None])
  k0 = np.abs(np.arange(train)[:, None] - np.arange(train)[None])
  want = [_dense_spread(-m * k) for m in slopes]
  assert p.bias == "closed_form" and p.pe == "alibi"
  np.testing.assert_allclose(p.bias_spread_per_head, want, rtol=1e-4)
  np.testing.assert_allclose(p.spread_vs_train,
                             np.mean([w / _dense_spread(-m * k0) for w, m in zip(want, slopes)]),
                             rtol=1e-4)
  assert p.rope_min_base is None and "bias spread ×" in p.describe(n)

  cfg = configs.build("smoke", "distance", "relative").model
  params = _stacked_params(cfg)
  p = predict(cfg, params, n, train)
  assert p.bias == "symbol" and p.table_reach == cfg.relative_distance
  blocks = params["blocks"]
  blocks = [blocks[b] for b in sorted(blocks)] if isinstance(blocks, dict) else blocks
  for s in range(2):
    dense = max(_dense_spread(np.asarray(P.relative_bias_from_table(
        jnp.asarray(blk["rel_table"][s]), n, max_distance=cfg.relative_distance,
        num_buckets=cfg.relative_buckets))[h]) for blk in blocks for h in range(cfg.num_heads))
    assert p.symbol_spread_max_per_seed[s] >= dense - 1e-4
  assert Prediction.from_dict(json.loads(json.dumps(p.to_dict()))) == p
  assert f"(table reach {cfg.relative_distance})" in p.describe(n)

  cfg = configs.build("smoke", "distance", "rope").model
  p = predict(cfg, _stacked_params(cfg), n, train)
  assert p.bias is None and p.rope_min_base == pytest.approx(S.rope_min_base(n, cfg.head_dim))
  assert p.rope_base_feasible == (cfg.rope_base >= p.rope_min_base)
  assert p.describe(n).startswith(f"base {cfg.rope_base:.4g} ")
  assert predict(configs.build("smoke", "distance", "nope").model, None, n, train
                 ).describe(n) == "—"
  with pytest.raises(ValueError, match="unknown prediction field"):
    Prediction.from_dict({"pe": "rope", "rope_spread_vs_train": 1.0})
  with pytest.raises(ValueError, match="bias must be"):
    Prediction(pe="alibi", bias="wide")


def test_long_lengths_evaluate_in_smaller_batches_with_the_same_numbers():
  """experiments.lengths keeps batch * n^2 at the training length's: 1000
  examples of 40 tokens -> 15 of 320 (1000 / 64, floored); the accuracies of
  a smoke model are those of one big batch."""
  import dataclasses

  from pe_spectral.analysis.extrapolation import eval_train_config
  from pe_spectral.data import tasks
  from pe_spectral.training import config, train
  rc = config.build("smoke", "even_pairs", "rope")
  cfg = dataclasses.replace(rc.train, eval_batch_size=1000)
  assert eval_train_config(cfg, 40, 320).eval_batch_size == 15
  assert eval_train_config(cfg, 40, 40) is cfg and eval_train_config(cfg, 40, 20) is cfg
  assert eval_train_config(cfg, 40, 40_000).eval_batch_size == 1
  n = 4 * rc.task.seq_len
  d = tasks.generate(tasks.lengthened(rc.task, n), num_examples=300)
  ids, labels = np.asarray(d.train_ids), np.asarray(d.train_labels)
  big = dataclasses.replace(rc.train, eval_batch_size=len(ids))
  small = eval_train_config(big, rc.task.seq_len, n)
  assert small.eval_batch_size < big.eval_batch_size
  accs = []
  for tc in (big, small):
    steps = train.make_steps(rc.model, rc.task, tc, 64)
    state = train.jit_init(steps)(np.arange(2, dtype=np.uint32))
    accs.append(np.asarray(train.jit_evaluate(steps)(state["params"], ids, labels)[0]))
  np.testing.assert_allclose(accs[0], accs[1], atol=1e-6)
