"""tape / condition / intercept: model–posterior separation (Fig. 8, Fig. 13)."""

import math
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet.layers import tracing
from bayes_planet.layers.gaussian_process import GaussianProcess, SparseGaussianProcess
from bayes_planet.layers.point_process import PoissonProcess
from bayes_planet.layers.random_variable import RandomVariable
from bayes_planet.layers.tracing import condition, intercept, tape

tfd = tfp.distributions


def model(seed=0):
    """z ~ N(0, 1); x ~ N(z, 1) (3 draws); y ~ Bernoulli(sigmoid(z))."""
    z = tracing.Normal(0.0, 1.0, name="z", seed=[seed, 1])
    x = tracing.Normal(z * tf.ones(3), 1.0, name="x", seed=[seed, 2])
    y = tracing.Bernoulli(logits=z, name="y", seed=[seed, 3])
    return z, x, y


def test_tape_records_in_creation_order():
    with tape() as t:
        z, x, y = model()
    assert list(t) == ["z", "x", "y"]
    assert t["z"] is z and t["x"] is x and t["y"] is y
    assert all(isinstance(rv, RandomVariable) for rv in t.values())
    with tape() as empty:
        pass
    assert not empty


def test_condition_replaces_exactly_the_named_variables():
    free_z, free_x, free_y = model(seed=0)
    with condition(z=2.5):
        z, x, y = model(seed=0)
    assert float(z.numpy()) == 2.5 and float(free_z.numpy()) != 2.5
    # x depends on z through its distribution, not its seed: same noise, shifted mean.
    np.testing.assert_allclose(x.numpy() - free_x.numpy(), 2.5 - free_z.numpy(), rtol=1e-5)
    np.testing.assert_allclose(x.distribution.mean().numpy(), np.full(3, 2.5))
    np.testing.assert_allclose(z.log_prob().numpy(), tfd.Normal(0.0, 1.0).log_prob(2.5))
    value = np.array([1.0, -1.0, 0.5], np.float32)
    with condition(x=value):
        z2, x2, y2 = model(seed=0)
    np.testing.assert_array_equal(x2.numpy(), value)
    assert z2.numpy() == free_z.numpy() and y2.numpy() == free_y.numpy()  # Untouched.


@pytest.mark.parametrize("tape_outside", [True, False])
def test_tape_records_conditioned_values_in_either_nesting(tape_outside):
    outer, inner = (tape(), condition(z=-1.0)) if tape_outside else (condition(z=-1.0), tape())
    with outer as a, inner as b:
        model()
    recorded = a if tape_outside else b
    assert list(recorded) == ["z", "x", "y"] and recorded["z"].numpy() == -1.0


def test_condition_accepts_random_variables_and_nests():
    q = RandomVariable(tfd.Normal(3.0, 0.1), value=3.25)
    with condition(z=q), condition(x=np.zeros(3, np.float32)):
        z, x, _ = model()
    assert z.numpy() == 3.25 and np.all(x.numpy() == 0.0)
    with condition(z=1.0):
        with condition(z=2.0):  # The innermost context wins.
            z, _, _ = model()
    assert z.numpy() == 2.0


def test_errors_warnings_and_cleanup():
    with pytest.raises(ValueError, match="two random variables named 'z'"):
        with tape():
            model()
            model()
    with pytest.warns(UserWarning, match="no random variable named \\['w'\\]"):
        with condition(w=1.0):
            model()
    with pytest.raises(RuntimeError), tape() as t:
        raise RuntimeError("boom")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z, _, _ = model()  # No interceptor left behind: nothing recorded, no warning.
    assert not t and isinstance(z, RandomVariable)
    with pytest.raises(TypeError, match="Distribution"):
        tracing.random_variable(3.0, name="bad")
    with pytest.raises(TypeError, match="callable"):
        with intercept("nope"):
            pass


def test_custom_interceptor_sees_names_and_can_change_distributions():
    seen = []

    def tempered(next_fn, distribution, name, **kwargs):
        seen.append(name)
        if name == "z":
            distribution = tfd.Normal(distribution.loc, 0.5 * distribution.scale)
        return next_fn(distribution, name, **kwargs)

    with intercept(tempered), tape() as t:
        model()
    assert seen == ["z", "x", "y"]
    np.testing.assert_allclose(t["z"].distribution.stddev().numpy(), 0.5)


