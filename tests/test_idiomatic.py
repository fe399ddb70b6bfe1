"""benchmarks/idiomatic/compare.py without timing anything: the program mapping, the steady-epoch and
ratio arithmetic, the table, the output parser, the data subset; and runs of tiny epochs (PyTorch's
cnn-mnist program, the three transformer-lm programs), to show a program keeps the contract."""
import importlib.util
import json
import math
import sys
from pathlib import Path

import guard
import numpy as np
import pytest

from dlbench.harness import data
from dlbench.harness.data.prepared import Built, base_meta, write_prepared
from dlbench.harness.environments import envs
from dlbench.harness.run.record import timing_summary

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("idiomatic_compare", REPO / "benchmarks" / "idiomatic" / "compare.py")
compare = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = compare  # dataclasses look their module up
spec.loader.exec_module(compare)

OURS = ("pytorch", "tensorflow", "keras-tensorflow", "keras-jax", "keras-torch")
TRANSFORMER_LM = ("pytorch", "jax", "tensorflow")  # the frameworks with a transformer-lm program


def test_every_framework_maps_to_a_program_of_each_workload_it_has():
    expected = {(f, w) for f in envs.RECIPES for w in ("cnn-mnist", "lstm-ptb")}
    expected |= {(f, "transformer-lm") for f in TRANSFORMER_LM}
    assert set(compare.PROGRAMS) == expected
    for (framework, workload), name in compare.PROGRAMS.items():
        assert name.endswith(".py") and "/" not in name
        if framework in OURS + TRANSFORMER_LM:
            assert compare.program_path(framework, workload) == compare.HERE / name


@pytest.mark.parametrize("framework", ["keras-torch", "mxnet", "chainer", "theano"])
def test_a_transformer_lm_pair_without_a_program_is_listed(framework, tmp_path):
    assert compare.program_path(framework, "transformer-lm") is None
    row = compare.compare_pair(framework, "transformer-lm", None, tmp_path)
    assert (row.dlbench, row.idiomatic, row.note) == (None, None, "no program yet")


def test_a_missing_program_is_reported_not_run(monkeypatch, tmp_path):
    monkeypatch.setitem(compare.PROGRAMS, ("jax", "cnn-mnist"), "no_such_program.py")
    assert compare.program_path("jax", "cnn-mnist") is None
    row = compare.compare_pair("jax", "cnn-mnist", None, tmp_path)  # returns before it reads any argument
    assert (row.dlbench, row.idiomatic, row.note) == (None, None, "no program yet")
    assert "no program yet" in compare.table([row])


@pytest.mark.parametrize("times", [[9.0, 2.0, 3.0], [9.0, 2.0, 4.0, 3.0], [5.0, 1.5]])
def test_steady_epoch_is_the_runners(times):
    epochs = [{"train_time_s": t, "eval_time_s": 0.0, "metric_value": None} for t in times]
    expected = timing_summary(epochs, {"value": 1.0, "higher_is_better": True})["steady_epoch_s"]
    assert compare.steady_epoch_s(times) == expected
    assert compare.steady_epoch_s([4.0]) is None


def test_speed_is_idiomatic_time_over_dlbench_time():
    assert compare.speed_percent(4.0, 3.0) == pytest.approx(75.0)  # dlbench slower
    assert compare.speed_percent(2.0, 3.0) == pytest.approx(150.0)  # dlbench faster
    assert compare.speed_percent(None, 3.0) is None
    row = compare.Row("pytorch", "cnn-mnist", compare.Side([9.0, 4.0, 4.2], [2.0, 1.0, 0.5]),
                      compare.Side([8.0, 3.0, 3.2], [2.1, 1.1, 0.6]))
    assert row.speed_percent == pytest.approx(100 * 3.1 / 4.1)
    lines = compare.table([row]).splitlines()
    assert lines[0].split("  ")[0] == "framework"
    assert lines[1].split() == ["pytorch", "cnn-mnist", "1", "4.100", "3.100", "75.6", "%", "-", "-", "0.5000",
                                "0.6000"]  # one run a side: no interval, no verdict


