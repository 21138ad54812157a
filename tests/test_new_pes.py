"""The PEs added after the paper's set, end to end on the smoke preset, and a toy
PE registered inside a test: adding a PE is one object, nothing else."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.nn.model import ModelConfig, apply_model, init_model
from pe_spectral.pe import encodings
from pe_spectral.pe import positional as P
from pe_spectral.training import config, runner, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(module, *args, cwd):
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                       text=True, cwd=cwd, env=env)
  assert out.returncode == 0, f"{module} {args}:\n{out.stderr[-3000:]}"
  return out


# Through the CLIs: one PE per distinct code path in ablate and decompose (a
# learned bias, here FIRE's MLP; a content-dependent bias; a partial rotation; a
# logit factor). rope_additive, xpos, kerple_log and kerple_power share those
# paths (a learned Toeplitz bias; rotation with a scale; a parametric bias) and
# are covered in process (test_model, test_decompose; rope_additive's sweep in
# test_thesis); each CLI compiles per PE, so each one here costs.
E2E_PES = ("fire", "cope", "p_rope", "alibi_multiplicative")


@pytest.mark.long
def test_new_pes_sweep_ablate_decompose_report(tmp_path):
  """One process per CLI, new PEs through it: sweep (default workdirs),
  ablate and decompose (a comma list of workdirs), then the report."""
  _cli("experiments.sweep", f"--pe={','.join(E2E_PES)}", "--preset=smoke", "--seeds=2",
       "--steps=6", "--eval_every=6", cwd=tmp_path)
  wds = [str(tmp_path / "runs" / "distance" / f"{pe}-smoke-steps6") for pe in E2E_PES]
  _cli("experiments.ablate", f"--workdir={','.join(wds)}", cwd=tmp_path)
  _cli("experiments.decompose", f"--workdir={','.join(wds)}", "--examples=8", cwd=tmp_path)
  for pe, wd in zip(E2E_PES, wds):
    with open(os.path.join(wd, "ablation.json")) as f:
      abl = json.load(f)
    with open(os.path.join(wd, "decompose.json")) as f:
      dec = json.load(f)
    assert abl["pe"] == dec["pe"] == pe
    assert np.asarray(abl["ablated"]).shape == (2, 2, 2)  # seeds, layers, heads
    assert dec["additive_residual_max"] < 1e-4  # CoPE's contextual term sits in B
    # a Hadamard form is checked exactly where the transform is a rotation
    assert (dec["hadamard_residual_max"] is not None) == (pe == "p_rope")
  _cli("studies.arxiv_2505_13027.report", f"--runs={tmp_path / 'runs'}",
       f"--out={tmp_path / 'R.md'}", f"--figdir={tmp_path / 'fig'}", "--ceiling_examples=200",
       cwd=tmp_path)
  text = (tmp_path / "R.md").read_text()
  for pe in E2E_PES:
    assert f"| {pe} |" in text


class ToyDecay(encodings.PositionalEncoding):
  """A PE defined in this test only: a fixed -0.5|i-j| bias on head 0."""
  name = "toy_decay"
  description = "test-only linear decay on head 0"
  kinds = ("bias",)

  def bias(self, cfg, params, seq_len):
    d = jnp.abs(jnp.arange(seq_len)[:, None] - jnp.arange(seq_len)[None, :])
    return jnp.zeros((cfg.num_heads, seq_len, seq_len)).at[0].set(-0.5 * d)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    k = jnp.abs(jnp.arange(-(seq_len - 1), seq_len)).astype(jnp.float32)
    return jnp.stack([-0.5 * k] + [0 * k] * (cfg.num_heads - 1))


@pytest.fixture
def toy_pe():
  encodings.register(ToyDecay())
  try:
    yield "toy_decay"
  finally:
    encodings.unregister("toy_decay")


def test_a_toy_pe_registered_in_a_test_trains_on_the_smoke_preset(toy_pe, tmp_path):
  rc = config.build("smoke", "distance", toy_pe, steps=6)
  assert rc.model.encoding.kinds == ("bias",)
  s = runner.run(rc, [0, 1], str(tmp_path / "run"), runner.RunOptions(eval_every=3),
                 runner.Hooks(notify=lambda m: None))
  assert len(s["test_accuracy"]) == 2 and all(np.isfinite(s["test_accuracy"]))
  # the bias reaches the logits: the same weights without it give other outputs
  cfg = rc.model
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (2, 12), 1, cfg.vocab_size)
  nope = ModelConfig(**{**cfg.to_dict(), "pe": "nope"})
  g0, _ = init_model(nope, jax.random.key(0))
  assert float(jnp.abs(apply_model(graphdef, params, ids)
                       - apply_model(g0, params, ids)).max()) > 1e-4


class CausalOnly(ToyDecay):
  """A PE defined by a process over the prefix: causal attention only."""
  name = "toy_causal_only"
  attention = ("causal",)


def test_a_pe_defined_for_one_mask_refuses_the_other_in_one_line():
  # every built-in has both forms but PaTH and stick-breaking, processes over the
  # prefix (docs/encodings.md)
  assert {p for p in encodings.names()
          if encodings.get(p).attention != ("causal", "bidirectional")} == {"path",
                                                                              "stickbreaking"}
  encodings.register(CausalOnly())
  try:
    base = dict(pe="toy_causal_only", vocab_size=7, num_classes=3, d_model=16, num_heads=2,
                num_layers=1, d_ff=32, max_len=12)
    assert ModelConfig(**base, causal=True).causal
    with pytest.raises(ValueError, match=r"^pe='toy_causal_only' is defined for causal "
                                         r"attention only, not bidirectional \(causal=False\)$"):
      ModelConfig(**base)
    # a run's config is causal for it unless the command line says otherwise, in one line
    assert config.build("smoke", "distance", "toy_causal_only").model.causal
    assert not config.build("smoke", "distance", "rope").model.causal
    with pytest.raises(ValueError, match="defined for causal attention only"):
      config.build("smoke", "distance", "toy_causal_only", overrides={"model": {"causal": False}})
  finally:
    encodings.unregister("toy_causal_only")
  for bad in ((), ("sideways",), ("causal", "causal")):
    odd = CausalOnly()
    odd.name, odd.attention = "toy_odd_modes", bad
    with pytest.raises(ValueError, match="declares attention"):
      encodings.register(odd)
  assert "toy_odd_modes" not in encodings.names()


def test_registry_refuses_duplicates_and_bad_names():
  with pytest.raises(ValueError, match="already registered"):
    encodings.register(encodings.get("rope"))
  bad = ToyDecay()
  bad.name = "no spaces"
  with pytest.raises(ValueError, match="identifier"):
    encodings.register(bad)
  for kinds in (("bias", "offset"), ("bias", "bias")):  # kinds are declared, and checked
    odd = ToyDecay()
    odd.kinds = kinds
    with pytest.raises(ValueError, match="kinds"):
      encodings.register(odd)
  assert "toy_decay" not in encodings.names()


def test_no_encoding_borrows_another_encodings_methods():
  """Every hook an encoding has is its own class's or inherited from its own
  bases: none is another class's function called with a foreign ``self``."""
  import inspect
  for name in encodings.names():
    enc = encodings.get(name)
    mro = type(enc).__mro__
    for attr, fn in inspect.getmembers(type(enc), inspect.isfunction):
      owner = fn.__qualname__.split(".")[0]
      assert any(c.__name__ == owner for c in mro), (name, attr, fn.__qualname__)
    src = inspect.getsource(type(enc))
    others = [c.__name__ for c in {type(encodings.get(n)) for n in encodings.names()}
              if c not in mro]
    for other in others:
      assert f"{other}." not in src, (name, other)


