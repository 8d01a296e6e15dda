"""Data-parallel training on TensorFlow's own engine (`tf.distribute`).

Nothing here is home-made communication: the strategies are TensorFlow's
(`MirroredStrategy`, `MultiWorkerMirroredStrategy`, `TPUStrategy`), the gradient
all-reduce is the strategy's, and this module only holds the few pieces every
data-parallel Bayesian training step needs (see ``docs/distributed.md``):

- `make_strategy(name)`: ``'none'``, ``'mirrored'``, ``'multi_worker'`` or ``'tpu'`` (the
  config key ``strategy``), and `set_logical_cpus` / `localhost_cluster` to run the
  multi-device and multi-worker code paths on one CPU machine.
- The reductions of an ELBO across replicas. Each replica holds ``B / R`` examples of a
  global batch of ``B``; its loss is the per-example loss summed and divided by ``B``
  (`tf.nn.compute_average_loss`) plus the KL regularizers divided by ``R``
  (`tf.nn.scale_regularization_loss`). The strategy *sums* the replicas' gradients, so
  the data term is the global-batch mean and the KL is counted once — exactly the
  single-device gradient (`replica_loss`). `global_mean` is the differentiable
  variant for losses that are non-linear in batch means (e.g. free nats).
- `replica_rows` (this replica's rows of a global batch) and `make_train_step`, a custom
  training step for any Keras model under any strategy.

Noise and replicas: a Bayesian layer's weight noise comes from its seed and its
checkpointed counter, which every replica holds and advances in lockstep, so every
replica draws the *same* weight sample — the single-device sample. Per-example noise
(Flipout signs, local-reparameterization and latent noise, dequantization) is drawn for
the global batch and sliced to the replica's rows (`layers.noise.per_example`), so each
example gets its single-device noise and a data-parallel step equals the single-device
step.
"""

import contextlib
import json
import socket

import tensorflow as tf

__all__ = [
    "STRATEGIES",
    "free_port",
    "global_mean",
    "is_chief",
    "localhost_cluster",
    "make_strategy",
    "make_train_step",
    "num_replicas",
    "replica_loss",
    "replica_rows",
    "set_logical_cpus",
]

STRATEGIES = ("none", "mirrored", "multi_worker", "tpu")


def set_logical_cpus(num):
    """Splits the first physical CPU into ``num`` logical devices; returns their names.

    Lets `MirroredStrategy` run ``num`` replicas on one CPU (for tests and benchmarks;
    the replicas share the cores). Must run before TensorFlow initializes its devices,
    i.e. before the first op: raises RuntimeError otherwise.
    """
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise ValueError(f"Expected a positive integer. Received: num={num!r}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is None or len(current) != num:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num)])
        except RuntimeError as error:
            raise RuntimeError(
                f"set_logical_cpus({num}) must run before TensorFlow initializes its devices "
                "(before any op or strategy); run it first thing in a fresh process.") from error
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def make_strategy(name="none", devices=None, tpu=None, heartbeat_timeout=120):
    """The `tf.distribute.Strategy` named by the config key ``strategy``.

    Args:
      name: ``'none'`` (the default strategy: one device, no wrapping), ``'mirrored'``
        (`MirroredStrategy`: synchronous data parallelism over the local GPUs, or over
        ``devices``), ``'multi_worker'`` (`MultiWorkerMirroredStrategy`: the same over
        the workers named by the ``TF_CONFIG`` environment variable, collective
        all-reduce over gRPC; create it first thing in the program) or ``'tpu'``
        (`TPUStrategy` on the TPU found by `TPUClusterResolver`; untested here).
      devices: optional device list for ``'mirrored'``; default: all GPUs, else every
        logical CPU (one, unless split with `set_logical_cpus`).
      tpu: optional TPU name/address for ``'tpu'`` (default: from the environment).
      heartbeat_timeout: seconds without a heartbeat before ``'multi_worker'`` declares
        a worker dead (TensorFlow's default, 10 s, kills healthy workers on busy
        machines: seen here with the cores oversubscribed).
    """
    if name not in STRATEGIES:
        raise ValueError(f"Expected strategy in {STRATEGIES}. Received: strategy={name!r}")
    if name == "none":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if devices is None and not tf.config.list_physical_devices("GPU"):
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]  # or just one
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        # RING collectives run on any device; NCCL is picked automatically on GPUs by AUTO.
        implementation = (tf.distribute.experimental.CommunicationImplementation.AUTO
                          if tf.config.list_physical_devices("GPU")
                          else tf.distribute.experimental.CommunicationImplementation.RING)
        options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        _configure_coordination(heartbeat_timeout)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    # TPU: connect to the cluster, initialize the TPU system, replicate over its cores.
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _configure_coordination(heartbeat_timeout):
    """The coordination service `MultiWorkerMirroredStrategy` would start, with our
    heartbeat timeout (the strategy only configures one when none is configured)."""
    if not heartbeat_timeout > 0:
        raise ValueError("Expected a positive number of seconds. Received: "
                         f"heartbeat_timeout={heartbeat_timeout!r}")
    from tensorflow.python.eager import context  # no public setter for the timeout
    try:  # TF 2.15; later TF moved the proto under compiler/xla
        from tensorflow.tsl.protobuf import coordination_config_pb2
    except ImportError:
        from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    jobs = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec().as_dict()
    if context.context().coordination_service is not None or not jobs:
        return
    coordinated = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(jobs[job]))
                   for job in ("chief", "worker") if job in jobs]
    leader = "chief" if "chief" in jobs else "worker"
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=f"/job:{leader}/replica:0/task:0",
        coordinated_jobs=coordinated, heartbeat_timeout_in_ms=int(heartbeat_timeout * 1000))


