import numpy as np
import pytest

from pe_spectral.analysis import ceilings
from pe_spectral.data.tasks import TaskConfig, generate


def test_bayes_ceiling_matches_protocol_measurement():
  """PROTOCOL §1.2: ≈ 97.5% Bayes accuracy, ≈ 5.7% ambiguous at 574 ids."""
  cfg = TaskConfig(name="distance", num_examples=6000)
  d = generate(cfg)
  res = ceilings.distance_bayes_accuracy(cfg, d.train_ids, d.train_labels, d.triggers)
  assert res["expected"] == pytest.approx(0.975, abs=0.01)
  assert res["empirical"] == pytest.approx(res["expected"], abs=0.02)
  assert 0.03 < res["ambiguous_fraction"] < 0.09


def test_posterior_of_unambiguous_sentence_is_certain():
  cfg = TaskConfig(name="distance", vocab_size=20, seq_len=20, max_len=20,
                   side_max=3, mid_max=5)
  a, b = 18, 19
  tokens = [1, 2, a, 3, 4, 5, b, 6]
  assert ceilings.distance_posterior(tokens, a, b, cfg) == {4: 1.0}
  # a second B makes two parses possible (mid 3 or mid 5 with right len 1/... )
  tokens = [1, a, 3, 4, b, 5, b, 7]
  post = ceilings.distance_posterior(tokens, a, b, cfg)
  assert set(post) == {3, 5} and abs(sum(post.values()) - 1) < 1e-12


def test_bag_of_tokens_ceiling_near_protocol():
  cfg = TaskConfig(name="distance", num_examples=100_000)
  d = generate(cfg)  # the paper's size generates (the only test that makes 100,000)
  assert d.train_ids.shape[0] + d.test_ids.shape[0] == 100_000
  ids = np.concatenate([np.asarray(d.train_ids), np.asarray(d.test_ids)])
  y = np.concatenate([np.asarray(d.train_labels), np.asarray(d.test_labels)])
  acc = ceilings.bag_of_tokens_accuracy(ids, y, d.triggers)
  assert acc == pytest.approx(0.069, abs=0.01)