# ---------------------------------------------------------------------------
# Golden tests of the new PEs' pure functions (oracles written here).
# ---------------------------------------------------------------------------

def _fire_params(key, heads=3, hidden=5, L=6.0, c=0.3):
  p = P.fire_init(key, heads, hidden=hidden, threshold=L, c=c)
  # non-zero biases so every term of the MLP is exercised
  p["fire_b1"] = 0.1 * jax.random.normal(jax.random.key(9), (hidden,))
  p["fire_b2"] = 0.1 * jax.random.normal(jax.random.key(8), (heads,))
  return p


def _fire_oracle(p, n, causal):
  sp = lambda x: np.log1p(np.exp(np.float64(x)))
  c, L = sp(p["fire_c"]), sp(p["fire_threshold"])
  w1, b1 = np.float64(p["fire_w1"]), np.float64(p["fire_b1"])
  w2, b2 = np.float64(p["fire_w2"]), np.float64(p["fire_b2"])
  out = np.zeros((w2.shape[1], n, n))
  for i in range(n):
    for j in range(n):
      if causal and j > i:
        continue
      dist = (i - j) if causal else abs(i - j)
      u = np.log(c * dist + 1) / np.log(c * max(L, i) + 1)
      out[:, i, j] = np.maximum(u * w1 + b1, 0) @ w2 + b2
  return out


