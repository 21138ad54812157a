import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from pe_spectral import decompose as D
from pe_spectral import positional, spectral as S
from pe_spectral.model import PRESETS, ModelConfig, apply_model, init_model

TINY = dict(PRESETS["smoke"], vocab_size=23, num_classes=5, dropout=0.0)
PES = [p for p in positional.PE_NAMES if p != "mla"]


def _ids(b=2, s=10, full=False):
  ids = jax.random.randint(jax.random.key(1), (b, s), 1, 23)
  if full:
    return ids
  return jnp.where(jnp.arange(s)[None] < jnp.asarray([10, 6])[:, None], ids, 0)


@pytest.mark.parametrize("faithful", [False, True])
@pytest.mark.parametrize("pe", PES)
def test_terms_sum_to_logits(pe, faithful):
  cfg = ModelConfig(pe=pe, faithful=faithful, rope_heads=1, **TINY)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids()
  for layer in range(cfg.num_layers):
    t = D.layer_terms(graphdef, params, ids, layer)
    total = t["G_cc"] + t["G_cp"] + t["G_pc"] + t["G_pp"] + t["B"]
    np.testing.assert_allclose(total, t["logits_theta0"], atol=2e-5)
    if cfg.num_rope_heads:
      np.testing.assert_allclose(t["hadamard"], t["logits"], atol=5e-5)
    else:
      np.testing.assert_allclose(t["logits"], t["logits_theta0"], atol=1e-6)
    if cfg.spec.input is None:  # position enters only through bias/rotation
      assert float(jnp.abs(t["G_pp"]).max()) == 0.0
    else:
      assert float(jnp.abs(t["G_pp"]).max()) > 0.0


def test_logits_match_attention_module():
  """The decomposition's logits are the module's own (pre-softmax) logits."""
  cfg = ModelConfig(pe="alibi", **TINY)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids(full=True)
  model = nnx.merge(graphdef, params)
  _, e, xs = model.forward(ids)
  block = model.blocks[1]
  h = block.ln1(xs[1])
  q, k = block.attn.project_qk(h, h, jnp.arange(10))
  want = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(cfg.head_dim) + model.alibi(10)
  np.testing.assert_allclose(D.layer_terms(graphdef, params, ids, 1)["logits"], want,
                             atol=1e-5)


def test_theta0_counterpart_equals_nope_model_with_same_weights():
  ids = _ids()
  rope = ModelConfig(pe="rope", **TINY)
  nope = ModelConfig(pe="nope", **TINY)
  g_r, p = init_model(rope, jax.random.key(0))
  g_n, _ = init_model(nope, jax.random.key(0))
  t_rope = D.layer_terms(g_r, p, ids, 0)
  t_nope = D.layer_terms(g_n, p, ids, 0)
  np.testing.assert_allclose(t_rope["logits_theta0"], t_nope["logits"], atol=1e-6)
  assert float(jnp.abs(t_rope["logits"] - t_nope["logits"]).max()) > 1e-3


def test_summary_measures_match_numpy():
  cfg = ModelConfig(pe="rope", **TINY)
  graphdef, params = init_model(cfg, jax.random.key(0))
  stacked = jax.tree.map(lambda x: jnp.stack([x, x]), params)
  ids = _ids(full=True)
  summ = D.summarize(graphdef, stacked, ids, cfg.num_layers)
  assert len(summ) == cfg.num_layers
  t = D.layer_terms(graphdef, params, ids, 0)
  l = np.asarray(t["logits"][1, 0], np.float64)   # example 1, head 0
  l0 = np.asarray(t["logits_theta0"][1, 0], np.float64)
  centred = l - l.mean(1, keepdims=True)
  sv = np.linalg.svd(centred, compute_uv=False)
  m = summ[0]["measures"]
  np.testing.assert_allclose(m["singular_values"][0, 1, 0], sv, rtol=1e-4, atol=1e-5)
  spread = np.ptp(np.linalg.eigvalsh((l + l.T) / 2))
  spread0 = np.ptp(np.linalg.eigvalsh((l0 + l0.T) / 2))
  assert float(m["spread"][0, 1, 0]) == pytest.approx(spread, rel=1e-4)
  assert float(summ[0]["contraction_ratio"][1, 1, 0]) == pytest.approx(
      spread / spread0, rel=1e-4)
  assert float(m["stable_rank"][0, 1, 0]) == pytest.approx((sv ** 2).sum() / sv[0] ** 2,
                                                           rel=1e-4)
  assert float(summ[0]["additive_residual"][0]) < 1e-5
  assert float(summ[0]["hadamard_residual"][0]) < 1e-4


