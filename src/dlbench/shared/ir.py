"""The framework-neutral model IR: a model is declared once and every adapter builds it.

Worker side: imports under Python 3.8 with numpy alone (no framework, no newer syntax).

A model is a plain JSON-able dict: {"input_shape": [...], "input_dtype": "...", "layers": [...]},
each layer a dict with a "type", a unique "name" and its settings. Activations are per-sample
shapes (no batch axis), NHWC for images, (time, features) for sequences.

Canonical weight layout (what adapters import and export), by layer type:
  conv2d     kernel (kh, kw, in, out)  "HWIO", bias (out,)
  dense      kernel (in, out), bias (out,)
  batchnorm  gamma, beta, moving_mean, moving_var (channels,)
  layer_norm gamma (the learned scale), beta (the learned offset) (features,)
  embedding  embeddings (vocab, dim)
  lstm       kernel (in, 4u), recurrent_kernel (u, 4u), bias (4u,); gates in the order i, f, g, o
             (input, forget, cell candidate, output), one bias per gate
  seq2seq    source_embeddings (Vs, E), target_embeddings (Vt, E), then encoder_ and decoder_ kernel,
             recurrent_kernel and bias laid out as an lstm's
  attention  query_kernel, key_kernel, value_kernel, output_kernel (d, d) and query_bias, key_bias,
             value_bias, output_bias (d,); head h owns columns h*dk .. (h+1)*dk - 1 of the query, key and
             value kernels and rows h*dk .. (h+1)*dk - 1 of the output kernel (dk = d / heads)
  positional_embedding  embeddings (max_len, d)
  tied_output  bias (units,) alone: its kernel is the named embedding's table, transposed
  rms_norm   gamma (features,), the learned scale
  swiglu     gate_kernel, up_kernel (d, hidden), down_kernel (hidden, d); no biases
  grouped_query_attention  query_kernel (d, d), key_kernel and value_kernel (d, kv_heads * dk), output_kernel
             (d, d), no biases; query head h owns columns h*dk .. (h+1)*dk - 1 of the query kernel and rows
             h*dk .. (h+1)*dk - 1 of the output kernel, key/value head g columns g*dk .. (g+1)*dk - 1 of theirs
Flatten flattens NHWC activations in C order (height, then width, then channels).

The Transformer pieces (issue #30):
- `residual(layers)`: y = x + f(x), f the block's own layers in order, which must give back the input's
  shape. Its layers are named with the block's name as a prefix ("residual_1_attention_1"), so the
  canonical weights stay one flat dict; `all_shapes` lists the block, then its layers, recursively.
- `attention(heads, causal, dropout)`: multi-head self-attention over a (steps, d) input (Vaswani et
  al.): q = x Wq + bq, k = x Wk + bk, v = x Wv + bv, split into `heads` heads of dk = d / heads columns;
  per head softmax(q k^T / sqrt(dk)) over the keys, where `causal` leaves out every key after the
  query's own step (a -inf score, as torch's is_causal); `dropout` drops attention weights in training
  only (inverted: kept ones scaled by 1 / (1 - rate)); the heads' outputs concatenated, times Wo, plus bo.
  Output (steps, d).
- `positional_embedding(max_len)`: adds a learned table's first `steps` rows to a (steps, d) input,
  row t to step t (steps <= max_len).
- `tied_output(embedding)`: logits = x E^T + b, E the named embedding layer's (vocab, dim) table, shared
  (its gradient is the sum of both uses); `units` = that vocab, filled in by `model`; input (..., dim).

The vision Transformer's pieces (issue #30, vit-cifar10): a patch embedding is a conv2d whose kernel and
stride are the patch side (ViT's own "hybrid-free" stem, as torchvision's conv_proj and timm's PatchEmbed);
- `to_sequence()`: (H, W, C) -> (H * W, C), the positions in row-major order (row by row, left to right),
  the order a C-order reshape of NHWC gives;
- `sequence_mean()`: (steps, features) -> (features,), the mean over the steps (a ViT's pooled output
  where it has no class token, as in Beyer et al. 2022's "global average pooling" ViT).

The LLaMA-style pieces (issue #42; Touvron et al. 2023):
- `rms_norm(epsilon)` (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + epsilon) * gamma over the last axis, no
  mean subtracted and no offset; the same in training and evaluation; input (features,) or (steps, features).
- `swiglu(hidden)` (Shazeer 2020): y = (silu(x Wg) * (x Wu)) Wd, silu(z) = z * sigmoid(z), the product element by
  element, no biases; input (..., d), output the same shape.
- `grouped_query_attention(heads, kv_heads, causal, rope_base)` (Ainslie et al. 2023) with rotary position
  embeddings (Su et al. 2021) on its queries and keys: q = x Wq in `heads` heads of dk = d / heads, k = x Wk and
  v = x Wv in `kv_heads` heads of dk each (kv_heads divides heads); query head h reads key/value head
  h // (heads / kv_heads), so consecutive query heads share one (kv_heads = heads: multi-head attention,
  kv_heads = 1: multi-query). Before the scores, each head's q and k at step t (from 0) are rotated in the
  "rotate half" pairing (HF's LLaMA, GPT-NeoX): for i < dk / 2, with angle a = t * rope_base ** (-2 i / dk),
  (u_i, u_{i + dk/2}) -> (u_i cos a - u_{i + dk/2} sin a, u_{i + dk/2} cos a + u_i sin a). Then per query head
  softmax(q k^T / sqrt(dk)), `causal` as attention's, no dropout; the heads concatenated, times Wo. dk must be
  even. Output (steps, d).

Activations (`activation(fn)`): relu, sigmoid, tanh, and gelu in its exact form,
gelu(x) = x * 0.5 * (1 + erf(x / sqrt(2))) (Hendrycks & Gimpel), never the tanh approximation.

Layer normalisation (`layer_norm(epsilon)`, Ba et al.) normalises each position over its last axis alone,
y = (x - mean) / sqrt(var + epsilon) * gamma + beta, with the biased variance (divided by the features,
N, not N - 1), the same in training and evaluation (no moving statistics). Its input is (features,) or
(steps, features) per sample; it keeps the shape.

A detector (Faster R-CNN, `detector`) adds a "detector" dict: its settings and six more parts, each a
list of layers as above, applied in this order: the backbone ("layers") maps an (H, W, 3) image to a
stride-16 feature map; "rpn" (a 3x3 conv and ReLU) feeds "rpn_cls" (a 1x1 conv, one objectness logit
per anchor) and "rpn_box" (a 1x1 conv, 4 deltas per anchor: channel 4a + k is coordinate k of anchor
a); RoI Align pools each RoI of the feature map to (size, size, channels); "head" (flatten, dense
layers) feeds "cls" (class logits, 0 = background) and "box" (4 deltas per class: unit 4c + k). Layer
names carry their part's prefix ("rpn_conv2d_1", "head_dense_1", "cls_dense_1"), so canonical weights
stay one flat dict. `detector_parts` gives each part as a model of its own, for the adapters' builders.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable, List, NamedTuple, Optional, Tuple

Shape = Tuple[int, ...]

# The layer kinds: one record each, KINDS (below, with the shapes); LAYER_SETTINGS, POSITIVE_SETTINGS,
# RATE_SETTINGS, WEIGHTLESS, WEIGHTED and UNCOUNTED are derived from it.
ACTIVATIONS = ("relu", "sigmoid", "tanh", "gelu")  # gelu: the exact (erf) form
PADDINGS = ("valid", "same")
# the losses a recipe may name (each adapter builds each of them)
LOSSES = ("softmax_cross_entropy", "sigmoid_cross_entropy", "sequence_softmax_cross_entropy",
          "masked_sequence_softmax_cross_entropy", "faster_rcnn")


class IRError(ValueError):
    pass


# ---- layer constructors: the only way workloads declare layers ------------------------------

def conv2d(filters: int, kernel: int = 3, padding: str = "valid", stride: int = 1) -> dict:
    return {"type": "conv2d", "filters": filters, "kernel": kernel, "stride": stride, "padding": padding}


def maxpool2d(pool: int = 2, stride: int = 0, padding: str = "valid") -> dict:
    """stride 0 means stride = pool, as in every framework's default."""
    return {"type": "maxpool2d", "pool": pool, "stride": stride or pool, "padding": padding}


