"""Equivalence certificates: real probes in the framework environments, the verdicts, and the store."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import transformer_pieces
from scipy.special import erf

from dlbench.harness.certification import certified_model, layer_checks, optimizer, power, probes, terms
from dlbench.harness.cli import main
from dlbench.harness.environments import envs, sources
from dlbench.harness.environments.envs import REFERENCE
from dlbench.harness.environments.process import PACKAGE_PARENT, worker_environment
from dlbench.harness.plan.suite import Cell
from dlbench.harness.plan.workloads import WORKLOADS, get_workload
from dlbench.harness.run import cell_config
from dlbench.harness.store import Store
from dlbench.shared import ir
from dlbench.shared.recipe import OPTIMIZER_SETTINGS

TESTS = Path(__file__).parent
CANDIDATES = [name for name in sorted(envs.RECIPES) if name != REFERENCE]
ALL_WORKLOADS = [WORKLOADS[name] for name in sorted(WORKLOADS)]


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "dlbench.sqlite") as opened:
        yield opened


def quiet(_certificate: dict) -> None:
    pass


@pytest.fixture
def broken(monkeypatch):
    """Frameworks named pytorch-<bug>: the PyTorch environment, an adapter with that mapping bug."""
    reference = envs.RECIPES[REFERENCE]
    real_require = envs.require
    for name, adapter in (("pytorch-swapped-gates", "SwappedGates"), ("pytorch-transposed-conv", "TransposedConv"),
                          ("pytorch-doubled-dropout", "DoubledDropout"),
                          ("pytorch-unscaled-dropout", "UnscaledDropout"),
                          ("pytorch-channel-dropout", "ChannelDropout"), ("pytorch-keras-momentum", "KerasMomentum"),
                          ("pytorch-hundredfold-decay", "HundredfoldDecay"),
                          ("pytorch-nesterov-dropped", "NesterovDropped"),
                          ("pytorch-tenfold-epsilon", "TenfoldEpsilon"), ("pytorch-changed-rho", "ChangedRho"),
                          ("pytorch-late-warmup", "LateWarmup"), ("pytorch-longer-total", "LongerTotal"),
                          ("pytorch-higher-final-rate", "HigherFinalRate"),
                          ("pytorch-unscaled-serving", "UnscaledServing"),
                          ("pytorch-doubled-attention-dropout", "DoubledAttentionDropout"),
                          ("pytorch-training-mode-serving", "TrainingModeServing"), ("pytorch-tanh-gelu", "TanhGelu"),
                          ("pytorch-float32-as-bfloat16", "Float32AsBfloat16"),
                          ("pytorch-half-master-weights", "HalfMasterWeights")):
        monkeypatch.setitem(envs.RECIPES, name, dataclasses.replace(
            reference, framework=name, adapter=f"broken_pytorch:{adapter}",
            worker_env={"PYTHONPATH": f"{PACKAGE_PARENT}:{TESTS}"}))
    monkeypatch.setattr(envs, "require", lambda name: real_require(REFERENCE if name.startswith("pytorch-") else name))


@pytest.mark.framework
def test_the_reference_certifies_against_itself_exactly(store, tmp_path):
    [cert] = probes.certify([REFERENCE], [get_workload("lstm-imdb")], store, tmp_path, quiet)
    assert cert["passed"] and cert["worst_scaled_deviation"] == 0.0
    kinds = {row["kind"] for row in cert["deviations"]}
    assert kinds == {"output", "serving", "loss", "grad", "after", "optimizer"}
    names = {row["tensor"] for row in cert["deviations"]}
    assert {"grad/lstm_1/kernel", "after/lstm_1/recurrent_kernel", "after/embedding_1/embeddings"} <= names
    assert store.certificates()[0]["deviations"] == cert["deviations"]


@pytest.mark.framework
@pytest.mark.parametrize("framework, workload, culprit", [
    ("pytorch-swapped-gates", "lstm-imdb", "lstm_1"),
    ("pytorch-transposed-conv", "cnn-mnist", "conv2d_1"),
])
def test_a_broken_mapping_fails_certification(broken, store, tmp_path, framework, workload, culprit):
    [cert] = probes.certify([framework], [get_workload(workload)], store, tmp_path, quiet)
    assert not cert["passed"]
    failed = [row["tensor"] for row in cert["deviations"] if not row["passed"]]
    assert "output" in failed and "loss" in failed and any(culprit in name for name in failed)
    assert cert["worst_scaled_deviation"] > 100 * terms.TOLERANCES["output"]


@pytest.mark.framework
def test_a_serving_path_that_differs_fails_certification(broken, store, tmp_path):
    """predict is right, the serving path serves unscaled pixels: only the serving entry can see it."""
    [cert] = probes.certify(["pytorch-unscaled-serving"], [get_workload("cnn-mnist")], store, tmp_path, quiet)
    failed = {row["tensor"] for row in cert["deviations"] if not row["passed"]}
    assert not cert["passed"] and failed == {"serving"} and cert["worst_tensor"] == "serving"


@pytest.mark.framework
@pytest.mark.parametrize("framework, caught", [
    ("pytorch-doubled-dropout", {"zeros", "scale"}),  # torch scales by 1/(1-2 rate) for it
    ("pytorch-unscaled-dropout", {"scale"}),
    ("pytorch-channel-dropout", {"independence"}),
])
def test_a_broken_dropout_fails_certification(broken, store, tmp_path, framework, caught):
    """Dropout is off where tensors are compared, so only the dropout check can see these bugs."""
    [cert] = probes.certify([framework], [get_workload("cnn-mnist")], store, tmp_path, quiet)
    failed = {row["tensor"] for row in cert["deviations"] if not row["passed"]}
    assert not cert["passed"] and all(name.startswith("dropout/") for name in failed)
    assert caught <= {name.rsplit("/", 1)[1] for name in failed}
    assert cert["worst_tensor"].startswith("dropout/")
    if framework == "pytorch-channel-dropout":  # only the image's dropout layer drops whole channels
        assert {name.split("/")[1] for name in failed} == {"dropout_1"}


@pytest.mark.framework
@pytest.mark.parametrize("framework, workload, caught", [
    # the two blind spots a checker found by breaking adapters, and an approximation within the outputs' margin
    ("pytorch-doubled-attention-dropout", transformer_pieces.gpt_workload, "dropout/residual_1_attention_1/"),
    ("pytorch-training-mode-serving", transformer_pieces.gpt_workload, "serving"),
    ("pytorch-tanh-gelu", transformer_pieces.workload, "activation/gelu"),
])
def test_what_the_whole_model_cannot_see_fails_its_own_check(broken, store, tmp_path, framework, workload, caught):
    """Attention's dropout (off where tensors are compared), a serving path left in training mode (it differs
    from inference only by dropout) and GELU's tanh form (1.6 to 2.2 times the outputs' tolerance in a model)
    each fail certification by their own check, by far."""
    [cert] = probes.certify([framework], [workload()], store, tmp_path, quiet)
    failed = {row["tensor"]: terms.share_of_tolerance(row) for row in cert["deviations"] if not row["passed"]}
    mine = {tensor: share for tensor, share in failed.items() if tensor.startswith(caught)}
    assert not cert["passed"] and mine and max(mine.values()) > 15
    if framework == "pytorch-tanh-gelu":  # the weights after the steps see it too, by the outputs' small margin
        assert failed["output"] < 3
    else:  # nothing else can see them
        assert mine == failed


@pytest.mark.framework
def test_a_hundredfold_weight_decay_fails_the_certificate(broken, store, tmp_path):
    """The CNN recipes' coupled L2 of 1e-6 moves a weight by 1e-8 of itself a step: invisible to the
    few steps on one batch, seen by the optimiser certificate's zero-gradient check."""
    [cert] = probes.certify(["pytorch-hundredfold-decay"], [get_workload("cnn-mnist")], store, tmp_path, quiet)
    failed = {row["tensor"] for row in cert["deviations"] if not row["passed"]}
    assert not cert["passed"] and failed and all(name.startswith("optimizer/decay/") for name in failed)


