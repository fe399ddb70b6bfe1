"""The DLBench study's workloads, declared once: model IR + dataset + training recipe + target.

A workload builds its model from a dataset's meta (input shape, classes, vocabulary), so the same
architecture runs on the study's dataset or on a stand-in such as the quick suite's offline data.
"""
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlbench.shared import ir

# The most epochs and the largest batch a cell may have, whether a suite, the command line or a user's workload
# file gives them: every value under them is one the store holds and a forecast multiplies (epochs x seconds)
MAX_EPOCHS = 100_000  # `dlbench estimate --epochs` 10^400 raised OverflowError
MAX_BATCH_SIZE = 1 << 20  # 1,048,576 samples, far above any batch a training step holds in memory


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    study_dataset: str
    study_meta: dict[str, Any]  # the study dataset's shapes, to count parameters without its data
    build: Callable[[dict], dict]  # dataset meta -> model IR
    recipe: dict[str, Any]
    target: dict[str, Any]  # metric, value, and whether higher is better
    tasks: tuple[str, ...] = field(default=("classification",))

    def model(self, meta: dict | None = None) -> dict:
        return self.build(meta or self.study_meta)


def _image_input(meta: dict) -> tuple[list[int], str]:
    return meta["input_shape"], "float32"


def _cnn_mnist(meta: dict) -> dict:
    shape, dtype = _image_input(meta)
    return ir.model(shape, dtype, [
        ir.conv2d(32), ir.relu(), ir.conv2d(64), ir.relu(), ir.maxpool2d(2), ir.dropout(0.25),
        ir.flatten(), ir.dense(128), ir.relu(), ir.dropout(0.5), ir.dense(meta["num_classes"]),
    ])


def _cnn_cifar10(meta: dict) -> dict:
    shape, dtype = _image_input(meta)
    layers = []
    for filters in (32, 64):
        layers += [ir.conv2d(filters, padding="same"), ir.relu(), ir.conv2d(filters), ir.relu(),
                   ir.maxpool2d(2), ir.dropout(0.25)]
    layers += [ir.flatten(), ir.dense(512), ir.relu(), ir.dropout(0.5), ir.dense(meta["num_classes"])]
    return ir.model(shape, dtype, layers)


def _cnn_cifar100(meta: dict) -> dict:
    shape, dtype = _image_input(meta)
    layers = []
    for filters, rate in ((128, 0.1), (256, 0.25), (512, 0.5)):
        layers += [ir.conv2d(filters, padding="same"), ir.relu(), ir.conv2d(filters), ir.relu(),
                   ir.maxpool2d(2), ir.dropout(rate)]
    layers += [ir.flatten(), ir.dense(1024), ir.relu(), ir.dropout(0.5), ir.dense(meta["num_classes"])]
    return ir.model(shape, dtype, layers)


def _cnn_svhn(meta: dict) -> dict:
    shape, dtype = _image_input(meta)
    layers = []
    for block, filters in enumerate((48, 64, 128, 160, 192, 192, 192, 192)):
        stride = 2 if block % 2 == 0 else 1  # the study's "odd" blocks, counted from one
        layers += [ir.conv2d(filters, kernel=5, padding="same"), ir.batchnorm(), ir.relu(),
                   ir.maxpool2d(2, stride=stride, padding="same"), ir.dropout(0.2)]
    layers += [ir.flatten(), ir.dense(3072), ir.relu(), ir.dropout(0.5), ir.dense(meta["num_classes"])]
    return ir.model(shape, dtype, layers)


def _lstm_imdb(meta: dict) -> dict:
    return ir.model([meta["seq_len"]], "int32", [
        ir.embedding(meta["vocab_size"], 32), ir.lstm(100), ir.dense(1),
    ])


def _lstm_ptb(meta: dict) -> dict:
    return ir.model([meta["seq_len"]], "int32", [
        ir.embedding(meta["vocab_size"], 200), ir.lstm(200, return_sequences=True),
        ir.lstm(200, return_sequences=True), ir.dropout(0.5), ir.dense(meta["vocab_size"]),
    ])