def batchnorm(momentum: float = 0.99, epsilon: float = 1e-3) -> dict:
    """momentum as Keras states it: moving = momentum * moving + (1 - momentum) * batch."""
    return {"type": "batchnorm", "momentum": momentum, "epsilon": epsilon}


def layer_norm(epsilon: float = 1e-5) -> dict:
    """Over the last axis, learned scale gamma (starts at 1) and offset beta (starts at 0), biased variance;
    epsilon as torch's nn.LayerNorm's default (Keras's is 1e-3, Flax's 1e-6: each adapter passes this one)."""
    return {"type": "layer_norm", "epsilon": epsilon}


def activation(fn: str) -> dict:
    """fn one of ACTIVATIONS; "gelu" is the exact x * 0.5 * (1 + erf(x / sqrt(2)))."""
    return {"type": "activation", "fn": fn}


def relu() -> dict:
    return activation("relu")


def dropout(rate: float) -> dict:
    return {"type": "dropout", "rate": rate}


def flatten() -> dict:
    return {"type": "flatten"}


def dense(units: int) -> dict:
    """Applies to the last axis, so on a sequence it is a per-timestep dense layer."""
    return {"type": "dense", "units": units}


def embedding(vocab: int, dim: int) -> dict:
    return {"type": "embedding", "vocab": vocab, "dim": dim}


def lstm(units: int, return_sequences: bool = False) -> dict:
    return {"type": "lstm", "units": units, "return_sequences": return_sequences}


def seq2seq(source_len: int, source_vocab: int, target_vocab: int, embed_dim: int, units: int) -> dict:
    """An encoder-decoder block with teacher forcing. Its input is one row of token ids per sample:
    the source (source_len ids), then the decoder's inputs (<start> and the target but its last token).
    The encoder LSTM reads the embedded source from a zero state; its final (h, c) starts the decoder
    LSTM, whose outputs at every step are the block's output: (target steps, units)."""
    return {"type": "seq2seq", "source_len": source_len, "source_vocab": source_vocab,
            "target_vocab": target_vocab, "embed_dim": embed_dim, "units": units}


def residual(layers: List[dict]) -> dict:
    """y = x + f(x), f these layers in order; they must give back the input's shape."""
    return {"type": "residual", "layers": list(layers)}


def attention(heads: int, causal: bool = True, dropout: float = 0.0) -> dict:
    """Multi-head self-attention over (steps, d), d a multiple of heads; causal: no step sees a later one;
    dropout: on the attention weights, in training only."""
    return {"type": "attention", "heads": heads, "causal": causal, "dropout": dropout}


def positional_embedding(max_len: int) -> dict:
    """A learned (max_len, d) table whose first `steps` rows are added to a (steps, d) input."""
    return {"type": "positional_embedding", "max_len": max_len}


