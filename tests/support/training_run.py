"""A small real training run, saved the way users save one (issue 16's "done when").

A linen transformer block with a bfloat16 MLP and dropout, and an nnx model with `Rngs` and
`Dropout` (typed keys in its state), trained a few steps with optax's
``MultiSteps(chain(clip, multi_transform(inject_hyperparams(adamw), set_to_zero)))`` on a (4, 2)
mesh of 8 CPU devices. Each step is saved by a `CheckpointManager` as
``Composite(state=StandardSave, nnx=StandardSave, metadata=JsonSave)``; the last state once more
with Orbax's v1 ``save_pytree``. Used by tests/interop/test_training_run.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

VOCAB, SEQ, WIDTH, HEADS, BATCH = 32, 8, 16, 2, 8
STEPS = 3
KEEP = 2


class Block(nn.Module):
    """Attention, then a bfloat16 MLP with dropout."""

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        x = x + nn.SelfAttention(num_heads=HEADS, deterministic=not train)(nn.LayerNorm()(x))
        h = nn.Dense(4 * WIDTH, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)(nn.LayerNorm()(x))
        h = nn.Dropout(0.1, deterministic=not train)(nn.gelu(h))
        return x + nn.Dense(WIDTH, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)(h).astype(x.dtype)


class Model(nn.Module):
    @nn.compact
    def __call__(self, tokens: jax.Array, *, train: bool = False) -> jax.Array:
        x = nn.Embed(VOCAB, WIDTH)(tokens)
        x = Block()(x, train=train)
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


class NnxHead(nnx.Module):
    """An nnx module whose state holds typed keys (`Rngs`, `Dropout`'s stream)."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)
        self.rngs = rngs


class TrainState(struct.PyTreeNode):
    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array  # a typed key (jax.random.key)
    raw_rng: jax.Array  # a raw uint32 key (jax.random.PRNGKey)
    tx: Any = struct.field(pytree_node=False)


def labels(params: Any) -> Any:
    """Embeddings are frozen (set_to_zero), everything else trains."""
    return {k: ("freeze" if k.startswith("Embed") else "train") for k in params}


def optimizer() -> optax.GradientTransformation:
    inner = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.multi_transform(
            {
                "train": optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2),
                "freeze": optax.set_to_zero(),
            },
            labels,
        ),
    )
    return optax.MultiSteps(inner, every_k_schedule=2)


def mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Mesh:
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), names)


def sharding_for(m: Mesh, x: Any) -> NamedSharding:
    """Shard the last dimension over the mesh's last axis when it divides; else replicate."""
    axis = m.axis_names[-1]
    size = m.shape[axis]
    shape = getattr(x, "shape", ())
    if len(shape) >= 2 and shape[-1] % size == 0:
        return NamedSharding(m, P(*([None] * (len(shape) - 1)), axis))
    return NamedSharding(m, P())


def init_state(seed: int = 0) -> TrainState:
    tokens = jnp.zeros((BATCH, SEQ), jnp.int32)
    params = Model().init(jax.random.key(seed), tokens)["params"]
    tx = optimizer()
    return TrainState(
        step=jnp.asarray(0, jnp.int32),
        params=params,
        opt_state=tx.init(params),
        rng=jax.random.key(seed + 1),
        raw_rng=jax.random.PRNGKey(seed + 2),
        tx=tx,
    )


def abstract_state(m: Mesh) -> TrainState:
    """What a restore onto mesh `m` asks for: `eval_shape(init)` with shardings of `m`."""
    shapes = jax.eval_shape(init_state)
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding_for(m, s)), shapes
    )


def place(state: Any, m: Mesh) -> Any:
    return jax.tree.map(lambda x: jax.device_put(x, sharding_for(m, x)), state)


def nnx_state() -> Any:
    model = NnxHead(nnx.Rngs(params=0, dropout=1))
    return nnx.state(model)


@jax.jit
def train_step(state: TrainState, tokens: jax.Array) -> TrainState:
    rng, dropout = jax.random.split(state.rng)

    def loss_fn(params: Any) -> jax.Array:
        logits = Model().apply({"params": params}, tokens, train=True, rngs={"dropout": dropout})
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens).mean()

    grads = jax.grad(loss_fn)(state.params)
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
    return state.replace(
        step=state.step + 1,
        params=optax.apply_updates(state.params, updates),
        opt_state=opt_state,
        rng=rng,
        raw_rng=jax.random.fold_in(state.raw_rng, 1),
    )


def run(root: Path) -> dict[str, Any]:
    """Train and save; returns what was saved: {"states": {step: state}, "nnx": nnx state,
    "json": {step: json}, "mesh": the training mesh, "v1": path of the v1 save}."""
    import orbax.checkpoint as ocp
    import orbax.checkpoint.experimental.v1 as v1

    m = mesh((4, 2), ("data", "model"))
    state = place(init_state(), m)
    nnx_tree = nnx_state()
    tokens = jax.random.randint(jax.random.key(9), (BATCH, SEQ), 0, VOCAB)
    saved: dict[str, Any] = {"states": {}, "json": {}, "nnx": nnx_tree, "mesh": m}
    options = ocp.CheckpointManagerOptions(max_to_keep=KEEP)
    with ocp.CheckpointManager(root / "run", options=options) as mngr:
        for step in range(1, STEPS + 1):
            state = train_step(state, tokens)
            meta = {"step": step, "lr": 1e-2, "tags": ["tiny", "test"], "loss": None}
            mngr.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state),
                    nnx=ocp.args.StandardSave(nnx_tree),
                    metadata=ocp.args.JsonSave(meta),
                ),
            )
            saved["states"][step] = state
            saved["json"][step] = meta
        mngr.wait_until_finished()
    v1.save_pytree(root / "v1", state)
    saved["v1"] = root / "v1"
    return saved
