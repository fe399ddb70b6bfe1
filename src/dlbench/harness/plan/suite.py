"""Suite files: parsing, validation with file:line messages, and the plan of cells they describe."""
import math
import os
import random
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dlbench.harness import data, file_names
from dlbench.harness.environments import releases
from dlbench.harness.environments.envs import RECIPES, EnvError, get_recipe
from dlbench.harness.plan import executions, precisions, user_workload
from dlbench.harness.plan.workloads import MAX_BATCH_SIZE, MAX_EPOCHS, WORKLOADS, get_workload, known_workloads
from dlbench.shared.cell_file import INFERENCE

DEVICES = ("cpu", "gpu")
# cold: every run compiles into its own empty folder; shared: the runs of one results folder share one
# compile folder per framework, and each run records whether it found it warm or cold (harness/run/one_cell.py)
COMPILE_CACHES = ("cold", "shared")
# default: glibc's malloc as every framework's users run it; retain: it keeps freed memory for reuse
# (process.RETAINING_MALLOC), so steps stop faulting their buffers in again, a cost that varies from run to run
ALLOCATORS = ("default", "retain")
# default: each framework's own GPU memory policy (TensorFlow and JAX take most of the card at start,
# PyTorch and MXNet grow as they allocate); grow: every framework allocates as it goes (process.GROWING_GPU_MEMORY)
GPU_MEMORY = ("default", "grow")
EXECUTORS = ("local", "ray")  # where the cells run: this machine, or a Ray cluster's nodes (dlbench.harness.run)
SUITE_FIELDS = ("name", "description", "frameworks", "device", "repeat", "seed", "threads", "timeout_s",
                "compile_cache", "allocator", "gpu_memory", "executor", "mode", "serve", "execution", "precision",
                "workloads")
# train: each cell trains for its epochs (the default); inference: each cell serves its model (worker/serve.py):
# a first call, warm-up, timed batch-1 calls, then whole batches timed as one span (docs/measurement.md)
MODES = ("train", INFERENCE)
SERVE_FIELDS = ("warmup_calls", "latency_calls", "throughput_samples")
# what an inference cell does without a `serve` field; a detector (frcnn-voc) serves one image a call, and its
# throughput counts DETECTOR_THROUGHPUT_SAMPLES images (a few seconds each on a CPU)
SERVE_DEFAULTS = {"warmup_calls": 20, "latency_calls": 200, "throughput_samples": 1024}
DETECTOR_THROUGHPUT_SAMPLES = 32
MAX_SERVE_CALLS = 1_000_000  # far above any useful count, far below what would fill the store with latencies
ENTRY_FIELDS = ("workload", "dataset", "epochs", "batch_size", "threads", "execution", "precision", "train_samples",
                "weights")
ALL_CORES = "all"  # an entry's threads value for every core of the machine at plan time
# What a suite file may hold. The built-in suites take under 2 KiB and nest four levels (suite, workloads,
# entry, value); the limits are far above that and far below what would exhaust time or memory.
MAX_SUITE_BYTES = 1 << 20  # 1 MiB: a 50 MB one took 17 s and 147 MB to parse; 1 MiB, 0.35 s
MAX_DEPTH = 20  # PyYAML composes nested collections recursively: 200,000 brackets overflowed Python's stack
MAX_NAME = 100  # characters of the suite's name, which every table and the report show
# cells of one plan: each cell's configuration is built (74 KB, 4 ms for the quick suite's) before the first runs
MAX_CELLS = 10_000
MAX_SEED = 2**32 - 1  # numpy's RandomState, which draws the weights and the batch order, takes no larger seed
# The integers a suite or the command line gives a cell are each bounded (MAX_EPOCHS, MAX_BATCH_SIZE from
# workloads.py, MAX_CELLS, MAX_SEED, max_threads()), so that the store can keep every value a plan holds.

# threads per logical core of the machine that reads the suite: a few beyond the cores can be measured on
# purpose (the cores flag then says so); 512 on 2 cores started 1,024 worker threads, and 10^20 broke the store
THREADS_PER_CORE = 4


def max_threads() -> int:
    """The most threads a cell may ask for on this machine: THREADS_PER_CORE x its logical cores."""
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def threads_bound() -> str:
    """Why max_threads() is what it is, for the messages that refuse more."""
    return f"{THREADS_PER_CORE} per logical core, and this machine has {os.cpu_count() or 1}"


class SuiteError(ValueError):
    pass


class _Mapping(dict):
    """A YAML mapping that remembers the line of each key, for error messages."""
    line = 0
    lines: dict[Any, int] = {}


