"""What cnn-mnist's convolutions and max-pool cost in JAX (XLA's CPU backend) and in PyTorch, alone.

cnn-mnist's convolutions (3x3, valid, stride 1, batch 128): conv1 28x28x1 -> 26x26x32 and conv2
26x26x32 -> 24x24x64, which is where nearly all of the workload's FLOPs are. This times each one's
forward pass and its training pass (forward and backward: the kernel's gradient, and for conv2 the
input's gradient too, as in training; for conv2 in JAX also each gradient alone), in JAX with NHWC
and with NCHW operands, and in PyTorch (NCHW), then the 2x2 max-pool of conv2's output, forward and
backward, and one float32 matmul of the same FLOPs as conv2's forward, as a yardstick.
Run it with each framework environment's Python; it prints one JSON line per case:

    ~/.cache/dlbench/envs/jax/bin/python benchmarks/jax_conv_cost.py --threads 2
    ~/.cache/dlbench/envs/pytorch/bin/python benchmarks/jax_conv_cost.py --threads 2
    XLA_FLAGS=--xla_cpu_use_onednn=true ~/.cache/dlbench/envs/jax/bin/python benchmarks/jax_conv_cost.py

Times are medians over --repeat calls after two warm-up calls, in milliseconds per batch.
"""
import argparse
import importlib.util
import json
import os
import statistics
import time

BATCH = 128
LAYERS = (("conv1", 28, 1, 32), ("conv2", 26, 32, 64))  # name, input side, in channels, out channels


def median_ms(call, repeat):
    for _ in range(2):
        call()
    times = []
    for _ in range(repeat):
        tic = time.perf_counter()
        call()
        times.append(time.perf_counter() - tic)
    return 1000 * statistics.median(times)


def conv_gflop(side, cin, cout):
    out = side - 2
    return 2 * BATCH * out * out * cout * cin * 9 / 1e9


def jax_cases(threads, repeat):
    os.environ["PJRT_NPROC"] = str(threads)  # as dlbench's JAX adapter
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.RandomState(0)
    for name, side, cin, cout in LAYERS:
        for layout in ("NHWC", "NCHW"):
            shape = (BATCH, side, side, cin) if layout == "NHWC" else (BATCH, cin, side, side)
            kernel_layout = "HWIO" if layout == "NHWC" else "OIHW"
            kshape = (3, 3, cin, cout) if layout == "NHWC" else (cout, cin, 3, 3)
            x = jnp.asarray(rng.standard_normal(shape).astype(np.float32))
            k = jnp.asarray(rng.standard_normal(kshape).astype(np.float32))

            def loss(x, k, layout=layout, kernel_layout=kernel_layout):
                y = jax.lax.conv_general_dilated(x, k, (1, 1), "VALID",
                                                 dimension_numbers=(layout, kernel_layout, layout))
                return jnp.sum(y)

            forward = jax.jit(loss)
            yield {"case": name, "layout": layout, "pass": "forward",
                   "ms": median_ms(lambda f=forward, x=x, k=k: f(x, k).block_until_ready(), repeat)}
            passes = [("forward+backward", (0, 1) if name == "conv2" else (1,))]
            if name == "conv2":
                passes += [("forward+kernel gradient", (1,)), ("forward+input gradient", (0,))]
            for label, argnums in passes:
                train = jax.jit(jax.grad(loss, argnums=argnums))
                yield {"case": name, "layout": layout, "pass": label,
                       "ms": median_ms(lambda f=train, x=x, k=k: jax.block_until_ready(f(x, k)), repeat)}
    pooled = jnp.asarray(rng.standard_normal((BATCH, 24, 24, 64)).astype(np.float32))
    pool = jax.jit(jax.grad(lambda x: jnp.sum(jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1),
                                                                     (1, 2, 2, 1), "VALID"))))
    yield {"case": "maxpool 2x2 of conv2's output", "layout": "NHWC", "pass": "forward+backward",
           "ms": median_ms(lambda: pool(pooled).block_until_ready(), repeat)}
    m, n, kk = BATCH * 24 * 24, 64, 32 * 9  # conv2's forward as one matmul (im2col's shape)
    a = jnp.asarray(rng.standard_normal((m, kk)).astype(np.float32))
    b = jnp.asarray(rng.standard_normal((kk, n)).astype(np.float32))
    dot = jax.jit(jnp.dot)
    yield {"case": "matmul (conv2's forward FLOPs)", "layout": "-", "pass": "forward",
           "ms": median_ms(lambda: dot(a, b).block_until_ready(), repeat)}
    yield {"versions": {"jax": jax.__version__}, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}


def torch_cases(threads, repeat):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    for name, side, cin, cout in LAYERS:
        x = torch.randn(BATCH, cin, side, side, requires_grad=name == "conv2")
        k = torch.randn(cout, cin, 3, 3, requires_grad=True)

        def forward(x=x, k=k):
            with torch.no_grad():
                F.conv2d(x, k).sum()

        def train(x=x, k=k):
            F.conv2d(x, k).sum().backward()

        yield {"case": name, "layout": "NCHW", "pass": "forward", "ms": median_ms(forward, repeat)}
        yield {"case": name, "layout": "NCHW", "pass": "forward+backward", "ms": median_ms(train, repeat)}
    pooled = torch.randn(BATCH, 64, 24, 24, requires_grad=True)
    yield {"case": "maxpool 2x2 of conv2's output", "layout": "NCHW", "pass": "forward+backward",
           "ms": median_ms(lambda: F.max_pool2d(pooled, 2).sum().backward(), repeat)}
    a, b = torch.randn(BATCH * 24 * 24, 32 * 9), torch.randn(32 * 9, 64)
    yield {"case": "matmul (conv2's forward FLOPs)", "layout": "-", "pass": "forward",
           "ms": median_ms(lambda: a @ b, repeat)}
    yield {"versions": {"torch": torch.__version__}, "mkldnn": torch.backends.mkldnn.is_available()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    cases = jax_cases if importlib.util.find_spec("jax") else torch_cases
    for row in cases(args.threads, args.repeat):
        if "case" in row:
            name = row["case"].split()[0]
            if name == "maxpool":
                row["ms"] = round(row["ms"], 2)
                print(json.dumps(row), flush=True)
                continue
            flop = {"conv1": conv_gflop(28, 1, 32), "conv2": conv_gflop(26, 32, 64)}.get(name, conv_gflop(26, 32, 64))
            flop *= {"forward": 1, "forward+backward": 2 if name == "conv1" else 3}.get(row["pass"], 2)
            row["gflop_per_s"] = round(flop / (row["ms"] / 1000), 1)
            row["ms"] = round(row["ms"], 2)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
