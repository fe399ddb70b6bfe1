"""What a workload's certificate is of: the model its probes train, and the digest of model and recipe that
a certificate is keyed by. It stands below probes.py, which probes, and below the run record and the
machine's store (machine_store.py), which look certificates up."""
import hashlib
import json

from dlbench.harness.plan.workloads import Workload

# A detector is certified on one image of this short and long side (probes.detector_request).
DETECTOR_SIDES = (64, 96)


def without_dropout(model: dict) -> dict:
    """The model with every dropout off: dropout layers' rates and attention's dropout 0, inside residual
    blocks too."""
    return dict(model, layers=_layers_without_dropout(model["layers"]))


def _layers_without_dropout(layers: list[dict]) -> list[dict]:
    off = []
    for layer in layers:
        if layer["type"] == "dropout":
            layer = dict(layer, rate=0.0)
        elif layer["type"] == "attention":
            layer = dict(layer, dropout=0.0)
        elif layer["type"] == "residual":
            layer = dict(layer, layers=_layers_without_dropout(layer["layers"]))
        off.append(layer)
    return off


def certified_model(workload: Workload) -> dict:
    """The model a workload is certified on: its own, dropout off; a detector's on a small canvas
    (DETECTOR_SIDES), which changes no weight's shape: RoI Align fixes the head's input."""
    if workload.study_meta["task"] == "detection":
        short, long = DETECTOR_SIDES
        return workload.model(dict(workload.study_meta, min_side=short, max_side=long))
    return without_dropout(workload.model())


def workload_digest(workload: Workload) -> str:
    """What a workload's certificate covers, as a digest: the model the probes train (certified_model), the
    model its dropout layers are checked from, and its recipe but the epochs (a probe takes probes.STEPS steps).
    A changed model or recipe under the same name is not covered by an older certificate."""
    covered = {"certified_model": certified_model(workload), "model": workload.model(),
               "recipe": {key: value for key, value in workload.recipe.items() if key != "epochs"}}
    return hashlib.sha256(json.dumps(covered, sort_keys=True).encode()).hexdigest()[:16]