def tied_output(embedding: str = "embedding_1") -> dict:
    """Logits x E^T + b over the named embedding layer's table E (weight tying, Press & Wolf 2017)."""
    return {"type": "tied_output", "embedding": embedding}


def rms_norm(epsilon: float = 1e-6) -> dict:
    """y = x / sqrt(mean(x^2) + epsilon) * gamma over the last axis (gamma starts at 1); epsilon as LLaMA's
    reference code's default and Hugging Face's LlamaRMSNorm's (torch's nn.RMSNorm defaults to float32's
    machine epsilon, Keras's RMSNormalization to 1e-6: each adapter passes this one)."""
    return {"type": "rms_norm", "epsilon": epsilon}


def swiglu(hidden: int) -> dict:
    """LLaMA's feed-forward block, (silu(x Wg) * (x Wu)) Wd, from d features to `hidden` and back, no biases."""
    return {"type": "swiglu", "hidden": hidden}


def grouped_query_attention(heads: int, kv_heads: int, causal: bool = True, rope_base: float = 10000.0) -> dict:
    """LLaMA's self-attention over (steps, d): `heads` query heads sharing `kv_heads` key/value heads in groups,
    rotary position embeddings of base `rope_base` on queries and keys, no biases, no dropout."""
    return {"type": "grouped_query_attention", "heads": heads, "kv_heads": kv_heads, "causal": causal,
            "rope_base": rope_base}


def to_sequence() -> dict:
    """(H, W, C) -> (H * W, C): an image's positions as a sequence, row by row."""
    return {"type": "to_sequence"}


def sequence_mean() -> dict:
    """(steps, features) -> (features,): the mean over the steps."""
    return {"type": "sequence_mean"}


def _named(layers: List[dict], prefix: str = "") -> List[dict]:
    counts = {}  # type: Dict[str, int]
    named = []
    for layer in layers:
        counts[layer["type"]] = counts.get(layer["type"], 0) + 1
        name = "%s%s_%d" % (prefix, layer["type"], counts[layer["type"]])
        layer = dict(layer, name=name)
        if layer["type"] == "residual":
            layer["layers"] = _named(layer["layers"], name + "_")
        named.append(layer)
    return named


def model(input_shape, input_dtype: str, layers: List[dict]) -> dict:
    """Names the layers (conv2d_1, conv2d_2, dense_1, ...), fills in each tied_output's units from its
    embedding, and checks every shape."""
    spec = {"input_shape": list(input_shape), "input_dtype": input_dtype, "layers": _named(layers)}
    embeddings = {layer["name"]: layer for layer in _flat_layers(spec["layers"]) if layer["type"] == "embedding"}
    for layer in _flat_layers(spec["layers"]):
        if layer["type"] == "tied_output" and "units" not in layer:
            if layer.get("embedding") not in embeddings:
                raise IRError("layer %s: embedding %r; the name of an embedding layer of the model is needed "
                              "(it has: %s)" % (layer["name"], layer.get("embedding"), ", ".join(embeddings) or "none"))
            layer["units"] = embeddings[layer["embedding"]]["vocab"]
    infer_shapes(spec)
    return spec


def _flat_layers(layers: List[dict]) -> List[dict]:
    """Every layer, a residual block's own layers right after the block, recursively."""
    flat = []
    for layer in layers:
        flat.append(layer)
        if layer.get("type") == "residual":
            flat += _flat_layers(layer.get("layers") or [])
    return flat


DETECTOR_PARTS = ("rpn", "rpn_cls", "rpn_box", "head", "cls", "box")


def detector(canvas, backbone: List[dict], rpn_channels: int, head_units: List[int], num_classes: int,
             anchor_scales, anchor_ratios=(0.5, 1.0, 2.0), roi_size: int = 7, sampling_ratio: int = 2) -> dict:
    """A Faster R-CNN (Ren et al. 2015) on a stride-16 backbone.

    `canvas` (H, W) is the landscape image size every image is padded into, both multiples of 16 (a
    portrait image goes into the transposed canvas); `num_classes` counts background. Anchors: for
    each ratio (height / width) and scale, py-faster-rcnn's base_size-16 anchor times the scale
    (shared/detection/boxes.base_anchors), ratio-major, A = ratios x scales per feature-map position. RoI
    Align as torchvision's roi_align with aligned=False: `roi_size` bins a side, `sampling_ratio`^2
    bilinear samples averaged per bin, spatial scale 1/16."""
    if canvas[0] % FEATURE_STRIDE or canvas[1] % FEATURE_STRIDE:
        raise IRError("canvas %s: both sides must be multiples of %d" % (list(canvas), FEATURE_STRIDE))
    spec = model([canvas[0], canvas[1], 3], "float32", backbone)
    feature = infer_shapes(spec)[-1][2]
    if (feature[0] * FEATURE_STRIDE, feature[1] * FEATURE_STRIDE) != tuple(canvas):
        raise IRError("the backbone maps %s to %s: not stride %d" % (list(canvas), list(feature), FEATURE_STRIDE))
    anchors = len(anchor_scales) * len(anchor_ratios)
    head = [flatten()]
    for units in head_units:
        head += [dense(units), relu()]
    spec["detector"] = {
        "num_classes": num_classes, "feature_stride": FEATURE_STRIDE,
        "anchor_scales": [float(s) for s in anchor_scales],
        "anchor_ratios": [float(r) for r in anchor_ratios], "anchors": anchors,
        "roi": {"op": "roi_align", "size": roi_size, "sampling_ratio": sampling_ratio,
                "spatial_scale": 1.0 / FEATURE_STRIDE, "aligned": False},
        "rpn": _named([conv2d(rpn_channels, 3, "same"), relu()], "rpn_"),
        "rpn_cls": _named([conv2d(anchors, 1)], "rpn_cls_"),
        "rpn_box": _named([conv2d(4 * anchors, 1)], "rpn_box_"),
        "head": _named(head, "head_"),
        "cls": _named([dense(num_classes)], "cls_"),
        "box": _named([dense(4 * num_classes)], "box_"),
    }
    detector_parts(spec)  # checks every part's shapes
    return spec