def test_model_posterior_elbo_is_exact_at_the_true_posterior():
    """Fig. 13 pattern: score the model at posterior samples via condition + tape.

    For z ~ N(0, 1), x_i ~ N(z, 1) the posterior is N(Σx/(n+1), 1/(n+1)), and then
    log p(x, z) - log q(z) = log p(x) for *every* z: a zero-variance ELBO.
    """
    data = np.array([0.3, 1.2, 0.9], np.float32)
    n = len(data)
    log_evidence = tfd.MultivariateNormalFullCovariance(
        np.zeros(n, np.float32), np.eye(n, dtype=np.float32) + 1.0).log_prob(data).numpy()

    def posterior(loc, scale, seed):
        return tracing.Normal(loc, scale, name="qz", seed=seed)

    def elbo_terms(loc, scale, seed):
        with tape() as q:
            posterior(loc, scale, seed)
        with tape() as p, condition(z=q["qz"], x=data):
            model()
        return (p["z"].log_prob() + tf.reduce_sum(p["x"].log_prob())
                - q["qz"].log_prob()).numpy()

    post_loc, post_scale = np.float32(data.sum() / (n + 1)), np.float32(math.sqrt(1 / (n + 1)))
    exact = [elbo_terms(post_loc, post_scale, [s, 0]) for s in range(5)]
    np.testing.assert_allclose(exact, log_evidence, rtol=1e-5)
    # A worse q: the Monte Carlo ELBO averages to the analytic one, below log p(x).
    loc, scale = 0.0, 1.0
    mc = np.mean([elbo_terms(loc, scale, [s, 1]) for s in range(400)])
    analytic = (-0.5 * (n + 1) * math.log(2 * math.pi)
                - 0.5 * (np.sum(data**2) - 2 * loc * data.sum() + n * (loc**2 + scale**2))
                - 0.5 * (loc**2 + scale**2) + 0.5 * math.log(2 * math.pi * math.e * scale**2))
    assert analytic < log_evidence
    assert abs(mc - analytic) < 4 * 1.6 / math.sqrt(400)  # Std of one term ≈ 1.6.


def test_layers_create_named_random_variables(tmp_path):
    """GP and Poisson-process layers are intercepted by layer name (Fig. 8)."""
    x = np.linspace(0, 1, 6)[:, None]
    prior = GaussianProcess(1, name="log_rate", dtype="float64", seed=0)
    q_layer = SparseGaussianProcess(1, 3, name="q_log_rate", dtype="float64", seed=0)
    events = PoissonProcess([0.0], [1.0], [6], name="events", dtype="float64", seed=0)
    counts = np.array([[0.0], [2.0], [1.0], [0.0], [3.0], [1.0]])

    def cox_model():
        return events(tf.exp(prior(x)))

    with tape() as q:
        q_layer(x)
    with tape() as p, condition(log_rate=q["q_log_rate"], events=counts):
        cox_model()
    assert list(q) == ["q_log_rate"] and list(p) == ["log_rate", "events"]
    log_rate = q["q_log_rate"].numpy()
    np.testing.assert_array_equal(p["log_rate"].numpy(), log_rate)
    np.testing.assert_array_equal(p["events"].numpy(), counts)
    expected = np.sum(counts * log_rate - np.exp(log_rate) / 6)
    np.testing.assert_allclose(p["events"].log_prob().numpy(), expected, rtol=1e-12)


def test_tracing_inside_tf_function_passes_gradients():
    loc = tf.Variable(0.5)

    @tf.function
    def loss():
        with tape() as q:
            tracing.Normal(loc, 1.0, name="qz", seed=[0, 0])
        with tape() as p, condition(z=q["qz"], x=tf.zeros(3)):
            model()
        return -tf.reduce_sum(p["x"].log_prob()) - p["z"].log_prob()

    with tf.GradientTape() as g:
        value = loss()
    grad = g.gradient(value, loc)
    assert grad is not None and np.isfinite(grad.numpy()) and np.isfinite(value.numpy())