SGD_NESTEROV = {"name": "sgd", "lr": 0.01, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}
# a Transformer's usual AdamW, with a schedule whose warm-up and total the certificate's own replace
ADAMW = {"name": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.01}
WARMUP_COSINE = {"name": "warmup_cosine", "warmup_steps": 1000, "total_steps": 50000, "final_lr_fraction": 0.1}


@pytest.mark.framework
@pytest.mark.parametrize("framework, config, schedule, culprits", [
    ("pytorch-nesterov-dropped", SGD_NESTEROV, None, {"sequence"}),
    ("pytorch-tenfold-epsilon", get_workload("lstm-imdb").recipe["optimizer"], None, {"epsilon"}),
    ("pytorch-changed-rho", get_workload("lstm-ptb").recipe["optimizer"], None, {"epsilon", "sequence"}),
    ("pytorch-hundredfold-decay", ADAMW, WARMUP_COSINE, {"decay"}),
    ("pytorch-tenfold-epsilon", ADAMW, WARMUP_COSINE, {"epsilon"}),
    ("pytorch-late-warmup", ADAMW, WARMUP_COSINE, {"schedule"}),
    ("pytorch-longer-total", ADAMW, WARMUP_COSINE, {"schedule"}),
    ("pytorch-higher-final-rate", ADAMW, WARMUP_COSINE, {"schedule"}),
    ("pytorch-late-warmup", SGD_NESTEROV, WARMUP_COSINE, {"schedule"}),
])
def test_a_broken_optimiser_term_fails_its_check(broken, tmp_path, framework, config, schedule, culprits):
    """Each broken term fails its check and the reference passes every check: AdamW's decoupled decay 100x
    fails the decay check, a schedule's warm-up, total or final rate read wrongly the schedule check."""
    made = optimizer.requests("probe", config, probes.probe_folder(framework, tmp_path), schedule)
    arrays = probes.run_probes(framework, [request for _, request in made], tmp_path)
    failed = {check.name for (check, _), out in zip(made, arrays, strict=True)
              if not all(row["passed"] for row in optimizer.rows(check, out))}
    assert culprits <= failed
    reference = probes.run_probes(REFERENCE, [request for _, request in made], tmp_path / "reference")
    assert all(row["passed"] for (check, _), out in zip(made, reference, strict=True)
               for row in optimizer.rows(check, out))


