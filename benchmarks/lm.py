r"""The language task's training speed: tokens per second per seed and MFU, beside
a PyTorch eager step of the same causal model, in one run.

  python -m benchmarks.lm                      # the cpu preset's lm model, rope
  python -m benchmarks.lm --preset=paper --seeds=8 --steps=5   # the lm_gpu size

Rows (the same configuration as ``--task=lm``; timed chunks of ``--steps``
steps, best of ``--reps``, after a warm-up chunk):

Throughput is *seed-tokens per second*: the training tokens of every seed
trained, per second of the whole program (8 seeds at 4,000 tokens/s each are
32,000 seed-tokens/s), the figure that compares with one PyTorch seed.

* JAX, 1 seed;
* JAX, ``--seeds`` seeds in one program one after another (``seed_group=1``,
  the sweep's CPU default), and all in one vmap (the GPU default);
* PyTorch eager, 1 seed: a nanoGPT-sized step of the same model written here
  for timing only (pre-LN blocks, causal attention through
  ``F.scaled_dot_product_attention``, RoPE on interleaved pairs, ReLU MLP, final
  LayerNorm, a per-token head, AdamW), on ``--threads`` threads.

MFU is the train step's matmul FLOPs (benchmarks/flops.py, counted on the
jaxpr) over the time, against the measured float32 matmul peak of this
machine. Writes ``--out`` (JSON). torch is a benchmark-only extra
(``pip install torch==2.13.0``); without it the PyTorch row is skipped.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time

import jax
import numpy as np
from absl import app, flags

from benchmarks.flops import matmul_flops, matmul_peak, timed
from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "cpu", "Preset of the lm task (cpu: lm_cpu, paper: lm_gpu).")
flags.DEFINE_string("pe", "rope", "PE (rope or nope for the PyTorch row).")
flags.DEFINE_integer("steps", 20, "Timed steps per chunk.")
flags.DEFINE_integer("reps", 3, "Timed chunks per row, best kept.")
flags.DEFINE_integer("seeds", 8, "Seeds of the multi-seed rows.")
flags.DEFINE_integer("threads", 2, "PyTorch intra-op threads.")
flags.DEFINE_bool("torch", True, "Time the PyTorch eager step (needs torch).")
flags.DEFINE_string("out", "benchmarks/out/lm.json", "JSON output.")


def jax_rows(rc, seeds: int, steps: int, reps: int, peak: float, log) -> dict:
  from pe_spectral.data import tasks
  from pe_spectral.training import train
  data = tasks.generate(rc.task)
  tokens_per_step = rc.train.batch_size * rc.task.seq_len
  one = train.make_steps(rc.model, rc.task, rc.train, rc.task.num_train)
  keys1 = train.seed_keys([0])
  state = jax.tree.map(lambda x: x[0], train.jit_init(one)(keys1))
  ids, nxt = one.windows(jax.random.key(0), data.train_ids)
  flops = matmul_flops(lambda s: one.train_step(s, ids, nxt, jax.random.key(0)), state)
  rows = {"matmul_flops_per_step": flops, "tokens_per_step": tokens_per_step}

  def measure(label, seed_group, n_seeds):
    tr = train.make_steps(rc.model, rc.task, rc.train, rc.task.num_train,
                          seed_group=seed_group)
    keys = train.seed_keys(list(range(n_seeds)))
    chunk = train.jit_chunk(tr)
    states = jax.block_until_ready(train.jit_init(tr)(keys))
    t_first, (states, _) = timed(lambda: chunk(states, keys, data.train_ids,
                                                data.train_labels, num_steps=steps))
    best = float("inf")
    for _ in range(reps):
      dt, (states, _) = timed(lambda: chunk(states, keys, data.train_ids,
                                             data.train_labels, num_steps=steps))
      best = min(best, dt)
    seed_tokens = n_seeds * steps * tokens_per_step / best
    rows[label] = {"seed_tokens_per_s": seed_tokens,
                   "tokens_per_s_each_seed": seed_tokens / n_seeds, "seconds": best,
                   "first_chunk_s": t_first,
                   "mfu": flops * n_seeds * steps / best / (peak * 1e9)}
    log(f"  {label:<28} {seed_tokens:10.0f} seed-tokens/s  MFU "
        f"{100 * rows[label]['mfu']:5.1f}%")

  measure("jax, 1 seed", None, 1)
  measure(f"jax, {seeds} seeds, seed_group=1", 1, seeds)
  measure(f"jax, {seeds} seeds, one vmap", None, seeds)
  return rows


def torch_row(rc, steps: int, reps: int, threads: int, log) -> dict | None:
  try:
    import torch
    from torch import nn
    from torch.nn import functional as F
  except ImportError:
    log("  torch not installed (pip install torch==2.13.0): no PyTorch row")
    return None
  m, t = rc.model, rc.task
  d, heads, hd = m.d_model, m.num_heads, m.d_model // m.num_heads
  torch.set_num_threads(threads)
  torch.manual_seed(0)

  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
      self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
      self.ff1, self.ff2 = nn.Linear(d, m.d_ff), nn.Linear(m.d_ff, d)

    def forward(self, x, cos, sin):
      b, n, _ = x.shape
      q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, heads, hd).permute(2, 0, 3, 1, 4)
      if cos is not None:
        def rot(u):
          u2 = torch.stack([-u[..., 1::2], u[..., 0::2]], -1).flatten(-2)
          return u * cos + u2 * sin
        q, k = rot(q), rot(k)
      out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
      x = x + self.o(out.transpose(1, 2).reshape(b, n, d))
      return x + self.ff2(torch.relu(self.ff1(self.ln2(x))))

  class LM(nn.Module):
    def __init__(self):
      super().__init__()
      self.emb = nn.Embedding(m.vocab_size, d)
      self.blocks = nn.ModuleList(Block() for _ in range(m.num_layers))
      self.ln = nn.LayerNorm(d)
      self.head = nn.Linear(d, m.vocab_size)
      theta = 10000.0 ** (-2 * torch.arange(hd // 2) / hd)
      ang = (torch.arange(t.seq_len, dtype=torch.float32)[:, None] * theta)
      ang = ang.repeat_interleave(2, -1)
      self.register_buffer("cos", ang.cos())
      self.register_buffer("sin", ang.sin())

    def forward(self, ids):
      x = self.emb(ids)
      cos, sin = (self.cos, self.sin) if m.pe == "rope" else (None, None)
      for blk in self.blocks:
        x = blk(x, cos, sin)
      return self.head(self.ln(x))

  model = LM()
  opt = torch.optim.AdamW(model.parameters(), lr=rc.train.learning_rate,
                          betas=(rc.train.b1, rc.train.b2), weight_decay=0.0)
  rng = np.random.default_rng(0)
  batch = rc.train.batch_size
  w = torch.as_tensor(rng.integers(1, m.vocab_size, (batch, t.seq_len + 1)))

  def step():
    opt.zero_grad(set_to_none=True)
    logits = model(w[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, m.vocab_size), w[:, 1:].reshape(-1))
    loss.backward()
    opt.step()

  step()
  best = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    for _ in range(steps):
      step()
    best = min(best, time.perf_counter() - t0)
  per_s = steps * batch * t.seq_len / best
  log(f"  {'pytorch eager, 1 seed':<28} {per_s:10.0f} tokens/s      (torch "
      f"{torch.__version__}, {threads} threads)")
  return {"tokens_per_s": per_s, "seconds": best, "torch": torch.__version__,
          "threads": threads}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from pe_spectral.training import config, runner
  log = lambda msg: print(msg, file=sys.stderr, flush=True)
  rc = config.build(FLAGS.preset, "lm", FLAGS.pe)
  peak = matmul_peak()
  cpu = runner.host_environment()["cpu"]
  log(f"lm, preset {FLAGS.preset}, pe {FLAGS.pe}: batch {rc.train.batch_size} x "
      f"{rc.task.seq_len} bytes, d_model {rc.model.d_model}, {rc.model.num_layers} layers; "
      f"{jax.devices()[0].device_kind}, {cpu.get('model')}; matmul peak {peak:.1f} GFLOP/s")
  out = {"preset": FLAGS.preset, "pe": FLAGS.pe, "date": time.strftime("%Y-%m-%d"),
         "device": jax.devices()[0].device_kind, "cpu": cpu, "peak_gflops": peak,
         "jax": jax.__version__, "python": platform.python_version(),
         "rows": jax_rows(rc, FLAGS.seeds, FLAGS.steps, FLAGS.reps, peak, log)}
  if FLAGS.torch:
    out["torch"] = torch_row(rc, FLAGS.steps, FLAGS.reps, FLAGS.threads, log)
    if out["torch"]:
      for label, row in out["rows"].items():
        if isinstance(row, dict):
          row["vs_torch"] = row["seed_tokens_per_s"] / out["torch"]["tokens_per_s"]
          log(f"  {label:<28} {row['vs_torch']:.2f}x PyTorch eager (seed-tokens/s)")
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
  with open(FLAGS.out, "w") as f:
    json.dump(out, f, indent=1)
  log(f"wrote {FLAGS.out}")
  return 0


if __name__ == "__main__":
  cli.run(main, compile_cache=False)  # sets XLA's CPU flags first
