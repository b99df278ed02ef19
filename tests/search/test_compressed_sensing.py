"""The compressed-sensing strategy's Lasso (`workbench.search.strategies.compressed_sensing`):
a sparse signal recovered by the cross-validated fit, and `lasso_alpha_max` where the first head
enters."""

from __future__ import annotations

import numpy as np

from tests.helpers import assert_close
from workbench.search.strategies.compressed_sensing import lasso, lasso_alpha_max, lasso_cv


def test_lasso_recovers_a_sparse_signal():
    rng = np.random.default_rng(0)
    x = (rng.random((200, 30)) < 0.2).astype(float)
    beta = np.zeros(30)
    beta[[3, 17]] = [1.0, 0.5]
    beta[9] = -0.8
    y = 0.2 + x @ beta + rng.normal(0, 0.05, 200)
    coef = lasso_cv(x, y)
    assert_close(coef[[3, 17, 9]], beta[[3, 17, 9]], atol=0.08)
    assert np.abs(np.delete(coef, [3, 17, 9])).max() < 0.05


def test_alpha_max_is_where_the_lasso_selects_its_first_head():
    rng = np.random.default_rng(0)
    x = rng.random((100, 30)) < 0.1
    y = 0.05 * x[:, 3] - 0.02 * x[:, 7] + 0.001 * rng.standard_normal(100)
    top = lasso_alpha_max(x.astype(float), y)
    assert not lasso(x.astype(float), y, top * 1.01).any()
    coef = lasso(x.astype(float), y, top * 0.9)
    assert np.flatnonzero(coef).tolist() == [3]
