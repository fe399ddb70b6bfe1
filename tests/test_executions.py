"""Executions as a suite axis (harness/plan/executions.py): planned, refused with the reason, in the cell's recipe,
hash and certificate key, labelled, and compared with each framework's default in the report."""
import textwrap

import numpy as np
import pytest
import transformer_pieces
from user_errors import error_of

from dlbench.harness.analysis import modes
from dlbench.harness.analysis.summary import summarise
from dlbench.harness.certification import machine_store, probes
from dlbench.harness.certification.certified_model import workload_digest
from dlbench.harness.environments import envs
from dlbench.harness.plan import executions, suite
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.present import modes as modes_table
from dlbench.harness.run import cell_config
from dlbench.harness.store import Store
from dlbench.worker.base import BaseAdapter

MODES_SUITE = """
name: modes
frameworks: [pytorch, jax, mxnet]
execution: [eager, graph, compiled]
workloads:
  - {workload: cnn-mnist, dataset: digits-28, epochs: 1}
  - {workload: frcnn-voc, dataset: photo-boxes, epochs: 1, execution: compiled}
"""


def write(tmp_path, text, name="suite"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_each_framework_plans_the_executions_it_runs_and_the_others_are_refused_with_the_reason(tmp_path):
    chosen = suite.load(str(write(tmp_path, MODES_SUITE)))
    cells = suite.plan(chosen)
    planned = sorted((c.workload, c.framework, c.execution) for c in cells)
    assert planned == [("cnn-mnist", "jax", "compiled"), ("cnn-mnist", "mxnet", "eager"),
                       ("cnn-mnist", "mxnet", "graph"), ("cnn-mnist", "pytorch", "compiled"),
                       ("cnn-mnist", "pytorch", "eager"), ("frcnn-voc", "jax", "compiled")]
    refused = suite.refusals(chosen)
    assert "jax eager, refused for cnn-mnist: " + executions.REFUSED[("jax", "eager")] in refused
    assert "mxnet compiled, refused for cnn-mnist, frcnn-voc: " + executions.REFUSED[("mxnet", "compiled")] in refused
    # a detector runs its framework's default alone: pytorch's default is not compiled
    detector = "pytorch compiled, refused for frcnn-voc: the detector adapters"
    assert any(line.startswith(detector) for line in refused)
    # --execution overrides the suite and its entries; a plan left with nothing says why
    assert {c.execution for c in suite.plan(chosen, execution="graph")} == {"graph"}
    with pytest.raises(suite.SuiteError, match="asked for is refused:\njax eager, refused for cnn"):
        suite.plan(chosen, frameworks=["jax"], workloads=["cnn-mnist"], execution="eager")


def test_without_an_execution_each_framework_runs_its_default(tmp_path):
    cells = suite.plan(suite.load("quick"))
    assert {c.execution for c in cells} == {None}
    assert {name: executions.default(name) for name in envs.RECIPES} == {
        "pytorch": "eager", "jax": "compiled", "tensorflow": "graph", "keras-tensorflow": "graph",
        "keras-jax": "compiled", "keras-torch": "eager", "chainer": "eager", "mxnet": "graph", "theano": "compiled"}


@pytest.mark.parametrize("value, message", [
    ("[]", "an empty list"), ("jit", "value 'jit' is not accepted"),
    ("[eager, eager]", "value 'eager' is listed twice")])
def test_a_bad_execution_names_its_line_and_the_accepted_values(capsys, tmp_path, value, message):
    path = write(tmp_path, f"""
        name: bad
        frameworks: [pytorch]
        workloads:
          - {{workload: cnn-mnist, dataset: digits-28, execution: {value}}}
    """)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:4: field 'execution': entry cnn-mnist on digits-28: {message}; expected one of eager, graph, "
        "compiled, or a non-empty list of distinct ones")


