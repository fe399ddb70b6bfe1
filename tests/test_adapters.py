"""Every framework adapter, run in its own environment: each classifier architecture (the study's seven and
the two Transformers) loads canonical weights exactly, computes what an independent numpy forward pass
computes, and learns; each architecture trains a few steps on the first rows of the quick suite's stand-in
for it; the Transformer pieces and AdamW's steps are checked beside them. All of a framework's cases run in
one process. (The detector, frcnn-voc, has its own adapter class and tests: test_detector.py.)"""
import json
from pathlib import Path

import guard
import numpy as np
import pytest
import transformer_pieces
from adapter_check import probe_inputs, probe_weights
from fixtures_data import prepared_standin
from numpy_forward import forward, gelu

from dlbench.harness.environments import envs
from dlbench.harness.environments.process import PACKAGE_PARENT
from dlbench.harness.plan.executions import EXECUTIONS
from dlbench.harness.plan.precisions import PRECISIONS
from dlbench.harness.plan.workloads import WORKLOADS
from dlbench.harness.run.cell_config import cell_recipe
from dlbench.shared import ir
from dlbench.shared.initializers import canonical_init

pytestmark = pytest.mark.framework

TESTS = Path(__file__).parent
# Theano first: its cold compilation (about 6 minutes) then fills the shared compile folder before
# test_certify's Theano probes, which come last on the other worker, instead of both compiling at once.
FRAMEWORKS = sorted(envs.RECIPES, key=lambda name: (name != "theano", name))
# Full study shapes for the CNNs and the ViT; small vocabularies and sequences keep the LSTMs and the GPT quick.
SMALL_META = {"lstm-imdb": {"vocab_size": 50, "seq_len": 12}, "lstm-ptb": {"vocab_size": 40, "seq_len": 10},
              "transformer-lm": {"vocab_size": 40, "seq_len": 10},
              "seq2seq-manythings": {"source_vocab_size": 30, "target_vocab_size": 20, "source_len": 7,
                                     "target_len": 5}}


def cases() -> list[dict]:
    result = []
    for workload in WORKLOADS.values():
        if "detection" in workload.tasks:  # a detector's adapter is another class: test_detector.py
            continue
        meta = dict(workload.study_meta, **SMALL_META.get(workload.name, {}))
        classes = meta.get("num_classes") or meta.get("target_vocab_size") or (
            2 if meta["task"] == "binary" else meta["vocab_size"])
        result.append({"workload": workload.name, "model": workload.model(meta), "recipe": check_recipe(workload),
                       "task": meta["task"], "n_classes": classes, "target_len": meta.get("target_len")})
    return result


def check_recipe(workload) -> dict:
    """The recipe as a cell of adapter_check.py's training resolves it (8 epochs of 16 samples in batches of 8):
    the Transformers' schedule ("auto" total_steps, a warm-up fraction) reaches the worker as numbers alone."""
    return cell_recipe(workload, 8, 8, 16)


CASES = cases()
# The quick suite's (workload, stand-in) pairs whose data come from a wheel on PyPI; in the tests, from a
# fixture wheel of the same layout (fixtures_data.py). The architecture is built from the stand-in's meta.
STANDINS = [("cnn-cifar10", "photo-patches-10"), ("cnn-svhn", "photo-patches-10"),
            ("cnn-cifar100", "photo-regions-100"), ("lstm-imdb", "rt-snippets"),
            ("seq2seq-manythings", "django-es-en"), ("vit-cifar10", "photo-patches-10")]


def standin_case(workload_name: str, dataset, rows: int = 16) -> dict:
    """A case whose training data are the first rows of a prepared stand-in, written beside it."""
    workload, meta = WORKLOADS[workload_name], dataset.meta
    folder = dataset.path.parent / f"first-{rows}"
    folder.mkdir(exist_ok=True)
    paths = {}
    for part in ("x", "y"):
        paths[part] = str(folder / f"{dataset.name}-{part}.npy")
        np.save(paths[part], np.load(dataset.path / f"{part}_train.npy")[:rows])
    classes = meta.get("num_classes") or meta.get("target_vocab_size")
    return {"workload": f"{workload_name} on {dataset.name}", "model": workload.model(meta),
            "recipe": check_recipe(workload), "task": meta["task"], "n_classes": classes,
            "target_len": meta.get("target_len"), "data": dict(paths, scale=meta["input_scale"])}


@pytest.fixture(scope="module")
def standin_cases(session_dir) -> list[dict]:
    data_dir = session_dir / "standins"
    return [standin_case(workload, prepared_standin(dataset, data_dir)) for workload, dataset in STANDINS]


