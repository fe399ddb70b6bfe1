"""Generated hostile input (issue #40): suite files, workload files and dataset archives, valid and damaged, fed
to the command that reads them all (`dlbench estimate FILE`, which runs the workload files and checks them
against their datasets before it looks for the runs to forecast from; here there are none, so an input that
passes every check ends in the one-line refusal "no results store"). Each example must either
succeed or be refused with exit status 2 and one `dlbench: error:` line: never a traceback, never a hang (each
example has a deadline that only a hang reaches) and never an allocation the files' size does not justify
(how far the process's resident memory grew is checked at the end).

The example counts are small, so that CI pays about a minute for them; `DLBENCH_HYPOTHESIS_EXAMPLES` multiplies
them for a longer search on a developer's machine."""
import io
import os
import struct
import zipfile
from pathlib import Path

import guard
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlbench.harness.cli import main

SCALE = int(os.environ.get("DLBENCH_HYPOTHESIS_EXAMPLES", "1"))
# a refusal is this; success would be 0
REFUSED = 2
# a generous ceiling on how far the test process's resident memory may grow: every input here is under a
# megabyte, so a reader that allocates what a header claims (gigabytes to exabytes) goes far past it, while the
# harness loading numpy, scipy and matplotlib stays well under (0.9 GiB in all, the module alone)
PEAK_GROWTH_BYTES = 3 * 2**30


def example_settings(examples: int):
    return settings(max_examples=examples * SCALE, deadline=guard.bound(120) * 1000, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large],
                    database=None)


def verify(capsys: pytest.CaptureFixture[str], suite_path: Path, data_dir: Path) -> None:
    """Runs the command; fails the test on a traceback (any exception out of main) or an unclear refusal."""
    code = main(["estimate", str(suite_path), "--results", str(data_dir.parent / "results"), "--data-dir",
                 str(data_dir)])
    captured = capsys.readouterr()
    assert code in (0, REFUSED), (code, captured)
    if code == REFUSED:
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("dlbench: error: "), captured.err
        assert "Traceback" not in captured.err


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_registries) -> None:
    """Each test's own DLBENCH_HOME, offline; the datasets and workloads its suites register (`data`, `gen`) are
    forgotten after it, as every later test file in this process expects."""
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DLBENCH_OFFLINE", "1")
    monkeypatch.delenv("DLBENCH_DATA", raising=False)


def status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (Linux), in bytes."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024  # kB


@pytest.fixture(scope="module", autouse=True)
def bounded_memory():
    """Checked once the module's examples have run: the high-water mark covers every example. What is bounded
    is the growth over the resident memory at the module's start: this process (a pytest worker) may have run
    other test files first and still hold what they took (CI saw 3.9 GiB resident before this module), so the
    high-water mark is reset then (Linux's clear_refs) and measured against that start. The archives are read
    in this process; the children it starts read workload files only, whose memory is the user's code's own, so
    they are not bounded here."""
    Path("/proc/self/clear_refs").write_text("5")
    start = status_bytes("VmRSS")
    yield
    growth = status_bytes("VmHWM") - start
    assert growth < PEAK_GROWTH_BYTES, f"resident memory grew by {growth / 2**30:.2f} GiB, from {start / 2**30:.2f}"


# ---- values a careless or hostile file may hold ------------------------------------------------------