class _Refused(Exception):
    """What a suite file may not hold, at its line; parse() adds the file."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line, self.message = line, message


class _LineLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases (a few lines of aliases expand to gigabytes wherever
    the value is read: 'billion laughs') and collections nested deeper than MAX_DEPTH, and saying where a
    value could not be read instead of raising its constructor's ValueError."""
    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if event.anchor is not None:  # an alias event's anchor is the name it refers to
            what = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            raise _Refused(event.start_mark.line + 1, f"YAML {what}{event.anchor}: a suite file accepts no anchors "
                           "(&name) or aliases (*name); write each value out")
        if self.depth >= MAX_DEPTH:
            raise _Refused(event.start_mark.line + 1, f"nested deeper than {MAX_DEPTH} levels; a suite nests four "
                           "(suite, workloads, entry, value)")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as error:  # a constructor's own: 2001-13-45, !!int "abc", 5,000 digits
            raise self._unreadable(node, str(error).partition(";")[0]) from None  # not Python's advice on digits
        # an explicit tag over a value it does not fit fails inside the constructor: !!timestamp 4 on a regular
        # expression's None, !!float "" on its first character
        except (TypeError, AttributeError, IndexError):
            raise self._unreadable(node, None) from None

    @staticmethod
    def _unreadable(node: yaml.Node, reason: str | None) -> _Refused:
        value = node.value if isinstance(node, yaml.ScalarNode) else node.tag
        return _Refused(node.start_mark.line + 1, f"cannot read {file_names.shortened(value)} as "
                        f"{node.tag.rpartition(':')[2]}" + (f": {reason}" if reason else ""))


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _Mapping:
    mapping = _Mapping(loader.construct_mapping(node, deep=True))
    mapping.line = node.start_mark.line + 1
    mapping.lines = {}
    for key_node, _ in node.value:  # construct_mapping keeps the last of two equal keys without a word
        key, line = loader.construct_object(key_node, deep=True), key_node.start_mark.line + 1
        if key in mapping.lines:
            raise _Refused(line, f"field {key!r} appears twice (lines {mapping.lines[key]} and {line}); "
                           "give each field once")
        mapping.lines[key] = line
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass(frozen=True)
class Entry:
    workload: str
    dataset: str
    epochs: int | None
    # the entry's batch sizes (an axis when more than one); empty: the workload recipe's
    batch_sizes: tuple[int, ...] = ()
    # the entry's threads per cell (an axis when more than one), ALL_CORES among them; empty: the suite's
    threads: tuple[int | str, ...] = ()
    # the entry's executions (executions.EXECUTIONS; an axis when more than one); empty: the suite's
    executions: tuple[str, ...] = ()
    # the entry's precisions (precisions.PRECISIONS; an axis when more than one); empty: the suite's
    precisions: tuple[str, ...] = ()
    weights: str | None = None  # an .npz of starting weights (initial_weights.py), absolute
    # train on the dataset's first N training samples (its stored order); the test split stays whole
    train_samples: int | None = None
    # FILE:LINE of the entry, for the error when train_samples exceeds the training split
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    frameworks: tuple[str, ...]
    device: str
    repeat: int
    seed: int
    threads: int | None
    timeout_s: float
    entries: tuple[Entry, ...]
    compile_cache: str = "cold"
    executor: str = "local"  # one of EXECUTORS; `dlbench run --executor` overrides it
    allocator: str = "default"  # one of ALLOCATORS; `dlbench run --allocator` overrides it
    gpu_memory: str = "default"  # one of GPU_MEMORY; `dlbench run --gpu-memory` overrides it
    # `frameworks: all`: on a GPU, every framework that has a CUDA build (the others have no GPU environment)
    all_frameworks: bool = False
    mode: str = "train"  # one of MODES
    serve: tuple[tuple[str, int], ...] = ()  # the suite's `serve` values (SERVE_FIELDS), each given one
    # the suite's executions for entries that name none; empty: each framework's default
    executions: tuple[str, ...] = ()
    # the suite's precisions for entries that name none; empty: float32
    precisions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Serve:
    """What an inference cell's worker does (docs/measurement.md): warmup_calls untimed calls and
    latency_calls timed calls on one sample each, then the first throughput_samples test samples (at most
    the test split's: cell_config caps it) in whole batches of throughput_batch, timed as one span."""
    warmup_calls: int
    latency_calls: int
    throughput_batch: int
    throughput_samples: int

    def as_config(self) -> dict[str, int]:
        return {"warmup_calls": self.warmup_calls, "latency_calls": self.latency_calls,
                "throughput_batch": self.throughput_batch, "throughput_samples": self.throughput_samples}