def run_check(framework: str, payload: list[dict], compile_cache: Path) -> dict[str, dict]:
    env = envs.require(framework)  # make test builds it first; a missing one fails with the command to run
    recipe = envs.get_recipe(framework)
    (compile_cache.parent / "home").mkdir(parents=True, exist_ok=True)
    variables = {"PYTHONPATH": str(PACKAGE_PARENT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                 "DLBENCH_THREADS": "1", "HOME": str(compile_cache.parent / "home"),
                 "DLBENCH_COMPILE_CACHE": str(compile_cache), **recipe.worker_env}
    done = guard.run([str(env.python), str(TESTS / "adapter_check.py"), recipe.adapter], 2400,  # theano: 378 s seen
                     input=json.dumps(payload), env=variables)
    assert done.returncode == 0, done.stderr[-3000:]
    return {row["workload"]: row for row in map(json.loads, done.stdout.splitlines())}


def case_rows(checked: dict[str, dict]) -> dict[str, dict]:
    """The check's rows of the trained cases (adapter_check.check's, which report threads and versions), without
    the refusals, the GELU grid and the optimiser steps."""
    return {name: row for name, row in checked.items() if "versions" in row}


@pytest.fixture(scope="module", params=FRAMEWORKS)
def checked(request, compile_cache, standin_cases) -> dict[str, dict]:
    """Every case of this file in one process per framework: the workloads, their stand-ins, the Transformer
    pieces and AdamW's (defined below)."""
    keras_only = FIT_CASES if request.param.startswith("keras") else []
    pieces = [PIECES, GELU_GRID, BLOCKS, LLAMA, ADAMW_TRAINING, ADAMW_STEPS]
    return run_check(request.param, CASES + standin_cases + pieces + keras_only, compile_cache)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
def test_canonical_weights_round_trip_exactly(checked, case):
    result = checked[case["workload"]]
    assert result["same_shapes"] and result["roundtrip_max_abs"] == 0.0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
def test_outputs_match_an_independent_numpy_forward(checked, case):
    expected = forward(case["model"], probe_weights(case["model"]), probe_inputs(case["model"]))
    got = np.array(checked[case["workload"]]["predictions"])
    assert got.shape == expected.shape
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() <= 1e-4 * scale + 1e-5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
@pytest.mark.parametrize("batch", ["serving_batch1", "serving_batch2"])
def test_serving_outputs_match_the_numpy_forward(checked, case, batch):
    """adapter.serving() on the probe inputs as a split stores them (uint8 pixels, token ids), one sample
    a call and both in one call: the numpy forward's outputs, to predict's tolerance."""
    expected = forward(case["model"], probe_weights(case["model"]), probe_inputs(case["model"]))
    got = np.array(checked[case["workload"]][batch])
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max() + 1e-5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
def test_a_few_steps_lower_the_loss(checked, case):
    result = checked[case["workload"]]
    assert result["eval_after"]["loss"] < result["eval_before"]["loss"]
    assert np.isfinite(result["train_losses"]).all()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["workload"])
def test_the_first_step_is_stamped_inside_the_first_epoch(checked, case):
    """The time to the first step (worker/train.py's first_step_s) is read from the adapter's stamp: it must fall
    within the first epoch, the 16 samples' two steps."""
    started, first_step_at, ended = checked[case["workload"]]["first_step"]
    assert first_step_at is not None and started < first_step_at <= ended


@pytest.mark.parametrize("pair", STANDINS, ids=lambda p: f"{p[0]}-on-{p[1]}")
def test_a_few_steps_on_the_stand_in_lower_the_loss(checked, pair):
    """Judged on the training loss: 16 real rows in batches of 8 train noisily (every framework's loss
    jumped at the fifth epoch here), and the evaluation after 8 epochs, with its BatchNorm's moving
    statistics, landed on either side of the one before (TensorFlow's cnn-svhn: 2.45 after, 2.39 before,
    on an Intel Xeon; below it on an AMD EPYC). An adapter that does not learn keeps its first loss."""
    result = checked[f"{pair[0]} on {pair[1]}"]
    losses = result["train_losses"]
    assert result["same_shapes"] and np.isfinite(losses).all() and np.isfinite(result["eval_after"]["loss"])
    assert np.mean(losses[-3:]) < losses[0], losses


def test_threads_are_set_and_versions_reported(checked):
    for result in case_rows(checked).values():
        assert result["threads"] == 1
        assert all(isinstance(v, str) and v for v in result["versions"].values())


