"""Precision as a suite axis (harness/plan/precisions.py): planned, refused with the reason, in the cell's recipe, hash
and certificate key, labelled, compared with float32 in the report, and certified against the reference in the same
precision, where a precision that does not show fails."""
import json
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import transformer_pieces
from test_certify import broken, quiet, store  # noqa: F401 (fixtures)
from user_errors import error_of

from dlbench.harness.analysis import modes
from dlbench.harness.analysis.summary import summarise
from dlbench.harness.certification import machine_store, precision_checks, probes
from dlbench.harness.certification.certified_model import workload_digest
from dlbench.harness.certification.terms import share_of_tolerance, tolerances
from dlbench.harness.cli import main
from dlbench.harness.environments import envs
from dlbench.harness.plan import precisions, suite
from dlbench.harness.plan.workloads import get_workload
from dlbench.harness.present import modes as modes_table
from dlbench.harness.run import cell_config
from dlbench.harness.store import Store
from dlbench.worker.base import LOSS_SCALE, BaseAdapter

PRECISIONS_SUITE = """
name: precisions
frameworks: [pytorch, chainer, mxnet]
precision: [float32, bfloat16, mixed-float16]
workloads:
  - {workload: cnn-mnist, dataset: digits-28, epochs: 1}
  - {workload: lstm-ptb, dataset: lee-news-lm, epochs: 1, precision: mixed-float16}
  - {workload: frcnn-voc, dataset: photo-boxes, epochs: 1, precision: bfloat16}
"""


