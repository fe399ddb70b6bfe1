"""benchmarks/idiomatic/compare.py without timing anything: the program mapping, the steady-epoch and
ratio arithmetic, the table, the output parser, the data subset, the modes (--execution, --precision: what
dlbench refuses, what the program is given and what it refuses); and runs of tiny epochs (PyTorch's
cnn-mnist program, the three transformer-lm programs in their precisions), to show a program keeps the
contract."""
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import guard
import numpy as np
import pytest

from dlbench.harness import data
from dlbench.harness.data.prepared import Built, base_meta, write_prepared
from dlbench.harness.environments import envs
from dlbench.harness.plan import modes
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
@pytest.mark.parametrize("precision", ["float32", "bfloat16", "mixed-bfloat16"])
@pytest.mark.parametrize("framework", TRANSFORMER_LM)
def test_transformer_lm_program_keeps_the_contract(framework, precision, tmp_path):
    """Two tiny epochs of each transformer-lm program in each precision it runs (3 batches of 8, the last short,
    6 updates: a warm-up of 0 updates, round(0.3)): stdout parses, and the loss starts near chance (ln 40 = 3.7),
    as from a default initialisation it should (the default N(0, 1) table of torch, tied, started near 50). The
    compiled executions are left to compare.py's runs: torch.compile alone takes half a minute."""
    python = envs.require(framework).python
    dataset = _windows(tmp_path)
    program = compare.program_path(framework, "transformer-lm")
    command = [str(python)] + compare.program_arguments(program, dataset.path, 2, 1, 0,
                                                        {"batch_size": 8, "optimizer": {"lr": 1e-3}},
                                                        compare.mode_arguments(framework, None, precision))
    done = guard.run(command, 600, check=True)
    side = compare.parse_program_output(done.stdout, 2)
    assert all(math.isfinite(loss) and 0 < loss < 1.5 * math.log(40) for loss in side.losses)


# ---- modes ----------------------------------------------------------------------------------------

def test_a_mode_is_given_to_the_program_only_where_it_is_not_the_default():
    """Both arguments, named in full, for any other mode; none for the framework's default execution in float32,
    so that the programs written before modes still run their default."""
    assert compare.mode_arguments("pytorch", None, None) == []
    assert compare.mode_arguments("jax", "compiled", "float32") == []  # jax's default execution
    assert compare.mode_arguments("pytorch", "compiled", None) == ["--execution", "compiled", "--precision", "float32"]
    assert compare.mode_arguments("tensorflow", None, "bfloat16") == ["--execution", "graph", "--precision",
                                                                      "bfloat16"]
    mode = compare.mode_arguments("tensorflow", "compiled", "mixed-bfloat16")
    command = compare.program_arguments(Path("p.py"), Path("d"), 2, 1, 0, {"batch_size": 8, "optimizer": {"lr": 0.1}},
                                        mode)
    assert command[-4:] == ["--execution", "compiled", "--precision", "mixed-bfloat16"]
    assert command[:-4] == compare.program_arguments(Path("p.py"), Path("d"), 2, 1, 0,
                                                     {"batch_size": 8, "optimizer": {"lr": 0.1}})


@pytest.mark.parametrize("framework, workload, execution, precision, reason", [
    ("pytorch", "transformer-lm", "graph", None, "TorchScript is deprecated"),
    ("jax", "transformer-lm", "eager", None, "jax.jit"),
    ("chainer", "cnn-mnist", None, "bfloat16", "numpy, which has no bfloat16"),
    ("pytorch", "lstm-ptb", None, "mixed-float16", "no float16 training primitive"),
])
def test_a_mode_dlbench_refuses_is_listed_with_its_reason_and_not_run(framework, workload, execution, precision,
                                                                     reason, tmp_path):
    why = compare.mode_refusal(framework, workload, execution, precision)
    assert reason in why
    # only the mode is read: a run, or the data, would need the options this namespace lacks
    row = compare.compare_pair(framework, workload, SimpleNamespace(execution=execution, precision=precision),
                               tmp_path)
    assert (row.dlbench, row.idiomatic, row.note) == (None, None, f"refused: {why}")
    assert row.label == modes.label(framework, execution, precision) and row.label != framework
    assert f"refused: {why}" in compare.table([row])


def test_the_modes_the_programs_run_are_ones_dlbench_runs():
    for framework in TRANSFORMER_LM:
        assert compare.mode_refusal(framework, "transformer-lm", None, None) is None
        for precision in ("bfloat16", "mixed-bfloat16"):
            assert compare.mode_refusal(framework, "transformer-lm", None, precision) is None
    assert compare.mode_refusal("pytorch", "transformer-lm", "compiled", "bfloat16") is None
    assert compare.mode_refusal("tensorflow", "transformer-lm", "compiled", "mixed-bfloat16") is None


