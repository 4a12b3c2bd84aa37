"""Seeded synthetic binary-classification problems (tests, demos and ``bench/logistic.py``):
the designs of :mod:`dask_strads._datasets.lasso`, labels drawn from a sparse logistic
model."""

from __future__ import annotations

import numpy as np

from dask_strads._datasets.lasso import (
    make_correlated_regression,
    make_sparse_regression,
    make_text_regression,
)

__all__ = ["make_classification", "C_min"]


def make_classification(n_samples: int = 200, n_features: int = 500, *,
                        n_informative: int = 10, design: str = "correlated",
                        margin: float = 3.0, random_state: int | None = 0, **design_kw):
    """``X`` from ``design`` (``"correlated"``: dense AR(1), ``"sparse"`` or ``"text"``:
    see :mod:`dask_strads._datasets.lasso`) and labels ``y in {0, 1}`` with
    ``P(y = 1) = sigmoid(X w)``, ``w`` sparse with ``n_informative`` non-zeros, scaled
    so that the margins ``X w`` have standard deviation ``margin``.

    Returns
    -------
    X : ndarray or scipy.sparse.csc_matrix of shape (n_samples, n_features)
    y : ndarray of int, shape (n_samples,)

    Examples
    --------
    >>> X, y = make_classification(100, 30, n_informative=3)
    >>> X.shape, sorted(set(y.tolist()))
    ((100, 30), [0, 1])
    """
    make = {"correlated": make_correlated_regression, "sparse": make_sparse_regression,
            "text": make_text_regression}.get(design)
    if make is None:
        raise ValueError(f"design: expected 'correlated', 'sparse' or 'text', got {design!r}")
    X, _, coef = make(n_samples, n_features, n_informative=n_informative,
                      random_state=random_state, **design_kw)
    z = np.asarray(X @ coef).ravel()
    z = (z - z.mean()) * (margin / max(z.std(), 1e-12))
    rng = np.random.default_rng(None if random_state is None else random_state + 1)
    y = (rng.random(n_samples) < 1.0 / (1.0 + np.exp(-z))).astype(np.int64)
    return X, y


def C_min(X, y, *, fit_intercept: bool = True) -> float:
    """The largest ``C`` at which an L1 logistic regression has no non-zero coefficient:
    ``1 / ||X' g||_inf`` with ``g`` the loss's gradient at the model with no features."""
    ys = np.where(np.asarray(y) == np.max(y), 1.0, -1.0)
    share = float(np.mean(ys > 0)) if fit_intercept else 0.5
    # gradient of sum log(1 + exp(-y z)) at z = logit(share): -(y + 1) / 2 + share
    g = (ys + 1.0) / 2.0 - share
    return 1.0 / float(np.abs(np.asarray(X.T @ g)).max())