def write(tmp_path, text, name="suite"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_each_framework_plans_the_precisions_it_trains_in_and_the_others_are_refused_with_the_reason(tmp_path):
    chosen = suite.load(str(write(tmp_path, PRECISIONS_SUITE)))
    planned = sorted((c.workload, c.framework, c.precision or "float32") for c in suite.plan(chosen))
    assert planned == [("cnn-mnist", framework, precision) for framework, precision in (
        ("chainer", "float32"), ("chainer", "mixed-float16"), ("mxnet", "float32"), ("pytorch", "bfloat16"),
        ("pytorch", "float32"), ("pytorch", "mixed-float16"))] + [("lstm-ptb", "chainer", "mixed-float16")]
    refused = suite.refusals(chosen)
    assert ("chainer bfloat16, refused for cnn-mnist, frcnn-voc: Chainer holds its arrays in numpy, which has no "
            "bfloat16 type") in refused
    assert f"mxnet bfloat16, refused for cnn-mnist, frcnn-voc: {precisions.REFUSED['mxnet', 'bfloat16']}" in refused
    assert (f"mxnet mixed-float16, refused for cnn-mnist, lstm-ptb: {precisions.REFUSED['mxnet', 'mixed-float16']}"
            in refused)
    # a framework that has the precision can still refuse a layer in it, and a detector trains in float32 alone
    assert f"pytorch mixed-float16, refused for lstm-ptb: {precisions.LAYER_REFUSALS[0].why}" in refused
    assert f"pytorch bfloat16, refused for frcnn-voc: {precisions.DETECTOR_ONLY_FLOAT32}" in refused
    # --precision overrides the suite and its entries; a plan left with nothing says why
    assert {c.precision for c in suite.plan(chosen, frameworks=["pytorch"], workloads=["cnn-mnist"],
                                            precision="mixed-bfloat16")} == {"mixed-bfloat16"}
    with pytest.raises(suite.SuiteError, match="asked for is refused:\nchainer bfloat16, refused for cnn"):
        suite.plan(chosen, frameworks=["chainer"], workloads=["cnn-mnist"], precision="bfloat16")


def test_a_precision_refused_in_one_execution_runs_in_the_others(tmp_path):
    """keras-jax compiles no float16 attention on the CPU: mixed-float16 is refused there when compiled (its
    default), not eager, and not for a model whose attention it does not fuse."""
    chosen = suite.load(str(write(tmp_path, """
        name: attention
        frameworks: [keras-jax]
        execution: [compiled, eager]
        precision: mixed-float16
        workloads:
          - {workload: transformer-lm, dataset: lee-news-lm, epochs: 1}
          - {workload: cnn-mnist, dataset: digits-28, epochs: 1}
    """)))
    planned = sorted((c.workload, c.execution, c.precision) for c in suite.plan(chosen))
    assert planned == [("cnn-mnist", "compiled", "mixed-float16"), ("cnn-mnist", "eager", "mixed-float16"),
                       ("transformer-lm", "eager", "mixed-float16")]
    assert suite.refusals(chosen) == [f"keras-jax mixed-float16, refused for transformer-lm: "
                                      f"{precisions.LAYER_REFUSALS[1].why}"]


def test_without_a_precision_every_framework_trains_in_float32():
    assert {c.precision for c in suite.plan(suite.load("quick"))} == {None}
    assert {name: recipe.precisions[0] for name, recipe in envs.RECIPES.items()} == dict.fromkeys(envs.RECIPES,
                                                                                                  "float32")


@pytest.mark.parametrize("value, message", [
    ("[]", "an empty list"), ("float16", "value 'float16' is not accepted"),
    ("[bfloat16, bfloat16]", "value 'bfloat16' is listed twice")])
def test_a_bad_precision_names_its_line_and_the_accepted_values(capsys, tmp_path, value, message):
    path = write(tmp_path, f"""
        name: bad
        frameworks: [pytorch]
        workloads:
          - {{workload: cnn-mnist, dataset: digits-28, precision: {value}}}
    """)
    assert error_of(capsys, ["run", str(path)]) == (
        f"{path}:4: field 'precision': entry cnn-mnist on digits-28: {message}; expected one of float32, bfloat16, "
        "mixed-bfloat16, mixed-float16, or a non-empty list of distinct ones")


def test_an_adapter_refuses_a_precision_it_does_not_train_in():
    class Float32Only(BaseAdapter):
        pass

    recipe = dict(get_workload("cnn-mnist").recipe, precision="bfloat16")
    with pytest.raises(NotImplementedError, match="precision 'bfloat16': this adapter does not build it"):
        Float32Only({"input_dtype": "float32"}, recipe, "classification", "cpu", 1, 0)

    class Reduced(BaseAdapter):
        precisions = ("float32", "bfloat16")
        dtypes = ("float32", "float64")

    with pytest.raises(ValueError, match="precision 'bfloat16' with dtype 'float64'"):
        Reduced({"input_dtype": "float32"}, dict(recipe, dtype="float64"), "classification", "cpu", 1, 0)


@pytest.mark.framework  # a cell's configuration records its environment's packages
def test_the_precision_enters_the_recipe_hash_and_certificate_key_and_float32_keeps_them(tmp_path):
    path = write(tmp_path, """
        name: two
        frameworks: [pytorch]
        threads: 1
        workloads:
          - {workload: cnn-mnist, dataset: digits-28, epochs: 1, precision: [float32, mixed-bfloat16]}
    """)
    prepared = {c.precision: cell_config.resolve(c, tmp_path) for c in suite.plan(suite.load(str(path)))}
    # float32's recipe names no precision: its hash is that of a cell that names none
    assert "precision" not in prepared["float32"].config["recipe"]
    assert prepared["mixed-bfloat16"].config["recipe"]["precision"] == "mixed-bfloat16"
    assert prepared["mixed-bfloat16"].hash != prepared["float32"].hash
    # the reference in a reduced precision is certified (against itself in it); in float32 it is the reference
    [(framework, workload)] = machine_store.pairs_of(suite.plan(suite.load(str(path))))
    assert (framework, workload.recipe["precision"]) == ("pytorch", "mixed-bfloat16")
    assert machine_store.key_now("pytorch", workload).workload_digest == workload_digest(
        prepared["mixed-bfloat16"].workload) != workload_digest(prepared["float32"].workload)


def run(run_id, precision, steady, first, metric=0.9):
    recipe = {"batch_size": 32, **({"precision": precision} if precision else {})}
    return {"id": run_id, "framework": "pytorch", "framework_version": "1.0", "workload": "cnn-mnist",
            "dataset": "digits-28", "device": "cpu", "status": "ok", "steady_epoch_s": steady,
            "first_epoch_s": first, "train_time_s": first + steady, "metric_value": metric, "metric_name": "accuracy",
            "n_train": 320, "execution": "eager", "precision": precision or "float32",
            "config": {"recipe": recipe, "threads": 2}, "epochs": [{"epoch": 1}, {"epoch": 2}]}


def test_a_precision_is_another_cell_labelled_and_set_beside_float32():
    runs = ([run(i, None, 2.0 + 0.01 * i, 3.0) for i in range(4)]
            + [run(10 + i, "bfloat16", 1.0 + 0.01 * i, 2.0, 0.85) for i in range(4)])
    cells = summarise(runs)
    assert {cell.label for cell in cells} == {"pytorch 1.0", "pytorch 1.0 (bfloat16)"}
    [row] = modes.rows(cells, runs)
    assert (row.cell.precision, row.default.precision) == ("bfloat16", "float32") and row.shown
    [shown] = modes_table.table([row]).rows
    assert shown[2] == "eager, bfloat16 (default eager, float32)" and "faster" in shown[4]
    assert shown[10] == "90.0% [90.0-90.0, 87.5%]: 85.0% [85.0-85.0, 87.5%]"


def test_a_reduced_precisions_tolerances_are_unit_roundoffs_of_its_half_type():
    assert tolerances("bfloat16")["output"] == 8 * 2 ** -8 == tolerances("mixed-bfloat16")["output"]
    assert tolerances("mixed-float16")["grad"] == 32 * 2 ** -11
    assert tolerances("float32")["output"] == 1e-4 and tolerances("bfloat16")["activation"] == 1e-5


def test_the_weights_row_tells_bfloat16_numbers_from_float32_ones():
    import numpy as np

    weights = np.random.RandomState(0).standard_normal(1000).astype(np.float32)
    as_bfloat16 = precision_checks._rounded(weights, "bfloat16")
    assert precision_checks.off_grid([as_bfloat16], "bfloat16") == 0.0
    assert precision_checks.off_grid([weights], "bfloat16") > 0.99
    assert precision_checks.off_grid([weights.astype(np.float16).astype(np.float32)], "float16") == 0.0
    assert np.max(np.abs(as_bfloat16 - weights) / np.abs(weights)) <= 2 ** -8  # to nearest: half a step at most
    float32 = {"output": np.ones(3, np.float32), "after/dense_1/kernel": weights}
    bf16_run = {"output": np.ones(3, np.float32) + 0.01, "after/dense_1/kernel": as_bfloat16}
    rows = {row["tensor"]: row for row in precision_checks.rows("bfloat16", bf16_run, float32)}
    assert rows["precision/output"]["passed"] and rows["precision/weights"]["passed"]
    rows = {row["tensor"]: row for row in precision_checks.rows("mixed-bfloat16", bf16_run, float32)}
    assert not rows["precision/weights"]["passed"] and share_of_tolerance(rows["precision/weights"]) == float("inf")
    rows = {row["tensor"]: row for row in precision_checks.rows("bfloat16", float32, float32)}
    assert not rows["precision/output"]["passed"] and not rows["precision/weights"]["passed"]


# the frameworks that train in a reduced precision, each certified in all of them by one process
REDUCED = sorted(name for name in envs.RECIPES if len(envs.RECIPES[name].precisions) > 1)
CERTIFIED = [get_workload("cnn-mnist"), transformer_pieces.gpt_workload()]


@pytest.fixture(scope="module")
def reference(session_dir):
    """The reference's probes of the certified workloads in every reduced precision (and float32, float64)."""
    folder = session_dir / "certify-precisions"
    asked = [precisions.as_run(w, envs.REFERENCE, precision) for w in CERTIFIED
             for precision in precisions.PRECISIONS[1:]]
    return folder, probes.reference_probes(asked, folder)


@pytest.mark.framework
@pytest.mark.parametrize("framework", REDUCED)
def test_every_reduced_precision_certifies_against_the_reference_in_it_and_shows(reference, tmp_path, framework):
    """Outputs, serving, gradients and steps within the precision's tolerances of the reference in the same precision
    (or as near the float64 result as it); the layer and optimiser checks in float32; and the precision visible:
    outputs off float32's by at least an eighth of the half type's unit roundoff, weights as the precision keeps
    them."""
    folder, probed = reference
    certified = [precisions.as_run(w, framework, precision) for precision in envs.RECIPES[framework].precisions[1:]
                 for w in CERTIFIED if not precisions.refusal(framework, precision, w)]  # keras-jax's float16 attention
    with Store(tmp_path / "dlbench.sqlite") as opened:
        certificates = probes.certify([framework], certified, opened, folder, quiet, probed)
    assert [(c["workload"], c["precision"]) for c in certificates] == [
        (w.name, w.recipe["precision"]) for w in certified]
    for cert in certificates:
        failed = [(row["tensor"], row["max_rel"]) for row in cert["deviations"] if not row["passed"]]
        shown = {row["tensor"]: row["max_rel"] for row in cert["deviations"] if row["kind"] == "precision"}
        print(f"{framework} ({cert['precision']}) {cert['workload']}: worst {cert['worst_tensor']} "
              f"{cert['worst_scaled_deviation']:.3g}; precision rows {shown}")
        assert cert["passed"], failed
        assert set(shown) == {"precision/output", "precision/serving", "precision/weights"}


@pytest.mark.framework
@pytest.mark.parametrize("framework, precision, caught", [
    ("pytorch-float32-as-bfloat16", "bfloat16", {"precision/output", "precision/serving", "precision/weights"}),
    ("pytorch-half-master-weights", "mixed-bfloat16", {"precision/weights"}),
])
def test_a_precision_that_does_not_show_fails_its_certificate(broken, store, tmp_path, framework,  # noqa: F811
                                                              precision, caught):
    """A run declared bfloat16 that trains in float32 stays within float32's rounding of the float32 reference; a
    mixed run whose master weights are bfloat16 holds no weight off bfloat16's grid: each fails its own rows."""
    workload = precisions.as_run(get_workload("cnn-mnist"), "pytorch", precision)
    [cert] = probes.certify([framework], [workload], store, tmp_path, quiet)
    failed = {row["tensor"]: share_of_tolerance(row) for row in cert["deviations"] if not row["passed"]}
    assert not cert["passed"] and caught <= set(failed)
    assert all(failed[tensor] > 10 for tensor in caught), failed


def test_a_precision_one_device_lacks_is_refused_there_alone():
    cnn = get_workload("cnn-mnist")
    assert precisions.refusal("mxnet", "mixed-bfloat16", cnn, "gpu") == precisions.DEVICE_REFUSED[
        "mxnet", "mixed-bfloat16", "gpu"]
    assert precisions.refusal("mxnet", "mixed-bfloat16", cnn, "cpu") is None


@pytest.mark.framework
def test_mxnet_amp_rewrites_its_whole_process_so_each_precision_probes_in_a_process_of_its_own(tmp_path):
    """amp.init cannot be undone: in one process a float32 model after a mixed-bfloat16 one is refused (it would
    compute in bfloat16); run_probes gives each precision its process, float32's outputs those of a lone probe."""
    cnn = get_workload("cnn-mnist")
    folder = probes.probe_folder("mxnet", tmp_path)
    mixed, float32 = (probes.weights_request(w, folder, False) for w in (
        precisions.as_run(cnn, "mxnet", "mixed-bfloat16"), cnn))
    failures: dict[int, str] = {}
    probes._probe_process("mxnet", [mixed, float32], tmp_path, failures)
    assert list(failures) == [1] and "a float32 model needs a process of its own" in failures[1]
    both = probes.run_probes("mxnet", [float32, mixed], tmp_path)
    alone = probes.run_probes("mxnet", [float32], tmp_path)[0]
    assert both[1]["output"].dtype == np.float32 and not np.array_equal(both[1]["output"], alone["output"])
    assert sorted(both[0]) == sorted(alone) and all(np.array_equal(both[0][k], alone[k]) for k in alone)


LOSS_SCALE_CHECK = """
import json, sys
import numpy as np
from dlbench.worker.base import LOSS_SCALE
from dlbench.worker.frameworks.chainer.optimizers import LossScale

class Param:
    def __init__(self, grad): self.grad = grad
class Optimizer:
    updates = 0
    def __init__(self): self.target = self; self.grads = [np.ones(2, np.float16)]
    def params(self): return [Param(g) for g in self.grads]
    def update(self): self.updates += 1

optimizer, scale, seen = Optimizer(), LossScale(), []
for step in range(LOSS_SCALE["growth_interval"] + 1):  # finite: the last one doubles the scale and starts again
    scale.update(optimizer); seen.append(scale.scale)
optimizer.grads = [np.array([1.0, np.inf], np.float16)]
scale.update(optimizer); seen.append(scale.scale)
print(json.dumps({"updates": optimizer.updates, "scales": sorted(set(seen)), "last": seen[-1],
                  "finite_steps": scale.finite_steps, "first": seen[0]}))
"""


def printed_in(framework: str, code: str, home: Path) -> dict:
    """The JSON line `code` prints, run in the framework's environment."""
    env = envs.require(framework)
    done = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(Path(probes.__file__).parents[3]), "PATH": "/usr/bin:/bin",
                               "HOME": str(home), "DLBENCH_THREADS": "1", **envs.get_recipe(framework).worker_env})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.framework