HUGE = (0, -1, 1, 2, 3, 7, 2**31, 2**63, 10**19, 10**250)
scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(HUGE), st.integers(-5, 70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["cnn-mnist", "lstm-imdb", "digits-28", "pytorch", "jax", "cpu", "gpu", "model.py",
                     "data.npz", "../x", "/etc/passwd", "", "1e400", "auto"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
SUITE_KEYS = ("name", "description", "frameworks", "device", "repeat", "seed", "threads", "epochs", "workloads",
              "mode", "serve", "time_limit", "warmup_epochs")
ENTRY_KEYS = ("workload", "dataset", "epochs", "batch_size", "threads", "train_samples", "weights", "repeat")


def entries() -> st.SearchStrategy:
    entry = st.dictionaries(st.sampled_from(ENTRY_KEYS) | st.text(max_size=6), values, max_size=5)
    plausible = st.fixed_dictionaries(
        {"workload": st.sampled_from(["cnn-mnist", "lstm-imdb", "model.py", "nothing.py"]),
         "dataset": st.one_of(st.sampled_from(["digits-28", "imdb-words", "data.npz"]),
                              st.fixed_dictionaries({"path": st.sampled_from(["data.npz", "loop.npz", ".", "none"]),
                                                     "task": st.sampled_from(["classification", "binary", "x"])},
                                                    optional={"num_classes": scalars, "input_scale": scalars,
                                                              "name": scalars}))},
        optional={key: values for key in ("epochs", "batch_size", "threads", "train_samples")})
    return st.lists(st.one_of(plausible, entry, values), max_size=4)


suites = st.fixed_dictionaries({"name": st.text(min_size=1, max_size=10) | scalars,
                                "frameworks": st.lists(st.sampled_from(["pytorch", "jax", "nope"]), max_size=3)
                                | values,
                                "workloads": entries()},
                               optional={key: values for key in SUITE_KEYS
                                         if key not in ("name", "frameworks", "workloads")})


def damaged(data: bytes, draw) -> bytes:
    """The bytes as they are, cut short, or with one byte changed."""
    how = draw(st.sampled_from(["whole", "whole", "cut", "flip"]))
    if how == "whole" or not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    if how == "cut":
        return data[:at]
    return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]


# ---- dataset archives ----------------------------------------------------------------------------

DTYPES = ("uint8", "float32", "float64", "int32", "int64", "bool", "complex64", "<U2", "int8")


def npy_claiming(shape: tuple, dtype: str, payload: bytes) -> bytes:
    """An .npy whose header claims `shape` (terabytes, say) over the few bytes that follow it."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                               "shape": shape})
    return out.getvalue() + payload


@st.composite
def archives(draw) -> bytes:
    """An .npz: the four arrays (some missing or extra), any type and shape, NaN and inf among the values,
    a member whose header claims a huge shape, a compressed bomb, and the whole file cut or altered."""
    n_train, n_test = draw(st.integers(0, 12)), draw(st.integers(0, 6))
    sample = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    members: dict[str, bytes] = {}
    for key, n in (("x_train", n_train), ("y_train", n_train), ("x_test", n_test), ("y_test", n_test)):
        if draw(st.integers(0, 9)) == 0:
            continue  # missing
        kind = draw(st.sampled_from(["plain", "plain", "plain", "claims", "bomb"]))
        dtype = draw(st.sampled_from(DTYPES))
        if kind == "claims":
            members[key] = npy_claiming((draw(st.sampled_from([2**20, 2**40, 2**62])), 28, 28), dtype, b"\0" * 64)
            continue
        shape = (n, *sample) if key.startswith("x") else (n,)
        if kind == "bomb":
            shape = (2**24,)  # 16 M zeros compress to about 16 KB
        array = np.zeros(shape, dtype=dtype)
        if kind == "plain" and array.size:
            flat = array.reshape(-1)
            if array.dtype.kind in "fc":
                flat[:] = draw(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32),
                                        min_size=flat.size, max_size=flat.size))
            elif array.dtype.kind in "iu":
                info = np.iinfo(array.dtype)
                flat[:] = draw(st.lists(st.integers(max(info.min, -3), min(info.max, 12)), min_size=flat.size,
                                        max_size=flat.size))
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, array, allow_pickle=False)
        members[key] = buffer.getvalue()
    if draw(st.booleans()):
        members["extra"] = b"not an array"
    out = io.BytesIO()
    compression = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
    with zipfile.ZipFile(out, "w", compression) as archive:
        for key, data in members.items():
            archive.writestr(key + ".npy", data)
    return damaged(out.getvalue(), draw)


DIGITS_MODEL = '''
from dlbench import ir, user

def model(meta):
    return ir.model(meta["input_shape"], "float32", [
        ir.conv2d(4, kernel=3, padding="same"), ir.relu(), ir.maxpool2d(2),
        ir.flatten(), ir.dense(meta["num_classes"])])

WORKLOAD = user.Workload(name="gen", description="generated", model=model,
    optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0},
    loss="softmax_cross_entropy", batch_size=8, epochs=1, metric="accuracy", target=0.5)
'''


def write_inputs(folder: Path, suite: object, dataset: bytes, model: str = DIGITS_MODEL) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.npz").write_bytes(dataset)
    (folder / "model.py").write_text(model)
    loop = folder / "loop.npz"
    if not loop.is_symlink():
        loop.symlink_to(folder / "loop.npz")  # a link to itself: a symlink loop
    path = folder / "suite.yaml"
    path.write_text(suite if isinstance(suite, str) else yaml.safe_dump(suite, allow_unicode=True))
    return path


def digits_npz() -> bytes:
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    np.savez(buffer, x_train=rng.integers(0, 256, (16, 8, 8, 1), dtype=np.uint8),
             y_train=np.arange(16) % 10, x_test=rng.integers(0, 256, (8, 8, 8, 1), dtype=np.uint8),
             y_test=np.arange(8) % 10)
    return buffer.getvalue()


# ---- the properties ------------------------------------------------------------------------------------

@example_settings(60)
@given(document=suites, data=st.data())
def test_generated_suite_files_are_read_or_refused(capsys, tmp_path_factory, document, data):
    text = yaml.safe_dump(document, allow_unicode=True)
    text = damaged(text.encode(), data.draw).decode("utf-8", "replace")
    folder = tmp_path_factory.mktemp("suite")
    verify(capsys, write_inputs(folder, text, digits_npz()), folder / "data")


@example_settings(60)
@given(archive=archives(), workload=st.sampled_from(["cnn-mnist", "model.py"]),
       task=st.sampled_from(["classification", "binary"]), classes=st.sampled_from([None, 1, 2, 10, 10**19]))
@pytest.mark.slow
def test_generated_dataset_archives_are_read_or_refused(capsys, tmp_path_factory, archive, workload, task, classes):
    dataset = {"path": "data.npz", "task": task}
    if classes is not None:
        dataset["num_classes"] = classes
    document = {"name": "gen", "frameworks": ["pytorch"], "workloads": [{"workload": workload, "dataset": dataset}]}
    folder = tmp_path_factory.mktemp("archive")
    verify(capsys, write_inputs(folder, document, archive), folder / "data")


LAYERS = {
    "conv2d": "ir.conv2d({0}, kernel={1}, stride={2}, padding='same')",
    "dense": "ir.dense({0})",
    "dropout": "ir.dropout({3})",
    "maxpool2d": "ir.maxpool2d({1}, stride={2})",
    "raw_conv": "{{'type': 'conv2d', 'name': 'c', 'filters': {0}, 'kernel': [{1}, {1}], 'stride': [{2}, {2}], "
                "'padding': 'valid', 'dilation': [1, 1]}}",
    "raw_dense": "{{'type': 'dense', 'name': 'd', 'units': {0}}}",
    "unknown": "{{'type': 'nope', 'name': 'n'}}",
}
SIZES = st.sampled_from(["0", "-1", "1", "2", "3", "10**19", "True", "2.5", "'3'", "None", "float('nan')"])
RATES = st.sampled_from(["0.0", "0.5", "1.0", "-0.1", "2", "float('nan')", "'x'"])
ENDINGS = ("", "", "raise ValueError('mine')", "import sys; sys.exit(0)", "import sys; sys.exit(3)",
           "WORKLOAD = 3", "del WORKLOAD", "def (:", "raise KeyboardInterrupt")


@example_settings(20)
@given(layers=st.lists(st.tuples(st.sampled_from(sorted(LAYERS)), SIZES, SIZES, SIZES, RATES), max_size=4),
       batch=SIZES, epochs=SIZES, ending=st.sampled_from(ENDINGS), in_model=st.booleans())
def test_generated_workload_files_are_read_or_refused(capsys, tmp_path_factory, layers, batch, epochs, ending,
                                                      in_model):
    built = ", ".join(LAYERS[kind].format(size, kernel, stride, rate) for kind, size, kernel, stride, rate in layers)
    body = f"    {ending}\n" if in_model and ending else ""
    source = (f"from dlbench import ir, user\n\ndef model(meta):\n{body}"
              f"    return ir.model(meta['input_shape'], 'float32', [{built}{', ' if built else ''}"
              "ir.flatten(), ir.dense(meta['num_classes'])])\n\n"
              "WORKLOAD = user.Workload(name='gen', description='generated', model=model,\n"
              "    optimizer={'name': 'adam', 'lr': 1e-3, 'beta1': 0.9, 'beta2': 0.999, 'epsilon': 1e-7},\n"
              f"    loss='softmax_cross_entropy', batch_size={batch}, epochs={epochs}, metric='accuracy', "
              "target=0.5)\n" + ("" if in_model else ending + "\n"))
    document = {"name": "gen", "frameworks": ["pytorch"],
                "workloads": [{"workload": "model.py", "dataset": {"path": "data.npz", "task": "classification"}}]}
    folder = tmp_path_factory.mktemp("model")
    verify(capsys, write_inputs(folder, document, digits_npz(), source), folder / "data")


def test_a_claimed_terabyte_member_is_refused_not_allocated(capsys, tmp_path):
    """The case the generator reaches by chance, made certain: a member claiming 2^40 x 28 x 28 floats."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for key in ("x_train", "y_train", "x_test", "y_test"):
            archive.writestr(key + ".npy", npy_claiming((2**40, 28, 28), "float32", struct.pack("<f", 1.0)))
    document = {"name": "gen", "frameworks": ["pytorch"],
                "workloads": [{"workload": "cnn-mnist", "dataset": {"path": "data.npz", "task": "classification"}}]}
    suite_path = write_inputs(tmp_path / "in", document, out.getvalue())
    code = main(["estimate", str(suite_path), "--results", str(tmp_path / "results"), "--data-dir",
                 str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == REFUSED and "data.npz" in err and "Traceback" not in err, err