@pytest.mark.parametrize("causal", [False, True])
def test_fire_bias_matches_loop_oracle(causal):
  p = _fire_params(jax.random.key(0))
  got = P.fire_bias(p, 11, causal=causal)  # 11 > L + 1: the interpolating regime too
  np.testing.assert_allclose(got, _fire_oracle(p, 11, causal), atol=1e-5, rtol=1e-5)
  assert float(jnp.abs(got).max()) > 1e-3


def test_fire_init_keeps_large_thresholds_finite():
  """softplus⁻¹ of a long context (4096) must not overflow to an infinite L,
  which would flatten the bias to f(0) everywhere."""
  for L in (2.0, 48.0, 4096.0, 1e5):
    c, got = P.fire_constants(P.fire_init(jax.random.key(0), 2, threshold=L, c=0.1))
    assert abs(float(got) - L) <= 1e-5 * L and abs(float(c) - 0.1) < 1e-6


def test_fire_coeffs_are_the_bias_while_toeplitz_and_the_hook_says_when_not():
  p = _fire_params(jax.random.key(1), L=9.0)
  n = 10  # n - 1 <= L: every query shares the normaliser
  bias = np.asarray(P.fire_bias(p, n))
  coeffs = np.asarray(P.fire_coeffs(p, n))
  for h in range(bias.shape[0]):
    for i in range(n):
      for j in range(n):
        assert abs(bias[h, i, j] - coeffs[h, j - i + n - 1]) < 1e-5
  cfg = ModelConfig(pe="fire", d_model=12, num_heads=3, max_len=32)
  enc = encodings.get("fire")
  assert enc.toeplitz_coeffs(cfg, p, n) is not None
  assert enc.toeplitz_coeffs(cfg, p, 14) is None  # beyond L + 1: not Toeplitz