def num_replicas(strategy=None):
    """Replicas in sync of ``strategy`` (default: the current one)."""
    return (strategy or tf.distribute.get_strategy()).num_replicas_in_sync


def is_chief(strategy=None):
    """Whether this process is the chief (writes logs and checkpoints): always true
    except for the non-chief workers of a multi-worker strategy."""
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def replica_rows(batch, replica_context=None):
    """This replica's contiguous rows of a *global* batch (a nest of ``[B, ...]``).

    Replica ``r`` of ``R`` gets rows ``[r B/R, (r+1) B/R)``, so the replicas together
    hold the global batch in order. Call it inside ``strategy.run``; with one replica
    it returns ``batch`` unchanged. ``B`` must be divisible by ``R``.
    """
    ctx = replica_context or tf.distribute.get_replica_context()
    if ctx is None:
        raise ValueError("replica_rows must be called in a replica context (strategy.run).")
    replicas = ctx.num_replicas_in_sync
    if replicas == 1:
        return batch

    def rows(x):
        size = x.shape[0]
        if size is None:
            raise ValueError(f"Expected a static batch size. Received: shape {x.shape}")
        if size % replicas:
            raise ValueError(f"Expected a global batch divisible by the {replicas} replicas. "
                             f"Received: batch size {size}")
        local = size // replicas
        start = tf.cast(ctx.replica_id_in_sync_group, tf.int32) * local
        out = x[start:start + local]
        out.set_shape([local] + x.shape[1:].as_list())
        return out

    return tf.nest.map_structure(rows, batch)


def replica_loss(per_example_loss, global_batch_size, regularization_losses=()):
    """A replica's share of ``mean(per_example_loss over the global batch) + sum(regs)``.

    ``sum(per_example_loss) / global_batch_size + sum(regularization_losses) / R``: the
    strategy sums the replicas' gradients, so the data term becomes the global-batch
    mean and each KL regularizer is counted once. With one replica this is the plain
    loss. Returns a scalar float32.
    """
    per_example_loss = tf.cast(per_example_loss, tf.float32)
    loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
    regularization_losses = [tf.cast(r, tf.float32) for r in regularization_losses]
    if regularization_losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(regularization_losses))
    return loss


def global_mean(values):
    """Means over the global batch of a list of same-shaped tensors, on every replica.

    Under a multi-replica strategy the per-replica sums and the element count are
    all-reduced (one collective; differentiable: the gradient of an all-sum is an
    all-sum), so every replica sees the global means — what a loss that is
    non-linear in batch means (e.g. ``max(free_nats, mean KL)``) needs to equal the
    single-device loss. A replica that differentiates ``loss / R`` then gets its share
    of the global gradient. With one replica: ``tf.reduce_mean`` of each.
    """
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return [tf.reduce_mean(v) for v in values]
    dtype = values[0].dtype
    sums = tf.stack([tf.reduce_sum(v) for v in values] + [tf.cast(tf.size(values[0]), dtype)])
    sums = ctx.all_reduce(tf.distribute.ReduceOp.SUM, sums)
    return tf.unstack(sums[:-1] / sums[-1])


def make_train_step(model, optimizer, loss_fn, global_batch_size, strategy=None,
                    jit_compile=None):
    """A custom data-parallel training step for a Keras model: ``step(x, y) -> loss``.

    ``x, y`` are the *global* batch (each replica takes its rows, `replica_rows`);
    ``loss_fn(y, outputs)`` returns per-example losses ``[B_local]``; the model's
    ``losses`` (KL terms) are added once (`replica_loss`). The strategy's optimizer
    all-reduces (sums) the gradients. Returns the global loss. Create the model and
    optimizer under ``strategy.scope()``.
    """
    strategy = strategy or tf.distribute.get_strategy()

    def replica_step(x, y):
        x, y = replica_rows((x, y))
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            loss = replica_loss(loss_fn(y, outputs), global_batch_size, model.losses)
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    @tf.function(jit_compile=jit_compile)
    def step(x, y):
        losses = strategy.run(replica_step, (x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def free_port():
    """A free TCP port on localhost (bound and released; a small race is possible)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def localhost_cluster(num_workers):
    """``TF_CONFIG`` JSON strings for ``num_workers`` workers on localhost (free ports).

    Worker ``i`` runs with ``os.environ['TF_CONFIG'] = localhost_cluster(n)[i]``;
    worker 0 is the chief. Loopback only.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"Expected a positive integer. Received: num_workers={num_workers!r}")
    workers = [f"localhost:{free_port()}" for _ in range(num_workers)]
    return [json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
            for i in range(num_workers)]