@dataclass(frozen=True)
class Cell:
    suite: str
    framework: str
    workload: str
    dataset: str
    device: str
    repetition: int
    seed: int
    epochs: int
    batch_size: int
    threads: int | None
    timeout_s: float
    compile_cache: str = "cold"  # one of COMPILE_CACHES
    allocator: str = "default"  # one of ALLOCATORS
    gpu_memory: str = "default"  # one of GPU_MEMORY
    weights: str | None = None  # starting weights (initial_weights.py) instead of the canonical ones
    train_samples: int | None = None  # the first N training samples only (Entry.train_samples)
    # where the entry's train_samples is set (FILE:LINE), for the error that it exceeds the training split
    train_samples_at: str = field(default="", compare=False)
    mode: str = "train"  # one of MODES
    serve: Serve | None = None  # an inference cell's serving settings; None for a training cell
    execution: str | None = None  # one of executions.EXECUTIONS; None: the framework's default
    precision: str | None = None  # one of precisions.PRECISIONS; None: float32


def builtin_suites() -> list[str]:
    folder = resources.files("dlbench.harness.plan") / "suites"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def locate(name_or_path: str) -> Path:
    path = Path(name_or_path)
    unnameable = file_names.unnameable(path)
    if unnameable:  # before the file system is asked, which would answer "File name too long"
        raise SuiteError(f"suite file {file_names.shortened(name_or_path)}: {unnameable}")
    if path.suffix in (".yaml", ".yml") or path.exists():
        if path.is_dir():
            raise SuiteError(f"suite file {path} is a folder; give the path of a suite file (.yaml) in it")
        if not path.exists():
            raise SuiteError(f"suite file {path} does not exist")
        if not path.is_file():
            raise SuiteError(f"suite file {path} is not a regular file; give the path of a suite file (.yaml)")
        return path
    if name_or_path not in builtin_suites():
        raise SuiteError(f"unknown suite {name_or_path!r}; built-in suites: {', '.join(builtin_suites())}; "
                         "or give the path of a suite file (.yaml)")
    return Path(str(resources.files("dlbench.harness.plan") / "suites" / f"{name_or_path}.yaml"))


def _read(path: Path) -> str:
    """The suite file's text: at most MAX_SUITE_BYTES of UTF-8."""
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_SUITE_BYTES + 1)  # no more, whatever the file says its size is
    except OSError as error:
        raise SuiteError(f"{path}: cannot read the suite file: {error.strerror}") from None
    if len(content) > MAX_SUITE_BYTES:
        raise SuiteError(f"{path}: larger than 1 MiB ({MAX_SUITE_BYTES:,} bytes), the most a suite file may hold")
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content.count(b"\n", 0, error.start) + 1
        raise SuiteError(f"{path}:{line}: not UTF-8 text (byte 0x{content[error.start]:02x} at offset {error.start}); "
                         "a suite file is YAML in UTF-8") from None


class _Checker:
    def __init__(self, path: Path):
        self.path = path
        # the users' datasets this suite's entries name, each read once however many entries share it
        self.datasets: dict[tuple[str, ...], Any] = {}

    def fail(self, mapping: _Mapping, key: str | None, message: str) -> SuiteError:
        line = mapping.lines.get(key, mapping.line) if key else mapping.line
        where = f"field {key!r}: " if key else ""
        return SuiteError(f"{self.path}:{line}: {where}{message}")

    def known_keys(self, mapping: _Mapping, accepted: tuple[str, ...]) -> None:
        for key in mapping:
            if key not in accepted:
                raise self.fail(mapping, key, f"unknown field; accepted: {', '.join(accepted)}")

    def integer(self, mapping: _Mapping, key: str, default: Any, minimum: int = 1, maximum: int | None = None,
                why: str = "") -> Any:
        """The field's integer within [minimum, maximum]; `why`, said after the range, is where the maximum
        comes from."""
        value = mapping.get(key, default)
        if value is None and default is None:
            return None
        if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
                or (maximum is not None and value > maximum)):
            accepted = f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
            raise self.fail(mapping, key, f"expected {accepted}{why}, got {file_names.shortened(value)}")
        return value

    def seconds(self, mapping: _Mapping, key: str, default: float) -> float:
        value = mapping.get(key, default)
        seconds = _seconds(value)
        if seconds is None:  # NaN or inf would switch the timeout off: a NaN deadline is never reached
            shown = file_names.shortened(value)
            raise self.fail(mapping, key, f"expected a finite number of seconds > 0, got {shown}")
        return seconds

    def choice(self, mapping: _Mapping, key: str, accepted, default: Any = None) -> Any:
        value = mapping.get(key, default)
        if value not in accepted:
            raise self.fail(mapping, key, f"{value!r} is not one of: {', '.join(accepted)}")
        return value


