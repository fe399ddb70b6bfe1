"""A suite entry's own workload and dataset: a Python file that declares a dlbench.user.Workload (WORKLOAD), and a
dataset in a plain format (data/user.py). Both are read, checked against each other and registered when the
suite is loaded, before any cell runs; every error names the file and what it accepts. The workload file is
the user's code: it runs in a child process (read_workload.py) within READ_TIMEOUT_S, once per file content
and dataset, and the harness keeps the model that child returned."""
from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import user
from dlbench.harness import data, file_names
from dlbench.harness.data.user import UserDataset
from dlbench.harness.environments.process import PACKAGE_PARENT
from dlbench.harness.plan import workloads
from dlbench.harness.plan.workloads import Workload
from dlbench.shared import ir
from dlbench.shared import schedule as schedules
from dlbench.shared.recipe import OPTIMIZER_SETTINGS

DECLARED = "WORKLOAD"  # the name a workload file binds its dlbench.user.Workload to
# a user's workload or dataset name: tables show it and a prepared folder is named by it, so no path separators
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_ACCEPTED = "1 to 64 letters, digits, '.', '_' or '-', the first a letter or digit"


# the most a workload file may take to be imported and to return its model(meta), in the child that reads it
READ_TIMEOUT_S = 60.0
SCHEDULE_EXAMPLE = ('{"name": "warmup_cosine", "warmup_fraction": 0.05 (or "warmup_steps": N), "total_steps": '
                    '"auto" (or N), "final_lr_fraction": 0.1}')
# what each (file, SHA-256, dataset meta) read to in this process, and the dataset it was read for
_READ: dict[tuple[str, str, str], dict] = {}
_READ_FOR: dict[tuple[str, str, str], str] = {}


class UserWorkloadError(ValueError):
    pass


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(path: Path, dataset: UserDataset | None) -> Workload:
    """The workload the file at `path` declares, registered under its name; `dataset`, the entry's plain-format
    dataset, is the one it is described (study_meta) and checked by. The file is read in a child process
    (`read`), once per file content and dataset."""
    if not path.is_file():
        raise UserWorkloadError(f"{path}: no such file; a workload file is Python that binds {DECLARED} to a "
                                "dlbench.user.Workload")
    if dataset is None:
        raise UserWorkloadError(f"{path}: a workload file goes with a dataset in a plain format in the same entry "
                                "(dataset: {path: FILE.npz, task: ...}), whose meta its model is built from")
    digest = sha256(path)
    meta = dataset.built.meta
    declared = read(path, digest, meta, dataset.NAME)
    name = declared["name"]
    if name in workloads.WORKLOADS:
        raise UserWorkloadError(f"{path}: the name {name!r} is a built-in workload's; give the file another name, "
                                "or the Workload another name=")
    if name in workloads.USER_FILES and workloads.USER_FILES[name][0] != str(path):
        raise UserWorkloadError(f"{path}: the name {name!r} is declared by {workloads.USER_FILES[name][0]} as "
                                "well; give one of them another name=")
    # the first entry's dataset describes it, as a built-in workload's study dataset does
    existing = workloads.USER_WORKLOADS.get(name)
    fresh = existing is None or workloads.USER_FILES[name][1] != digest
    study = (dataset.NAME, meta) if fresh else (existing.study_dataset, existing.study_meta)
    workload = Workload(name, declared["description"], study[0], study[1], _builder(path, digest),
                        _recipe(declared),
                        {"metric": declared["metric"], "value": declared["target"],
                         "higher_is_better": declared["metric"] == "accuracy"},
                        (declared["task"],))
    workloads.register_user(workload, str(path), digest)
    return workload


def _recipe(declared: dict) -> dict:
    """The recipe as a built-in workload's: a schedule only where the file declares one."""
    recipe = {key: declared[key] for key in ("optimizer", "batch_size", "epochs", "loss")}
    if declared["schedule"] is not None:
        recipe["schedule"] = declared["schedule"]
    return recipe


def read(path: Path, digest: str, meta: dict, dataset_name: str) -> dict:
    """What the file declares and its model for `meta` (read_here's answer), read in a child process of this
    Python within READ_TIMEOUT_S; the answer is kept, so each file content is read once per dataset."""
    key = (str(path), digest, _meta_key(meta))
    if key not in _READ:
        print(f"dlbench: running workload file {path} (Python code, in a child process, at most "
              f"{READ_TIMEOUT_S:g} s) for dataset {dataset_name}", flush=True)  # stdout: a refusal's one line is stderr
        _READ[key] = _read_in_child(path, meta)
        _READ_FOR[key] = dataset_name
    return _READ[key]