@pytest.mark.framework  # a cell's configuration records its environment's packages
def test_the_execution_enters_the_recipe_hash_and_certificate_key_and_the_default_keeps_them(tmp_path):
    path = write(tmp_path, """
        name: two
        frameworks: [pytorch]
        threads: 1
        workloads:
          - {workload: cnn-mnist, dataset: digits-28, epochs: 1, execution: [eager, compiled]}
    """)
    prepared = {c.execution: cell_config.resolve(c, tmp_path) for c in suite.plan(suite.load(str(path)))}
    plain = cell_config.resolve(suite.plan(suite.load(str(write(tmp_path, """
        name: plain
        frameworks: [pytorch]
        threads: 1
        workloads:
          - {workload: cnn-mnist, dataset: digits-28, epochs: 1}
    """, "plain"))))[0], tmp_path)
    # the default's recipe names no execution: its hash and digest are those of a cell that names none
    assert "execution" not in prepared["eager"].config["recipe"] and prepared["eager"].hash == plain.hash
    assert prepared["compiled"].config["recipe"]["execution"] == "compiled"
    assert prepared["compiled"].hash != plain.hash
    assert workload_digest(prepared["compiled"].workload) != workload_digest(plain.workload)
    # the reference in another execution is certified against its default, which is the reference
    cells = suite.plan(suite.load(str(path)))
    [(framework, workload)] = machine_store.pairs_of(cells)
    assert (framework, workload.recipe["execution"]) == ("pytorch", "compiled")
    assert machine_store.key_now("pytorch", workload).workload_digest == workload_digest(prepared["compiled"].workload)


def test_an_adapter_refuses_an_execution_it_does_not_run():
    class Eager(BaseAdapter):
        executions = ("eager",)

    recipe = dict(get_workload("cnn-mnist").recipe, execution="compiled")
    with pytest.raises(NotImplementedError, match="execution 'compiled': this adapter does not build it"):
        Eager({"input_dtype": "float32"}, recipe, "classification", "cpu", 1, 0)
    assert Eager({"input_dtype": "float32"}, get_workload("cnn-mnist").recipe, "classification", "cpu", 1,
                 0).execution == "eager"


def run(run_id, framework, execution, steady, first, metric=0.9, first_step=None):
    recipe = {"batch_size": 32, **({"execution": execution} if execution else {})}
    return {"id": run_id, "framework": framework, "framework_version": "1.0", "workload": "cnn-mnist",
            "dataset": "digits-28", "device": "cpu", "status": "ok", "steady_epoch_s": steady,
            "first_epoch_s": first, "first_step_s": first_step, "train_time_s": first + steady, "metric_value": metric,
            "metric_name": "accuracy", "n_train": 320, "execution": execution or executions.default(framework),
            "config": {"recipe": recipe, "threads": 2}, "epochs": [{"epoch": 1}, {"epoch": 2}]}


def test_an_execution_beside_its_default_gets_its_speed_up_compile_cost_and_break_even():
    runs = ([run(i, "pytorch", None, 2.0 + 0.01 * i, 3.0, first_step=0.5) for i in range(4)]
            + [run(10 + i, "pytorch", "compiled", 1.0 + 0.01 * i, 31.0, 0.91, first_step=25.0 + i) for i in range(4)]
            + [run(20 + i, "jax", None, 1.5, 9.0) for i in range(4)])
    cells = summarise(runs)
    labels = {cell.label for cell in cells}
    assert labels == {"pytorch 1.0", "pytorch 1.0 (compiled)", "jax 1.0"}
    [row] = modes.rows(cells, runs)
    assert (row.cell.execution, row.default.execution) == ("compiled", "eager")
    assert row.speed_up.median == pytest.approx(2.03 / 1.03, rel=0.01) and row.shown
    assert row.first_epoch_excess_s.median == pytest.approx(30.0 - 0.015, abs=0.01)
    assert row.default_excess_s.median == pytest.approx(1.0 - 0.015, abs=0.01)
    assert row.break_even_epochs == pytest.approx(29.0 / 1.0, rel=0.01) and row.steps_per_epoch == 10
    assert (row.first_step_s.median, row.default_first_step_s.median) == (26.5, 0.5)
    assert row.steady_step_s == pytest.approx(0.1015)  # the median steady epoch, 1.015 s, over its 10 steps
    table = modes_table.table([row])
    [shown] = table.rows
    assert shown[1:3] == ["pytorch 1.0", "compiled, float32 (default eager, float32)"]
    assert shown[7] == "26.5 s [25.0-28.0, 87.5%] (0.500 s [0.500-0.500, 87.5%])" and shown[8] == "0.102 s"
    assert "faster" in shown[4] and shown[9].startswith("29 epochs, 290 steps")
    assert shown[10] == "90.0% [90.0-90.0, 87.5%]: 91.0% [91.0-91.0, 87.5%]"  # 4 runs: [min-max] at 87.5%