def _seconds(value: Any) -> float | None:
    """The value as a finite number of seconds > 0, else None: NaN, inf, a bool, a string, or an integer
    too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if 0 < seconds < math.inf else None


def _yaml_error(path: Path, error: yaml.YAMLError) -> str:
    """PyYAML's complaint in one line, at the line and column it marks: its own text spans several lines (the
    context, the problem, each with a quoted source line and a caret), which an error line cannot hold."""
    mark = getattr(error, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    said = f"{context}: {problem}" if context else problem
    return f"{where}: not valid YAML: {' '.join(said.split())}"


def parse(path: Path, user_code: bool = True) -> Suite:
    """The suite the file describes, checked. With user_code False the entries' workload files (Python) are
    neither run nor checked against their datasets, only located: `run` checks that much before it locks its
    results folder, and runs the files after (each such entry's workload is then its file's path)."""
    try:
        document = yaml.load(_read(path), Loader=_LineLoader)
    except yaml.YAMLError as error:
        raise SuiteError(_yaml_error(path, error)) from None
    except _Refused as refused:
        raise SuiteError(f"{path}:{refused.line}: {refused.message}") from None
    check = _Checker(path)
    if not isinstance(document, _Mapping):
        raise SuiteError(f"{path}:1: a suite is a mapping with the fields {', '.join(SUITE_FIELDS)}")
    check.known_keys(document, SUITE_FIELDS)
    device = check.choice(document, "device", DEVICES, "cpu")
    frameworks = document.get("frameworks")
    all_frameworks = frameworks == "all"
    if all_frameworks:
        frameworks = frameworks_for(device)
    if not isinstance(frameworks, list) or not frameworks:
        raise check.fail(document, "frameworks", f"expected 'all' or a list of frameworks from: {', '.join(RECIPES)} "
                         "(optionally name@version)")
    try:
        frameworks = releases.expanded(str(framework) for framework in frameworks)
        for framework in frameworks:
            get_recipe(framework, device)
    except EnvError as error:
        raise check.fail(document, "frameworks", str(error)) from None
    entries = document.get("workloads")
    if not isinstance(entries, list) or not entries:
        raise check.fail(document, "workloads", f"expected a non-empty list of mappings with {', '.join(ENTRY_FIELDS)}")
    mode = check.choice(document, "mode", MODES, "train")
    return Suite(
        name=_name(check, document, path), description=str(document.get("description", "")),
        frameworks=tuple(frameworks), device=device,
        repeat=check.integer(document, "repeat", 1, maximum=MAX_CELLS),
        seed=check.integer(document, "seed", 0, minimum=0, maximum=MAX_SEED),
        threads=check.integer(document, "threads", None, maximum=max_threads(), why=f" ({threads_bound()})"),
        timeout_s=check.seconds(document, "timeout_s", 3600),
        entries=tuple(_entry(check, document, item, mode, user_code) for item in entries),
        compile_cache=check.choice(document, "compile_cache", COMPILE_CACHES, "cold"),
        executor=check.choice(document, "executor", EXECUTORS, "local"),
        allocator=check.choice(document, "allocator", ALLOCATORS, "default"),
        gpu_memory=check.choice(document, "gpu_memory", GPU_MEMORY, "default"), all_frameworks=all_frameworks,
        mode=mode, serve=_serve(check, document, mode), executions=_modes(check, document, "execution", "the suite"),
        precisions=_modes(check, document, "precision", "the suite"),
    )


def _serve(check: _Checker, document: _Mapping, mode: str) -> tuple[tuple[str, int], ...]:
    """The suite's `serve` mapping (inference suites only), each value checked; the fields left out take
    SERVE_DEFAULTS when the plan is made."""
    if "serve" not in document:
        return ()
    if mode != INFERENCE:
        raise check.fail(document, "serve", "serving settings need `mode: inference`; a training suite serves nothing")
    serve = document["serve"]
    if not isinstance(serve, _Mapping):
        raise check.fail(document, "serve", f"expected a mapping with some of: {', '.join(SERVE_FIELDS)}")
    check.known_keys(serve, SERVE_FIELDS)
    minimum = {"warmup_calls": 0}
    return tuple((key, check.integer(serve, key, None, minimum=minimum.get(key, 1), maximum=MAX_SERVE_CALLS))
                 for key in SERVE_FIELDS if key in serve)


def _name(check: _Checker, document: _Mapping, path: Path) -> str:
    """The suite's name: its field, else the file's name without .yaml."""
    name = str(document.get("name", path.stem))
    if "name" in document and len(name) > MAX_NAME:
        raise check.fail(document, "name", f"{file_names.shortened(name)} is longer than {MAX_NAME} characters, "
                         "the most a suite's name may have")
    return name


def frameworks_for(device: str) -> list[str]:
    """What `frameworks: all` means on the device: every framework, or on a GPU those with a CUDA build."""
    return [name for name, recipe in RECIPES.items() if device == "cpu" or recipe.cuda_packages]


def _entry(check: _Checker, document: _Mapping, item: Any, mode: str = "train", user_code: bool = True) -> Entry:
    if not isinstance(item, _Mapping):
        raise check.fail(document, "workloads", f"each entry is a mapping with the fields {', '.join(ENTRY_FIELDS)}")
    check.known_keys(item, ENTRY_FIELDS)
    own_dataset = _user_dataset(check, item) if isinstance(item.get("dataset"), dict) else None
    users_file = isinstance(item.get("workload"), str) and item["workload"].endswith(".py")
    if users_file and not user_code:
        workload = str(_user_file(check, item, "workload", item["workload"]))  # run later, by a second parse
    elif users_file:
        workload = _user_workload(check, item, own_dataset)
    else:
        workload = check.choice(item, "workload", tuple(WORKLOADS))
    dataset = own_dataset.NAME if own_dataset else check.choice(item, "dataset", tuple(data.dataset_names()))
    task = data.describe(dataset)["task"]
    if users_file and not user_code:
        pass  # what the workload trains for is known once its file has run
    elif task not in get_workload(workload).tasks:
        raise check.fail(item, "dataset", f"{dataset!r} is a {task} dataset; {workload} needs "
                         f"{' or '.join(get_workload(workload).tasks)}")
    if own_dataset is not None and (user_code or not users_file):
        try:
            user_workload.check_fit(get_workload(workload), own_dataset, str(own_dataset.path))
        except user_workload.UserWorkloadError as error:
            raise check.fail(item, "dataset", str(error)) from None
    if mode == INFERENCE:
        for key in ("epochs", "train_samples"):  # what would change nothing an inference cell measures
            if key in item:
                raise check.fail(item, key, f"entry {workload} on {dataset}: an inference suite trains nothing; "
                                 f"leave {key} out (a trained model's weights come from `weights`)")
    return Entry(workload, dataset, check.integer(item, "epochs", None, maximum=MAX_EPOCHS),
                 batch_sizes=_axis(check, item, "batch_size", f"entry {workload} on {dataset}"),
                 threads=_axis(check, item, "threads", f"entry {workload} on {dataset}"),
                 executions=_modes(check, item, "execution", f"entry {workload} on {dataset}"),
                 precisions=_modes(check, item, "precision", f"entry {workload} on {dataset}"),
                 weights=_weights_path(check, item), train_samples=_train_samples(check, item, workload, dataset),
                 where=f"{check.path}:{item.lines.get('train_samples', item.line)}")


USER_DATASET_FIELDS = ("path", "task", "name", "num_classes", "input_scale")


def _user_file(check: _Checker, item: _Mapping, key: str, value: Any) -> Path:
    """A path an entry gives, relative to the suite file's folder."""
    unnameable = file_names.unnameable(check.path.parent / str(value))
    if unnameable:  # before the file system is asked, which would answer "File name too long"
        raise check.fail(item, key, f"a path the file system cannot hold: {unnameable}")
    path = check.path.parent / str(value)
    try:
        return path.resolve()
    except (RuntimeError, OSError) as error:  # a symbolic link loop: RuntimeError up to Python 3.12, then OSError
        raise check.fail(item, key, f"{path}: a path that cannot be followed ({error}); give a file, or a link "
                         "that ends at one") from None