def _read_in_child(path: Path, meta: dict) -> dict:
    package_root = str(PACKAGE_PARENT)  # the child imports this very dlbench, as a worker does
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    # a session of its own, so that whatever the file starts stops with it (a grandchild holding the pipe open
    # would keep communicate() waiting after the child itself was killed)
    with subprocess.Popen([sys.executable, "-m", "dlbench.harness.plan.read_workload", str(path)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as child:
        try:
            stdout, _ = child.communicate(json.dumps(meta), timeout=READ_TIMEOUT_S)
        except BaseException as stopped:  # the time limit, or Ctrl-C (which the child's session does not get)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            if isinstance(stopped, subprocess.TimeoutExpired):
                raise UserWorkloadError(f"{path}: still running after {READ_TIMEOUT_S:g} s, the most dlbench waits "
                                        "for a workload file to be imported and its model(meta) to return; "
                                        "stopped. Does it loop, wait for input or train at import?") from None
            raise
    try:
        answer = json.loads(stdout) if child.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        how = (f"was killed by signal {signal.Signals(-child.returncode).name}" if child.returncode < 0
               else f"ended with exit status {child.returncode}")
        raise UserWorkloadError(f"{path}: the process reading it {how} before answering (os._exit, a crash in "
                                "native code, or a signal); a workload file declares its workload and returns")
    if "error" in answer:
        raise UserWorkloadError(answer["error"])
    return answer


def read_here(path: Path, meta: dict) -> dict:
    """Runs the file in this process (read_workload.py's, the child) and returns its workload's fields and its
    model for `meta`, checked; raises UserWorkloadError naming the file and what is wrong."""
    declared = _declared(path)
    name = declared.name or path.stem
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise UserWorkloadError(f"{path}: the workload's name {file_names.shortened(name)}; accepted: "
                                f"{NAME_ACCEPTED} (give the Workload name=)")
    _check_recipe(path, declared)
    _check_schedule(path, declared, meta)
    return {"name": name, "description": str(declared.description), "optimizer": dict(declared.optimizer),
            "schedule": declared.schedule, "batch_size": declared.batch_size, "epochs": declared.epochs,
            "loss": declared.loss,
            "metric": declared.metric, "target": float(declared.target), "task": declared.task,
            "model": _model(path, declared.model, meta)}


def _meta_key(meta: dict) -> str:
    """The meta as the model sees it, the same whether built now or read back from a prepared folder (which
    adds the dataset's hash)."""
    return json.dumps({key: value for key, value in meta.items() if key != "hash"}, sort_keys=True)


def _declared(path: Path) -> user.Workload:
    """Runs the file as a module of its own and returns its WORKLOAD."""
    module_name = f"dlbench_user_workload_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserWorkloadError(f"{path}: Python cannot load it as a module; a workload file is a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # the user's code: any exception, SystemExit included, reported with its line
        raise UserWorkloadError(f"{_where(path, error)}: the workload file raised {type(error).__name__}: "
                                f"{error}") from None
    declared = getattr(module, DECLARED, None)
    if declared is None:
        raise UserWorkloadError(f"{path}: declares no {DECLARED}; bind {DECLARED} to a dlbench.user.Workload(...)")
    if not isinstance(declared, user.Workload):
        raise UserWorkloadError(f"{path}: {DECLARED} is a {type(declared).__name__}; expected a "
                                "dlbench.user.Workload(...)")
    return declared


def _where(path: Path, error: BaseException) -> str:
    """FILE:LINE of the last line of the file the error passed through (a SyntaxError's own line)."""
    if isinstance(error, SyntaxError) and error.lineno:
        return f"{path}:{error.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
             if Path(frame.filename) == path]
    return f"{path}:{lines[-1]}" if lines else str(path)


def _model(path: Path, model: Any, meta: dict) -> dict:
    """The workload's model function called on `meta`, its errors (an IRError, a missing meta key, SystemExit)
    named with the file."""
    try:
        spec = model(meta)
    except BaseException as error:  # the user's code
        raise UserWorkloadError(f"{_where(path, error)}: the model raised {type(error).__name__}: "
                                f"{error}") from None
    if not isinstance(spec, dict) or "layers" not in spec:
        raise UserWorkloadError(f"{path}: the model returned a {type(spec).__name__}; expected what "
                                "dlbench.ir.model(input_shape, input_dtype, layers) returns")
    try:
        ir.infer_shapes(spec)
    except (ir.IRError, KeyError, TypeError) as error:
        raise UserWorkloadError(f"{path}: the model: {error}") from None
    return spec


def _builder(path: Path, digest: str):
    """The workload's model for a meta: the one its file's model(meta) returned in the child for that meta.
    The user's function is not called again, so a model() that would fail on a later call cannot stop a run
    half way; a meta it was not read for (no dataset of the suite) is an error, never a guess."""
    def build(meta: dict) -> dict:
        key = (str(path), digest, _meta_key(meta))
        if key not in _READ:
            read_for = [_READ_FOR[k] for k in _READ if k[:2] == key[:2]]
            raise UserWorkloadError(f"{path}: its model was read for the dataset{'s' if len(read_for) > 1 else ''} "
                                    f"{', '.join(read_for)} of the suite, not for a dataset of meta "
                                    f"{file_names.shortened(_meta_key(meta))}; name that dataset in the suite's "
                                    "entry")
        return copy.deepcopy(_READ[key]["model"])
    return build


def _check_recipe(path: Path, declared: user.Workload) -> None:
    if not callable(declared.model):
        raise UserWorkloadError(f"{path}: model is a {type(declared.model).__name__}; expected a function of the "
                                "dataset's meta that returns dlbench.ir.model(...)")
    if declared.task not in user.TASK_LOSSES:
        raise UserWorkloadError(f"{path}: task {declared.task!r}; accepted: {', '.join(user.TASK_LOSSES)}")
    loss = user.TASK_LOSSES[declared.task]
    if declared.loss != loss:
        raise UserWorkloadError(f"{path}: loss {declared.loss!r} for a {declared.task} task; accepted: {loss!r}")
    optimizer = declared.optimizer
    if not isinstance(optimizer, dict) or optimizer.get("name") not in OPTIMIZER_SETTINGS:
        raise UserWorkloadError(f"{path}: optimizer {optimizer!r}; expected a dict whose name is one of "
                                f"{', '.join(OPTIMIZER_SETTINGS)}")
    needed = OPTIMIZER_SETTINGS[optimizer["name"]]
    given = set(optimizer) - {"name"}
    # exactly these: an adapter reads sgd's weight_decay, and not every adapter applies one to adam or adadelta
    missing = [key for key in needed if key not in given]
    unknown = sorted(given - set(needed))
    if missing or unknown:
        raise UserWorkloadError(f"{path}: optimizer {optimizer['name']}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown
                                                                      else []))
            + f"; it takes {', '.join(needed)}")
    for key, maximum in (("batch_size", workloads.MAX_BATCH_SIZE), ("epochs", workloads.MAX_EPOCHS)):
        value = getattr(declared, key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
            raise UserWorkloadError(f"{path}: {key} {file_names.shortened(value)}; expected an integer from 1 to "
                                    f"{maximum}")
    metric = user.TASK_METRICS[declared.task]
    if declared.metric != metric:
        raise UserWorkloadError(f"{path}: metric {declared.metric!r} for a {declared.task} task; accepted: {metric!r}")
    target = declared.target
    number = not isinstance(target, bool) and isinstance(target, int | float) and not math.isnan(target)
    if metric == "accuracy" and not (number and 0 < target <= 1):
        raise UserWorkloadError(f"{path}: target {target!r}; an accuracy target is a number in (0, 1]")
    if metric == "perplexity" and not (number and 1 < target < math.inf):
        raise UserWorkloadError(f"{path}: target {target!r}; a perplexity target is a number above 1")


def _check_schedule(path: Path, declared: user.Workload, meta: dict) -> None:
    """The schedule as the cells of the file's own epochs and batch size on this dataset resolve it (a suite
    entry that changes them is checked again when its cells are planned, run/cell_config.cell_recipe)."""
    if declared.schedule is None:
        return
    try:
        updates = declared.epochs * math.ceil(meta["n_train"] / declared.batch_size)
        schedules.resolved(declared.schedule, updates)
        json.dumps(declared.schedule, allow_nan=False)  # it travels to the harness and the worker as JSON
    except (TypeError, ValueError) as error:  # ScheduleError is a ValueError; json's are ValueError, TypeError
        raise UserWorkloadError(f"{path}: {error}; a schedule is None or a dict such as {SCHEDULE_EXAMPLE}") \
            from None


def check_fit(workload: Workload, dataset: UserDataset, where: str) -> None:
    """Refuses a dataset the workload's model cannot train on: its input shape and type, its labels against the
    model's whole output shape, its token ids against the embedding's vocabulary. Run once, when the suite is
    loaded, so that a misfit fails no cell."""
    meta, arrays = dataset.built.meta, dataset.built.arrays
    try:
        model = workload.model(meta)
    except ir.IRError as error:  # a built-in workload's model on the user's shapes (a user's names its file)
        raise UserWorkloadError(f"{where}: the model of {workload.name} cannot take this dataset's samples "
                                f"({list(arrays['x_train'].shape[1:])}): {error}") from None
    except KeyError as error:  # a built-in workload that needs what a plain dataset's meta does not hold
        raise UserWorkloadError(f"{where}: {workload.name} builds its model from meta {error}, which a dataset "
                                f"in a plain format does not hold (it holds {', '.join(sorted(meta))})") from None
    owner = _model_owner(workload)
    shape = list(arrays["x_train"].shape[1:])
    if list(model["input_shape"]) != shape:
        raise UserWorkloadError(f"{where}: {owner} takes input_shape {model['input_shape']}, "
                                f"but x_train's samples are {shape}: build the model from meta['input_shape']")
    integer_input = arrays["x_train"].dtype == np.int32
    if integer_input != (model["input_dtype"] == "int32"):
        raise UserWorkloadError(f"{where}: {owner} takes {model['input_dtype']} inputs, but "
                                f"x_train is {dataset.input_dtype}: int32 for token ids (any integer type), "
                                "float32 for uint8 or float32 inputs")
    first = model["layers"][0] if model["layers"] else None
    if first is not None and first["type"] == "embedding":
        for key in ("x_train", "x_test"):
            largest = int(arrays[key].max())
            if largest >= first["vocab"]:
                raise UserWorkloadError(f"{where}: array {key} holds token id {largest}, beyond the vocabulary of "
                                        f"{first['name']} ({first['vocab']} ids: 0 to {first['vocab'] - 1})")
    task = meta["task"]
    if task not in workload.tasks:
        raise UserWorkloadError(f"{where}: the dataset is for {task}; {workload.name} trains for "
                                f"{' or '.join(workload.tasks)}")
    _check_output(where, owner, model, task, arrays)


def _model_owner(workload: Workload) -> str:
    """How a message names a workload's model: with its file, for a user's workload."""
    if workload.name in workloads.USER_FILES:
        return f"the model of {workload.name} ({workloads.USER_FILES[workload.name][0]})"
    return f"the model of {workload.name}"


def _check_output(where: str, owner: str, model: dict, task: str, arrays: dict[str, np.ndarray]) -> None:
    """The model's whole output shape a sample against what the labels need: one logit a sample for a binary
    task, one a class for a classification (labels are one class index a sample: y is (samples,)), one a token
    at every position for a language model (y is (samples, steps))."""
    shapes = ir.infer_shapes(model)
    last, output = (shapes[-1][0]["name"], list(shapes[-1][2])) if shapes else ("none", list(model["input_shape"]))
    if task == "language_model":
        steps = arrays["y_train"].shape[1]
        if len(output) != 2 or output[0] != steps:
            raise UserWorkloadError(f"{where}: {owner} ends in layer {last} of output shape {output}; a language "
                                    f"model's labels are the next token at each of the {steps} positions, so its "
                                    "model ends in shape [steps, vocabulary]")
        largest = max(int(arrays[key].max()) for key in ("y_train", "y_test"))
        if largest >= output[1]:
            raise UserWorkloadError(f"{where}: the labels hold token id {largest}, out of range for the "
                                    f"{output[1]} output units of {last}, the last layer of {owner} "
                                    f"(ids 0 to {output[1] - 1})")
    if task == "binary" and output != [1]:
        raise UserWorkloadError(f"{where}: {owner} ends in layer {last} of output shape {output}; a binary task's "
                                "model ends in shape [1] (one sigmoid logit a sample)")
    if task == "classification":
        if len(output) != 1:
            raise UserWorkloadError(f"{where}: {owner} ends in layer {last} of output shape {output}; a "
                                    "classification's labels are one class a sample, so its model ends in shape "
                                    "[classes] (flatten or pool before the last dense layer)")
        for key in ("y_train", "y_test"):
            largest = int(arrays[key].max())
            if largest >= output[0]:
                raise UserWorkloadError(f"{where}: array {key} holds label {largest}, out of range for the "
                                        f"{output[0]} output units of {last}, the last layer of {owner} "
                                        f"(labels 0 to {output[0] - 1})")


def read_dataset(path: Path, name: str, task: Any, num_classes: Any, input_scale: Any) -> UserDataset:
    """The entry's plain-format dataset, registered under `name`."""
    if not NAME.fullmatch(name):
        raise UserWorkloadError(f"{path}: the dataset's name {file_names.shortened(name)}; accepted: {NAME_ACCEPTED} "
                                "(give the entry's dataset a name:)")
    registered = data.user_dataset(name)
    if name in data.dataset_names() and registered is None:
        raise UserWorkloadError(f"{path}: the name {name!r} is a built-in dataset's; give it another name")
    dataset = data.user.read(path, name, task, num_classes, input_scale)
    if registered is not None and registered.path != dataset.path:
        raise UserWorkloadError(f"{path}: the name {name!r} is given to {registered.path} as well; "
                                "give each dataset its own name")
    data.register_user(dataset)
    return dataset