def test_a_layer_type_or_optimizer_the_adapter_lacks_raises_naming_it(checked):
    """adapter_check.refusals: the IR and the adapter contract made to accept a layer type and an
    optimizer named 'novel'; the adapter must refuse each by name, not build another in its place."""
    refused = checked["refusals"]
    assert "layer type 'novel'" in (refused["layer"] or ""), refused["layer"]
    assert "optimizer 'novel'" in (refused["optimizer"] or ""), refused["optimizer"]


@pytest.mark.parametrize("what", ["loss", "activation", "conv_padding", "pool_padding"])
def test_a_loss_activation_or_padding_the_adapter_lacks_raises_naming_it(checked, what):
    """adapter_check.refusals: the IR made to accept a loss, an activation and a padding named 'novel' (issue
    #42): the adapter must refuse each by name, not train softmax cross-entropy, apply another activation
    or pad as 'valid' in its place."""
    refused = checked["refusals"][what]
    name = what.rpartition("_")[2]
    assert f"{name} 'novel': this adapter does not build it" in (refused or ""), refused


def test_the_adapter_runs_its_recipes_executions_and_refuses_the_others_by_name(checked, request):
    """The harness plans from the recipe's executions (harness/plan/executions.py): the adapter's own, default
    first, must be the same; an execution it lacks is refused, never run in another mode under its name."""
    framework = request.node.callspec.params["checked"]
    refused = checked["refusals"]
    assert refused["executions"] == list(envs.get_recipe(framework).executions)
    assert set(refused["execution"]) == set(EXECUTIONS) - set(refused["executions"])
    for mode, error in refused["execution"].items():
        assert f"execution '{mode}': this adapter does not build it" in (error or ""), error


def test_the_adapter_trains_in_its_recipes_precisions_and_refuses_the_others_by_name(checked, request):
    """The harness plans from the recipe's precisions (harness/plan/precisions.py): the adapter's own, float32 first,
    must be the same; a precision it lacks is refused, never trained in float32 under its name."""
    framework = request.node.callspec.params["checked"]
    refused = checked["refusals"]
    assert refused["precisions"] == list(envs.get_recipe(framework).precisions)
    assert set(refused["precision"]) == set(PRECISIONS) - set(refused["precisions"])
    for name, error in refused["precision"].items():
        assert f"precision '{name}': this adapter does not build it" in (error or ""), error


def test_a_classifier_refuses_the_detectors_loss(checked):
    """faster_rcnn is in ir.LOSSES, so the adapter contract accepts it; a classifier adapter trained it as
    softmax cross-entropy."""
    refused = checked["refusals"]["detector_loss"]
    assert "loss 'faster_rcnn': this adapter does not build it" in (refused or ""), refused


RECURRENT = {case["workload"] for case in CASES
             if any(layer["type"] in ("lstm", "seq2seq") for layer in case["model"]["layers"])}


@pytest.mark.parametrize("checked", [name for name in FRAMEWORKS if name == "theano"], indirect=True)
def test_theano_reports_the_scan_it_ran(checked):
    """Theano's scan runs its compiled (Cython) loop where the interpreter builds it (up to Python
    3.10), else its Python loop; the adapter reports which one its compiled functions ran."""
    major, minor = map(int, envs.require("theano").info()["python_version"].split(".")[:2])
    expected = "c" if (major, minor) < (3, 11) else "python"
    for workload, result in case_rows(checked).items():
        architecture = workload.split(" on ")[0]  # a stand-in case is named "<workload> on <dataset>"
        assert result["versions"]["theano-scan"] == (expected if architecture in RECURRENT else "none"), workload


# ---- the Transformer family's pieces (transformer_pieces.py), checked in the same process ----------------

PIECES, GELU_GRID = transformer_pieces.case(), transformer_pieces.gelu_grid_case()
BLOCKS = transformer_pieces.gpt_case()
LLAMA = transformer_pieces.llama_case()


def test_gelu_is_the_exact_erf_form(checked):
    """The activation alone on [-6, 6]: the erf form to float32 rounding (MXNet's erf: 5e-7 off); the tanh
    approximation, 4.7e-4 off, fails."""
    got = np.array(checked[GELU_GRID["workload"]]["predictions"])[0]
    expected = gelu(np.array(GELU_GRID["grid"], np.float32).astype(np.float64))
    print(f"gelu: max |framework - erf form| = {np.abs(got - expected).max():.3g}")
    assert np.abs(got - expected).max() <= 1e-5


def test_transformer_pieces_build_and_compute_the_numpy_forward(checked):
    """Every framework builds the exact GELU and layer normalisation with its own ops: weights round trip,
    outputs as the independent numpy forward (math.erf, biased variance), a few steps lower the loss."""
    assert_builds_and_learns(checked, PIECES)