def _row(dlbench_runs: list[float], idiomatic_runs: list[float]):
    return compare.Row("jax", "lstm-ptb", compare.pooled([compare.Side([9.0, t], [1.0]) for t in dlbench_runs]),
                       compare.pooled([compare.Side([9.0, t], [1.0]) for t in idiomatic_runs]),
                       dlbench_runs=tuple(dlbench_runs), idiomatic_runs=tuple(idiomatic_runs))


def test_repeated_runs_give_the_geometric_ratio_its_interval_and_the_verdict_against_95_percent():
    slower = _row([1.00, 1.02, 0.98, 1.01], [0.80, 0.81, 0.79, 0.80])  # dlbench at about 80 %
    estimate = slower.speed
    assert estimate.n == 4 and estimate.level == 0.95
    geometric = np.exp(np.mean(np.log([0.80, 0.81, 0.79, 0.80])) - np.mean(np.log([1.00, 1.02, 0.98, 1.01])))
    assert slower.speed_percent == pytest.approx(100 * geometric)
    assert estimate.low < estimate.median < estimate.high < 0.95
    assert slower.against_target == "below 95%"
    assert _row([1.00, 1.01, 0.99], [1.02, 1.03, 1.01]).against_target == "at or above 95%"
    assert _row([1.0, 1.3, 0.8], [0.9, 1.2, 1.0]).against_target == "not shown either way"
    line = compare.table([slower]).splitlines()[1].split()
    assert line[2] == "4" and line[-4:-2] == ["below", "95%"]
    assert line[7].endswith("-" + f"{100 * estimate.high:.1f}")


def test_repetitions_pool_their_steady_times():
    sides = [compare.Side([9.0, 4.0, 6.0], [1.0, 0.9, 0.8]), compare.Side([9.0, 3.0, 3.0], [1.0, 0.9, 0.7]),
             compare.Side([9.0, 8.0, 8.0], [1.0, 0.9, 0.6])]
    pooled = compare.pooled(sides)
    assert pooled.steady_epoch_s == 5.0  # median of 5, 3 and 8
    assert pooled.final_loss == 0.8