@pytest.mark.framework
def test_the_dropout_check_passes_the_reference_and_names_each_layer(store, tmp_path):
    workload = get_workload("cnn-mnist")
    folder = probes.probe_folder(REFERENCE, tmp_path)
    requests = layer_checks.dropout_requests(workload, folder)
    assert [(r["layer"], r["rate"], r["shape"]) for r in requests] == [("dropout_1", 0.25, [4, 4, 16]),
                                                                       ("dropout_2", 0.5, [128])]
    outputs = probes.run_probes(REFERENCE, requests, tmp_path)
    rows = [row for request, out in zip(requests, outputs, strict=True)
            for row in layer_checks.dropout_rows(request, out["output"])]
    assert [row["tensor"] for row in rows] == [f"dropout/dropout_{i}/{check}" for i in (1, 2)
                                              for check in ("zeros", "scale", "independence")]
    assert all(row["passed"] for row in rows), rows
    zeros = outputs[0]["output"] == 0
    assert zeros.size == layer_checks.DROPOUT_ELEMENTS and abs(zeros.mean() - 0.25) < 0.01


def test_dropout_rows_on_known_outputs():
    request = {"rate": 0.5, "shape": [4, 4, 16], "layer": "dropout_1", "kept": 1.0}
    rng = np.random.RandomState(0)
    count = layer_checks.DROPOUT_ELEMENTS // 256
    kept = rng.rand(count, 4, 4, 16) >= 0.5
    good = layer_checks.dropout_rows(request, kept * 2.0)
    assert [row["passed"] for row in good] == [True, True, True]
    unscaled = layer_checks.dropout_rows(request, kept * 1.0)
    assert [row["passed"] for row in unscaled] == [True, False, True]
    assert unscaled[1]["max_abs"] == pytest.approx(1.0)
    doubled = layer_checks.dropout_rows(request, (rng.rand(count, 4, 4, 16) >= 0.75) * 4.0)  # rate 0.75
    assert not doubled[0]["passed"] and doubled[0]["max_abs"] == pytest.approx(0.25, abs=0.01)
    channels = np.repeat(np.repeat(rng.rand(count, 1, 1, 16) >= 0.5, 4, axis=1), 4, axis=2) * 2.0
    assert [row["passed"] for row in layer_checks.dropout_rows(request, channels)][2] is False