def test_main_parses_the_modes_and_prints_a_refusal_without_running(capsys):
    assert compare.main(["--framework", "pytorch", "--workload", "transformer-lm", "--execution", "graph",
                         "--precision", "bfloat16", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "pytorch (graph, bfloat16) transformer-lm: dlbench refused: pytorch cannot run execution 'graph'" in out
    assert "execution graph, precision bfloat16" in out
    table_row = out.splitlines()[-1]
    assert table_row.startswith("pytorch (graph, bfloat16)  transformer-lm") and "refused:" in table_row
    with pytest.raises(SystemExit):
        compare.main(["--framework", "pytorch", "--workload", "transformer-lm", "--precision", "float64"])
    assert "invalid choice: 'float64'" in capsys.readouterr().err


def test_the_table_names_the_mode():
    side = compare.Side([9.0, 4.0], [1.0, 0.5])
    row = compare.Row("pytorch", "transformer-lm", side, side, execution="compiled", precision="mixed-bfloat16")
    assert compare.table([row]).splitlines()[1].startswith("pytorch (compiled, mixed-bfloat16)  transformer-lm")
    default = compare.Row("tensorflow", "transformer-lm", side, side, execution="graph", precision="float32")
    assert compare.table([default]).splitlines()[1].split()[0:2] == ["tensorflow", "transformer-lm"]


def test_in_another_mode_the_program_runs_first_so_a_refusal_costs_no_dlbench_run():
    assert [compare.side_order(r, False) for r in range(3)] == [("dlbench", "idiomatic"), ("idiomatic", "dlbench"),
                                                                ("dlbench", "idiomatic")]
    assert [compare.side_order(r, True) for r in range(2)] == [("idiomatic", "dlbench"), ("dlbench", "idiomatic")]


@pytest.mark.parametrize("framework, mode, refused", [
    ("pytorch", ["--execution", "eager", "--precision", "mixed-float16"], "argument --precision: invalid choice"),
    ("pytorch", ["--execution", "graph", "--precision", "float32"], "argument --execution: invalid choice"),
    ("jax", ["--execution", "eager", "--precision", "float32"], "argument --execution: invalid choice"),
    ("tensorflow", ["--execution", "eager", "--precision", "bfloat16"], "argument --execution: invalid choice"),
    ("tensorflow", ["--execution", "graph", "--precision", "mixed-float16"], "argument --precision: invalid choice"),
])
def test_a_program_refuses_a_mode_it_lacks_and_compare_says_so(framework, mode, refused, monkeypatch, tmp_path):
    """Each transformer-lm program reads its arguments before it imports its framework, so the harness's Python
    shows a refusal: argparse's error on stderr, status 2, which run_program raises as ProgramRefused."""
    monkeypatch.setattr(compare.envs, "require", lambda name: SimpleNamespace(python=Path(sys.executable)))
    program = compare.program_path(framework, "transformer-lm")
    with pytest.raises(compare.ProgramRefused, match=f"{program.name} refused {' '.join(mode)}: .*{refused}"):
        compare.run_program(framework, "transformer-lm", program, tmp_path, tmp_path, 2, 1, 0, "default", mode)


def test_a_program_written_before_modes_refuses_their_arguments(monkeypatch, tmp_path):
    program = tmp_path / "old_program.py"
    program.write_text("import argparse\np = argparse.ArgumentParser()\n"
                       "for name in ('--data', '--epochs', '--threads', '--seed', '--batch-size', '--learning-rate'):\n"
                       "    p.add_argument(name, required=True)\np.parse_args()\n")
    monkeypatch.setattr(compare.envs, "require", lambda name: SimpleNamespace(python=Path(sys.executable)))
    mode = compare.mode_arguments("pytorch", "compiled", None)
    with pytest.raises(compare.ProgramRefused, match="unrecognized arguments: --execution compiled"):
        compare.run_program("pytorch", "cnn-mnist", program, tmp_path, tmp_path, 2, 1, 0, "default", mode)


def test_main_reports_a_refusing_program_as_such(monkeypatch, capsys):
    def refusing(framework, workload, args, scratch, say):
        raise compare.ProgramRefused("torch_cnn_mnist.py refused --execution compiled --precision float32: "
                                     "error: unrecognized arguments")
    monkeypatch.setattr(compare, "compare_pair", refusing)
    assert compare.main(["--framework", "pytorch", "--workload", "cnn-mnist", "--execution", "compiled"]) == 0
    out = capsys.readouterr().out
    assert "pytorch cnn-mnist: torch_cnn_mnist.py refused --execution compiled" in out
    assert out.splitlines()[-1].split("  ")[0] == "pytorch (compiled)" and "program refuses the mode" in out


def test_a_program_that_fails_otherwise_is_a_failure(monkeypatch, tmp_path):
    program = tmp_path / "crashing.py"
    program.write_text("import sys\nsys.exit('out of memory')\n")  # status 1
    monkeypatch.setattr(compare.envs, "require", lambda name: SimpleNamespace(python=Path(sys.executable)))
    with pytest.raises(RuntimeError, match="exited with status 1") as raised:
        compare.run_program("pytorch", "transformer-lm", program, tmp_path, tmp_path, 2, 1, 0, "default")
    assert not isinstance(raised.value, compare.ProgramRefused)


def test_in_the_default_mode_a_usage_error_is_a_failure_not_a_refusal(monkeypatch, tmp_path):
    """Every program runs its default mode: refusing its arguments there breaks the contract."""
    program = tmp_path / "strict.py"
    program.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")  # refuses --data etc.
    monkeypatch.setattr(compare.envs, "require", lambda name: SimpleNamespace(python=Path(sys.executable)))
    with pytest.raises(RuntimeError, match="exited with status 2") as raised:
        compare.run_program("pytorch", "transformer-lm", program, tmp_path, tmp_path, 2, 1, 0, "default")
    assert not isinstance(raised.value, compare.ProgramRefused)