def test_xpos_scale_closed_form_and_relative_logits():
  d, pos = 8, np.arange(7)
  got = np.asarray(P.xpos_scale(pos, d, gamma=0.4, scale_base=16.0))
  for n in pos:
    for i in range(d // 2):
      zeta = (2 * i / d + 0.4) / 1.4
      assert abs(got[n, i] - zeta ** (n / 16.0)) < 1e-6
  np.testing.assert_allclose(P.xpos_scale(jnp.asarray(pos), d, scale_base=16.0),
                             P.xpos_scale(pos, d, scale_base=16.0), rtol=1e-6)
  # logits depend on positions only through n - m: shifting both changes nothing
  t = P.XPos(scale_base=16.0)
  q, k = jax.random.normal(jax.random.key(0), (2, 7, d))
  def logits(shift):
    qq, kk = t(q, k, np.arange(7) + shift)
    return qq @ kk.T
  np.testing.assert_allclose(logits(0), logits(5), atol=1e-4, rtol=1e-4)
  # and with the scale removed (gamma -> huge makes ζ -> 1) it is RoPE
  plain = P.XPos(gamma=1e9)(q, k, np.arange(7))
  rope = P.Rotation()(q, k, np.arange(7))
  np.testing.assert_allclose(plain[0], rope[0], atol=1e-5)


def test_xpos_decays_keys_behind_and_amplifies_keys_ahead():
  """The one-sided decay in bidirectional attention: pair 0's query scale at
  position 4 times the key scale at 0 (behind) is ζ_0 < 1, at 8 (ahead) 1/ζ_0 > 1."""
  d = 8
  x = jnp.zeros((9, d)).at[:, 0].set(1.0)  # only pair 0 is non-zero
  qq, kk = P.XPos(scale_base=4.0)(x, x, np.arange(9))
  norm = lambda v: float(np.linalg.norm(np.asarray(v[:2])))  # rotation keeps the norm
  zeta0 = 0.4 / 1.4
  assert abs(norm(qq[4]) - zeta0) < 1e-5                    # ζ_0^(4/4)
  assert abs(norm(qq[4]) * norm(kk[0]) - zeta0) < 1e-5      # key behind: decayed
  assert abs(norm(qq[4]) * norm(kk[8]) - 1 / zeta0) < 1e-4  # key ahead: amplified


@pytest.mark.parametrize("causal", [False, True])
def test_cope_positions_match_loop_oracle(causal):
  g = np.asarray(jax.nn.sigmoid(jax.random.normal(jax.random.key(3), (2, 7, 7))))
  got = np.asarray(P.cope_positions(jnp.asarray(g), causal=causal))
  for b in range(2):
    for i in range(7):
      for j in range(7):
        if causal and j > i:
          want = 0.0
        else:
          want = g[b, i, min(i, j):max(i, j) + 1].sum()
        assert abs(got[b, i, j] - want) < 1e-5
  # every gate open: plain relative positions |i - j| + 1
  ones = np.asarray(P.cope_positions(jnp.ones((5, 5))))
  np.testing.assert_allclose(ones, np.abs(np.subtract.outer(np.arange(5), np.arange(5))) + 1,
                             atol=1e-6)


def test_cope_bias_interpolates_and_masks():
  """With every gate ~1 (huge q·k) the term is q·e[|i-j|+1] exactly; a masked
  key neither gets counted nor changes a position."""
  d, n = 4, 5
  q = jnp.ones((1, n, 1, d)) * 10.0
  k = jnp.ones((1, n, 1, d)) * 10.0
  emb = jax.random.normal(jax.random.key(0), (8, d))
  got = np.asarray(P.cope_bias(q, k, emb, scale=1.0))[0, 0]
  want = np.array([[float(q[0, i, 0] @ emb[abs(i - j) + 1]) for j in range(n)]
                   for i in range(n)])
  np.testing.assert_allclose(got, want, rtol=1e-5)
  # fractional positions interpolate: q ⟂ k makes every gate σ(0) = 1/2, so query 0
  # and key 2 are 1.5 apart and the term is halfway between q·e[1] and q·e[2]
  # (the check above only ever hit integer positions)
  q_half = jnp.zeros((1, n, 1, d)).at[..., 0].set(10.0)
  k_half = jnp.zeros((1, n, 1, d)).at[..., 1].set(10.0)
  half = np.asarray(P.cope_bias(q_half, k_half, emb, scale=1.0))[0, 0]
  z = lambda idx: float(q_half[0, 0, 0] @ emb[idx])
  assert abs(half[0, 2] - (0.5 * z(1) + 0.5 * z(2))) < 1e-5
  mask = jnp.asarray([True, False, True, True, True])[None, None, None, :]
  m = np.asarray(P.cope_bias(q, k, emb, scale=1.0, mask=mask))[0, 0]
  assert abs(m[0, 2] - float(q[0, 0, 0] @ emb[2])) < 1e-4  # key 1 not counted: p = 2


# ---------------------------------------------------------------------------
# Randomized positions (Ruoss et al. 2023).
# ---------------------------------------------------------------------------

def test_random_positions_are_sorted_distinct_and_in_range():
  for s in range(5):
    p = np.asarray(P.random_positions(jax.random.key(s), 9, 20))
    assert p.dtype == np.int32 and (np.diff(p) > 0).all() and p.min() >= 0 and p.max() < 20
  np.testing.assert_array_equal(P.random_positions(jax.random.key(3), 9, 20),
                                P.random_positions(jax.random.key(3), 9, 20))
  with pytest.raises(ValueError, match="distinct positions"):
    P.random_positions(jax.random.key(0), 21, 20)


@pytest.mark.parametrize("pe", ["sinusoidal", "learned", "relative", "alibi", "kerple_log",
                                "fire", "rope", "rope_sinusoidal", "xpos", "mla",
                                "rope_additive", "alibi_multiplicative"])
def test_random_positions_equal_scattering_tokens_into_a_padded_sequence(pe):
  """The oracle: giving n tokens the positions p_1 < ... < p_n is the same as
  writing them at indices p_t of a sequence of length R whose other slots are
  padding (masked keys, excluded from the pool) -- computed by the plain model."""
  n, R = 10, 26
  small = dict(vocab_size=23, num_classes=5, d_model=16, num_heads=2, num_layers=2,
               d_ff=32, dropout=0.0)  # MLA: latent 8, rotary width 8 (its defaults)
  cfg_r = ModelConfig(pe=pe, max_len=n, random_positions=R, **small)
  cfg_s = ModelConfig(pe=pe, max_len=R, **small)
  graphdef, params = init_model(cfg_r, jax.random.key(0))
  g_s, _ = init_model(cfg_s, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (3, n), 1, 23)
  key = jax.random.key(5)
  from flax import nnx
  pos = np.asarray(nnx.merge(graphdef, params).context(ids, position_key=key)["positions"])
  assert pos[-1] >= n  # the draw really spreads the tokens out
  scattered = jnp.zeros((3, R), jnp.int32).at[:, pos].set(ids)
  got = apply_model(graphdef, params, ids, position_key=key)
  want = apply_model(g_s, params, scattered)
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)
  plain = apply_model(g_s, params, ids)  # positions 0..n-1: a different answer
  assert float(jnp.abs(plain - want).max()) > 1e-4


def test_random_positions_train_and_evaluate_deterministically(tmp_path):
  rc = config.build("smoke", "distance", "rope", steps=4, random_positions=96)
  assert rc.model.random_positions == 96
  s = runner.run(rc, [0], str(tmp_path / "run"), runner.RunOptions(eval_every=4),
                 runner.Hooks(notify=lambda m: None))
  assert np.isfinite(s["test_accuracy"]).all()
  run = runner.load_run(str(tmp_path / "run"), notify=lambda m: None)
  rc2, evaluate = run.rc, train.jit_evaluate(run.steps)
  a1 = evaluate(run.states["params"], run.data.test_ids, run.data.test_labels)[1]
  a2 = evaluate(run.states["params"], run.data.test_ids, run.data.test_labels)[1]
  np.testing.assert_array_equal(a1, a2)  # evaluation draws are fixed per batch
  for bad in ({"pe": "nope"}, {"pe": "cope"}, {"random_positions": 10}):
    with pytest.raises(ValueError, match="random_positions"):
      ModelConfig(**{**rc2.model.to_dict(), **bad})
