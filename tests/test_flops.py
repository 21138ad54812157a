"""The benchmark's matmul-FLOP counter against closed forms."""
import jax
import jax.numpy as jnp

from benchmarks.flops import matmul_flops


def test_matmul_and_mlp_gradient_flops():
  a, b = jnp.ones((3, 4)), jnp.ones((4, 5))
  assert matmul_flops(lambda a, b: jnp.tanh(a @ b), a, b) == 2 * 3 * 4 * 5
  # batched einsum: batch 6, [7, 8] @ [8, 9]
  q, k = jnp.ones((6, 7, 8)), jnp.ones((6, 8, 9))
  assert matmul_flops(lambda q, k: jnp.einsum("bij,bjk->bik", q, k), q, k) == 2 * 6 * 7 * 8 * 9
  # Gradient of a 2-layer MLP w.r.t. both weights: forward 2 dots, backward 3
  # (no input gradient for the first layer): 5 * 2*N*d*h for equal sizes.
  n, d = 10, 6
  x, w1, w2 = jnp.ones((n, d)), jnp.ones((d, d)), jnp.ones((d, d))
  loss = lambda w1, w2: jnp.sum(jax.nn.relu(x @ w1) @ w2)
  assert matmul_flops(jax.grad(loss, argnums=(0, 1)), w1, w2) == 5 * 2 * n * d * d
  # jit and scan bodies are descended into; scan multiplies by its length.
  body = lambda c, _: (jnp.tanh(c @ w1), None)
  f = jax.jit(lambda c: jax.lax.scan(body, c, None, length=4)[0])
  assert matmul_flops(f, x) == 4 * 2 * n * d * d


def test_memory_benchmark_reads_the_compiled_programs():
  """benchmarks/memory.py compiles without running: its argument bytes are the
  programs' inputs counted independently (parameters + data), and the
  all-seeds programs hold the seeds' parameters."""
  import numpy as np

  from benchmarks.memory import analysis, programs
  from pe_spectral.training import config as configs
  rc = configs.build("smoke", "distance", "rope", steps=4)
  nbytes = lambda tree: sum(int(np.prod(x.shape)) * x.dtype.itemsize
                            for x in jax.tree.leaves(tree))
  sizes = {}
  for seeds in (1, 3):
    tr, progs = programs(rc, seeds, None, steps=1, ablation=False, eval_examples=50)
    params = tr.abstract_state(seeds)["params"]
    data = 50 * rc.task.max_len * 4 + 50 * 4  # int32 ids and labels
    ev = analysis(progs["evaluation"])
    assert ev["argument"] == nbytes(params) + data, (ev, nbytes(params))
    assert analysis(progs["train chunk"])["temp"] > 0
    sizes[seeds] = nbytes(params)
  assert sizes[3] == 3 * sizes[1]
