"""Analytic FLOP counts (multiply-adds × 2) of the world model and the planner.

Counted from the layer shapes of a built `WorldModel`: dense layers ``2·in·out``,
convolutions ``2·k²·c_in·c_out·H_out·W_out``, the GRU cell's input and recurrent
matmuls; Flipout and local reparameterization double the Bayesian layers'
matmuls. A train step is taken as 3× the forward pass (forward, and the two
backward matmuls per layer); element-wise work is not counted, so the achieved
rates are lower bounds.
"""

from bayes_planet.layers import keras

__all__ = ["imagine_step_flops", "plan_flops", "train_step_flops"]


def _dense(layer, rows=1):
    kernel = layer.kernel
    shape = kernel.weight_shape if hasattr(kernel, "weight_shape") else kernel.shape
    mult = 2 if type(layer).__name__ in ("DenseFlipout", "DenseLocalReparameterization") else 1
    return 2 * rows * int(shape[0]) * int(shape[1]) * mult


def _mlp(mlp):
    layers = list(mlp.hidden) + ([mlp.out] if mlp.out is not None else [])
    return sum(_dense(layer) for layer in layers)


def _gru(cell):
    units = cell.units
    in_dim = int(cell.kernel.shape[0]) if hasattr(cell.kernel, "shape") else cell.kernel.weight_shape[0]
    return 2 * 3 * units * (in_dim + units)


def _conv_stack(layers, size):
    flops, h = 0, size
    for layer in layers:
        k, s = layer.kernel_size[0], layer.strides[0]
        cin, cout = int(layer.kernel.shape[2]), layer.filters
        if isinstance(layer, keras.layers.Conv2DTranspose):
            cin, cout = int(layer.kernel.shape[3]), layer.filters
            h_out = (h - 1) * s + k
            flops += 2 * k * k * cin * cout * h * h
        else:
            h_out = (h - k) // s + 1
            flops += 2 * k * k * cin * cout * h_out * h_out
        h = h_out
    return flops


def imagine_step_flops(model):
    """Forward FLOPs of one prior step plus the reward head, per candidate."""
    r = model.rssm
    return (_dense(r.transition_in) + _gru(r.cell) + _dense(r.prior_hidden)
            + _dense(r.prior_stats) + _mlp(model.reward_net))


def train_step_flops(model, batch, length):
    """FLOPs of one train step on a ``batch × length`` chunk (3× forward)."""
    r = model.rssm
    step = (_dense(r.transition_in) + _gru(r.cell) + _dense(r.prior_hidden)
            + _dense(r.prior_stats) + _dense(r.post_hidden) + _dense(r.post_stats)
            + _mlp(model.reward_net))
    if model.pixels:
        enc = _conv_stack(model.encoder.convs, model.obs_shape[0])
        dec = _dense(model.decoder.dense) + _conv_stack(model.decoder.deconvs, 1)
    else:
        enc, dec = _mlp(model.encoder), _mlp(model.decoder)
    return 3 * batch * length * (step + enc + dec)


def plan_flops(model, planner):
    """FLOPs of planning one action with CEM: iterations × candidates × horizon × K rollouts."""
    return (planner.cem.iterations * planner.cem.candidates * planner.horizon
            * planner.weight_samples * imagine_step_flops(model))