def test_transformer_blocks_build_and_compute_the_numpy_forward(checked):
    """Residual blocks, causal multi-head attention, learned positions and an output tied to the token
    embedding, each with the framework's own ops: weights round trip (the tied output holds its bias alone),
    outputs as the numpy forward (whose attention is causal: tests/test_ir.py), a few steps lower the loss."""
    assert_builds_and_learns(checked, BLOCKS)


def test_llama_blocks_build_and_compute_the_numpy_forward(checked):
    """RMS normalisation, grouped-query attention with rotary embeddings and SwiGLU (issue #42), each with the
    framework's own ops where it has them: weights round trip, outputs as the numpy forward (whose rotations
    and grouping tests/test_ir.py checks), a few steps lower the loss."""
    assert_builds_and_learns(checked, LLAMA)


def assert_builds_and_learns(checked: dict[str, dict], case: dict) -> None:
    """The case's weights round trip exactly, its outputs are the numpy forward's, a few steps lower its loss."""
    result = checked[case["workload"]]
    assert result["same_shapes"] and result["roundtrip_max_abs"] == 0.0
    expected = forward(case["model"], probe_weights(case["model"]), probe_inputs(case["model"]))
    got = np.array(result["predictions"])
    assert got.shape == expected.shape
    deviation, scale = np.abs(got - expected).max(), np.abs(expected).max()
    print(f"max |output - numpy forward| = {deviation:.3g} (outputs up to {scale:.3g})")
    assert deviation <= 1e-4 * scale + 1e-5
    assert np.isfinite(result["train_losses"]).all()
    assert result["eval_after"]["loss"] < result["eval_before"]["loss"]


# ---- AdamW with a warm-up and cosine schedule, checked in the same process -----------------------------

ADAMW = {"name": "adamw", "lr": 1e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-3, "weight_decay": 0.5}
WARMUP_COSINE = {"name": "warmup_cosine", "warmup_steps": 2, "total_steps": 6, "final_lr_fraction": 0.2}
STEPS_MODEL = ir.model([5], "float32", [ir.dense(4)])


def adamw_reference(start: dict, gradients: dict, config: dict, schedule: dict) -> list[dict]:
    """torch.optim.AdamW's steps in float64 with the learning rate of the warm-up and cosine schedule
    (the k-th update from 0: k / W in the warm-up, then f + (1 - f) (1 + cos(pi min(1, (k - W) / (T - W)))) / 2):
    written here from the formulas, apart from the certificate's rule and the adapters' code."""
    warmup, total, final = schedule["warmup_steps"], schedule["total_steps"], schedule["final_lr_fraction"]
    b1, b2 = config["beta1"], config["beta2"]
    params = {name: np.asarray(value, np.float64) for name, value in start.items()}
    m = {name: np.zeros_like(value) for name, value in params.items()}
    v = {name: np.zeros_like(value) for name, value in params.items()}
    after = []
    for k in range(len(next(iter(gradients.values())))):
        if k < warmup:
            lr = config["lr"] * k / warmup
        else:
            cosine = 0.5 * (1 + np.cos(np.pi * min(1.0, (k - warmup) / (total - warmup))))
            lr = config["lr"] * (final + (1 - final) * cosine)
        t = k + 1
        for name, p in params.items():
            g = np.asarray(gradients[name][k], np.float64)
            p = p * (1 - lr * config["weight_decay"])
            m[name] = b1 * m[name] + (1 - b1) * g
            v[name] = b2 * v[name] + (1 - b2) * g * g
            denominator = np.sqrt(v[name]) / np.sqrt(1 - b2 ** t) + config["epsilon"]
            params[name] = p - lr / (1 - b1 ** t) * m[name] / denominator
        after.append({name: value.copy() for name, value in params.items()})
    return after


def adamw_steps_case() -> dict:
    """8 steps: the warm-up (lr 0, then lr / 2), the cosine decay, then two at the final rate. Gradients of
    both signs, some as small as epsilon, so that the betas, epsilon and the decay all move the weights."""
    rng = np.random.RandomState(7)
    start = {name: rng.uniform(-1, 1, value.shape) for name, value in canonical_init(STEPS_MODEL, 0).items()}
    gradients = {name: rng.standard_normal((8, *value.shape)) * rng.choice([1.0, 1e-3], (8, *value.shape))
                 for name, value in start.items()}
    recipe = {"optimizer": ADAMW, "schedule": WARMUP_COSINE, "batch_size": 1, "epochs": 1,
              "loss": "softmax_cross_entropy"}
    return {"workload": "adamw steps", "model": STEPS_MODEL, "recipe": recipe, "task": "classification",
            "weights": {k: v.astype(np.float32).tolist() for k, v in start.items()},
            "gradients": {k: v.astype(np.float32).tolist() for k, v in gradients.items()}}