def _user_workload(check: _Checker, item: _Mapping, dataset: Any) -> str:
    """An entry's `workload: FILE.py`: the user's workload it declares, loaded and registered; its name."""
    path = _user_file(check, item, "workload", item["workload"])
    try:
        return user_workload.load(path, dataset).name
    except user_workload.UserWorkloadError as error:
        raise check.fail(item, "workload", str(error)) from None


def _user_dataset(check: _Checker, item: _Mapping) -> Any:
    """An entry's `dataset: {path: FILE.npz or FOLDER, task: ..., name, num_classes, input_scale}`: the
    user's dataset, read, checked and registered (data/user.py)."""
    fields = item["dataset"]
    accepted = f"a dataset's name, or a mapping with {', '.join(USER_DATASET_FIELDS)} (path and task required)"
    unknown = [key for key in fields if key not in USER_DATASET_FIELDS]
    if unknown or not isinstance(fields.get("path"), str) or "task" not in fields:
        what = f"unknown field {unknown[0]!r}" if unknown else "path (a string) and task are required"
        raise check.fail(item, "dataset", f"{what}; expected {accepted}")
    num_classes, scale = fields.get("num_classes"), fields.get("input_scale")
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 2):
        raise check.fail(item, "dataset", f"num_classes {file_names.shortened(num_classes)}; expected an integer >= 2")
    if scale is not None and _seconds(scale) is None:  # the same test: a finite number > 0
        raise check.fail(item, "dataset", f"input_scale {file_names.shortened(scale)}; expected a finite number > 0 "
                         "(what the inputs are divided by: 255 for 0..255 pixels)")
    path = _user_file(check, item, "dataset", fields["path"])
    name = str(fields.get("name") or path.name.removesuffix(".npz"))
    key = (str(path), name, repr(fields["task"]), repr(num_classes), repr(scale))
    if key not in check.datasets:
        try:
            check.datasets[key] = user_workload.read_dataset(path, name, fields["task"], num_classes, scale)
        except (user_workload.UserWorkloadError, data.user.UserDataError) as error:
            raise check.fail(item, "dataset", str(error)) from None
    return check.datasets[key]


