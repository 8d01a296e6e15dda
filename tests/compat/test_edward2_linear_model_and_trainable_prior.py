"""compat.edward2's BayesianLinearModel and TrainableNormalKLDivergenceStdDev: edward2's names
and arguments over the library's."""

import numpy as np
import pytest

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet.layers import regularizers


def test_bayesian_linear_model_is_the_librarys():
    assert ed.layers.BayesianLinearModel is bl.BayesianLinearModel
    model = ed.layers.BayesianLinearModel(noise_variance=0.01)
    x = np.random.default_rng(0).normal(size=(6, 2)).astype(np.float32)
    model.fit(x, x @ np.array([1.0, -2.0], np.float32))
    out = model(np.eye(2, dtype=np.float32))
    np.testing.assert_allclose(out.distribution.mean().numpy(), [1.0, -2.0], atol=0.05)


def test_trainable_prior_stddev_takes_edward2_arguments():
    reg = ed.regularizers.TrainableNormalKLDivergenceStdDev(seed=3)
    assert isinstance(reg, regularizers.TrainableNormalKLDivergenceStdDev)
    posterior = ed.Independent(ed.Normal(loc=np.zeros(3, np.float32), scale=1.0).distribution,
                               reinterpreted_batch_ndims=1)
    assert float(reg(posterior)) >= 0.0
    # edward2's `stddev` is the unconstrained variable; its constraint gives the prior's.
    np.testing.assert_allclose(reg.stddev_constraint(reg.stddev).numpy(),
                               regularizers.TrainableNormalKLDivergenceStdDev.stddev.fget(reg))
    assert isinstance(ed.regularizers.get("trainable_normal_kl_divergence_stddev"),
                      ed.regularizers.TrainableNormalKLDivergenceStdDev)
    for kwargs, message in [({"stddev_regularizer": "l2"}, "stddev_regularizer='l2'"),
                            ({"stddev_constraint": "exp"}, "stddev_constraint='exp'")]:
        with pytest.raises(ValueError, match=rf"implements .* only\. Received: {message}$"):
            ed.regularizers.TrainableNormalKLDivergenceStdDev(**kwargs)