@pytest.mark.parametrize("faithful", [False, True])
def test_mla_terms(faithful):
  """MLA: terms sum to L; the channels split L - B; the Hadamard form (true
  rotation only) equals L; θ = 0 equals the model run at position 0 everywhere."""
  cfg = ModelConfig(pe="mla", faithful=faithful, mla_latent_dim=8, mla_rope_dim=4, **TINY)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids()
  model = nnx.merge(graphdef, params)
  _, _, xs = model.forward(ids)
  for layer in range(cfg.num_layers):
    t = D.layer_terms(graphdef, params, ids, layer)
    total = t["G_cc"] + t["G_cp"] + t["G_pc"] + t["G_pp"] + t["B"]
    np.testing.assert_allclose(total, t["logits_theta0"], atol=2e-5)
    np.testing.assert_allclose(t["mla_content"] + t["mla_rotary"] + t["B"], t["logits"],
                               atol=2e-5)
    # Oracle: the module's own q, k (rotated / all at position 0).
    attn = model.blocks[layer].attn
    x = model.blocks[layer].ln1(xs[layer])
    d = cfg.head_dim + cfg.mla_rope_dim
    for pos, key in ((jnp.arange(10), "logits"), (jnp.zeros(10, jnp.int32), None)):
      q, k = attn.project_qk(x, pos)
      want = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
      if key is not None:
        np.testing.assert_allclose(t[key], want, atol=2e-5)
      elif not faithful:  # a true rotation is the identity at position 0
        np.testing.assert_allclose(t["logits_theta0"], want, atol=2e-5)
    if faithful:
      assert "hadamard" not in t  # the paper's transform is not a rotation
    else:
      np.testing.assert_allclose(t["hadamard"], t["logits"], atol=5e-5)
      assert float(jnp.abs(t["logits"] - t["logits_theta0"]).max()) > 1e-4
  stacked = jax.tree.map(lambda x: jnp.stack([x, x]), params)
  summ = D.summarize(graphdef, stacked, ids, cfg.num_layers)
  assert summ[0]["contraction_ratio"].shape == (2, 2, cfg.num_heads)
  assert set(summ[0]["term_norms"]) >= {"mla_content", "mla_rotary"}
  assert ("hadamard_residual" in summ[0]) == (not faithful)


def test_decompose_cli(tmp_path):
  import json
  import os
  import subprocess
  import sys
  wd = str(tmp_path / "run")
  subprocess.run([sys.executable, "-m", "experiments.sweep", "--preset=smoke",
                  "--seeds=2", "--steps=12", f"--workdir={wd}"], check=True,
                 capture_output=True)
  out = subprocess.run([sys.executable, "-m", "experiments.decompose",
                        f"--workdir={wd}", "--examples=8"], capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  with open(os.path.join(wd, "decompose.json")) as f:
    res = json.load(f)
  assert np.asarray(res["contraction_ratio_median"]).shape == (2, 2, 2)  # seeds, L, H
  assert res["additive_residual_max"] < 1e-4 and res["hadamard_residual_max"] < 1e-3
  assert os.path.getsize(os.path.join(wd, "contraction.png")) > 1000