def _axis(check: _Checker, item: _Mapping, key: str, entry: str) -> tuple[Any, ...]:
    """An entry's `batch_size` or `threads`: one integer from 1 to its maximum (MAX_BATCH_SIZE, max_threads()),
    or a non-empty list of distinct ones (an axis of the sweep: the plan holds every value); `threads` also takes
    ALL_CORES, the machine's cores at plan time. Absent: ()."""
    if key not in item:
        return ()
    value = item[key]
    takes_all = key == "threads"
    maximum = max_threads() if takes_all else MAX_BATCH_SIZE
    bound = f" ({threads_bound()})" if takes_all else ""
    accepted = (f"an integer from 1 to {maximum}{bound}{', ' + repr(ALL_CORES) if takes_all else ''}, or a "
                f"non-empty list of distinct ones{' (all: every core of the machine)' if takes_all else ''}")
    values = value if isinstance(value, list) else [value]
    if not values:
        raise check.fail(item, key, f"{entry}: an empty list; expected {accepted}")
    for one in values:
        if one == ALL_CORES and takes_all:
            continue
        if isinstance(one, bool) or not isinstance(one, int) or not 1 <= one <= maximum:
            also = f" ({ALL_CORES!r} is for threads only)" if one == ALL_CORES else ""
            raise check.fail(item, key, f"{entry}: value {file_names.shortened(one)} is not accepted{also}; "
                             f"expected {accepted}")
    seen = set()
    for one in values:  # every value is a positive integer or ALL_CORES now (no True, which equals 1)
        if one in seen:
            raise check.fail(item, key, f"{entry}: value {one!r} is listed twice; expected {accepted}")
        seen.add(one)
    return tuple(values)


MODE_VALUES = {"execution": executions.EXECUTIONS, "precision": precisions.PRECISIONS}


def _modes(check: _Checker, item: _Mapping, key: str, where: str) -> tuple[str, ...]:
    """A suite's or an entry's `execution` or `precision` (`key`): one of MODE_VALUES[key], or a non-empty list of
    distinct ones (an axis: the plan holds every value each framework runs). Absent: ()."""
    if key not in item:
        return ()
    accepted = f"one of {', '.join(MODE_VALUES[key])}, or a non-empty list of distinct ones"
    values = item[key] if isinstance(item[key], list) else [item[key]]
    if not values:
        raise check.fail(item, key, f"{where}: an empty list; expected {accepted}")
    for index, one in enumerate(values):
        if one not in MODE_VALUES[key]:
            raise check.fail(item, key, f"{where}: value {file_names.shortened(one)} is not accepted; "
                             f"expected {accepted}")
        if one in values[:index]:
            raise check.fail(item, key, f"{where}: value {one!r} is listed twice; expected {accepted}")
    return tuple(values)


def _train_samples(check: _Checker, item: _Mapping, workload: str, dataset: str) -> int | None:
    """An entry's `train_samples`: a positive integer (whether the prepared training split holds that many
    is checked when the plan's cells are resolved, before the first runs: cell_config.check_train_samples)."""
    value = item.get("train_samples")
    if value is None and "train_samples" not in item:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise check.fail(item, "train_samples", f"entry {workload} on {dataset}: expected a positive integer no "
                         f"larger than {dataset}'s training samples (the first N of them are trained on), "
                         f"got {file_names.shortened(value)}")
    return value


def _weights_path(check: _Checker, item: _Mapping) -> str | None:
    """An entry's `weights`, relative to the suite file's folder, or None; the file must exist (what it
    holds is checked against the model when the plan is resolved)."""
    if "weights" not in item:
        return None
    if not isinstance(item["weights"], str) or not item["weights"]:
        raise check.fail(item, "weights", "expected the path of an .npz of canonical weights")
    unnameable = file_names.unnameable(check.path.parent / item["weights"])
    if unnameable:  # before the file system is asked, which would answer "File name too long"
        raise check.fail(item, "weights", f"a path the file system cannot hold: {unnameable}")
    path = (check.path.parent / item["weights"]).resolve()
    if not path.is_file():
        raise check.fail(item, "weights", f"no file {path}")
    return str(path)


def load(name_or_path: str, user_code: bool = True) -> Suite:
    return parse(locate(name_or_path), user_code)