FEATURE_STRIDE = 16


def detector_parts(spec: dict) -> "OrderedDict[str, dict]":
    """Every part of a detector as a model of its own ({"input_shape", "input_dtype", "layers"}), in
    order: "backbone", then DETECTOR_PARTS. Spatial sizes are those of the landscape canvas."""
    config = spec["detector"]
    roi = config["roi"]
    if roi["op"] != "roi_align" or roi["aligned"] is not False:  # all that pipeline.roi_align_plan computes
        raise IRError("detector RoI op %r with aligned %r: only roi_align with aligned false is built"
                      % (roi["op"], roi["aligned"]))
    feature = infer_shapes(spec)[-1][2]
    size = config["roi"]["size"]
    parts = OrderedDict([("backbone", {"input_shape": list(spec["input_shape"]), "input_dtype": "float32",
                                       "layers": spec["layers"]})])
    for name in DETECTOR_PARTS:
        if name in ("rpn_cls", "rpn_box"):
            shape = infer_shapes(parts["rpn"])[-1][2]
        elif name == "head":
            shape = (size, size, feature[-1])
        elif name in ("cls", "box"):
            shape = infer_shapes(parts["head"])[-1][2]
        elif name == "rpn":
            shape = feature
        else:  # a part added to DETECTOR_PARTS must say what it reads
            raise IRError("detector part %r has no input rule" % name)
        parts[name] = {"input_shape": list(shape), "input_dtype": "float32", "layers": config[name]}
        infer_shapes(parts[name])
    return parts


def all_shapes(spec: dict) -> List[Tuple[dict, Shape, Shape]]:
    """infer_shapes of a model, or of every part of a detector, in order; a residual block's layers follow
    the block, recursively (every layer that holds weights is listed once)."""
    parts = detector_parts(spec).values() if "detector" in spec else [spec]
    result = []
    for part in parts:
        result += _with_inner(infer_shapes(part))
    return result


def _with_inner(shapes: List[Tuple[dict, Shape, Shape]]) -> List[Tuple[dict, Shape, Shape]]:
    result = []
    for layer, in_shape, out_shape in shapes:
        result.append((layer, in_shape, out_shape))
        if layer["type"] == "residual":
            result += _with_inner(block_shapes(layer, in_shape))
    return result


def block_shapes(layer: dict, in_shape: Shape) -> List[Tuple[dict, Shape, Shape]]:
    """(layer, input shape, output shape) of a residual block's own layers, in order."""
    return _shapes(layer["layers"], in_shape)


# ---- layer kinds: one record each -----------------------------------------------------------

class Kind(NamedTuple):
    """All that this module knows of one layer kind (KINDS): a new kind is one record and the rules it names.

    settings      the keys a layer of the kind holds (LAYER_SETTINGS), checked present by _check;
    output_shape  (layer, input shape) -> output shape, of a checked layer; raises IRError on an input it
                  does not take;
    param_shapes  (layer, input shape) -> its canonical weights' shapes, name -> shape in canonical order;
                  None for a kind that holds no weights of its own (WEIGHTLESS);
    flops         (layer, input shape, output shape) -> one sample's forward FLOPs (forward_flops); None for a
                  kind they leave out (UNCOUNTED);
    positive      the settings that are sizes, integers >= 1 (POSITIVE_SETTINGS);
    rates         the settings that are rates in [0, 1) (RATE_SETTINGS);
    booleans      the settings that are true or false;
    check         (layer) -> None, the kind's own checks (a padding, an activation, an epsilon, a block's
                  layers), run by _check before the sizes, rates and booleans; None where it has none."""
    settings: Tuple[str, ...]
    output_shape: Callable[[dict, Shape], Shape]
    param_shapes: Optional[Callable[[dict, Shape], "OrderedDict[str, Shape]"]]
    flops: Optional[Callable[[dict, Shape, Shape], int]]
    positive: Tuple[str, ...] = ()
    rates: Tuple[str, ...] = ()
    booleans: Tuple[str, ...] = ()
    check: Optional[Callable[[dict], None]] = None


# the rules the records name, kind by kind in KINDS's order (a rule two kinds share comes with the first)

def _check_padding(layer: dict) -> None:
    if layer["padding"] not in PADDINGS:
        raise IRError("layer %s: padding %r; accepted: %s" % (layer["name"], layer["padding"], PADDINGS))


def _window_shape(layer: dict, shape: Shape, window: int) -> Shape:
    """(height, width) after a window of side `window` slides over an (H, W, C) input by the layer's stride."""
    if len(shape) != 3:
        raise IRError("layer %s needs an (H, W, C) input, got %s" % (layer["name"], shape))
    h = _spatial_out(shape[0], window, layer["stride"], layer["padding"])
    w = _spatial_out(shape[1], window, layer["stride"], layer["padding"])
    if h < 1 or w < 1:
        raise IRError("layer %s shrinks %s to nothing" % (layer["name"], shape))
    return (h, w)