def test_single_runs_of_an_execution_are_not_ranked():
    runs = [run(1, "pytorch", None, 2.0, 3.0), run(2, "pytorch", "compiled", 1.0, 31.0)]
    [row] = modes.rows(summarise(runs), runs)
    assert not row.shown and row.p_adjusted is None
    [shown] = modes_table.table([row]).rows
    assert shown[4] == "2.00x (single runs: untested)" and shown[9] == "- (no speed-up shown)"
    assert shown[7] == "- (-)"  # no first step recorded (a store from before schema 15)


# every execution but the defaults (which test_certify.py certifies), each framework's one process
OTHER_EXECUTIONS = [(name, mode) for name in sorted(envs.RECIPES) for mode in envs.RECIPES[name].executions[1:]]


@pytest.fixture(scope="module")
def reference(session_dir):
    """The reference's probes (its default execution) of the workloads every other execution is certified on."""
    folder = session_dir / "certify-executions"
    return folder, probes.reference_probes(CERTIFIED, folder)


CERTIFIED = [get_workload("cnn-mnist"), transformer_pieces.gpt_workload()]


@pytest.mark.framework
@pytest.mark.parametrize("framework, execution", OTHER_EXECUTIONS, ids=lambda value: value)
def test_every_execution_certifies_at_the_float32_tolerances(reference, tmp_path, framework, execution):
    """A mode must never change the maths: each framework's executions other than its default pass the same
    certificate, at the same tolerances, against the reference's default (eager) execution: outputs, serving,
    gradients, steps, dropout, epsilon and activation checks."""
    folder, probed = reference
    with Store(tmp_path / "dlbench.sqlite") as store:
        certificates = probes.certify([framework], [executions.as_run(w, framework, execution) for w in CERTIFIED],
                                      store, folder, lambda cert: None, probed)
    for cert in certificates:
        failed = [(row["tensor"], row["max_rel"]) for row in cert["deviations"] if not row["passed"]]
        print(f"{framework} ({execution}) {cert['workload']}: worst {cert['worst_tensor']} "
              f"{cert['worst_scaled_deviation']:.3g}")
        assert cert["passed"] and cert["execution"] == execution, failed


@pytest.mark.framework
def test_executions_certified_together_each_probe_in_their_own_files(reference, tmp_path):
    """A probe's files are named by workload and precision: two executions of one framework certified in one call
    (as `dlbench certify --suite modes` does) write theirs in a folder each, so that neither certificate is made from
    the other's outputs."""
    folder, probed = reference
    workdir = tmp_path / "certify"
    asked = [executions.as_run(get_workload("cnn-mnist"), "tensorflow", mode) for mode in ("graph", "compiled")]
    with Store(tmp_path / "dlbench.sqlite") as store:
        graph, compiled = probes.certify(["tensorflow"], asked, store, workdir, lambda cert: None, probed)
    outputs = [np.load(workdir / "tensorflow" / mode / "cnn-mnist.npz")["output"] for mode in ("graph", "compiled")]
    assert not np.array_equal(*outputs)  # XLA's convolutions round otherwise than oneDNN's
    assert (graph["execution"], compiled["execution"]) == ("graph", "compiled")
    assert [row["max_abs"] for row in graph["deviations"]] != [row["max_abs"] for row in compiled["deviations"]]