def plan(suite: Suite, frameworks: list[str] | None = None, workloads: list[str] | None = None,
         device: str | None = None, repeat: int | None = None, epochs: int | None = None,
         compile_cache: str | None = None, allocator: str | None = None,
         gpu_memory: str | None = None, threads: int | None = None, cores: int | None = None,
         execution: str | None = None, precision: str | None = None) -> list[Cell]:
    """Cells in run order: repetitions outermost, so a slow drift of the machine touches every
    framework alike rather than all repetitions of one; within a repetition the cells are shuffled
    (`shuffled`), so no framework always runs first or right after the same neighbour. An entry's axes
    (`batch_size`, `threads`, `execution`, `precision` lists) multiply its cells: entries x batch sizes x threads x
    frameworks x the executions and precisions each framework runs (one it refuses is left out: `refusals` says why);
    `threads` (--threads) overrides every entry's threads, and an entry's `all` is `cores` (by default this machine's,
    at plan time); `execution` (--execution) and `precision` (--precision) every entry's."""
    if compile_cache is not None and compile_cache not in COMPILE_CACHES:
        raise SuiteError(f"compile cache {compile_cache!r} is not one of: {', '.join(COMPILE_CACHES)}")
    if allocator is not None and allocator not in ALLOCATORS:
        raise SuiteError(f"allocator {allocator!r} is not one of: {', '.join(ALLOCATORS)}")
    if gpu_memory is not None and gpu_memory not in GPU_MEMORY:
        raise SuiteError(f"gpu memory policy {gpu_memory!r} is not one of: {', '.join(GPU_MEMORY)}")
    device = device or suite.device
    if not frameworks and suite.all_frameworks:
        frameworks = frameworks_for(device)
    for name in frameworks or suite.frameworks:
        try:
            get_recipe(name, device)
        except EnvError as error:
            raise SuiteError(str(error)) from None
    entries = list(suite.entries)
    if workloads:
        present = [e.workload for e in entries]
        for name in workloads:
            if name not in known_workloads():
                raise SuiteError(f"unknown workload {name!r}; known: {', '.join(known_workloads())}")
            if name not in present:
                raise SuiteError(f"workload {name!r} is not in suite {suite.name!r}; its workloads: "
                                 f"{', '.join(present)}")
        entries = [e for e in entries if e.workload in workloads]
    cores = cores or os.cpu_count() or 1
    # the plan's size from its lists' lengths, refused before a single cell is built
    point_count = sum(len(entry.batch_sizes or (None,)) * len(_threads(entry, threads or None, suite.threads, cores))
                      * len(_asked(entry, suite, execution, "execution"))
                      * len(_asked(entry, suite, precision, "precision")) for entry in entries)
    _check_size(suite, repeat or suite.repeat, point_count, len(frameworks or suite.frameworks))
    points = [(entry, batch_size, entry_threads) for entry in entries
              for batch_size in entry.batch_sizes or (get_workload(entry.workload).recipe["batch_size"],)
              for entry_threads in _threads(entry, threads or None, suite.threads, cores)]
    cells = []
    inference = suite.mode == INFERENCE
    if inference and epochs:
        raise SuiteError(f"--epochs {epochs}: suite {suite.name!r} is an inference suite (mode: inference), which "
                         "trains nothing; leave --epochs out")
    for repetition in range(1, (repeat or suite.repeat) + 1):
        repetition_cells = []
        for entry, batch_size, cell_threads in points:
            recipe = get_workload(entry.workload).recipe
            for framework in frameworks or suite.frameworks:
                for cell_execution, cell_precision in _modes_run(entry, suite, execution, precision, framework,
                                                                  device)[0]:
                    repetition_cells.append(Cell(
                        suite=suite.name, framework=framework, workload=entry.workload, dataset=entry.dataset,
                        device=device, repetition=repetition, seed=suite.seed + repetition - 1,
                        epochs=0 if inference else epochs or entry.epochs or recipe["epochs"],
                        batch_size=batch_size, threads=cell_threads,
                        timeout_s=suite.timeout_s, compile_cache=compile_cache or suite.compile_cache,
                        allocator=allocator or suite.allocator, gpu_memory=gpu_memory or suite.gpu_memory,
                        weights=entry.weights, train_samples=entry.train_samples, train_samples_at=entry.where,
                        mode=suite.mode, serve=serve_settings(suite, entry.workload, batch_size) if inference else None,
                        execution=cell_execution, precision=cell_precision,
                    ))
        cells += shuffled(repetition_cells, suite.seed, repetition)
    if not cells and entries:
        raise SuiteError(f"suite {suite.name}: no cell to run; every execution and precision asked for is refused:\n"
                         + "\n".join(refusals(suite, frameworks, workloads, execution, precision, device)))
    return cells


def _asked(entry: Entry, suite: Suite, override: str | None, key: str) -> tuple[str | None, ...]:
    """The executions or precisions (`key`) asked of an entry's cells: --execution or --precision, else the entry's,
    else the suite's; (None,): each framework's default."""
    listed = {"execution": (entry.executions, suite.executions), "precision": (entry.precisions, suite.precisions)}
    return (override,) if override else listed[key][0] or listed[key][1] or (None,)