def adamw_training_case() -> dict:
    """The Transformer pieces trained with AdamW, warming up over 3 of its 16 updates (8 epochs of 2 batches)."""
    schedule = dict(WARMUP_COSINE, warmup_steps=3, total_steps=16)
    return dict(PIECES, workload="transformer pieces with adamw", recipe=dict(PIECES["recipe"], optimizer=ADAMW,
                                                                              schedule=schedule))


ADAMW_STEPS, ADAMW_TRAINING = adamw_steps_case(), adamw_training_case()


def test_adamw_with_warmup_cosine_steps_as_the_numpy_reference(checked):
    """Every step of the framework's AdamW and schedule within float32 rounding of the reference's, the first
    (lr 0) moving nothing; a schedule stepped late, or the decay coupled or not scaled by the schedule, is
    off by far more (a step moves a weight by up to about lr, 1e-2; the tolerance is 1e-5)."""
    case = ADAMW_STEPS
    got = checked[case["workload"]]["after"]
    expected = adamw_reference(case["weights"], case["gradients"], ADAMW, WARMUP_COSINE)
    assert len(got) == len(expected) == 8
    for step, (framework_step, reference_step) in enumerate(zip(got, expected, strict=True)):
        for name, value in reference_step.items():
            deviation = np.abs(np.asarray(framework_step[name]) - value).max()
            assert deviation <= 1e-5, (step, name, deviation)
    first = {name: np.asarray(value) for name, value in got[0].items()}
    assert all(np.array_equal(first[name], np.asarray(case["weights"][name], np.float32)) for name in first)


def test_adamw_with_warmup_cosine_lowers_the_loss(checked):
    result = checked[ADAMW_TRAINING["workload"]]
    assert result["same_shapes"] and np.isfinite(result["train_losses"]).all()
    assert result["eval_after"]["loss"] < result["eval_before"]["loss"]


def test_a_schedule_the_adapter_lacks_raises_naming_it(checked):
    refused = checked["refusals"]["schedule"]
    assert "schedule 'novel'" in (refused or ""), refused


# ---- Keras: the adapter's feed (its train function over batches gathered on the device) trains as fit ----

def without_dropout(layers: list[dict]) -> list[dict]:
    """The layers without dropout (attention's included): two Keras models draw different dropout masks."""
    kept = []
    for layer in layers:
        if layer["type"] == "dropout":
            continue
        layer = dict(layer, layers=without_dropout(layer["layers"])) if "layers" in layer else dict(layer)
        if layer["type"] == "attention":
            layer["dropout"] = 0.0
        kept.append(layer)
    return kept


def fit_case(workload: str) -> dict:
    case = next(case for case in CASES if case["workload"] == workload)
    model = dict(case["model"], layers=without_dropout(case["model"]["layers"]))
    return dict(case, workload=f"{workload} fed as fit", model=model, fit_orders=3)


# SGD with momentum and coupled L2 over BatchNorm on uint8 pixels, Adadelta on a language model, Adam on the
# masked loss, AdamW with its warm-up and cosine schedule
FIT_CASES = [fit_case(name) for name in ("cnn-svhn", "lstm-ptb", "seq2seq-manythings", "transformer-lm")]


@pytest.mark.parametrize("checked", [name for name in FRAMEWORKS if name.startswith("keras")], indirect=True)
@pytest.mark.parametrize("case", FIT_CASES, ids=lambda c: c["workload"])
def test_keras_feed_trains_as_fit(checked, case):
    """Three epochs of 21 samples in batches of 8 (a partial last batch) by train_epoch and by model.fit from
    the same weights: the same weights to float32 rounding, the same epoch metrics and optimiser steps. A
    batch taken out of order, a step missed or run twice, or a schedule read at another step is far off."""
    result = checked[case["workload"]]
    print(f"max |feed - fit| weight: {result['max_weight_difference']:.3g}")
    assert result["feed_iterations"] == result["fit_iterations"] == 9
    assert result["max_weight_difference"] <= 1e-5
    for feed, fit in zip(result["feed_metrics"], result["fit_metrics"], strict=True):
        assert feed.keys() == fit.keys()
        for name, value in fit.items():
            assert abs(feed[name] - value) <= 1e-5 * max(1.0, abs(value)), (name, feed[name], value)