def _conv2d_shape(layer: dict, shape: Shape) -> Shape:
    return _window_shape(layer, shape, layer["kernel"]) + (layer["filters"],)


def _conv2d_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict([("kernel", (layer["kernel"], layer["kernel"], in_shape[-1], layer["filters"])),
                        ("bias", (layer["filters"],))])


def _conv2d_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    fan_in = layer["kernel"] * layer["kernel"] * in_shape[-1]
    return int(math.prod(out_shape)) * (2 * fan_in + 1)


def _maxpool2d_shape(layer: dict, shape: Shape) -> Shape:
    return _window_shape(layer, shape, layer["pool"]) + (shape[2],)


def _check_epsilon(layer: dict) -> None:
    epsilon = layer["epsilon"]
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < math.inf:
        raise IRError("layer %s: epsilon %r; a positive number is needed" % (layer["name"], epsilon))


def _same_shape(layer: dict, shape: Shape) -> Shape:
    return tuple(shape)


def _batchnorm_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict((key, (in_shape[-1],)) for key in ("gamma", "beta", "moving_mean", "moving_var"))


def _norm_shape(layer: dict, shape: Shape) -> Shape:
    """A layer normalisation's, an RMS normalisation's: over the last axis of (features,) or (steps, features)."""
    if len(shape) not in (1, 2):
        raise IRError("layer %s needs a (features,) or (steps, features) input, got %s" % (layer["name"], shape))
    return tuple(shape)


def _layer_norm_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict([("gamma", (in_shape[-1],)), ("beta", (in_shape[-1],))])


def _check_fn(layer: dict) -> None:
    if layer["fn"] not in ACTIVATIONS:
        raise IRError("layer %s: activation %r; accepted: %s" % (layer["name"], layer["fn"], ACTIVATIONS))


def _flatten_shape(layer: dict, shape: Shape) -> Shape:
    return (int(math.prod(shape)),)


def _units_shape(layer: dict, shape: Shape) -> Shape:
    """The last axis becomes `units` (a dense layer, a tied output)."""
    return tuple(shape[:-1]) + (layer["units"],)


def _dense_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict([("kernel", (in_shape[-1], layer["units"])), ("bias", (layer["units"],))])


def _dense_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    """A dense layer's, and a tied output's (counted as a dense layer)."""
    positions = int(math.prod(in_shape[:-1]))
    return positions * layer["units"] * (2 * in_shape[-1] + 1)


def _embedding_shape(layer: dict, shape: Shape) -> Shape:
    return tuple(shape) + (layer["dim"],)


def _embedding_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict([("embeddings", (layer["vocab"], layer["dim"]))])


def _lstm_shape(layer: dict, shape: Shape) -> Shape:
    if len(shape) != 2:
        raise IRError("layer %s needs a (time, features) input, got %s" % (layer["name"], shape))
    return (shape[0], layer["units"]) if layer["return_sequences"] else (layer["units"],)


def _lstm_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return _lstm_shapes("", in_shape[-1], layer["units"])


def _lstm_layer_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    return _lstm_flops(in_shape[0], in_shape[-1], layer["units"])


def _seq2seq_shape(layer: dict, shape: Shape) -> Shape:
    if len(shape) != 1 or shape[0] <= layer["source_len"]:
        raise IRError("layer %s needs (source_len + target steps,) token ids, got %s" % (layer["name"], shape))
    return (shape[0] - layer["source_len"], layer["units"])


def _seq2seq_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    shapes = OrderedDict([("source_embeddings", (layer["source_vocab"], layer["embed_dim"])),
                          ("target_embeddings", (layer["target_vocab"], layer["embed_dim"]))])
    shapes.update(_lstm_shapes("encoder_", layer["embed_dim"], layer["units"]))
    shapes.update(_lstm_shapes("decoder_", layer["embed_dim"], layer["units"]))
    return shapes


def _seq2seq_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    steps = in_shape[0]  # source steps in the encoder, the rest in the decoder
    return _lstm_flops(steps, layer["embed_dim"], layer["units"])


def _check_block(layer: dict) -> None:
    if not isinstance(layer["layers"], list) or not layer["layers"]:
        raise IRError("layer %s: layers %r; a non-empty list of layers is needed" % (layer["name"], layer["layers"]))


def _residual_shape(layer: dict, shape: Shape) -> Shape:
    inner = block_shapes(layer, tuple(shape))
    if inner[-1][2] != tuple(shape):
        raise IRError("layer %s: its layers map %s to %s; a residual block must keep the shape"
                      % (layer["name"], tuple(shape), inner[-1][2]))
    return tuple(shape)


def _residual_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    """Its layers' (the addition is not counted)."""
    return _layers_flops(block_shapes(layer, in_shape))


def _sequence_input(layer: dict, shape: Shape) -> None:
    if len(shape) != 2:
        raise IRError("layer %s needs a (steps, features) input, got %s" % (layer["name"], shape))


def _attention_shape(layer: dict, shape: Shape) -> Shape:
    _sequence_input(layer, shape)
    if shape[1] % layer["heads"]:
        raise IRError("layer %s: %d features do not split into %d heads" % (layer["name"], shape[1], layer["heads"]))
    return tuple(shape)


def _attention_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    shapes = OrderedDict()  # type: OrderedDict[str, Shape]
    for part in ATTENTION_PARTS:
        shapes[part + "_kernel"] = (in_shape[-1], in_shape[-1])
        shapes[part + "_bias"] = (in_shape[-1],)
    return shapes