def _modes_run(entry: Entry, suite: Suite, execution: str | None, precision: str | None, framework: str,
               device: str) -> tuple[list[tuple[str | None, str | None]], list[tuple[str, str]]]:
    """The (execution, precision) pairs the framework runs of those asked (None: its default), and (the value, why)
    for each execution or precision it refuses."""
    workload = get_workload(entry.workload)
    refused, run = [], []
    for asked in _asked(entry, suite, execution, "execution"):
        why = asked and executions.refusal(framework, asked, workload)
        if why:
            refused.append((asked, why))
            continue
        for precision_asked in _asked(entry, suite, precision, "precision"):
            why = precision_asked and precisions.refusal(framework, precision_asked, workload, device, asked)
            refused += [(precision_asked, why)] if why else []
            run += [] if why else [(asked, precision_asked)]
    return run, list(dict.fromkeys(refused))


def refusals(suite: Suite, frameworks: list[str] | None = None, workloads: list[str] | None = None,
             execution: str | None = None, precision: str | None = None, device: str | None = None) -> list[str]:
    """Why the plan of these arguments (as `plan` takes them) leaves cells out: a line per framework, execution or
    precision and reason (executions.refusal, precisions.refusal), naming the workloads: "jax eager, refused for
    cnn-mnist, lstm-ptb: ..."."""
    refused: dict[tuple[str, str, str], list[str]] = {}
    for entry in suite.entries:
        if workloads and entry.workload not in workloads:
            continue
        for framework in frameworks or suite.frameworks:
            for asked, why in _modes_run(entry, suite, execution, precision, framework, device or suite.device)[1]:
                names = refused.setdefault((framework, asked, why), [])
                names += [] if entry.workload in names else [entry.workload]
    return [f"{framework} {asked}, refused for {', '.join(names)}: {why}"
            for (framework, asked, why), names in refused.items()]


def serve_settings(suite: Suite, workload: str, batch_size: int) -> Serve:
    """An inference cell's settings: the suite's `serve` values over SERVE_DEFAULTS, batches of the cell's
    batch size; a detector's batches of one image and DETECTOR_THROUGHPUT_SAMPLES images by default."""
    detector = "detection" in get_workload(workload).tasks
    values = dict(SERVE_DEFAULTS, throughput_samples=DETECTOR_THROUGHPUT_SAMPLES) if detector else dict(SERVE_DEFAULTS)
    values.update(suite.serve)
    return Serve(values["warmup_calls"], values["latency_calls"], 1 if detector else batch_size,
                 values["throughput_samples"])


def _threads(entry: Entry, override: int | None, suite_threads: int | None, cores: int) -> list[int | None]:
    """An entry's threads per cell: --threads, else the entry's (`all` as `cores`; a value that `all` comes
    to as well is planned once), else the suite's (None: the cores of the machine that runs the cell)."""
    if override:
        return [override]
    if not entry.threads:
        return [suite_threads]
    numbers = (cores if value == ALL_CORES else int(value) for value in entry.threads)
    return list(dict.fromkeys(numbers))  # in order, each once


def _check_size(suite: Suite, repetitions: int, entries: int, frameworks: int) -> None:
    """Refuses a plan of more than MAX_CELLS cells (--repeat 100000000 ran out of memory building it), or of
    so many repetitions that the last one's seed (seed + repetitions - 1) is beyond what numpy's RandomState
    takes."""
    cells = repetitions * entries * frameworks
    if cells > MAX_CELLS:
        raise SuiteError(f"the plan would hold {cells:,} cells ({repetitions:,} repetitions x {entries} workload "
                         f"entries and axis values x {frameworks} frameworks); a plan holds at most {MAX_CELLS:,}: "
                         "ask for fewer repetitions (repeat, --repeat), workloads (-w), frameworks (-f) or values "
                         "of the entries' batch_size and threads")
    last_seed = suite.seed + repetitions - 1
    if last_seed > MAX_SEED:
        raise SuiteError(f"seed {suite.seed} and {repetitions} repetitions: the last repetition would draw from "
                         f"seed {last_seed}; seed + repetitions - 1 may be at most {MAX_SEED}")


def shuffled(cells: list[Cell], seed: int, repetition: int) -> list[Cell]:
    """The cells of one repetition in the order they run: listed order (workloads, then frameworks)
    shuffled by random.Random(f"{seed}-{repetition}"). A string seed is hashed with SHA-512, not
    hash(), so the order is the same in every process; each repetition gets its own order, and every
    run records its place in it (plan_position)."""
    order = list(cells)
    random.Random(f"{seed}-{repetition}").shuffle(order)
    return order
