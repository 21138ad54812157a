"""The user's alternative: the paper's model and training step in PyTorch, eager, one seed.

Follows the paper's trans.py (docs/protocol.md): K/V from the input embeddings in every
layer, q from LN1(x), RoPE (interleaved pairs) on all heads for 'rope', no
padding mask, attention dropout + output dropout + FFN dropout 0.1, ReLU FFN,
no final LN, mean pool over all positions, Linear(d, vocab); AdamW(lr 1e-4,
betas (0.98, 0.9), wd 1e-5), CE with ignore_index=0. Written here for timing
only (torch is a benchmark-only extra: ``pip install torch==2.13.0``).
"""
from __future__ import annotations

import math
import time

import numpy as np


def build(vocab, d_model, heads, layers, d_ff, max_len, pe):
  import torch
  from torch import nn

  class Layer(nn.Module):
    def __init__(self):
      super().__init__()
      self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
      self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))
      self.ff1, self.ff2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
      self.drop = nn.Dropout(0.1)

    def forward(self, x, e, cos, sin):
      b, n, _ = x.shape
      hd = d_model // heads
      split = lambda t: t.view(b, n, heads, hd).transpose(1, 2)
      q, k, v = split(self.q(self.ln1(x))), split(self.k(e)), split(self.v(e))
      if cos is not None:
        def rot(t):
          t2 = torch.stack([-t[..., 1::2], t[..., 0::2]], -1).flatten(-2)
          return t * cos + t2 * sin
        q, k = rot(q), rot(k)
      att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1)
      out = (self.drop(att) @ v).transpose(1, 2).reshape(b, n, d_model)
      x = x + self.drop(self.o(out))
      return x + self.drop(self.ff2(torch.relu(self.ff1(self.ln2(x)))))

  class Model(nn.Module):
    def __init__(self):
      super().__init__()
      self.emb = nn.Embedding(vocab, d_model)
      self.layers = nn.ModuleList(Layer() for _ in range(layers))
      self.head = nn.Linear(d_model, vocab)
      hd = d_model // heads
      pos = torch.arange(max_len, dtype=torch.float32)[:, None]
      theta = 10000.0 ** (-2 * torch.arange(hd // 2) / hd)
      ang = (pos * theta).repeat_interleave(2, -1)
      self.register_buffer("cos", ang.cos())
      self.register_buffer("sin", ang.sin())

    def forward(self, ids):
      e = self.emb(ids)
      n = ids.shape[1]
      cos = sin = None
      if pe == "rope":
        cos, sin = self.cos[:n], self.sin[:n]
      x = e
      for layer in self.layers:
        x = layer(x, e, cos, sin)
      return self.head(x.mean(1))

  return Model()


def throughput(*, vocab, d_model, heads, layers, d_ff, max_len, batch, pe, steps,
               threads=2, reps=1) -> dict:
  """Examples/s of eager training steps (first step excluded as warm-up; the
  best of ``reps`` timed runs of ``steps`` steps)."""
  import torch
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  model = build(vocab, d_model, heads, layers, d_ff, max_len, pe)
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.98, 0.9),
                          weight_decay=1e-5)
  loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0)
  rng = np.random.default_rng(0)
  ids = torch.as_tensor(rng.integers(1, vocab, (batch, max_len)))
  labels = torch.as_tensor(rng.integers(1, 70, (batch,)))

  def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(ids), labels)
    loss.backward()
    opt.step()
    return float(loss)

  step()
  dt = float("inf")
  for _ in range(reps):
    t = time.perf_counter()
    for _ in range(steps):
      step()
    dt = min(dt, time.perf_counter() - t)
  return {"examples_per_s": steps * batch / dt, "seconds_per_step": dt / steps,
          "torch": torch.__version__}
