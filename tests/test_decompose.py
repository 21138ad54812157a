import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from pe_spectral.analysis import decompose as D
from pe_spectral.nn.model import ModelConfig, init_model
from pe_spectral.pe import encodings
from pe_spectral.training.config import MODEL_PRESETS as PRESETS

TINY = dict(PRESETS["smoke"], vocab_size=23, num_classes=5, dropout=0.0)

def _ids(b=2, s=10, full=False):
  ids = jax.random.randint(jax.random.key(1), (b, s), 1, 23)
  if full:
    return ids
  return jnp.where(jnp.arange(s)[None] < jnp.asarray([10, 6])[:, None], ids, 0)


def _np(x):
  return np.asarray(x, np.float64)


def _oracle_logits(params, cfg, x_layer, e, layer, *, rotate=True):
  """Float64 NumPy loops, written from the definitions (not the model's code):
  pre-LN of the layer input, q/k projections, RoPE on the first
  ``num_rope_heads`` heads (interleaved pairs (2i, 2i+1) turned by
  m·base^(-2i/d)), scaled dot products, plus the layer's ALiBi or relative bias
  (``-slope_h·|i-j|`` / table[clip(j-i)]). ``[batch, heads, n, n]``."""
  blk = params["blocks"][layer]
  def ln(x):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * _np(blk["ln1"]["scale"]) + _np(blk["ln1"]["bias"])
  hq = ln(_np(x_layer))
  hk = _np(e) if cfg.kv_from_input else hq
  proj = lambda x, name: x @ _np(blk["attn"][name]["kernel"]) + _np(blk["attn"][name]["bias"])
  q, k = proj(hq, "q_proj"), proj(hk, "k_proj")
  b, n, _ = q.shape
  H, d = cfg.num_heads, cfg.head_dim
  q, k = q.reshape(b, n, H, d), k.reshape(b, n, H, d)
  if rotate:
    # p-RoPE: only the highest round(p d/2) pairs turn (Barbero et al. 2024)
    turning = d // 2 if cfg.pe != "p_rope" else int(round(0.75 * (d // 2)))
    for head in range(cfg.num_rope_heads):
      for m in range(n):
        for i in range(turning):
          t = m * cfg.rope_base ** (-2.0 * i / d)
          c, s_ = np.cos(t), np.sin(t)
          for x in (q, k):
            x0, x1 = x[:, m, head, 2 * i].copy(), x[:, m, head, 2 * i + 1].copy()
            x[:, m, head, 2 * i], x[:, m, head, 2 * i + 1] = c * x0 - s_ * x1, s_ * x0 + c * x1
          if cfg.pe == "xpos":  # Sun et al.: query pair i times ζ_i^(m/512), key ζ_i^(-m/512)
            zeta = (2.0 * i / d + 0.4) / 1.4
            q[:, m, head, 2 * i:2 * i + 2] *= zeta ** (m / 512.0)
            k[:, m, head, 2 * i:2 * i + 2] *= zeta ** (-m / 512.0)
  out = np.zeros((b, H, n, n))
  for head in range(H):
    for i in range(n):
      for j in range(n):
        out[:, head, i, j] = (q[:, i, head] * k[:, j, head]).sum(-1) / np.sqrt(d)
  if cfg.pe == "cope":  # Golovneva et al.: q_i·e[p_ij], p_ij = Σ σ(q_i·k_t/√d) between j and i
    emb = _np(blk["cope_pos_emb"])
    gates = 1 / (1 + np.exp(-out.copy()))
    for head in range(H):
      for i in range(n):
        for j in range(n):
          lo_t, hi_t = min(i, j), max(i, j)
          p_ij = np.clip(gates[:, head, i, lo_t:hi_t + 1].sum(-1), 0, len(emb) - 1)
          f = np.floor(p_ij).astype(int)
          c = np.minimum(f + 1, len(emb) - 1)
          z = lambda idx: (q[:, i, head] * emb[idx]).sum(-1)
          out[:, head, i, j] += (p_ij - f) * z(c) + (1 - (p_ij - f)) * z(f)
  paper_slopes = isinstance(cfg.pe_options, encodings.AlibiOptions) and \
      cfg.encoding.slope_scheme(cfg) == "paper"
  slopes = ([np.exp(-h / H) for h in range(H)] if paper_slopes
            else [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)])  # H a power of 2
  if cfg.pe == "alibi_multiplicative" and rotate:  # content logits times e^(-m_h |i-j|)
    for head in range(H):
      for i in range(n):
        for j in range(n):
          out[:, head, i, j] *= np.exp(-slopes[head]) ** abs(i - j)
  if cfg.pe == "alibi":
    for head in range(H):
      for i in range(n):
        for j in range(n):
          out[:, head, i, j] -= slopes[head] * abs(i - j)
  elif cfg.pe == "rope_additive":  # Σ_k w[h, k] cos((i - j) base^(-2k/d))
    w = _np(blk["rope_cos_w"])
    for head in range(H):
      for i in range(n):
        for j in range(n):
          for kk in range(d // 2):
            out[:, head, i, j] += w[head, kk] * np.cos((i - j) * cfg.rope_base ** (-2.0 * kk / d))
  elif cfg.pe in ("kerple_log", "kerple_power"):
    softplus = lambda x: np.log1p(np.exp(x))
    r1 = softplus(_np(blk["kerple_r1"]))
    raw2 = _np(blk["kerple_r2"])
    r2 = softplus(raw2) if cfg.pe == "kerple_log" else 2 / (1 + np.exp(-raw2))
    for i in range(n):
      for j in range(n):
        dist = abs(i - j)
        out[:, :, i, j] += (-r1 * np.log(1 + r2 * dist) if cfg.pe == "kerple_log"
                            else -r1 * dist ** r2)
  elif cfg.pe == "relative":
    table, r = _np(blk["rel_table"]), cfg.relative_distance
    for i in range(n):
      for j in range(n):
        out[:, :, i, j] += table[min(max(j - i, -r), r) + r]
  elif cfg.pe == "fire":  # Li et al.: f(ψ(|i-j|)/ψ(max(L, i))), ψ(x) = log(cx + 1)
    softplus = lambda x: np.log1p(np.exp(x))
    c, L = softplus(_np(blk["fire_c"])), softplus(_np(blk["fire_threshold"]))
    psi = lambda x: np.log(c * x + 1.0)
    for i in range(n):
      for j in range(n):
        u = psi(abs(i - j)) / psi(max(L, i))
        hidden = np.maximum(u * _np(blk["fire_w1"]) + _np(blk["fire_b1"]), 0.0)
        out[:, :, i, j] += hidden @ _np(blk["fire_w2"]) + _np(blk["fire_b2"])
  return out


ORACLE_PES = [(pe, False) for pe in ("nope", "sinusoidal", "learned", "alibi",
                                      "relative", "rope", "rope_sinusoidal",
                                      "partial_rope", "kerple_log", "kerple_power",
                                      "p_rope", "fire", "xpos", "cope", "rope_additive",
                                      "alibi_multiplicative")]
ORACLE_PES += [(pe, True) for pe in ("alibi", "relative", "rope_sinusoidal",
                                     "alibi_multiplicative")]


@pytest.mark.parametrize("pe,faithful", ORACLE_PES)
def test_logits_and_terms_match_float64_oracle(pe, faithful, monkeypatch):
  """The decomposition's logits, its θ = 0 logits and its four content/position
  Grams against the float64 loop oracle; and the logits the model's own
  forward pass feeds its softmax (captured there) against the same oracle."""
  from pe_spectral.nn import attention
  cfg = ModelConfig(pe=pe, faithful=faithful, **TINY)
  graphdef, params = init_model(cfg, jax.random.key(0))
  if pe == "cope":  # its table starts at zero (the paper): give the term something to do
    for l, blk in params["blocks"].items():
      blk["cope_pos_emb"] = jax.random.normal(jax.random.key(7 + l), blk["cope_pos_emb"].shape)
  ids = _ids(full=True)
  model = nnx.merge(graphdef, params)
  _, e, xs = model.forward(ids)
  _, e_c, xs_c = model.forward(ids, input_pe=False)
  captured = []
  original = attention.softmax_probs
  def spy(q, k, bias, mask, scale, dtype, factor=None):
    captured.append(np.asarray(attention.attention_logits(q * scale, k, bias=bias,
                                                          scale=1.0, factor=factor)))
    return original(q, k, bias, mask, scale, dtype, factor=factor)
  monkeypatch.setattr(attention, "softmax_probs", spy)
  model(ids)  # un-jitted: concrete values reach the spy
  assert len(captured) == cfg.num_layers
  for layer in range(cfg.num_layers):
    t = D.layer_terms(graphdef, params, ids, layer)
    want = _oracle_logits(params, cfg, xs[layer], e, layer)
    np.testing.assert_allclose(t["logits"], want, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(captured[layer], want, atol=2e-5, rtol=1e-5)
    want0 = _oracle_logits(params, cfg, xs[layer], e, layer, rotate=False)
    np.testing.assert_allclose(t["logits_theta0"], want0, atol=2e-5, rtol=1e-5)
    # content-only counterpart: the same oracle on the content stream, no bias
    additive = {"bias", "contextual"} & set(cfg.encoding.kinds)
    plain = dataclasses.replace(cfg, pe="nope", pe_options=None) if additive else cfg
    g_cc = _oracle_logits(params, plain, xs_c[layer], e_c, layer, rotate=False)
    np.testing.assert_allclose(t["G_cc"], g_cc, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(t["G_cp"] + t["G_pc"] + t["G_pp"] + t["B"],
                               want0 - g_cc, atol=3e-5, rtol=1e-5)
    if cfg.num_rope_heads and cfg.pe != "xpos":  # the Hadamard form is the rotated logits
      np.testing.assert_allclose(t["hadamard"], want, atol=5e-5, rtol=1e-5)
    if "input" not in cfg.encoding.kinds:  # position enters only through bias/rotation
      assert float(jnp.abs(t["G_pp"]).max()) == 0.0
    else:
      assert float(jnp.abs(t["G_pp"]).max()) > 0.0


@pytest.mark.parametrize("pe", ["rope", "alibi", "relative", "learned"])
def test_causal_model_ignores_future_tokens(pe):
  """With ``causal=True`` changing token t leaves every earlier position's
  hidden state unchanged (and changes later ones); without, earlier ones move."""
  ids = _ids(b=2, s=10, full=True)
  changed = ids.at[:, 6].set(jnp.where(ids[:, 6] == 3, 4, 3))
  for causal in (True, False):
    cfg = ModelConfig(pe=pe, causal=causal, **TINY)
    graphdef, params = init_model(cfg, jax.random.key(2))
    model = nnx.merge(graphdef, params)
    def last(x):  # the last block's output at every position
      _, e, xs = model.forward(x)
      return model.blocks[-1](xs[-1], e, **model.context(x), head_mask=None, key=None)
    a, b = last(ids), last(changed)
    early = float(jnp.abs(a[:, :6] - b[:, :6]).max())
    late = float(jnp.abs(a[:, 6:] - b[:, 6:]).max())
    assert late > 1e-4
    if causal:
      assert early == 0.0, (pe, early)
    else:
      assert early > 1e-4, pe


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
  assert float(m["sv_max"][0, 1, 0]) == pytest.approx(sv[0], rel=1e-4)
  sv0 = np.linalg.svd(l0 - l0.mean(1, keepdims=True), compute_uv=False)
  assert float(summ[0]["norm_ratio"][1, 1, 0]) == pytest.approx(sv[0] / sv0[0], rel=1e-4)
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
  cfg = ModelConfig(pe="mla", faithful=faithful, pe_options={"latent_dim": 8, "rope_dim": 4},
                    **TINY)
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
    d = cfg.head_dim + cfg.pe_options.rope_dim
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


def test_decompose_cli(sweep_reference, tmp_path):
  import json
  import os
  import shutil
  import subprocess
  import sys
  wd = str(tmp_path / "run")
  shutil.copytree(sweep_reference[0], wd)
  out = subprocess.run([sys.executable, "-m", "experiments.decompose",
                        f"--workdir={wd}", "--examples=8"], capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  with open(os.path.join(wd, "decompose.json")) as f:
    res = json.load(f)
  assert np.asarray(res["contraction_ratio_median"]).shape == (2, 2, 2)  # seeds, L, H
  assert res["additive_residual_max"] < 1e-4 and res["hadamard_residual_max"] < 1e-3
  assert os.path.getsize(os.path.join(wd, "contraction.png")) > 1000


@pytest.mark.parametrize("pe", ["rope", "alibi", "alibi_multiplicative"])
def test_attention_maps_are_the_models_own_probabilities(pe, monkeypatch):
  """decompose.attention_maps: the softmax of the logits layer_terms computes,
  masked as the model masks them, equals the probabilities the model's own
  forward pass computes (captured there); every row sums to 1 and the padded
  keys of the short example get nothing."""
  from pe_spectral.analysis import plotting
  from pe_spectral.nn import attention
  cfg = ModelConfig(pe=pe, **TINY)  # clean mode: padding masked
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids()  # the second example has 6 tokens, then padding
  captured = []
  original = attention.softmax_probs
  def spy(*args, **kw):
    probs = original(*args, **kw)
    captured.append(np.asarray(probs))
    return probs
  monkeypatch.setattr(attention, "softmax_probs", spy)
  nnx.merge(graphdef, params)(ids)  # un-jitted: concrete values reach the spy
  monkeypatch.setattr(attention, "softmax_probs", original)
  assert len(captured) == cfg.num_layers
  stacked = jax.tree.map(lambda x: x[None], params)  # one seed
  maps = [np.asarray(D.attention_maps(graphdef, stacked, ids, layer))[0]
          for layer in range(cfg.num_layers)]
  for layer, m in enumerate(maps):
    assert m.shape == (2, cfg.num_heads, 10, 10)
    np.testing.assert_allclose(m, captured[layer].reshape(m.shape), atol=2e-6)
    # and the float64 softmax of decompose's own logits, padded keys left out
    logits = _np(D.layer_terms(graphdef, params, ids, layer)["logits"])
    keys = (np.asarray(ids) != 0)[:, None, None, :]
    z = np.where(keys, logits, -np.inf)
    want = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(m, want / want.sum(-1, keepdims=True), atol=2e-6)
    np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)
    assert np.all(m[1, :, :, 6:] < 1e-6)
  import tempfile
  with tempfile.TemporaryDirectory() as d:  # and the figure of one example draws
    path = f"{d}/maps.png"
    plotting.attention_maps(np.stack([m[1] for m in maps]), path, "example 1", length=6)
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