def test_attention_dropout_rows_read_the_dropped_attention_weights(tmp_path):
    """The attention check's output (query i, head h, key j) is h's weight of key j after dropout: independent
    masks at the rate pass; masks shared by the heads, or a doubled rate, fail."""
    layer = {"type": "attention", "name": "attention_1", "heads": 2, "causal": True, "dropout": 0.1}
    workload = dataclasses.replace(transformer_pieces.gpt_workload(), build=lambda meta: ir.model(
        (8, 8), "float32", [ir.attention(2, causal=True, dropout=0.1), ir.dense(8)]))
    [request] = layer_checks.dropout_requests(workload, tmp_path)
    steps = layer_checks.ATTENTION_STEPS
    assert request["shape"] == [steps, 2, steps] and request["kept"] == 1 / steps and request["rate"] == 0.1
    assert request["model"]["layers"][0]["causal"] is False  # every weight 1 / steps
    x = np.load(request["x"])
    assert x.shape == (layer_checks.DROPOUT_ELEMENTS // (2 * steps * steps), steps, 2 * steps)
    rng = np.random.RandomState(1)
    kept = rng.rand(len(x), steps, 2, steps) >= 0.1
    judged = layer_checks.rows(request, kept / steps / 0.9)
    assert [row["passed"] for row in judged] == [True, True, True]
    shared = np.repeat(kept[:, :, :1], 2, axis=2)
    assert [row["passed"] for row in layer_checks.rows(request, shared / steps / 0.9)] == [True, True, False]
    doubled = rng.rand(len(x), steps, 2, steps) >= 0.2
    assert not layer_checks.rows(request, doubled / steps / 0.8)[0]["passed"]
    assert layer_checks.rebuilt(request, dict(layer, dropout=0.11))["model"]["layers"][0]["dropout"] == 0.11


def test_the_activation_check_tells_gelus_tanh_form_by_far(tmp_path):
    """GELU's tanh form strays from the exact one by 1.8e-4 of the input at most: 18 times the check's
    tolerance, whatever a model's outputs make of it; the exact form rounded to float32 passes. One check per
    function, named after its first layer."""
    [request] = layer_checks.activation_requests(transformer_pieces.workload(), tmp_path)
    assert (request["check"], request["fn"], request["layer"]) == ("activation", "gelu", "activation_1")
    x = np.load(request["x"]).astype(np.float64)
    exact = x * 0.5 * (1 + erf(x / np.sqrt(2)))
    [row] = layer_checks.rows(request, exact.astype(np.float32))
    assert row["passed"] and row["max_rel"] < 1e-6
    tanh = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    [row] = layer_checks.rows(request, tanh.astype(np.float32))
    assert not row["passed"] and row["max_rel"] > 15 * terms.TOLERANCES["activation"]
    relu = dict(request, fn="relu")
    assert layer_checks.rows(relu, np.maximum(x, 0))[0]["passed"]
    assert not layer_checks.rows(relu, exact)[0]["passed"]


@pytest.mark.framework
def test_batchnorms_moving_statistics_are_certified(broken, store, tmp_path):
    """The moving statistics after the steps are compared like every weight: a momentum given in the
    other convention leaves everything else equal and fails them alone."""
    [cert] = probes.certify(["pytorch-keras-momentum"], [get_workload("cnn-svhn")], store, tmp_path, quiet)
    failed = {row["tensor"] for row in cert["deviations"] if not row["passed"]}
    assert not cert["passed"] and failed
    assert all(name.split("/")[-1] in ("moving_mean", "moving_var") for name in failed)
    assert {name.split("/")[0] for name in failed} == {"after"}
    assert "after/batchnorm_1/moving_mean" in failed


@pytest.mark.framework
def test_runs_are_marked_with_their_certificate(broken, store, tmp_path):
    env = envs.require("pytorch-swapped-gates")
    code, reference = sources.framework_source("pytorch-swapped-gates"), sources.framework_source(REFERENCE)
    model = certified_model.workload_digest(get_workload("lstm-imdb"))

    def status(framework_env: str = env.packages_digest(), worker: str = code, of_reference: str = reference) -> str:
        return store.certificate_status("pytorch-swapped-gates", framework_env, "lstm-imdb", worker, of_reference,
                                        model)

    assert status() == "none"
    [cert] = probes.certify(["pytorch-swapped-gates"], [get_workload("lstm-imdb")], store, tmp_path, quiet)
    assert (cert["worker_source"], cert["reference_source"]) == (code, reference)
    assert status() == "failed"
    assert status(framework_env="another-env") == "none"
    # after a change to the adapter's code, or to the reference's, the verdict no longer counts
    assert status(worker="new") == "none" and status(of_reference="new") == "none"


def test_compare_names_missing_and_misshapen_tensors():
    reference = {"output": np.ones((2, 3)), "grad/a": np.ones(4), "after/b": np.ones(2), "loss": np.array(1.0)}
    candidate = {"output": np.ones((2, 3)) * (1 + 5e-5), "grad/a": np.ones(5), "loss": np.array(1.0 + 1e-9)}
    rows = {row["tensor"]: row for row in probes.compare(reference, candidate)}
    assert rows["output"]["passed"] and rows["output"]["max_rel"] == pytest.approx(5e-5)
    assert not rows["grad/a"]["passed"] and rows["grad/a"]["problem"] == "shape (5,) != (4,)"
    assert not rows["after/b"]["passed"] and rows["after/b"]["problem"] == "missing"
    assert rows["loss"]["passed"]


def test_tiny_deviations_of_near_zero_tensors_pass_by_the_absolute_floor():
    rows = probes.compare({"grad/a": np.array([1e-9, 0.0])}, {"grad/a": np.array([5e-8, 0.0])})
    assert rows[0]["passed"] and rows[0]["max_rel"] > 1


def test_weights_after_the_steps_are_measured_against_the_steps():
    start = {"w": np.array([1.0, -1.0])}
    reference = {"after/w": np.array([1.001, -1.0])}  # one step of 1e-3
    half_step_off = {"after/w": np.array([1.0015, -1.0])}  # tiny next to the weights, half the step
    [row] = probes.compare(reference, half_step_off, start)
    assert not row["passed"] and row["max_rel"] == pytest.approx(0.5)


def test_adams_steps_on_a_rounding_level_gradient_are_judged_by_the_amplified_rounding():
    """A weight whose exact gradient is 0 (a key bias's) and whose float32 gradients are 1e-10 and -9e-10: with
    Adam at epsilon 1e-8 each step moves it by about lr * g / (|g| + epsilon), +1e-5 in the reference and -1e-4
    in the candidate, 11 % of the tensor's steps apart after 3. That passes for Adam and AdamW (within 3 x the
    rounding 9e-10 times 3 lr / epsilon); the same deviation fails with SGD, and where the exact gradient is large."""
    lr = 1e-3
    start = {"b": np.zeros(2)}
    exact = {"grad/b": np.array([0.0, 1e-2]), "after/b": np.array([0.0, -3 * lr])}
    reference = {"grad/b": np.array([1e-10, 1e-2]), "after/b": np.array([3e-5, -3 * lr])}
    candidate = {"grad/b": np.array([-9e-10, 1e-2]), "after/b": np.array([-3e-4, -3 * lr])}
    adam = {"name": "adam", "lr": lr, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}

    def after_row(exact_values: dict, config: dict) -> dict:
        return next(r for r in probes.compare(reference, candidate, start, exact_values, config)
                    if r["tensor"] == "after/b")

    for config in (adam, dict(adam, name="adamw", weight_decay=0.01)):
        row = after_row(exact, config)
        assert row["passed"] and row["amplified_rounding"] == pytest.approx(3 * lr / 1e-8 * 9e-10)
        assert row["max_rel"] == pytest.approx(0.11)
    row = after_row(exact, {"name": "sgd", "lr": lr, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0})
    assert not row["passed"] and "amplified_rounding" not in row
    assert not after_row(dict(exact, **{"grad/b": np.array([1e-2, 1e-2])}), adam)["passed"]


@pytest.mark.framework
def test_certify_fills_the_machines_missing_pairs_and_again_certifies_anew(tmp_path, capsys, monkeypatch):
    machine = tmp_path / "machine" / "certificates.sqlite"
    monkeypatch.setenv("DLBENCH_CERTIFICATES", str(machine))
    command = ["certify", "-f", REFERENCE, "-w", "lstm-imdb", "--results", str(tmp_path / "first")]
    assert main(command) == 0
    with Store(machine) as store:
        [first] = store.certificates()
    assert first["workload_digest"] == certified_model.workload_digest(get_workload("lstm-imdb")) and first["passed"]
    # from another results folder: the pair holds a certificate, so nothing is probed
    assert main([*command[:-1], str(tmp_path / "second")]) == 0
    assert "pytorch lstm-imdb: certified already (pass" in capsys.readouterr().out
    assert not (tmp_path / "second").exists()
    with Store(machine) as store:
        assert [cert["id"] for cert in store.certificates()] == [first["id"]]
    assert main([*command[:-1], str(tmp_path / "third"), "--again"]) == 0
    with Store(machine) as store:
        assert len(store.certificates()) == 2
    capsys.readouterr()
    assert main(["certify", "--show"]) == 0
    shown = capsys.readouterr().out
    assert "lstm-imdb" in shown and "pass" in shown and "x tol" in shown and str(machine) in shown


@pytest.fixture(scope="session")
def certify_dir(session_dir) -> Path:
    """The probes' folder of the session: its compile cache is the adapter checks' too."""
    return session_dir / "certify"


def probed_workloads() -> list:
    """Every workload, then the tests' own: the Transformer pieces, the tiny GPT, the tiny LLaMA and the pieces
    with AdamW."""
    return ALL_WORKLOADS + [transformer_pieces.workload(), transformer_pieces.gpt_workload(),
                            transformer_pieces.llama_workload(), pieces_with_adamw()]


@pytest.fixture(scope="session")
def reference(certify_dir) -> dict:
    """The reference's probes of every probed workload, once for all the frameworks' certificates."""
    return probes.reference_probes(probed_workloads(), certify_dir)


@pytest.fixture(scope="module", params=CANDIDATES)
def certificates(request, tmp_path_factory, certify_dir, reference) -> dict[str, dict]:
    """One probe process per framework, as `dlbench certify` runs it, against the shared reference: the
    framework's certificate of each probed workload, by workload."""
    with Store(tmp_path_factory.mktemp("certificates") / "dlbench.sqlite") as opened:
        made = probes.certify([request.param], probed_workloads(), opened, certify_dir, quiet, reference)
    return {cert["workload"]: cert for cert in made}


@pytest.mark.framework
def test_every_workload_certifies(certificates):
    assert set(certificates) == {workload.name for workload in probed_workloads()}
    assert [name for name in certificates if name in WORKLOADS] == sorted(WORKLOADS)
    failed = {name: [(row["tensor"], row["max_rel"], row.get("error"), row.get("problem"))
                     for row in certificates[name]["deviations"] if not row["passed"]]
              for name in WORKLOADS if not certificates[name]["passed"]}
    assert failed == {}


@pytest.mark.framework
def test_the_transformer_pieces_certify(certificates):
    """The pieces of issue #30 (transformer_pieces.py), in a tiny model of their own: outputs, loss, gradients
    and the optimizer's steps against the reference's."""
    cert = certificates[transformer_pieces.NAME]
    worst = {}
    for row in cert["deviations"]:
        if row["kind"] in ("output", "loss", "grad", "after") and row["max_rel"] is not None:
            worst[row["kind"]] = max(worst.get(row["kind"], 0.0), row["max_rel"])
    print(f"{cert['framework']}: worst relative deviation by kind {({k: float(f'{v:.3g}') for k, v in worst.items()})}")
    assert cert["passed"], [(row["tensor"], row["max_rel"], row.get("problem")) for row in cert["deviations"]
                            if not row["passed"]]
    assert {"output", "loss", "grad", "after"} <= {row["kind"] for row in cert["deviations"]}


@pytest.mark.framework
def test_the_transformer_blocks_certify(certificates):
    """Residual blocks, causal attention, learned positions and the tied output (transformer_pieces.gpt_model):
    outputs, loss, gradients (the tied table's summed over both uses) and the optimizer's steps."""
    cert = certificates[transformer_pieces.GPT_NAME]
    assert cert["passed"], [(row["tensor"], row["max_rel"], row.get("problem")) for row in cert["deviations"]
                            if not row["passed"]]
    assert {"output", "loss", "grad", "after"} <= {row["kind"] for row in cert["deviations"]}


@pytest.mark.framework
def test_the_llama_blocks_certify(certificates):
    """RMS normalisation, grouped-query attention with rotary embeddings and SwiGLU (transformer_pieces.llama_model):
    outputs, loss, gradients and the optimizer's steps against the reference's."""
    cert = certificates[transformer_pieces.LLAMA_NAME]
    worst = max(row["max_rel"] for row in cert["deviations"] if row["max_rel"] is not None)
    print(f"{cert['framework']}: llama-blocks' worst relative deviation {worst:.3g}")
    assert cert["passed"], [(row["tensor"], row["max_rel"], row.get("problem")) for row in cert["deviations"]
                            if not row["passed"]]
    assert {"output", "loss", "grad", "after"} <= {row["kind"] for row in cert["deviations"]}


@pytest.mark.framework
def test_the_detectors_certificate_exercises_every_loss(reference):
    """The fixed proposals and boxes of frcnn-voc's probe give every one of the four losses a value."""
    float32 = reference["frcnn-voc", "float32"].same
    for name in ("rpn_objectness", "rpn_box", "head_class", "head_box"):
        assert float(float32["loss/" + name]) > 0, name
    assert float32["output/class_logits"].shape == (probes.DETECTOR_ROIS, 21)
    assert float32["output/rpn_objectness"].shape == (4 * 6 * 9,)


@pytest.mark.framework
def test_a_failing_probe_names_its_workload_and_keeps_the_others(broken, tmp_path, monkeypatch):
    """One probe process serves several workloads: a workload that fails is named with its traceback,
    and the workloads before and after it still ran."""
    good, bad = get_workload("lstm-imdb"), get_workload("lstm-ptb")
    real_request = probes.weights_request

    def request_with_a_missing_batch(workload, folder, exact):
        request = real_request(workload, folder, exact)
        return dict(request, x=str(folder / "nowhere.npy")) if workload is bad else request

    monkeypatch.setattr(probes, "weights_request", request_with_a_missing_batch)
    with pytest.raises(probes.CertifyError, match=r"pytorch lstm-ptb: the probe failed(.|\n)*nowhere\.npy"):
        probes.probe_many(REFERENCE, [(good, False), (bad, False), (good, True)], tmp_path)
    assert (tmp_path / REFERENCE / "lstm-imdb.npz").is_file()
    assert (tmp_path / REFERENCE / "lstm-imdb-float64.npz").is_file()


def test_measured_runs_never_inherit_the_shared_compile_cache(monkeypatch, tmp_path):
    """Probes share compiled code (they time nothing); a run's worker compiles cold in its own folder
    even when the harness itself was started with DLBENCH_COMPILE_CACHE set."""
    monkeypatch.setenv("DLBENCH_COMPILE_CACHE", str(tmp_path / "shared"))
    assert "DLBENCH_COMPILE_CACHE" not in worker_environment(tmp_path / "run", 2, {})
    probing = worker_environment(tmp_path / "probe", 1, {"DLBENCH_COMPILE_CACHE": str(tmp_path / "shared")})
    assert probing["DLBENCH_COMPILE_CACHE"] == str(tmp_path / "shared")


def test_a_shared_suite_gives_cache_using_frameworks_one_folder_each(monkeypatch, tmp_path):
    """compile_cache: shared points a framework that compiles into a cache (theano) at one folder per
    framework under the results; other frameworks, and cold suites, keep compiling in their run folder."""
    monkeypatch.delenv("DLBENCH_COMPILE_CACHE", raising=False)
    results = tmp_path / "results"

    def cell(framework: str, cache: str) -> Cell:
        return Cell("s", framework, "cnn-mnist", "digits-28", "cpu", 1, 0, 1, 32, 1, 60.0, cache)

    shared = cell_config.shared_compile_cache(results, cell("theano", "shared"))
    assert shared == results / "compile-cache" / "theano"
    assert cell_config.shared_compile_cache(results, cell("theano", "cold")) is None
    assert cell_config.shared_compile_cache(results, cell(REFERENCE, "shared")) is None
    variables = worker_environment(tmp_path / "run", 1, {}, shared)
    assert variables["DLBENCH_COMPILE_CACHE"] == str(shared) and shared.is_dir()
    assert "DLBENCH_COMPILE_CACHE" not in worker_environment(tmp_path / "run", 1, {}, None)


def test_the_cache_state_is_cold_until_the_shared_folder_holds_a_file(tmp_path):
    theano = Cell("s", "theano", "cnn-mnist", "digits-28", "cpu", 1, 0, 1, 32, 1, 60.0, "shared")
    folder = tmp_path / "compile-cache" / "theano"
    assert cell_config.compile_cache_state(theano, folder) == "cold"  # absent
    (folder / "compiledir_x" / "lock_dir").mkdir(parents=True)
    assert cell_config.compile_cache_state(theano, folder) == "cold"  # folders, no compiled file yet
    (folder / "compiledir_x" / "mod.so").write_bytes(b"\0")
    assert cell_config.compile_cache_state(theano, folder) == "warm"
    assert cell_config.compile_cache_state(dataclasses.replace(theano, compile_cache="cold"), None) == "cold"
    pytorch = dataclasses.replace(theano, framework=REFERENCE)
    assert cell_config.compile_cache_state(pytorch, folder) is None  # the setting changes nothing for it


def test_the_optimiser_rule_refuses_what_it_has_no_formula_for():
    with pytest.raises(optimizer.OptimizerError, match="optimizer 'lamb': no rule for it; known: sgd"):
        optimizer.checks({"name": "lamb", "lr": 1e-3})
    with pytest.raises(optimizer.OptimizerError, match="optimizer adamw: missing weight_decay"):
        optimizer.checks({k: v for k, v in ADAMW.items() if k != "weight_decay"})
    with pytest.raises(optimizer.OptimizerError, match="schedule 'step': no rule for it; known: warmup_cosine"):
        optimizer.rule_steps(ADAMW, optimizer.start_weights(), optimizer.checks(ADAMW)[0].gradients, (1,),
                             {"name": "step"})
    with pytest.raises(optimizer.OptimizerError, match="unknown setting.*amsgrad.*accepted: lr, beta1"):
        optimizer.checks(dict(get_workload("lstm-imdb").recipe["optimizer"], amsgrad=True))
    with pytest.raises(optimizer.OptimizerError, match="optimizer sgd: missing nesterov"):
        optimizer.checks({"name": "sgd", "lr": 0.1, "momentum": 0.0, "weight_decay": 0.0})


def test_each_check_makes_its_terms_dominate():
    """Zero gradients where L2 is declared (SGD's step raised to DECAY_STEP of the weights), gradients of
    epsilon's scale where epsilon is, and a long sequence for every optimiser."""
    cnn = optimizer.checks(get_workload("cnn-mnist").recipe["optimizer"])
    assert [check.name for check in cnn] == ["decay", "sequence"]
    decay = cnn[0]
    assert decay.config["lr"] * decay.config["weight_decay"] == pytest.approx(optimizer.DECAY_STEP)
    assert all(not value.any() for value in decay.gradients.values())
    adam = optimizer.checks(get_workload("lstm-imdb").recipe["optimizer"])
    assert [check.name for check in adam] == ["epsilon", "sequence"]
    epsilon = adam[0].gradients["dense_1/kernel"]
    assert 0.5e-7 <= np.abs(epsilon).min() and np.abs(epsilon).max() <= 2e-7
    assert len(adam[1].gradients["dense_1/bias"]) == optimizer.SEQUENCE_STEPS


@pytest.mark.framework
@pytest.mark.parametrize("workload", ["cnn-mnist", "lstm-imdb", "frcnn-voc"])
def test_every_value_of_a_workload_is_seen_or_explained(certify_dir, workload):
    """One workload of each family: every value of its model and recipe, changed, fails certification
    against the true reference, or the table says why it cannot (certify --power runs all of them)."""
    rows = power.power(get_workload(workload), certify_dir / "power")
    assert not [row["value"] for row in rows if row["why"] == power.UNEXPLAINED]
    optimizer_seen = {row["value"]: row["seen"] for row in rows if row["value"].startswith("recipe.optimizer.")}
    assert optimizer_seen and all(optimizer_seen.values())
    not_seen = {row["value"] for row in rows if row["seen"] is False}
    assert "recipe.epochs" in not_seen
    assert ("recipe.batch_size" in not_seen) == (workload != "frcnn-voc")  # a detector refuses all but 1
    layers = [row for row in rows if not row["value"].startswith(("recipe.", "detector."))]
    assert sum(row["seen"] is True for row in layers) >= 0.8 * len(layers)
    if workload == "cnn-mnist":
        [rate] = [row for row in rows if row["value"] == "dropout_1.rate"]
        assert rate["seen"] and rate["by"].startswith("dropout/dropout_1/")
        [padding] = [row for row in rows if row["value"] == "maxpool2d_1.padding"]
        assert padding["seen"] is False and "pads nothing on a 24x24 input" in padding["why"]


@pytest.mark.framework
def test_every_value_of_the_transformer_blocks_is_seen_or_explained(certify_dir):
    """certify --power on the GPT-style blocks: attention's heads and causal mask, the positions' max_len and
    every layer normalisation's epsilon (inside residual blocks too) and attention's dropout (by its own check)
    are seen; widths that break a residual block or the tie make no model."""
    rows = {row["value"]: row for row in power.power(transformer_pieces.gpt_workload(), certify_dir / "power")}
    assert not [value for value, row in rows.items() if row["why"] == power.UNEXPLAINED]
    seen = ["residual_1_attention_1.heads", "residual_1_attention_1.causal", "positional_embedding_1.max_len",
            "residual_1_layer_norm_1.epsilon", "residual_2_layer_norm_1.epsilon", "layer_norm_1.epsilon",
            "residual_2_dense_1.units", "residual_2_activation_1.fn"]
    assert {value: rows[value]["seen"] for value in seen} == dict.fromkeys(seen, True)
    assert rows["residual_1_attention_1.heads"]["changed to"] == 4
    assert rows["residual_2_layer_norm_1.epsilon"]["by"] == "layer_norm/residual_2_layer_norm_1/inference"
    dropout = rows["residual_1_attention_1.dropout"]
    assert dropout["seen"] and dropout["by"].startswith("dropout/residual_1_attention_1/")
    for value in ("tied_output_1.units", "embedding_1.vocab", "residual_2_dense_2.units"):
        assert rows[value]["seen"] is None and rows[value]["by"].startswith("not a valid model"), value


@pytest.mark.framework
def test_every_value_of_the_llama_blocks_is_seen(certify_dir):
    """certify --power on the tiny LLaMA: every RMS normalisation's epsilon (by its own probe), the query and
    key/value heads, the causal mask, the rotary base and SwiGLU's width, each changed, fail certification (a
    change that makes no valid model, the key/value heads doubled past the query heads, is not a model to run)."""
    rows = {row["value"]: row for row in power.power(transformer_pieces.llama_workload(), certify_dir / "power")}
    assert not [value for value, row in rows.items() if row["why"] == power.UNEXPLAINED]
    invalid = {value for value, row in rows.items() if row["seen"] is None}  # widths no model takes
    assert {row["by"].split(":")[0] for value, row in rows.items() if value in invalid} == {"not a valid model"}
    assert "embedding_1.dim" in invalid and "residual_3_grouped_query_attention_1.kv_heads" in invalid
    layers = [value for value in rows if not value.startswith("recipe.") and value not in invalid]
    assert {value: rows[value]["seen"] for value in layers} == dict.fromkeys(layers, True)
    attention = "residual_1_grouped_query_attention_1"
    assert {f"{attention}.{key}" for key in ("heads", "kv_heads", "causal", "rope_base")} <= set(layers)
    assert {"residual_3_grouped_query_attention_1.causal", "residual_3_grouped_query_attention_1.rope_base"} <= set(
        layers)
    assert rows["residual_2_rms_norm_1.epsilon"]["by"] == "rms_norm/residual_2_rms_norm_1/inference"
    assert rows["residual_2_swiglu_1.hidden"]["seen"] and rows["rms_norm_1.epsilon"]["seen"]


def test_changes_cover_every_kind_of_value():
    assert power.changed("momentum", 0.9) == pytest.approx(0.89)
    assert power.changed("epsilon", 1e-7) == pytest.approx(1.1e-7)
    assert power.changed("rate", 0.5) == pytest.approx(0.55)
    assert power.changed("stride", 1) == 2 and power.changed("filters", 64) == 70
    assert power.changed("padding", "valid") == "same" and power.changed("fn", "tanh") == "gelu"
    assert power.changed("nesterov", False) is True
    assert power.changed("heads", 2) == 4
    model = get_workload("cnn-mnist").model()
    labels = {change.label for change in power.changes(model, get_workload("cnn-mnist").recipe)}
    assert {"conv2d_1.kernel", "activation_2.fn", "dropout_2.rate", "dense_2.units", "recipe.optimizer.weight_decay",
            "recipe.batch_size"} <= labels
    assert not any(label.endswith((".type", ".name")) for label in labels if not label.startswith("recipe."))


@pytest.mark.framework
def test_batchnorms_epsilon_is_checked_where_it_dominates(tmp_path):
    """In the workloads BatchNorm's variances dwarf its epsilon (cnn-svhn's deep stack hid a 10 % change
    in its float32 noise); the check of each BatchNorm layer alone, from moving variances of epsilon's
    scale, passes the reference and fails an epsilon 10 % off."""
    requests = layer_checks.batchnorm_requests(get_workload("cnn-svhn"), probes.probe_folder(REFERENCE, tmp_path))
    assert [request["layer"] for request in requests] == [f"batchnorm_{i}" for i in range(1, 9)]
    [output] = probes.run_probes(REFERENCE, requests[:1], tmp_path)
    [row] = layer_checks.batchnorm_rows(requests[0], output["output"])
    assert row["passed"] and row["max_rel"] < 1e-6
    layer = dict(requests[0]["model"]["layers"][0], epsilon=1.1e-3)
    [wrong] = layer_checks.batchnorm_rows(dict(requests[0], model=layer_checks.batchnorm_model(layer)),
                                          output["output"])
    assert not wrong["passed"] and wrong["max_rel"] > 100 * terms.TOLERANCES["output"]


@pytest.mark.framework
def test_every_value_of_adamw_and_its_schedule_is_seen_by_the_optimiser_certificate(tmp_path):
    """certify --power on a recipe with AdamW and warmup_cosine: each optimiser and schedule value, changed,
    fails the true reference's optimiser certificate (a schedule value in the probe's own schedule)."""
    recipe = dict(get_workload("lstm-imdb").recipe, optimizer=ADAMW, schedule=WARMUP_COSINE)
    workload = dataclasses.replace(get_workload("lstm-imdb"), recipe=recipe)
    checks = probes.optimizer_requests(workload, probes.probe_folder(REFERENCE, tmp_path))
    assert [check.name for check, _ in checks] == ["decay", "epsilon", "sequence", "schedule"]
    outputs = probes.run_probes(REFERENCE, [request for _, request in checks], tmp_path)
    assert all(row["passed"] for (check, _), out in zip(checks, outputs, strict=True)
               for row in optimizer.rows(check, out))
    changes = [change for change in power.changes(workload.model(), recipe)
               if change.path[1] in ("optimizer", "schedule")]
    settings = [f"optimizer.{key}" for key in ("name", *OPTIMIZER_SETTINGS["adamw"])]
    settings += [f"schedule.{key}" for key in ("warmup_steps", "total_steps", "final_lr_fraction")]
    assert sorted(change.label for change in changes) == sorted(f"recipe.{setting}" for setting in settings)
    for change in changes:
        rows = power._optimizer_rows(change, checks, outputs)
        assert not all(row["passed"] for row in rows), change.label
    # the Transformers' warm-up as a share of the updates: resolved by the harness, which no adapter reads
    fraction = {key: value for key, value in WARMUP_COSINE.items() if key != "warmup_steps"}
    fraction.update(warmup_fraction=0.05, total_steps="auto")
    [change] = [change for change in power.changes(workload.model(), dict(recipe, schedule=fraction))
                if change.label == "recipe.schedule.warmup_fraction"]
    rows = power._optimizer_rows(change, checks, outputs)
    assert rows and all(row["passed"] for row in rows)
    assert "no adapter reads it" in power._why(workload, workload.model(), change)
    assert "warmup_fraction" not in optimizer.probe_schedule(fraction)


def pieces_with_adamw():
    """The Transformer pieces trained with AdamW and a warm-up and cosine schedule whose total the harness would
    resolve per cell ("auto"): the certificate runs its own warm-up and total (optimizer.PROBE_SCHEDULE)."""
    pieces = transformer_pieces.workload()
    schedule = dict(WARMUP_COSINE, total_steps="auto")
    return dataclasses.replace(pieces, name=f"{pieces.name}-adamw",
                               recipe=dict(pieces.recipe, optimizer=ADAMW, schedule=schedule))


@pytest.mark.framework
def test_adamw_with_warmup_cosine_certifies(certificates):
    """Each framework's AdamW and schedule pass every check of the optimiser certificate (the decay, epsilon,
    sequence and schedule checks), beside the pieces' outputs, gradients and steps."""
    cert = certificates[pieces_with_adamw().name]
    checked = {row["tensor"].split("/")[1] for row in cert["deviations"] if row["kind"] == "optimizer"}
    assert checked == {"decay", "epsilon", "sequence", "schedule"}
    assert cert["passed"], [(row["tensor"], row["max_rel"], row.get("problem")) for row in cert["deviations"]
                            if not row["passed"]]