def _attention_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    """Its four projections and both products with the whole (steps x steps) score matrix, as the frameworks
    compute it, causal or not: 4 T d (2d + 1) + 4 T^2 d."""
    steps, features = in_shape
    return 4 * steps * features * (2 * features + 1) + 4 * steps * steps * features


def _positional_embedding_shape(layer: dict, shape: Shape) -> Shape:
    _sequence_input(layer, shape)
    if shape[0] > layer["max_len"]:
        raise IRError("layer %s: %d steps, more than max_len %d" % (layer["name"], shape[0], layer["max_len"]))
    return tuple(shape)


def _positional_embedding_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict([("embeddings", (layer["max_len"], in_shape[-1]))])


def _tied_output_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict([("bias", (layer["units"],))])  # its kernel is the embedding's table


def _to_sequence_shape(layer: dict, shape: Shape) -> Shape:
    if len(shape) != 3:
        raise IRError("layer %s needs an (H, W, C) input, got %s" % (layer["name"], shape))
    return (shape[0] * shape[1], shape[2])


def _sequence_mean_shape(layer: dict, shape: Shape) -> Shape:
    if len(shape) != 2:
        raise IRError("layer %s needs a (steps, features) input, got %s" % (layer["name"], shape))
    return (shape[1],)


def _rms_norm_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    return OrderedDict([("gamma", (in_shape[-1],))])


def _swiglu_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    features, hidden = in_shape[-1], layer["hidden"]
    return OrderedDict([("gate_kernel", (features, hidden)), ("up_kernel", (features, hidden)),
                        ("down_kernel", (hidden, features))])


def _swiglu_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    """Its three matmuls and the gate's product: 6 d h + h a position (silu, element-wise, not counted)."""
    positions = int(math.prod(in_shape[:-1]))
    return positions * layer["hidden"] * (6 * in_shape[-1] + 1)


def _check_rope_base(layer: dict) -> None:
    base = layer["rope_base"]
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 1 < base < math.inf:
        raise IRError("layer %s: rope_base %r; a number above 1 is needed" % (layer["name"], base))