def test_chainers_loss_scale_skips_an_overflowing_step_and_follows_every_frameworks_terms(tmp_path):
    seen = printed_in("chainer", LOSS_SCALE_CHECK, tmp_path)
    initial = LOSS_SCALE["initial"]
    assert seen == {"updates": LOSS_SCALE["growth_interval"] + 1, "first": initial,
                    "scales": sorted({initial, initial * LOSS_SCALE["growth_factor"],
                                      initial * LOSS_SCALE["growth_factor"] * LOSS_SCALE["backoff_factor"]}),
                    "last": initial * LOSS_SCALE["growth_factor"] * LOSS_SCALE["backoff_factor"], "finite_steps": 0}


def test_a_mode_the_reference_cannot_run_is_listed_as_not_certifiable_and_never_asked_for(capsys, tmp_path):
    """torch's CPU LSTM has no float16 training: no framework's lstm-ptb in mixed-float16 can be certified against
    the reference in it, so certify lists it with the reason, and `run` does not count it as missing."""
    lstm = precisions.as_run(get_workload("lstm-ptb"), "chainer", "mixed-float16")
    assert precisions.reference_refusal(lstm) == precisions.LAYER_REFUSALS[0].why
    cnn = precisions.as_run(get_workload("cnn-mnist"), "chainer", "mixed-float16")
    assert precisions.reference_refusal(cnn) is None
    assert machine_store.missing([("chainer", lstm)]) == []
    assert main(["certify", "-f", "chainer", "-w", "lstm-ptb", "--precision", "mixed-float16",
                 "--results", str(tmp_path)]) == 0
    assert (f"chainer (mixed-float16) lstm-ptb: cannot be certified, for the reference (pytorch) cannot run it in "
            f"mixed-float16: {precisions.LAYER_REFUSALS[0].why}") in capsys.readouterr().out


FUSIONS_CHECK = """
import json
import tensorflow as tf
from dlbench.worker.frameworks.tensorflow.adapter import configure_fusions
seen = {}
for precision, device in (("mixed-float16", "cpu"), ("float32", "cpu"), ("mixed-float16", "gpu"), ("bfloat16", "cpu")):
    configure_fusions(precision, device)
    seen[precision + " " + device] = tf.config.optimizer.get_experimental_options().get("remapping", True)
print(json.dumps(seen))
"""


@pytest.mark.framework
def test_tensorflow_leaves_its_slow_float16_fusions_out_on_the_cpu_alone(tmp_path):
    """Grappler's remapper fuses a float16 MatMul and BiasAdd into a oneDNN kernel ~200x slower than float32's on the
    CPU (tensorflow/adapter.configure_fusions): off for mixed-float16 there, on for the other precisions and a GPU."""
    assert printed_in("tensorflow", FUSIONS_CHECK, tmp_path) == {
        "mixed-float16 cpu": False, "float32 cpu": True, "mixed-float16 gpu": True, "bfloat16 cpu": True}