def _seq2seq(meta: dict) -> dict:
    return ir.model([meta["source_len"] + meta["target_len"]], "int32", [
        ir.seq2seq(meta["source_len"], meta["source_vocab_size"], meta["target_vocab_size"], 256, 256),
        ir.dense(meta["target_vocab_size"]),
    ])


def _frcnn(meta: dict) -> dict:
    """Faster R-CNN on a VGG-style backbone trained from scratch (no pretrained weights): four blocks
    of a 3x3 conv (32, 64, 128, 256 filters) + ReLU + 2x2 max-pool make the stride-16 map. Anchors
    scale with the images: py-faster-rcnn's scales 8, 16, 32 (128 to 512 pixels) belong to a short
    side of 600, so a dataset prepared smaller gets them times min_side / 600.

    What carries no gradient (anchors, the sampling of anchors and RoIs, proposals' decoding, the
    detections' post-processing, RoI Align's sampling plan) is shared numpy on the worker side
    (shared/detection/pipeline.py): one seeded implementation makes every framework sample the same anchors
    and RoIs, so frameworks can differ only in what they compute. NMS and RoI Align themselves are
    each framework's (worker/frameworks/*/detector.py), its own op where it has one."""
    canvas = [-(-side // ir.FEATURE_STRIDE) * ir.FEATURE_STRIDE for side in (meta["min_side"], meta["max_side"])]
    backbone = []
    for filters in (32, 64, 128, 256):
        backbone += [ir.conv2d(filters, padding="same"), ir.relu(), ir.maxpool2d(2)]
    scale = meta["min_side"] / 600
    return ir.detector(canvas, backbone, rpn_channels=256, head_units=[512, 512],
                       num_classes=meta["num_classes"] + 1, anchor_scales=[s * scale for s in (8, 16, 32)])


def _transformer_block(width: int, heads: int, causal: bool, mlp: int, rate: float) -> list[dict]:
    """A pre-LN Transformer block (GPT-2's and ViT's order): x + drop(attn(ln(x))), then x + drop(mlp(ln(x)))
    with a GELU MLP. The attention weights themselves are not dropped: every dropout is a layer of its own."""
    return [ir.residual([ir.layer_norm(), ir.attention(heads, causal=causal), ir.dropout(rate)]),
            ir.residual([ir.layer_norm(), ir.dense(mlp), ir.activation("gelu"), ir.dense(width), ir.dropout(rate)])]


# Both Transformers: 4 blocks of width 128, 4 heads of 32, an MLP of 512 (4x), dropout 0.1
_WIDTH, _HEADS, _BLOCKS, _MLP, _RATE = 128, 4, 4, 512, 0.1


def _transformer_lm(meta: dict) -> dict:
    """A GPT-style decoder over the dataset's windows: its context is their length (lstm-ptb's 30 tokens on
    PTB, so the two language models read the same windows and their perplexities compare directly)."""
    layers = [ir.embedding(meta["vocab_size"], _WIDTH), ir.positional_embedding(meta["seq_len"]), ir.dropout(_RATE)]
    for _ in range(_BLOCKS):
        layers += _transformer_block(_WIDTH, _HEADS, True, _MLP, _RATE)
    return ir.model([meta["seq_len"]], "int32", layers + [ir.layer_norm(), ir.tied_output("embedding_1")])


VIT_PATCH = 4


def _vit(meta: dict) -> dict:
    """A vision Transformer: 4x4 patches embedded by a conv2d of kernel and stride 4, a learned position per
    patch, the blocks without a mask, and the mean over the patches into the classifier (no class token)."""
    shape, dtype = _image_input(meta)
    patches = (shape[0] // VIT_PATCH) * (shape[1] // VIT_PATCH)
    layers = [ir.conv2d(_WIDTH, kernel=VIT_PATCH, stride=VIT_PATCH), ir.to_sequence(), ir.positional_embedding(patches),
              ir.dropout(_RATE)]
    for _ in range(_BLOCKS):
        layers += _transformer_block(_WIDTH, _HEADS, False, _MLP, _RATE)
    return ir.model(shape, dtype, layers + [ir.layer_norm(), ir.sequence_mean(), ir.dense(meta["num_classes"])])


def _adamw_recipe(lr: float, weight_decay: float, batch_size: int, epochs: int, loss: str) -> dict:
    """AdamW with a linear warm-up over the first 5 % of the cell's updates, then a cosine to a tenth of lr.
    The warm-up is a fraction, so that a quick cell of a few dozen updates warms up as a long one does.
    Epsilon 1e-6 (BERT's) rather than torch's 1e-8: a weight whose gradient is at float32's rounding level
    (an attention key bias's is 0 in exact arithmetic: softmax ignores a constant added to every score) would
    move by up to lr a step on rounding alone with 1e-8, differently in frameworks that compute the same
    thing; with 1e-6 such a step stays below a thousandth of lr, and certificates compare computation."""
    return {"optimizer": {"name": "adamw", "lr": lr, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6,
                          "weight_decay": weight_decay},
            "schedule": {"name": "warmup_cosine", "warmup_fraction": 0.05, "total_steps": "auto",
                         "final_lr_fraction": 0.1},
            "batch_size": batch_size, "epochs": epochs, "loss": loss}


# The common CNN recipe of WORKLOADS.md: L2 is coupled (added to the gradient) on every weight.
_CNN_SGD = {"name": "sgd", "lr": 0.01, "momentum": 0.5, "nesterov": False, "weight_decay": 1e-6}


def _cnn_recipe(epochs: int) -> dict:
    return {"optimizer": dict(_CNN_SGD), "batch_size": 128, "epochs": epochs, "loss": "softmax_cross_entropy"}


def _image_meta(side: int, channels: int, classes: int) -> dict:
    return {"task": "classification", "input_shape": [side, side, channels], "num_classes": classes}


def _accuracy_target(percent: float) -> dict:
    return {"metric": "accuracy", "value": percent / 100, "higher_is_better": True}


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("cnn-mnist", "2 conv + 2 dense CNN for 28x28 grey digits", "mnist",
             _image_meta(28, 1, 10), _cnn_mnist, _cnn_recipe(15), _accuracy_target(98.5)),
    Workload("cnn-cifar10", "the classic Keras CIFAR-10 CNN (4 conv, 2 dense)", "cifar10",
             _image_meta(32, 3, 10), _cnn_cifar10, _cnn_recipe(100), _accuracy_target(75)),
    Workload("cnn-cifar100", "3 blocks of 2 conv (128/256/512) + 2 dense", "cifar100",
             _image_meta(32, 3, 100), _cnn_cifar100, _cnn_recipe(200), _accuracy_target(45)),
    Workload("cnn-svhn", "8 blocks of 5x5 conv + BatchNorm + pool, 2 dense", "svhn",
             _image_meta(32, 3, 10), _cnn_svhn, _cnn_recipe(100), _accuracy_target(95)),
    Workload("lstm-imdb", "embedding 32, LSTM 100 (last output), sigmoid output: sentiment", "imdb",
             {"task": "binary", "vocab_size": 5000, "seq_len": 500}, _lstm_imdb,
             {"optimizer": {"name": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
              "batch_size": 64, "epochs": 50, "loss": "sigmoid_cross_entropy"},
             _accuracy_target(85), ("binary",)),
    Workload("lstm-ptb", "embedding 200, 2 stacked LSTM 200, dropout, dense per step: language model", "ptb",
             {"task": "language_model", "vocab_size": 10000, "seq_len": 30}, _lstm_ptb,
             {"optimizer": {"name": "adadelta", "lr": 1.0, "rho": 0.95, "epsilon": 1e-6},
              "batch_size": 20, "epochs": 50, "loss": "sequence_softmax_cross_entropy"},
             {"metric": "perplexity", "value": 200.0, "higher_is_better": False}, ("language_model",)),
    # The vocabularies and lengths come from the prepared pairs; the study-size figures below (used only
    # to list parameters and FLOPs) are estimates for the first 100,000 spa-eng pairs.
    Workload("seq2seq-manythings", "LSTM encoder-decoder 256, teacher forcing, masked loss: translation",
             "manythings", {"task": "translation", "source_vocab_size": 24000, "target_vocab_size": 12000,
                            "source_len": 20, "target_len": 18}, _seq2seq,
             {"optimizer": {"name": "adam", "lr": 1e-4, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
              "batch_size": 128, "epochs": 100, "loss": "masked_sequence_softmax_cross_entropy"},
             _accuracy_target(70), ("translation",)),
    # py-faster-rcnn's solver (VGG16, VOC) but for the learning rate: momentum 0.9, L2 5e-4 coupled, one
    # image a batch. Its lr 1e-3 fine-tunes an ImageNet-pretrained VGG16; this backbone starts from
    # scratch, and on photo-boxes (PyTorch) 1e-3 left the training images' mAP at 0.005 after 40 epochs
    # where 1e-2 reached 0.38. The study published no settings; the target is dlbench's (about half of
    # what Ren et al. report with pretrained backbones).
    Workload("frcnn-voc", "Faster R-CNN: 4-block VGG-style backbone, RPN (9 anchors), RoI Align 7x7, 2 dense 512",
             "voc2012", {"task": "detection", "min_side": 600, "max_side": 1000, "num_classes": 20}, _frcnn,
             {"optimizer": {"name": "sgd", "lr": 1e-2, "momentum": 0.9, "nesterov": False, "weight_decay": 5e-4},
              "batch_size": 1, "epochs": 10, "loss": "faster_rcnn"},
             {"metric": "map", "value": 0.3, "higher_is_better": True}, ("detection",)),
    # Not in the study (issue #30). The target is dlbench's, below lstm-ptb's 200 on the same windows; no
    # PTB run has checked it yet (PTB cannot be downloaded on the machines dlbench is developed on).
    Workload("transformer-lm", "GPT-style decoder: 4 pre-LN blocks of width 128, 4 causal heads, tied output",
             "ptb", {"task": "language_model", "vocab_size": 10000, "seq_len": 30}, _transformer_lm,
             _adamw_recipe(1e-3, 0.01, 32, 20, "sequence_softmax_cross_entropy"),
             {"metric": "perplexity", "value": 170.0, "higher_is_better": False}, ("language_model",)),
    # Not in the study (issue #30). Its target is cnn-cifar10's: a ViT this small, from scratch and without
    # augmentation, is not expected to beat the CNN by much on CIFAR-10.
    Workload("vit-cifar10", "vision Transformer: 4x4 patches, 4 pre-LN blocks of width 128, 4 heads, mean-pooled",
             "cifar10", _image_meta(32, 3, 10), _vit, _adamw_recipe(1e-3, 0.05, 128, 100, "softmax_cross_entropy"),
             _accuracy_target(75)),
)}


METRIC_LABELS = {"map": "mAP"}  # a metric's stored name -> its name as people write it, where the two differ


def metric_label(metric: str | None) -> str:
    """A metric's name as the report, the tables, the charts, `list` and the log write it: mAP, accuracy,
    perplexity (the store and the workers keep the stored name)."""
    return METRIC_LABELS.get(metric, metric) if metric else "metric"


def target_text(target: dict) -> str:
    """A target as listings and tables show it: its metric, direction and value ("accuracy >= 0.985")."""
    return f"{metric_label(target['metric'])} {'>=' if target['higher_is_better'] else '<='} {target['value']:g}"


# Workloads declared in users' files (plan/user_workload.py), registered as a suite naming them is loaded:
# name -> the workload, and name -> (the file, its SHA-256), which the cell's configuration carries
USER_WORKLOADS: dict[str, Workload] = {}
USER_FILES: dict[str, tuple[str, str]] = {}


def register_user(workload: Workload, file: str, sha256: str) -> None:
    """Makes a user's workload known to this process under its name (a suite's file names it)."""
    USER_WORKLOADS[workload.name] = workload
    USER_FILES[workload.name] = (file, sha256)


def known_workloads() -> dict[str, Workload]:
    """The built-in workloads, then those of users' files this process has loaded."""
    return {**WORKLOADS, **USER_WORKLOADS}


def get_workload(name: str) -> Workload:
    known = known_workloads()
    if name not in known:
        raise WorkloadError(f"unknown workload {name!r}; known: {', '.join(known)}")
    return known[name]