def _grouped_query_attention_shape(layer: dict, shape: Shape) -> Shape:
    _sequence_input(layer, shape)
    heads, kv_heads = layer["heads"], layer["kv_heads"]
    if shape[1] % heads:
        raise IRError("layer %s: %d features do not split into %d heads" % (layer["name"], shape[1], heads))
    if heads % kv_heads:
        raise IRError("layer %s: %d heads do not split into %d key/value groups" % (layer["name"], heads, kv_heads))
    if (shape[1] // heads) % 2:
        raise IRError("layer %s: heads of %d features; rotary embeddings need an even number"
                      % (layer["name"], shape[1] // heads))
    return tuple(shape)


def _grouped_query_attention_params(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    features = in_shape[-1]
    kv_features = features // layer["heads"] * layer["kv_heads"]
    return OrderedDict([("query_kernel", (features, features)), ("key_kernel", (features, kv_features)),
                        ("value_kernel", (features, kv_features)), ("output_kernel", (features, features))])


def _grouped_query_attention_flops(layer: dict, in_shape: Shape, out_shape: Shape) -> int:
    """Its four projections and both products with the whole (steps x steps) score matrix of every query head
    (rotations not counted): 4 T d (d + kv dk) + 4 T^2 d."""
    steps, features = in_shape
    kv_features = features // layer["heads"] * layer["kv_heads"]
    return 4 * steps * features * (features + kv_features) + 4 * steps * steps * features


# every layer kind of the IR, in the order error messages list them; param_shapes None: no weights of its own
# (a residual block's layers are listed apart: all_shapes), flops None: not counted (element-wise, reshapes,
# lookups)
KINDS = {
    "conv2d": Kind(settings=("filters", "kernel", "stride", "padding"), positive=("filters", "kernel", "stride"),
                   check=_check_padding, output_shape=_conv2d_shape, param_shapes=_conv2d_params,
                   flops=_conv2d_flops),
    "maxpool2d": Kind(settings=("pool", "stride", "padding"), positive=("pool", "stride"), check=_check_padding,
                      output_shape=_maxpool2d_shape, param_shapes=None, flops=None),
    "batchnorm": Kind(settings=("momentum", "epsilon"), check=_check_epsilon, output_shape=_same_shape,
                      param_shapes=_batchnorm_params, flops=None),
    "layer_norm": Kind(settings=("epsilon",), check=_check_epsilon, output_shape=_norm_shape,
                       param_shapes=_layer_norm_params, flops=None),
    "activation": Kind(settings=("fn",), check=_check_fn, output_shape=_same_shape, param_shapes=None,
                       flops=None),
    "dropout": Kind(settings=("rate",), rates=("rate",), output_shape=_same_shape, param_shapes=None, flops=None),
    "flatten": Kind(settings=(), output_shape=_flatten_shape, param_shapes=None, flops=None),
    "dense": Kind(settings=("units",), positive=("units",), output_shape=_units_shape, param_shapes=_dense_params,
                  flops=_dense_flops),
    "embedding": Kind(settings=("vocab", "dim"), positive=("vocab", "dim"), output_shape=_embedding_shape,
                      param_shapes=_embedding_params, flops=None),
    "lstm": Kind(settings=("units", "return_sequences"), positive=("units",), booleans=("return_sequences",),
                 output_shape=_lstm_shape, param_shapes=_lstm_params, flops=_lstm_layer_flops),
    "seq2seq": Kind(settings=("source_len", "source_vocab", "target_vocab", "embed_dim", "units"),
                    positive=("source_len", "source_vocab", "target_vocab", "embed_dim", "units"),
                    output_shape=_seq2seq_shape, param_shapes=_seq2seq_params, flops=_seq2seq_flops),
    "residual": Kind(settings=("layers",), check=_check_block, output_shape=_residual_shape, param_shapes=None,
                     flops=_residual_flops),
    "attention": Kind(settings=("heads", "causal", "dropout"), positive=("heads",), rates=("dropout",),
                      booleans=("causal",), output_shape=_attention_shape, param_shapes=_attention_params,
                      flops=_attention_flops),
    "positional_embedding": Kind(settings=("max_len",), positive=("max_len",),
                                 output_shape=_positional_embedding_shape,
                                 param_shapes=_positional_embedding_params, flops=None),
    "tied_output": Kind(settings=("embedding", "units"), positive=("units",), output_shape=_units_shape,
                        param_shapes=_tied_output_params, flops=_dense_flops),
    "to_sequence": Kind(settings=(), output_shape=_to_sequence_shape, param_shapes=None, flops=None),
    "sequence_mean": Kind(settings=(), output_shape=_sequence_mean_shape, param_shapes=None, flops=None),
    "rms_norm": Kind(settings=("epsilon",), check=_check_epsilon, output_shape=_norm_shape,
                     param_shapes=_rms_norm_params, flops=None),
    "swiglu": Kind(settings=("hidden",), positive=("hidden",), output_shape=_same_shape,
                   param_shapes=_swiglu_params, flops=_swiglu_flops),
    "grouped_query_attention": Kind(settings=("heads", "kv_heads", "causal", "rope_base"),
                                    positive=("heads", "kv_heads"), booleans=("causal",), check=_check_rope_base,
                                    output_shape=_grouped_query_attention_shape,
                                    param_shapes=_grouped_query_attention_params,
                                    flops=_grouped_query_attention_flops),
}

# derived from KINDS, never restated. LAYER_SETTINGS is also what _check accepts: a kind put there without a
# record (tests/test_fallbacks.py plants one) passes _check and is refused by name by every rule.
LAYER_SETTINGS = {kind: record.settings for kind, record in KINDS.items()}
# the settings that are sizes (integers >= 1) and rates (in [0, 1)), checked for every layer however it was
# written (a hand-written dict as well as a constructor's): a stride of 0 divides by zero, a dense layer of 0
# units builds in no framework
POSITIVE_SETTINGS = {kind: record.positive for kind, record in KINDS.items() if record.positive}
RATE_SETTINGS = {kind: record.rates for kind, record in KINDS.items() if record.rates}
# the layer types that hold no weights of their own (a residual block's layers are listed apart: all_shapes)
WEIGHTLESS = tuple(kind for kind, record in KINDS.items() if record.param_shapes is None)
# the layer types that hold weights (param_shapes gives them): every other type of LAYER_SETTINGS
WEIGHTED = tuple(kind for kind, record in KINDS.items() if record.param_shapes is not None)
# the layer types forward_flops leaves out: element-wise, reshapes, lookups
UNCOUNTED = tuple(kind for kind, record in KINDS.items() if record.flops is None)


# ---- shapes, parameters, FLOPs --------------------------------------------------------------

def same_padding(size: int, kernel: int, stride: int) -> Tuple[int, int]:
    """Padding (before, after) that TensorFlow's 'same' uses: output = ceil(size / stride),
    the odd pixel going after. Adapters of frameworks with symmetric padding use this."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _spatial_out(size: int, kernel: int, stride: int, padding: str) -> int:
    if padding == "same":
        return -(-size // stride)
    if padding == "valid":
        return (size - kernel) // stride + 1
    raise IRError("padding %r has no output size rule" % padding)  # a padding added to PADDINGS must say


def _check(layer: dict) -> None:
    """A layer's kind is known and the layer holds its settings; then the kind's own check, its sizes, its
    rates and its booleans (KINDS)."""
    kind = layer.get("type")
    if kind not in LAYER_SETTINGS:
        raise IRError("unknown layer type %r; known: %s" % (kind, ", ".join(LAYER_SETTINGS)))
    for key in LAYER_SETTINGS[kind]:
        if key not in layer:
            raise IRError("layer %s lacks %r" % (layer.get("name", kind), key))
    record = KINDS.get(kind)
    if record is None:  # accepted without a record: each rule refuses it by name
        return
    if record.check is not None:
        record.check(layer)
    for key in record.positive:
        _check_positive(layer, key)
    for key in record.rates:
        rate = layer[key]
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            raise IRError("layer %s: %s %r; a rate in [0, 1) is needed" % (layer.get("name", kind), key, rate))
    for key in record.booleans:
        if not isinstance(layer[key], bool):
            raise IRError("layer %s: %s %r; true or false is needed" % (layer.get("name", kind), key, layer[key]))


def _check_positive(layer: dict, key: str) -> None:
    value = layer[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IRError("layer %s: %s %r; a positive integer is needed" % (layer.get("name", layer["type"]), key,
                                                                         value))


def output_shape(layer: dict, shape: Shape) -> Shape:
    _check(layer)
    record = KINDS.get(layer["type"])
    if record is None:
        raise IRError("layer type %r has no output shape rule" % layer["type"])
    return record.output_shape(layer, shape)


def infer_shapes(spec: dict) -> List[Tuple[dict, Shape, Shape]]:
    """(layer, input shape, output shape) for every top-level layer, in order (a residual block's own layers:
    block_shapes, or all_shapes for every layer); each tied_output's embedding checked against it."""
    shapes = _shapes(spec["layers"], tuple(spec["input_shape"]))
    _check_ties(_with_inner(shapes))
    return shapes


def _shapes(layers: List[dict], shape: Shape) -> List[Tuple[dict, Shape, Shape]]:
    result = []
    for layer in layers:
        out = output_shape(layer, shape)
        result.append((layer, shape, out))
        shape = out
    return result


def _check_ties(shapes: List[Tuple[dict, Shape, Shape]]) -> None:
    """A tied_output names an embedding layer of the same model whose vocab is its units and whose dim is
    its input's features."""
    embeddings = {layer["name"]: layer for layer, _, _ in shapes if layer["type"] == "embedding"}
    for layer, in_shape, _ in shapes:
        if layer["type"] != "tied_output":
            continue
        table = embeddings.get(layer["embedding"])
        if table is None:
            raise IRError("layer %s: embedding %r; the name of an embedding layer of the model is needed (it has: %s)"
                          % (layer["name"], layer["embedding"], ", ".join(embeddings) or "none"))
        if table["vocab"] != layer["units"] or table["dim"] != in_shape[-1]:
            raise IRError("layer %s: %d units on %d features, but %s is a (%d, %d) table"
                          % (layer["name"], layer["units"], in_shape[-1], table["name"], table["vocab"], table["dim"]))


def param_shapes(layer: dict, in_shape: Shape) -> "OrderedDict[str, Shape]":
    """Canonical parameter shapes of one layer, in canonical order (none for a kind of WEIGHTLESS)."""
    record = KINDS.get(layer["type"])
    if record is None:  # a new layer type must say which weights it holds, none included
        raise IRError("layer type %r has no parameter rule" % layer["type"])
    return OrderedDict() if record.param_shapes is None else record.param_shapes(layer, in_shape)


ATTENTION_PARTS = ("query", "key", "value", "output")  # canonical order of an attention layer's weights


def _lstm_shapes(prefix: str, features: int, units: int) -> "OrderedDict[str, Shape]":
    return OrderedDict([(prefix + "kernel", (features, 4 * units)), (prefix + "recurrent_kernel", (units, 4 * units)),
                        (prefix + "bias", (4 * units,))])


def weight_shapes(spec: dict) -> "OrderedDict[str, Shape]":
    """Every canonical weight of the model as "layer_name/param" -> shape."""
    shapes = OrderedDict()  # type: OrderedDict[str, Shape]
    for layer, in_shape, _ in all_shapes(spec):
        for key, shape in param_shapes(layer, in_shape).items():
            shapes[layer["name"] + "/" + key] = shape
    return shapes


def input_vocab(spec: dict) -> int:
    """How many token ids a token model's input may hold (both languages' for a seq2seq block)."""
    first = spec["layers"][0]
    if first["type"] == "embedding":
        return first["vocab"]
    if first["type"] == "seq2seq":
        return min(first["source_vocab"], first["target_vocab"])
    raise IRError("layer type %r does not take token ids" % first["type"])


def count_params(spec: dict) -> int:
    """All parameters, BatchNorm's moving statistics included (as Keras's "Total params")."""
    return sum(int(math.prod(shape)) for shape in weight_shapes(spec).values())


def forward_flops(spec: dict) -> int:
    """FLOPs of one sample's forward pass: 2 per multiply-add of conv, dense and LSTM layers,
    plus their bias additions. Element-wise layers (activations, pooling, BatchNorm, layer
    normalisation, a sequence's mean, reshapes) are not counted.
    A detector's sample is one landscape image with DETECTOR_ROIS RoIs through its head, as in a
    training step; RoI Align, proposals and NMS are not counted."""
    if "detector" in spec:
        parts = detector_parts(spec)
        head = sum(forward_flops(parts[name]) for name in ("head", "cls", "box"))
        return image_forward_flops(spec) + DETECTOR_ROIS * head
    return _layers_flops(infer_shapes(spec))


def _layers_flops(shapes: List[Tuple[dict, Shape, Shape]]) -> int:
    """The sum of each layer's FLOPs rule (KINDS: none for a kind of UNCOUNTED)."""
    total = 0
    for layer, in_shape, out_shape in shapes:
        record = KINDS.get(layer["type"])
        if record is None:  # a new layer type must say what it costs, were it nothing
            raise IRError("layer type %r has no FLOPs rule" % layer["type"])
        if record.flops is not None:
            total += record.flops(layer, in_shape, out_shape)
    return total


DETECTOR_ROIS = 128  # the RoIs a training step samples per image (py-faster-rcnn's and torchvision's)


def _lstm_flops(steps: int, features: int, units: int) -> int:
    return steps * 4 * units * (2 * (features + units) + 1)


def train_flops(spec: dict) -> int:
    """FLOPs of one training sample: forward plus backward, taken as 3x forward (the usual estimate).
    A detector's training step also runs the backbone and the RPN once more, without gradient, for the
    proposals its RoIs are sampled from (worker/detector.py: rpn_outputs, then train_step): that
    second forward pass of the image's layers is counted too."""
    flops = 3 * forward_flops(spec)
    if "detector" in spec:
        flops += image_forward_flops(spec)
    return flops


def image_forward_flops(spec: dict) -> int:
    """A detector's per-image forward FLOPs: the backbone and the RPN (its 3x3 conv and both 1x1 outputs)
    on the landscape canvas, the head's RoIs left out."""
    parts = detector_parts(spec)
    return sum(forward_flops(parts[name]) for name in ("backbone", "rpn", "rpn_cls", "rpn_box"))
