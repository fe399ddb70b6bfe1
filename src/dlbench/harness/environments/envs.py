"""Per-framework environments: a venv per framework, built with uv from a recipe kept in code.

The harness never imports a framework; it only runs the environment's interpreter.
"""
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dlbench.harness import file_names, folders


class EnvError(RuntimeError):
    pass


REFERENCE = "pytorch"  # the framework every other one is certified against

# name@version becomes the environment's folder name and its compile cache's: jax@0.6.2.0.0... (PEP 440 reads
# it as 0.6.2, a supported version) reached 300 characters and "File name too long"; real ones take under 30
MAX_SPEC = 100
BUILD_VERSION = 2  # bump when create() changes what it builds, so older environments are rebuilt


@dataclass(frozen=True)
class Recipe:
    framework: str
    python: str  # interpreter version for uv to find, e.g. "3.11"
    packages: tuple[str, ...]
    # "module:Class" that the worker imports. Not part of digest(): where the adapter's code lives says
    # nothing of what the environment is built from (the code's own digest is in every cell hash).
    adapter: str = field(metadata={"built": False})
    import_check: str  # modules whose import proves the environment works
    version_package: str  # the distribution whose version is "the framework's version"
    # pip's find-links (a folder of local wheels) when pip is configured with one: here it holds the
    # CPU build of torch, without which a plain "torch" pulls a multi-GB CUDA build
    find_links_from_pip: bool = False
    worker_env: dict[str, str] = field(default_factory=dict)
    # pins for the build environments of packages built from source (uv's --build-constraints): an
    # sdist whose setup.py needs pkg_resources builds only with an older setuptools than the newest
    build_constraints: tuple[str, ...] = ()
    # whether its adapter compiles into DLBENCH_COMPILE_CACHE (worker/base.py, compile_cache): only then
    # does a suite's compile_cache setting change anything, and only then is a run's cache state recorded.
    # Not part of digest(): it describes the adapter, not what the environment is built from.
    uses_compile_cache: bool = field(default=False, metadata={"built": False})
    # Versions of version_package besides the default (its exact pin in packages) that `name@version`
    # may ask for, as a PEP 440 specifier: only those whose environments were built and certified.
    supported: str = field(default="", metadata={"built": False})
    # packages pinned exactly for the default version, left to uv's resolver for any other (a pin made
    # for the default version often excludes an older framework: flax 0.12.8 needs a newer jax)
    released: tuple[str, ...] = field(default=(), metadata={"built": False})
    # (specifier, requirement): extra pins for versions in the specifier, where a package's own metadata
    # admits something that breaks it (a numpy released after that framework)
    older_pins: tuple[tuple[str, str], ...] = field(default=(), metadata={"built": False})
    # The CUDA build, for device "gpu": the packages that replace `packages` (the same versions, the
    # registry's CUDA wheels) and the distribution that then carries the version; none where the
    # framework has no CUDA build dlbench can install, and no_cuda says why.
    cuda_packages: tuple[str, ...] = field(default=(), metadata={"built": False})
    cuda_version_package: str = field(default="", metadata={"built": False})
    no_cuda: str = field(default="", metadata={"built": False})
    # the CUDA build links CUDA's libraries by name, as a system install provides them: they come from
    # NVIDIA's wheels among cuda_packages instead, and their folders go on the worker's LD_LIBRARY_PATH
    cuda_libraries_on_path: bool = field(default=False, metadata={"built": False})
    # what the environment computes on: "cpu", or "gpu" in the recipe for_device("gpu") returns
    device: str = "cpu"
    # the executions its adapter runs (harness/plan/executions.py), its default first, as the adapter's own
    # `executions` (tests/test_adapters.py holds them equal). Not part of digest(): the adapter's, not the build's.
    executions: tuple[str, ...] = field(default=("eager",), metadata={"built": False})
    # the precisions its adapter runs (harness/plan/precisions.py), float32 first, as the adapter's own `precisions`
    # (tests/test_adapters.py holds them equal). Not part of digest(), as executions.
    precisions: tuple[str, ...] = field(default=("float32",), metadata={"built": False})

    @property
    def default_version(self) -> str:
        for line in self.packages:
            requirement = Requirement(line)
            if requirement.name == self.version_package:
                return str(requirement.specifier).removeprefix("==")
        raise EnvError(f"the {self.framework} recipe pins no {self.version_package}")

    def for_version(self, version: str) -> "Recipe":
        """The recipe of another version of the framework: version_package pinned to it, the released
        packages unpinned, the older pins that apply added. Refused outside `supported`."""
        if version == self.default_version:
            return self
        accepted = f"{self.default_version}" + (f", or {self.supported}" if self.supported else " only")
        try:
            parsed = Version(version)
        except InvalidVersion:
            raise EnvError(f"{self.framework}@{version}: {version!r} is not a version number (nor a range, "
                           f"LOW..HIGH); {self.version_package} versions dlbench supports: {accepted}") from None
        if not self.supported or parsed not in SpecifierSet(self.supported):
            raise EnvError(f"{self.framework}@{version}: {self.version_package} {version} is outside the versions "
                           f"dlbench supports: {accepted}")
        packages = []
        for line in self.packages:
            requirement = Requirement(line)  # rewritten in place, so extras such as jax[cuda12] stay
            if requirement.name == self.version_package:
                requirement.specifier = SpecifierSet(f"=={version}")
            elif requirement.name in self.released:
                requirement.specifier = SpecifierSet()
            packages.append(str(requirement))
        packages += [pin for versions, pin in self.older_pins if parsed in SpecifierSet(versions)]
        return replace(self, packages=tuple(packages))

    def for_device(self, device: str) -> "Recipe":
        """The recipe of the CPU build ("cpu": this one) or of the CUDA build ("gpu"); a framework
        without a CUDA build is refused with the reason."""
        if device == self.device:
            return self
        if device != "gpu" or self.device != "cpu":
            raise EnvError(f"device {device!r}: expected cpu or gpu")
        if not self.cuda_packages:
            raise EnvError(f"{self.framework} has no GPU environment: {self.no_cuda}")
        # the registry's own wheels: the local find-links folder holds CPU builds
        return replace(self, packages=self.cuda_packages, device="gpu", find_links_from_pip=False,
                       version_package=self.cuda_version_package or self.version_package)

    def digest(self) -> str:
        """Identifies what an environment was built from: the recipe and the way create() builds it.
        Fields left at their defaults are not part of it, so adding an optional field to Recipe does
        not make every existing environment look stale."""
        defaults = {f.name: f.default_factory() if f.default_factory is not MISSING else f.default
                    for f in fields(self)}
        built = {f.name for f in fields(self) if f.metadata.get("built", True)}
        changed = {name: value for name, value in asdict(self).items()
                   if name in built and value != defaults.get(name, MISSING)}
        text = json.dumps([BUILD_VERSION, changed], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# Every framework package is pinned exactly, at the version certified against the reference, so a build
# installs the same framework on any day; their own dependencies (numpy among them) resolve within the
# ranges these versions declare, and each environment's dlbench-env.json freezes what was installed.
# every precision (harness/plan/precisions.py, worker/base.py), float32 first: the frameworks that train in them all
PRECISIONS = ("float32", "bfloat16", "mixed-bfloat16", "mixed-float16")
RECIPES: dict[str, Recipe] = {r.framework: r for r in (
    # The CUDA builds below are the registry's (torch's default Linux wheel is its CUDA build; JAX's
    # cuda12 extra and TensorFlow's and-cuda extra install NVIDIA's CUDA wheels beside them), so no
    # CUDA toolkit is needed on the machine, only NVIDIA's driver.
    Recipe("pytorch", "3.11", ("torch==2.13.0", "numpy"), "dlbench.worker.frameworks.pytorch.adapter:Adapter",
           # torch before 2.3 was built against numpy 1 and fails on numpy 2's arrays; torch 2.1 compares versions
           # with the packaging module, which it does not declare (without it, pkg_resources, gone from venvs)
           "torch, numpy", "torch", find_links_from_pip=True, supported=">=2.1,<2.13",
           older_pins=(("<2.3", "numpy<2"), ("<2.2", "packaging")),
           cuda_packages=("torch==2.13.0", "numpy"),
           executions=("eager", "compiled"), precisions=PRECISIONS),
    # from 0.4.38: the attention layers call jax.nn.dot_product_attention, new in 0.4.31 (0.4.30's certificate fails
    # on it), and 0.4.38 is the oldest release certified on every workload
    Recipe("jax", "3.11", ("jax==0.10.2", "flax==0.12.8", "optax==0.2.8", "numpy"),
           "dlbench.worker.frameworks.jax.adapter:Adapter", "jax, flax, optax", "jax",
           supported=">=0.4.38,<0.10.2", released=("flax", "optax"),
           cuda_packages=("jax[cuda12]==0.10.2", "flax==0.12.8", "optax==0.2.8", "numpy"), executions=("compiled",),
           precisions=PRECISIONS),
    # tensorflow-cpu on the CPU, "tensorflow" with CUDA on a GPU. version_package names the installed
    # distribution (what Environment.version() finds in the freeze); the worker's versions() reports
    # tf.__version__ under "tensorflow", the module it imported.
    Recipe("tensorflow", "3.11", ("tensorflow-cpu==2.21.0", "numpy"),
           "dlbench.worker.frameworks.tensorflow.adapter:Adapter",
           "tensorflow, numpy", "tensorflow-cpu", worker_env={"TF_CPP_MIN_LOG_LEVEL": "2"}, supported=">=2.16,<2.21",
           cuda_packages=("tensorflow[and-cuda]==2.21.0", "numpy"), cuda_version_package="tensorflow",
           executions=("graph", "eager", "compiled"), precisions=PRECISIONS),
    # Keras 3, one adapter for its three backends; the backend is chosen by KERAS_BACKEND at import.
    Recipe("keras-tensorflow", "3.11", ("tensorflow-cpu==2.21.0", "keras==3.15.1", "numpy"),
           "dlbench.worker.frameworks.keras3.adapter:Adapter", "keras, tensorflow, numpy", "keras",
           worker_env={"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}, supported="==3.12.0",
           cuda_packages=("tensorflow[and-cuda]==2.21.0", "keras==3.15.1", "numpy"),
           executions=("graph", "eager", "compiled"), precisions=PRECISIONS),
    Recipe("keras-jax", "3.11", ("keras==3.15.1", "jax==0.10.2", "numpy"),
           "dlbench.worker.frameworks.keras3.adapter:Adapter",
           "keras, jax, numpy", "keras", worker_env={"KERAS_BACKEND": "jax"}, supported="==3.12.0",
           cuda_packages=("keras==3.15.1", "jax[cuda12]==0.10.2", "numpy"), executions=("compiled", "eager"),
           precisions=PRECISIONS),
    Recipe("keras-torch", "3.11", ("keras==3.15.1", "torch==2.13.0", "numpy"),
           "dlbench.worker.frameworks.keras3.adapter:Adapter",
           "keras, torch, numpy", "keras", find_links_from_pip=True, worker_env={"KERAS_BACKEND": "torch"},
           supported="==3.12.0", cuda_packages=("keras==3.15.1", "torch==2.13.0", "numpy"),
           executions=("eager", "compiled"), precisions=PRECISIONS),
    # Chainer 7.8.1 is an sdist: its setup.py imports pkg_resources, gone from setuptools 81, hence the
    # build constraint (setuptools < 74 at run time too, as FRAMEWORKS.md found working); numpy 2 fails
    # on np.sctypes. threadpoolctl sets the BLAS threads numpy computes with (Chainer's CPU backend).
    Recipe("chainer", "3.11", ("chainer==7.8.1", "numpy<2", "setuptools<74", "threadpoolctl"),
           "dlbench.worker.frameworks.chainer.adapter:Adapter", "chainer, numpy, threadpoolctl", "chainer",
           build_constraints=("setuptools<74",), precisions=("float32", "mixed-float16"),
           no_cuda="Chainer 7.8.1 declares CuPy >=7.7,<8, whose wheels (cupy-cuda110 7.8.0 at the newest) "
                   "exist for Python 3.8 at most, need the CUDA 11.0 toolkit installed on the machine and "
                   "compile no kernels for GPUs newer than compute capability 8.0 (Ampere)"),
    # MXNet 1.9.1 (archived upstream): its wheel declares Python 3.5-3.8, and numpy 1.24 removed the
    # np.bool it uses. One engine worker thread for the CPU (MXNet's default, stated so it is recorded):
    # each operator then runs its own OpenMP threads, the cell's budget, set by the adapter.
    # MXNET_CPU_PARALLEL_SIZE: a copy of more than 200,000 elements made on the Python thread (weights
    # set, a split put on the device) runs OpenMP threads of its own by default. libgomp then manages
    # more threads than there are cores and stops its threads spinning between operators: they sleep
    # and are woken for each one, and lstm-ptb's training step took 35 ms instead of 18 ms. Those
    # copies stay on one thread; the operators keep the cell's threads.
    Recipe("mxnet", "3.8", ("mxnet==1.9.1", "numpy<1.24"), "dlbench.worker.frameworks.mxnet.adapter:Adapter",
           "mxnet, numpy", "mxnet",
           worker_env={"MXNET_CPU_WORKER_NTHREADS": "1", "MXNET_CPU_PARALLEL_SIZE": "2147483647"},
           # CUDA 11.7: the newest CUDA MXNet 1.9.1 was built for on the registry. Its libmxnet.so links
           # CUDA 11's runtime, cuBLAS, cuFFT, cuRAND, cuSOLVER, cuSPARSE, NVRTC and NVTX, cuDNN 8 and
           # NCCL 2 by name; NVIDIA's cu11 wheels hold them all (only the driver's libcuda is the machine's)
           cuda_packages=("mxnet-cu117==1.9.1", "numpy<1.24", "nvidia-cuda-runtime-cu11", "nvidia-cublas-cu11",
                          "nvidia-cudnn-cu11<9", "nvidia-nccl-cu11", "nvidia-cuda-nvrtc-cu11", "nvidia-cufft-cu11",
                          "nvidia-curand-cu11", "nvidia-cusolver-cu11", "nvidia-cusparse-cu11", "nvidia-nvtx-cu11"),
           cuda_version_package="mxnet-cu117", cuda_libraries_on_path=True, executions=("graph", "eager"),
           precisions=("float32", "mixed-bfloat16")),
    # Theano 1.0.5 needs numpy < 1.24 (np.bool), scipy < 1.14 (the last wheels with an LP64 OpenBLAS,
    # which Theano links as its BLAS) and setuptools < 81 (pkg_resources; uv venvs have none).
    # Python 3.10: the newest interpreter where Theano's compiled (Cython) scan still builds.
    Recipe("theano", "3.10", ("theano==1.0.5", "numpy<1.24", "scipy<1.14", "setuptools<81"),
           "dlbench.worker.frameworks.theano.adapter:Adapter", "theano, numpy", "theano",
           # without blas.ldflags Theano's import fails probing numpy's build info; the adapter sets its own
           worker_env={"THEANO_FLAGS": "blas.ldflags="}, uses_compile_cache=True, executions=("compiled",),
           no_cuda="Theano 1.0.5's GPU backend needs pygpu and libgpuarray built against the machine's CUDA; "
                   "neither is on PyPI, and its cuDNN support ends at cuDNN 7"),
)}


def dlbench_home() -> Path:
    return Path(os.environ.get("DLBENCH_HOME") or Path.home() / ".cache" / "dlbench")


def env_root() -> Path:
    return dlbench_home() / "envs"


def split_spec(spec: str) -> tuple[str, str | None]:
    """("jax", "0.6.2") for "jax@0.6.2", ("jax", None) for "jax"; an unknown name or an empty version
    is refused."""
    if len(spec) > MAX_SPEC:
        raise EnvError(f"framework {file_names.shortened(spec)}: longer than {MAX_SPEC} characters, "
                       f"the most a framework name@version may have; known: {', '.join(RECIPES)}")
    name, at, version = spec.partition("@")
    if name not in RECIPES:
        raise EnvError(f"unknown framework {name!r}; known: {', '.join(RECIPES)} (optionally name@version)")
    if at and not version:
        raise EnvError(f"{spec!r}: no version after '@'; for instance {name}@{RECIPES[name].default_version}")
    return name, version or None


def framework_name(spec: str) -> str:
    return split_spec(spec)[0]


def get_recipe(spec: str, device: str = "cpu") -> Recipe:
    """The recipe of a framework ("pytorch", its default version) or of one version ("pytorch@2.8.0"),
    for the CPU or the GPU."""
    name, version = split_spec(spec)
    recipe = RECIPES[name].for_device(device)
    return recipe if version is None else recipe.for_version(version)


def is_reference(spec: str) -> bool:
    """The reference is the reference framework at its default version."""
    return framework_name(spec) == REFERENCE and get_recipe(spec) is RECIPES[REFERENCE]


def folder_name(spec: str, device: str = "cpu") -> str:
    """An environment's folder: the framework's name for its default version, name@version otherwise,
    so "jax" and "jax@0.10.2" (the default written out) share one; "+gpu" after it for the CUDA build."""
    name, version = split_spec(spec)
    recipe = get_recipe(spec, device)
    base = name if recipe.packages == RECIPES[name].for_device(device).packages else f"{name}@{version}"
    return base + ("+gpu" if device == "gpu" else "")


def parse_folder(folder: str) -> tuple[str, str]:
    """(spec, device) of an environment's folder name: ("jax@0.6.2", "gpu") for "jax@0.6.2+gpu"."""
    spec, _, device = folder.partition("+")
    return spec, device or "cpu"


def worker_variables(recipe: Recipe, env_path: Path) -> dict[str, str]:
    """The variables a worker of this recipe's environment at env_path runs with: the recipe's own, and
    for a CUDA build that takes CUDA's libraries from NVIDIA's wheels, their folders on LD_LIBRARY_PATH."""
    variables = dict(recipe.worker_env)
    if recipe.device == "gpu" and recipe.cuda_libraries_on_path:
        folders = sorted(str(folder) for folder in env_path.glob("lib/python*/site-packages/nvidia/*/lib"))
        variables["LD_LIBRARY_PATH"] = ":".join(folders + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    return variables


def uv_command() -> list[str]:
    from uv import find_uv_bin  # the uv wheel ships its binary; no system install needed

    return [find_uv_bin()]


def _reports_version(python: str, version: str) -> bool:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def find_interpreter(version: str) -> str:
    """A local CPython of this version: on PATH, else in pyenv's folder (whose shims answer only for
    the active versions). uv is never left to download one: these machines reach only PyPI."""
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(str(p) for p in pyenv_root.glob(f"versions/{version}.*/bin/python{version}"))
    for candidate in candidates:
        if candidate and _reports_version(candidate, version):
            return candidate
    raise EnvError(f"no Python {version} found on PATH or under {pyenv_root}/versions; "
                   f"install one (for instance: pyenv install {version})")


def _pip_find_links() -> str | None:
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value and Path(value).is_dir() else None


def _run(command: list[str], what: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise EnvError(f"{what} failed (exit {result.returncode}): {' '.join(command)}\n{result.stderr[-3000:]}")
    return result.stdout


@dataclass(frozen=True)
class Environment:
    framework: str
    path: Path
    device: str = "cpu"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def info_file(self) -> Path:
        return self.path / "dlbench-env.json"

    def info(self) -> dict:
        return json.loads(self.info_file.read_text())

    def exists(self) -> bool:
        return self.info_file.is_file() and self.python.exists()

    def version(self) -> str | None:
        """The framework's version as installed."""
        return self.info()["packages"].get(get_recipe(self.framework, self.device).version_package)

    def packages_digest(self) -> str:
        """Identifies exactly what is installed: certificates are valid for this and nothing else."""
        return digest_of(self.info()["packages"])


def digest_of(packages: dict[str, str]) -> str:
    """The digest of a package set (name -> version), as Environment.packages_digest computes it."""
    return hashlib.sha256(json.dumps(packages, sort_keys=True).encode()).hexdigest()[:16]


def in_recipe_order(specs: set[str]) -> list[str]:
    """Framework specs in a fixed order: the recipes' order, each framework's versions sorted."""
    position = {name: index for index, name in enumerate(RECIPES)}
    return sorted(specs, key=lambda spec: (position[framework_name(spec)], spec))


def environment(framework: str, device: str = "cpu") -> Environment:
    return Environment(framework, env_root() / folder_name(framework, device), device)


def create_command(framework: str, device: str = "cpu") -> str:
    return f"dlbench env create {framework}" + (" --device gpu" if device == "gpu" else "")


def require(framework: str, device: str = "cpu") -> Environment:
    """The framework's environment, or an error that names the command creating it."""
    env = environment(framework, device)
    what = f"{framework}{' GPU' if device == 'gpu' else ''}"
    if not env.exists():
        raise EnvError(f"the {what} environment does not exist (looked in {env.path}); "
                       f"create it with: {create_command(framework, device)}")
    if env.info().get("recipe") != get_recipe(framework, device).digest():
        raise EnvError(f"the {what} environment at {env.path} was built from an older recipe; "
                       f"rebuild it with: {create_command(framework, device)}")
    return env


def create(framework: str, device: str = "cpu", log=print) -> Environment:
    """Builds into a temporary folder and renames it into place, so a failed build leaves nothing
    that looks usable. An environment already built from the same recipe is kept (one rebuilt from a
    run's packages is replaced: it holds the run's packages, not the recipe's)."""
    recipe = get_recipe(framework, device)
    env = environment(framework, device)
    if env.exists() and env.info().get("recipe") == recipe.digest() and "from_run" not in env.info():
        log(f"{env.path.name}: environment up to date at {env.path}")
        if "hashes" not in env.info():  # built before dlbench recorded them: added, nothing rebuilt
            info = dict(env.info(), hashes=registry_hashes(recipe, env.info()["python_version"],
                                                           env.info()["packages"]))
            folders.write_text_atomically(env.info_file, json.dumps(info, indent=1, sort_keys=True))
            log(f"{env.path.name}: recorded the registry's hashes of {len(info['hashes'])} of its "
                f"{len(info['packages'])} packages")
        return env
    return _build(framework, recipe, recipe.python, list(recipe.packages), " ".join(recipe.packages), {}, log)


def create_from_run(framework: str, python_version: str, packages: dict[str, str], origin: dict,
                    device: str = "cpu", hashes: dict[str, list[str]] | None = None, log=print) -> Environment:
    """The environment of `framework` rebuilt with exactly a stored run's packages (each pinned, none
    resolved: --no-deps) on its Python's major.minor, each package that has `hashes` (recorded when the
    run's environment was built) checked against them by uv. Its dlbench-env.json records `origin` (the
    store and run, and how many packages were checked by hash), so runs made in it say so; a later
    `create` replaces it with the recipe's build."""
    recipe = get_recipe(framework, device)
    hashes = hashes or {}
    wanted = [" ".join([f"{name}=={version}", *(f"--hash={digest}" for digest in hashes.get(name, ()))])
              for name, version in sorted(packages.items())]
    checked = sum(bool(hashes.get(name)) for name in packages)
    env = _build(framework, recipe, ".".join(python_version.split(".")[:2]), wanted,
                 f"the {len(wanted)} packages of run {origin.get('run_id')} exactly ({checked} checked by hash)",
                 {"from_run": dict(origin, packages_checked_by_hash=checked)}, log, no_deps=True)
    installed = env.info()["packages"]
    if installed != packages:
        differ = sorted(set(installed.items()) ^ set(packages.items()))
        raise EnvError(f"{framework}: the rebuilt environment differs from run {origin.get('run_id')}'s "
                       f"packages: {differ[:10]}")
    return env


def _index_options(recipe: Recipe, folder: Path) -> tuple[list[str], str | None]:
    """uv's options for where the recipe's packages come from (pip's find-links folder when the recipe
    takes its wheels) and how sdists build (a constraints file written into `folder`); and the folder."""
    options = []
    links = _pip_find_links() if recipe.find_links_from_pip else None
    if links:
        options += ["--find-links", links]
    if recipe.build_constraints:
        constraints = folder / "build-constraints.txt"
        constraints.write_text("".join(line + "\n" for line in recipe.build_constraints))
        options += ["--build-constraints", str(constraints)]
    return options, links


def _build(framework: str, recipe: Recipe, python_version: str, requirements: list[str], described: str,
           extra_info: dict, log, no_deps: bool = False) -> Environment:
    """Builds `requirements` into the framework's environment for recipe.device (see create); `described`
    says what, in the log."""
    env = environment(framework, recipe.device)
    building = env.path.with_name(env.path.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    tic = time.perf_counter()
    uv = uv_command()
    interpreter = find_interpreter(python_version)
    _run(uv + ["venv", "--quiet", "--python", interpreter, str(building)], f"creating the {framework} venv")
    python = building / "bin" / "python"
    # bytecode compiled now: workers run with PYTHONDONTWRITEBYTECODE, and compiling a framework's
    # sources on every start would add seconds to each cell
    # a requirements file: the only place a requirement may carry its hashes
    (building / "requirements.txt").write_text("".join(line + "\n" for line in requirements))
    install = uv + ["pip", "install", "--quiet", "--compile-bytecode", "--python", str(python),
                    "-r", str(building / "requirements.txt")]
    if no_deps:
        install.append("--no-deps")
    options, links = _index_options(recipe, building)
    install += options
    log(f"{env.path.name}: installing {described}" + (f" (local wheels from {links})" if links else ""))
    _run(install, f"installing {framework}")
    # with the worker's variables: Keras picks its backend (and so what it imports) from KERAS_BACKEND;
    # in a scratch HOME, so that what a framework writes at import (Theano compiles modules into
    # ~/.theano) stays out of the user's home
    with tempfile.TemporaryDirectory() as home:
        variables = worker_variables(recipe, building)
        _run(["env", f"HOME={home}", *(f"{k}={v}" for k, v in variables.items()), str(python), "-c",
              f"import {recipe.import_check}"], f"importing {framework}")
    freeze = _run(uv + ["pip", "freeze", "--python", str(python)], "listing packages")
    version = _run([str(python), "-c", "import platform; print(platform.python_version())"], "python version")
    packages = dict(line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    info = {"framework": framework_name(framework), "device": recipe.device,
            "requested": [line.split(" --hash=")[0] for line in requirements], "recipe": recipe.digest(),
            "python_version": version.strip(), "packages": packages,
            "hashes": registry_hashes(recipe, version.strip(), packages),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra_info}
    (building / "dlbench-env.json").write_text(json.dumps(info, indent=1, sort_keys=True))
    shutil.rmtree(env.path, ignore_errors=True)
    building.rename(env.path)
    log(f"{env.path.name}: environment ready at {env.path} in {time.perf_counter() - tic:.0f} s")
    return env


def _compile(recipe: Recipe, requirements: list[str], python_version: str, what: str, *options: str) -> str:
    """uv's `pip compile` of `requirements` for the recipe's indexes and build constraints, from the
    registry's metadata alone (nothing installed); its output, without header or annotations."""
    with tempfile.TemporaryDirectory() as folder:
        wanted = Path(folder) / "requirements.in"
        wanted.write_text("".join(line + "\n" for line in requirements))
        command = uv_command() + ["pip", "compile", "--quiet", "--no-header", "--no-annotate",
                                  "--python-version", python_version, *options,
                                  *_index_options(recipe, Path(folder))[0], str(wanted)]
        return _run(command, what)


def registry_hashes(recipe: Recipe, python_version: str, packages: dict[str, str]) -> dict[str, list[str]]:
    """Package name (as in `packages`) -> the sha256 hashes the registry publishes for that exact
    version (every file of it: each platform's wheel and the sdist), as uv's `pip compile
    --generate-hashes` lists them from the registry's metadata. A package from a local wheel folder
    (the CPU torch) has none there, and is left out."""
    pins = [f"{name}=={version}" for name, version in sorted(packages.items())]
    out = _compile(recipe, pins, ".".join(python_version.split(".")[:2]), "listing the registry's hashes",
                   "--generate-hashes", "--no-deps")
    names = {canonicalize_name(name): name for name in packages}
    hashes: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line and not line[0].isspace() and "==" in line:
            current = names.get(canonicalize_name(line.split("==", 1)[0]))
        elif current and line.strip().startswith("--hash="):
            hashes.setdefault(current, []).append(line.strip().removeprefix("--hash=").rstrip(" \\"))
    return hashes


def resolve(framework: str, device: str = "cpu", platform: str = "x86_64-manylinux_2_28") -> list[str]:
    """What create() would install, as name==version lines, resolved by uv for the recipe's Python on
    `platform` from the registry's metadata alone: nothing is downloaded but package metadata (and an
    sdist that must be built to learn its dependencies), so a CUDA recipe can be checked on a machine
    without a GPU, in seconds rather than gigabytes."""
    recipe = get_recipe(framework, device)
    out = _compile(recipe, list(recipe.packages), recipe.python,
                   f"resolving the {folder_name(framework, device)} environment", "--python-platform", platform)
    return [line.strip() for line in out.splitlines() if "==" in line and not line.startswith("#")]


def ensure(framework: str, device: str = "cpu", log=print) -> Environment:
    """The framework's environment, built first where it is missing or stale; concurrent callers on one
    machine (Ray tasks on one node) wait on a lock file, so it is built once."""
    root = env_root()
    root.mkdir(parents=True, exist_ok=True)
    # never through a link planted in its place: no O_TRUNC either, the file is only locked
    with os.fdopen(folders.open_no_follow(root / f".{folder_name(framework, device)}.lock",
                                          os.O_WRONLY | os.O_CREAT), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return create(framework, device, log)