def _lines(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_parser_reads_the_epochs():
    side = compare.parse_program_output(_lines({"epoch": 1, "train_time_s": 3.0, "loss": 2.3},
                                               {"epoch": 2, "train_time_s": 1.5, "loss": 2.1}) + "\n", 2)
    assert side.train_times == [3.0, 1.5] and side.losses == [2.3, 2.1] and side.final_loss == 2.1


@pytest.mark.parametrize("text, message", [
    ('{"epoch": 1, "train_time_s": 3.0, "loss": 2.3}\nEpoch 2/2 - loss: 2.1\n', "stdout line 2 is not a JSON object"),
    ('{"epoch": 1, "train_time_s": 3.0}\n', "'loss' missing"),
    ('{"epoch": 1, "train_time_s": 3.0, "loss": NaN}\n', "'loss' missing or not a finite number"),
    ('{"epoch": 2, "train_time_s": 3.0, "loss": 2.3}\n', "epoch 2, expected 1"),
    ('{"epoch": 1, "train_time_s": 0, "loss": 2.3}\n', "train_time_s must be > 0"),
    ('[1, 2]\n', "stdout line 1 is not a JSON object"),
])
def test_parser_rejects_a_malformed_line(text, message):
    with pytest.raises(compare.ProgramOutputError, match=message.replace("(", r"\(")):
        compare.parse_program_output(text, 1)


def test_parser_rejects_missing_epochs():
    with pytest.raises(compare.ProgramOutputError, match="reported 1 epochs, expected 3"):
        compare.parse_program_output(_lines({"epoch": 1, "train_time_s": 3.0, "loss": 2.3}), 3)


def _digits(folder: Path, n_train: int = 40, n_test: int = 12) -> data.PreparedDataset:
    rng = np.random.RandomState(0)
    arrays = {"x_train": rng.randint(0, 256, (n_train, 28, 28, 1)).astype(np.uint8),
              "y_train": rng.randint(0, 10, n_train).astype(np.int32),
              "x_test": rng.randint(0, 256, (n_test, 28, 28, 1)).astype(np.uint8),
              "y_test": rng.randint(0, 10, n_test).astype(np.int32)}
    info = {"name": "digits-28", "task": "classification", "description": "random pixels", "source": "a test",
            "licence": "none", "num_classes": 10}
    write_prepared(Built(arrays, base_meta(info, arrays, 255.0)), folder / "prepared" / "digits-28")
    return data.load_prepared(folder / "prepared" / "digits-28")


def test_subset_is_a_prepared_dataset_of_the_first_rows(tmp_path):
    source = _digits(tmp_path / "full")
    cut = compare.subset(source, tmp_path / "cut", 16, 5)
    assert cut.path == tmp_path / "cut" / "prepared" / "digits-28"
    assert (cut.meta["n_train"], cut.meta["n_test"]) == (16, 5)
    assert cut.hash != source.hash and source.hash[:16] in cut.meta["description"]
    np.testing.assert_array_equal(np.load(cut.path / "x_train.npy"), np.load(source.path / "x_train.npy")[:16])
    np.testing.assert_array_equal(np.load(cut.path / "y_test.npy"), np.load(source.path / "y_test.npy")[:5])
    assert data.prepare("digits-28", tmp_path / "cut").hash == cut.hash  # how runner.resolve finds it


@pytest.mark.framework
def test_pytorch_program_keeps_the_contract(tmp_path):
    """One tiny epoch of torch_cnn_mnist.py in the pytorch environment: its stdout parses."""
    python = envs.require("pytorch").python  # make test builds it first
    dataset = _digits(tmp_path, n_train=24, n_test=4)
    program = compare.program_path("pytorch", "cnn-mnist")
    command = [str(python)] + compare.program_arguments(program, dataset.path, 2, 1, 0,
                                                        {"batch_size": 16, "optimizer": {"lr": 0.01}})
    done = guard.run(command, 600, check=True)
    side = compare.parse_program_output(done.stdout, 2)
    assert all(math.isfinite(loss) and loss > 0 for loss in side.losses)


def _windows(folder: Path, vocab: int = 40, steps: int = 30, n_train: int = 20, n_test: int = 4):
    """A language-model dataset as dlbench prepares one: windows of token ids, each label the next token."""
    rng = np.random.RandomState(0)
    tokens = {part: rng.randint(0, vocab, (n, steps + 1)).astype(np.int32)
              for part, n in (("train", n_train), ("test", n_test))}
    arrays = {f"{kind}_{part}": t[:, :-1] if kind == "x" else t[:, 1:] for part, t in tokens.items() for kind in "xy"}
    arrays = {name: np.ascontiguousarray(array) for name, array in arrays.items()}
    info = {"name": "lee-news-lm", "task": "language_model", "description": "random tokens", "source": "a test",
            "licence": "none", "vocab_size": vocab, "seq_len": steps}
    write_prepared(Built(arrays, base_meta(info, arrays, None)), folder / "prepared" / "lee-news-lm")
    return data.load_prepared(folder / "prepared" / "lee-news-lm")


@pytest.mark.framework
@pytest.mark.parametrize("framework", TRANSFORMER_LM)
def test_transformer_lm_program_keeps_the_contract(framework, tmp_path):
    """Two tiny epochs of each transformer-lm program (3 batches of 8, the last short, 6 updates: a warm-up
    of 0 updates, round(0.3)): stdout parses, and the loss starts near chance (ln 40 = 3.7), as from a
    default initialisation it should (the default N(0, 1) table of torch, tied, started near 50)."""
    python = envs.require(framework).python
    dataset = _windows(tmp_path)
    program = compare.program_path(framework, "transformer-lm")
    command = [str(python)] + compare.program_arguments(program, dataset.path, 2, 1, 0,
                                                        {"batch_size": 8, "optimizer": {"lr": 1e-3}})
    done = guard.run(command, 600, check=True)
    side = compare.parse_program_output(done.stdout, 2)
    assert all(math.isfinite(loss) and 0 < loss < 1.5 * math.log(40) for loss in side.losses)
