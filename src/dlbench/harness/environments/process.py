"""The variables a worker process starts with: its caches and temp files in its own folder, its threads,
and the allocator and GPU memory policies a suite asks for. Every process of a framework environment that
dlbench starts gets them: a run's worker, a GEMM peak, certification's probes."""
import os
from pathlib import Path

from dlbench.harness import PACKAGE_DIR

PACKAGE_PARENT = PACKAGE_DIR.parent  # put on the worker's PYTHONPATH


# allocator: retain. glibc's malloc serves blocks above a threshold from mmap and trims freed memory at
# the heap's top back to the system; both thresholds adapt as the process runs, so how often a training
# step faults its buffers in again (zeroed, page by page) depends on the process's history. Fixed this
# high, freed memory is kept and reused: keras-torch cnn-mnist's steady epoch went from 3.6-4.2 s to
# 2.9 s on a 2-core EPYC (docs/fairness.md, "Page faults").
RETAINING_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967295"}

# gpu_memory: grow. TensorFlow (and Keras on it) and JAX (and Keras on it) take most of a GPU's memory
# when they start (JAX 75 %; the study found TF, Keras and Theano holding the whole card); these make
# them allocate as they go, as PyTorch's caching allocator and MXNet's pool do by default.
GROWING_GPU_MEMORY = {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}

# float32 is float32 on a GPU too. On Ampere and later, cuBLAS and cuDNN may compute a float32 matmul or convolution
# in TF32 (a 10-bit mantissa), and the frameworks' defaults differ: TensorFlow on, PyTorch on for cuDNN's
# convolutions only. NVIDIA's switch turns TF32 off in both libraries for every framework; XLA's own GEMMs follow
# the JAX adapters' matmul precision "highest". No effect without a GPU.
NO_TF32 = {"NVIDIA_TF32_OVERRIDE": "0"}


def worker_environment(run_dir: Path, threads: int, extra: dict[str, str],
                       compile_cache: Path | None = None, allocator: str = "default",
                       gpu_memory: str = "default") -> dict[str, str]:
    """The worker's variables: every cache and temp file of the framework lands in the run's folder,
    except compiled code when a shared compile_cache folder is given (suite field compile_cache: shared);
    glibc's malloc as it comes, or retaining freed memory (suite field allocator: retain); each framework's
    own GPU memory policy, or growing allocations (suite field gpu_memory: grow); no TF32 (NO_TF32)."""
    env = dict(os.environ)
    for name, sub in (("HOME", "home"), ("TMPDIR", "tmp"), ("XDG_CACHE_HOME", "cache"),
                      ("TORCH_HOME", "cache/torch"), ("KERAS_HOME", "cache/keras"), ("MPLCONFIGDIR", "cache/mpl")):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(run_dir / sub)
    env.update({
        "PYTHONPATH": str(PACKAGE_PARENT), "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
        "DLBENCH_THREADS": str(threads),  # for frameworks that take their thread count at import
        **NO_TF32,
    })
    env.pop("DLBENCH_COMPILE_CACHE", None)  # a measured run compiles cold unless its caller says otherwise
    for name in RETAINING_MALLOC:  # the suite decides the allocator, not the harness's own environment
        env.pop(name, None)
    if allocator == "retain":
        env.update(RETAINING_MALLOC)
    for name in GROWING_GPU_MEMORY:  # likewise the GPU memory policy
        env.pop(name, None)
    if gpu_memory == "grow":
        env.update(GROWING_GPU_MEMORY)
    if compile_cache is not None:
        compile_cache.mkdir(parents=True, exist_ok=True)
        env["DLBENCH_COMPILE_CACHE"] = str(compile_cache)
    env.update(extra)
    return env
