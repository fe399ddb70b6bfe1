import re
from pathlib import Path

import numpy as np
import pytest
import transformer_pieces

import dlbench.ir as public_ir
from dlbench.harness.plan.workloads import WORKLOADS, WorkloadError, get_workload
from dlbench.shared import ir
from dlbench.shared.initializers import canonical_init
from dlbench.worker.base import batch_slices, epoch_order, finish_metrics, thread_budget

# Counted by hand from WORKLOADS.md (cnn-mnist's figure is stated there; cnn-cifar10 and lstm-imdb
# are the Keras examples' well-known totals).
EXPECTED_PARAMS = {
    "cnn-mnist": 1_199_882,
    "cnn-cifar10": 1_250_858,
    "cnn-cifar100": 6_777_060,
    "cnn-svhn": 6_728_938,
    "lstm-imdb": 213_301,
    "lstm-ptb": 4_651_600,
    # embeddings 24000*256 + 12000*256, two LSTMs 4*(256*512+256) each, dense 256*12000+12000
    "seq2seq-manythings": 9_216_000 + 2 * 525_312 + 3_084_000,
    # a block: 2 norms 2*256 + attention 4*(128*128+128) + MLP 128*512+512 + 512*128+128 = 198,272;
    # tokens 10000*128 + positions 30*128 + 4 blocks + final norm 256 + tied bias 10000
    "transformer-lm": 1_280_000 + 3_840 + 4 * 198_272 + 256 + 10_000,
    # patches 4*4*3*128+128 + positions 64*128 + 4 blocks + final norm 256 + classifier 128*10+10
    "vit-cifar10": 6_272 + 8_192 + 4 * 198_272 + 256 + 1_290,
}
FLATTEN_WIDTH = {"cnn-mnist": 9216, "cnn-cifar10": 2304, "cnn-cifar100": 2048, "cnn-svhn": 768}


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_parameter_counts_of_the_workloads(name):
    assert ir.count_params(get_workload(name).model()) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", sorted(FLATTEN_WIDTH))
def test_flatten_widths_match_the_study(name):
    shapes = ir.infer_shapes(get_workload(name).model())
    assert [out for layer, _, out in shapes if layer["type"] == "flatten"] == [(FLATTEN_WIDTH[name],)]


def test_cnn_mnist_flops_counted_by_hand():
    # conv1 26*26*32*(2*9+1) + conv2 24*24*64*(2*288+1) + dense 128*(2*9216+1) + dense 10*(2*128+1)
    forward = 411_008 + 21_270_528 + 2_359_424 + 2_570
    model = get_workload("cnn-mnist").model()
    assert ir.forward_flops(model) == forward
    assert ir.train_flops(model) == 3 * forward


def test_frcnn_flops_counted_by_hand_for_one_canvas():
    # frcnn-voc on a 64 x 96 canvas (min_side 64, max_side 96): four blocks of a same-padded 3x3 conv
    # and a 2x2 pool, so the convs see 64x96, 32x48, 16x24, 8x12 maps and the feature map is 4x6x256
    model = get_workload("frcnn-voc").model({"min_side": 64, "max_side": 96, "num_classes": 20})
    backbone = (64 * 96 * 32 * (2 * 9 * 3 + 1) + 32 * 48 * 64 * (2 * 9 * 32 + 1)
                + 16 * 24 * 128 * (2 * 9 * 64 + 1) + 8 * 12 * 256 * (2 * 9 * 128 + 1))
    rpn = 4 * 6 * 256 * (2 * 9 * 256 + 1) + 4 * 6 * 9 * (2 * 256 + 1) + 4 * 6 * 36 * (2 * 256 + 1)
    # per RoI: 7x7x256 flattened, dense 512, dense 512, class scores 21, boxes 84
    head = 512 * (2 * 7 * 7 * 256 + 1) + 512 * (2 * 512 + 1) + 21 * (2 * 512 + 1) + 84 * (2 * 512 + 1)
    forward = backbone + rpn + 128 * head
    assert ir.forward_flops(model) == forward
    # forward and backward of the whole step (3x), plus the backbone and RPN's second forward pass
    # that makes the proposals
    assert ir.train_flops(model) == 3 * forward + backbone + rpn


def test_lstm_flops_and_shapes():
    model = ir.model([7], "int32", [ir.embedding(11, 3), ir.lstm(5, return_sequences=True), ir.dense(11)])
    assert [out for _, _, out in ir.infer_shapes(model)] == [(7, 3), (7, 5), (7, 11)]
    lstm = 7 * 4 * 5 * (2 * (3 + 5) + 1)
    dense = 7 * 11 * (2 * 5 + 1)
    assert ir.forward_flops(model) == lstm + dense


def test_seq2seq_shapes_and_weights():
    model = ir.model([7 + 5], "int32", [ir.seq2seq(7, 30, 20, 8, 6), ir.dense(20)])
    assert [out for _, _, out in ir.infer_shapes(model)] == [(5, 6), (5, 20)]
    assert list(ir.weight_shapes(model))[:4] == ["seq2seq_1/source_embeddings", "seq2seq_1/target_embeddings",
                                                 "seq2seq_1/encoder_kernel", "seq2seq_1/encoder_recurrent_kernel"]
    weights = canonical_init(model, 0)
    assert np.all(weights["seq2seq_1/decoder_bias"][6:12] == 1)
    assert np.abs(weights["seq2seq_1/source_embeddings"]).max() <= 0.05
    with pytest.raises(ir.IRError, match="source_len"):
        ir.model([7], "int32", [ir.seq2seq(7, 30, 20, 8, 6)])


def test_workload_builds_from_a_dataset_meta():
    model = get_workload("lstm-ptb").model({"vocab_size": 2000, "seq_len": 30})
    assert model["layers"][-1]["units"] == 2000 and model["input_shape"] == [30]


@pytest.mark.parametrize("size, kernel, stride, pads", [
    (32, 2, 2, (0, 0)), (16, 2, 1, (0, 1)), (5, 3, 2, (1, 1)), (6, 3, 2, (0, 1)), (28, 3, 1, (1, 1)),
])
def test_same_padding_matches_tensorflow(size, kernel, stride, pads):
    assert ir.same_padding(size, kernel, stride) == pads


def test_layers_are_named_in_order():
    names = [layer["name"] for layer in get_workload("cnn-mnist").model()["layers"]]
    assert names[:3] == ["conv2d_1", "activation_1", "conv2d_2"] and names[-1] == "dense_2"


@pytest.mark.parametrize("layers, message", [
    ([ir.activation("swish")], "activation 'swish'"),
    ([ir.activation("gelu_tanh")], "activation 'gelu_tanh'"),
    ([ir.conv2d(4, padding="full")], "padding 'full'"),
    ([ir.flatten(), ir.conv2d(4)], r"needs an \(H, W, C\) input"),
    ([ir.conv2d(4, kernel=9)], "shrinks"),
    ([{"type": "mamba"}], "unknown layer type 'mamba'"),
    ([{"type": "attention", "heads": 2, "causal": True}], "attention_1 lacks 'dropout'"),
    ([ir.layer_norm()], r"layer_norm_1 needs a \(features,\) or \(steps, features\) input"),
    ([ir.flatten(), ir.layer_norm(0.0)], "epsilon 0.0; a positive number"),
    ([ir.flatten(), ir.layer_norm(-1e-5)], "epsilon -1e-05; a positive number"),
    ([ir.flatten(), ir.layer_norm("1e-5")], "epsilon '1e-5'; a positive number"),
    ([ir.flatten(), ir.layer_norm(float("nan"))], "epsilon nan; a positive number"),
    ([ir.flatten(), {"type": "layer_norm"}], "layer_norm_1 lacks 'epsilon'"),
])
def test_bad_models_are_refused_with_the_reason(layers, message):
    with pytest.raises(ir.IRError, match=message):
        ir.model([6, 6, 1], "float32", layers)


def test_layer_norm_keeps_the_shape_and_holds_a_scale_and_an_offset_per_feature():
    model = ir.model([6], "int32", [ir.embedding(30, 8), ir.layer_norm(), ir.flatten(), ir.dense(4),
                                    ir.layer_norm(1e-6)])
    assert [out for _, _, out in ir.infer_shapes(model)] == [(6, 8), (6, 8), (48,), (4,), (4,)]
    assert model["layers"][1] == {"type": "layer_norm", "epsilon": 1e-5, "name": "layer_norm_1"}
    shapes = ir.weight_shapes(model)
    assert shapes["layer_norm_1/gamma"] == (8,) and shapes["layer_norm_1/beta"] == (8,)
    assert shapes["layer_norm_2/gamma"] == (4,) and list(shapes).index("layer_norm_2/gamma") == 5
    assert ir.count_params(model) == 30 * 8 + 2 * 8 + 48 * 4 + 4 + 2 * 4
    assert ir.forward_flops(model) == 4 * (2 * 48 + 1)  # element-wise: not counted, as BatchNorm
    weights = canonical_init(model, 0)
    assert weights["layer_norm_1/gamma"].tolist() == [1] * 8 and weights["layer_norm_1/beta"].tolist() == [0] * 8


def test_unknown_workload_lists_the_known_ones():
    with pytest.raises(WorkloadError, match="cnn-mnist, cnn-cifar10"):
        get_workload("resnet")


def test_canonical_init_is_deterministic_and_canonical():
    model = WORKLOADS["lstm-ptb"].model({"vocab_size": 50, "seq_len": 6})
    first, again, other = canonical_init(model, 0), canonical_init(model, 0), canonical_init(model, 1)
    assert list(first) == list(ir.weight_shapes(model))
    for key, shape in ir.weight_shapes(model).items():
        assert first[key].shape == shape and first[key].dtype == np.float32
        assert np.array_equal(first[key], again[key])
    assert not np.array_equal(first["lstm_1/kernel"], other["lstm_1/kernel"])
    bias = first["lstm_1/bias"]
    assert np.all(bias[200:400] == 1) and np.all(bias[:200] == 0) and np.all(bias[400:] == 0)
    recurrent = first["lstm_1/recurrent_kernel"].astype(np.float64)  # (200, 800): orthonormal rows
    assert np.allclose(recurrent @ recurrent.T, np.eye(200), atol=1e-5)
    assert np.abs(first["embedding_1/embeddings"]).max() <= 0.05
    limit = np.sqrt(6 / (200 + 50))
    assert np.abs(first["dense_1/kernel"]).max() <= limit and np.abs(first["dense_1/kernel"]).max() > 0.9 * limit


def test_conv_init_uses_receptive_field_fans():
    weights = canonical_init(ir.model([8, 8, 3], "float32", [ir.conv2d(16, kernel=5)]), 3)
    limit = np.sqrt(6 / (25 * 3 + 25 * 16))
    assert 0.9 * limit < np.abs(weights["conv2d_1/kernel"]).max() <= limit


def test_batchnorm_starts_as_identity():
    weights = canonical_init(ir.model([4, 4, 2], "float32", [ir.batchnorm()]), 0)
    assert weights["batchnorm_1/gamma"].tolist() == [1, 1] and weights["batchnorm_1/moving_var"].tolist() == [1, 1]
    assert weights["batchnorm_1/beta"].tolist() == [0, 0] and weights["batchnorm_1/moving_mean"].tolist() == [0, 0]


def test_epoch_order_is_a_seeded_permutation():
    order = epoch_order(0, 1, 1000)
    assert sorted(order.tolist()) == list(range(1000))
    assert np.array_equal(order, epoch_order(0, 1, 1000))
    assert not np.array_equal(order, epoch_order(0, 2, 1000))
    assert not np.array_equal(order, epoch_order(1, 1, 1000))


def test_batches_cover_every_sample_once_keeping_the_last_partial_batch():
    slices = list(batch_slices(10, 4))
    assert [(s.start, s.stop) for s in slices] == [(0, 4), (4, 8), (8, 10)]


def test_metrics_from_sums():
    assert finish_metrics("softmax_cross_entropy", 6.0, 4, 3, 4) == {"loss": 1.5, "accuracy": 0.75}
    lm = finish_metrics("sequence_softmax_cross_entropy", 4.0, 2, 5, 10)
    assert lm["perplexity"] == pytest.approx(np.exp(2.0)) and lm["accuracy"] == 0.5
    masked = finish_metrics("masked_sequence_softmax_cross_entropy", 7.0, 7, 3, 7)  # 7 unmasked tokens
    assert masked["loss"] == 1.0 and masked["accuracy"] == pytest.approx(3 / 7)


@pytest.mark.parametrize("value, expected", [("3", 3), ("", None), ("0", None), ("-2", None), ("two", None)])
def test_thread_budget_is_the_harness_setting_else_the_cores(monkeypatch, value, expected):
    monkeypatch.setattr("os.cpu_count", lambda: 5)
    monkeypatch.setenv("DLBENCH_THREADS", value)
    assert thread_budget() == (expected or 5)


# ---- the Transformer pieces: residual blocks, attention, positions, a tied output ----------------------

def test_transformer_pieces_shapes_weights_and_names():
    import transformer_pieces
    spec = transformer_pieces.gpt_model()
    names = [layer["name"] for layer, _, _ in ir.all_shapes(spec)]
    assert names == ["embedding_1", "positional_embedding_1", "residual_1", "residual_1_layer_norm_1",
                     "residual_1_attention_1", "residual_2", "residual_2_layer_norm_1", "residual_2_dense_1",
                     "residual_2_activation_1", "residual_2_dense_2", "residual_2_dropout_1", "layer_norm_1",
                     "tied_output_1"]
    shapes = ir.weight_shapes(spec)
    assert shapes["positional_embedding_1/embeddings"] == (6, 8)
    assert [key for key in shapes if key.startswith("residual_1_attention_1/")] == [
        f"residual_1_attention_1/{part}_{kind}" for part in ("query", "key", "value", "output")
        for kind in ("kernel", "bias")]
    assert shapes["residual_1_attention_1/query_kernel"] == (8, 8)
    assert shapes["tied_output_1/bias"] == (30,) and "tied_output_1/kernel" not in shapes
    assert spec["layers"][-1]["units"] == 30
    assert ir.infer_shapes(spec)[-1][2] == (6, 30)
    # 30x8 tokens + 6x8 positions + 3 norms x 16 + attention 4 x 72 + MLP 8x16+16 + 16x8+8 + tied bias 30
    assert ir.count_params(spec) == 240 + 48 + 48 + 288 + 144 + 136 + 30


def test_transformer_pieces_flops_counted_by_hand():
    import transformer_pieces
    steps, d, vocab = 6, 8, 30
    attention = 4 * steps * d * (2 * d + 1) + 4 * steps * steps * d
    mlp = steps * 16 * (2 * d + 1) + steps * d * (2 * 16 + 1)
    assert ir.forward_flops(transformer_pieces.gpt_model()) == attention + mlp + steps * vocab * (2 * d + 1)


def test_canonical_init_of_the_transformer_pieces():
    import transformer_pieces
    weights = canonical_init(transformer_pieces.gpt_model(), 0)
    assert np.all(weights["residual_1_attention_1/query_bias"] == 0)
    limit = np.sqrt(6.0 / 16)  # glorot on (8, 8)
    kernel = weights["residual_1_attention_1/key_kernel"]
    assert 0 < np.abs(kernel).max() <= limit and kernel.std() > 0.2 * limit
    assert np.abs(weights["positional_embedding_1/embeddings"]).max() <= 0.05
    assert not np.array_equal(weights["residual_1_attention_1/query_kernel"], kernel)


def test_the_numpy_reference_attention_is_causal_and_the_tie_shares_the_table():
    """A later token changes no earlier position's logits; a changed token table changes the tied output."""
    import transformer_pieces
    from numpy_forward import forward
    spec = transformer_pieces.gpt_model()
    weights = canonical_init(spec, 0)
    tokens = np.array([[1, 2, 3, 4, 5, 6]])
    changed = tokens.copy()
    changed[0, 4] = 20
    before, after = forward(spec, weights, tokens), forward(spec, weights, changed)
    assert np.allclose(before[0, :4], after[0, :4]) and not np.allclose(before[0, 4:], after[0, 4:])
    uncausal = dict(spec, layers=[dict(layer, layers=[dict(inner, causal=False) for inner in layer["layers"]])
                                  if layer["type"] == "residual" else layer for layer in spec["layers"]])
    assert not np.allclose(forward(uncausal, weights, tokens)[0, :4], forward(uncausal, weights, changed)[0, :4])
    # the logits are the final features times the embedding table: scaling the table scales the output's kernel
    scaled = dict(weights, **{"embedding_1/embeddings": weights["embedding_1/embeddings"] * 2})
    assert not np.allclose(forward(spec, scaled, tokens), before)


def test_the_attention_of_the_numpy_reference_against_a_loop():
    """One head at a time, step by step, written as the formula reads: the vectorised reference agrees."""
    from numpy_forward import attention
    rng = np.random.RandomState(0)
    layer = {"type": "attention", "name": "attention_1", "heads": 2, "causal": True, "dropout": 0.0}
    w = {f"a/{part}_{kind}": rng.normal(size=(4, 4) if kind == "kernel" else (4,))
         for part in ("query", "key", "value", "output") for kind in ("kernel", "bias")}
    x = rng.normal(size=(1, 3, 4))
    q, k, v = (x[0] @ w[f"a/{p}_kernel"] + w[f"a/{p}_bias"] for p in ("query", "key", "value"))
    heads = []
    for h in range(2):
        cols = slice(2 * h, 2 * h + 2)
        rows = []
        for t in range(3):
            scores = np.array([q[t, cols] @ k[s, cols] / np.sqrt(2) for s in range(t + 1)])
            share = np.exp(scores) / np.exp(scores).sum()
            rows.append(sum(share[s] * v[s, cols] for s in range(t + 1)))
        heads.append(np.array(rows))
    expected = np.concatenate(heads, axis=1) @ w["a/output_kernel"] + w["a/output_bias"]
    assert np.allclose(attention(x, layer, w, "a/")[0], expected)


def test_the_grouped_query_attention_of_the_numpy_reference_against_a_loop():
    """Query head by query head, step by step, each rotation as a complex number (u_i + i u_{i + dk/2}) times
    e^{i t theta_i}, written as the formula reads: the vectorised reference agrees (4 query heads, 2 groups)."""
    from numpy_forward import grouped_query_attention
    rng = np.random.RandomState(1)
    heads, kv_heads, size, steps, base = 4, 2, 4, 5, 100.0
    layer = {"type": "grouped_query_attention", "name": "g", "heads": heads, "kv_heads": kv_heads, "causal": True,
             "rope_base": base}
    features = heads * size
    w = {"g/query_kernel": rng.normal(size=(features, features)),
         "g/output_kernel": rng.normal(size=(features, features)),
         "g/key_kernel": rng.normal(size=(features, kv_heads * size)),
         "g/value_kernel": rng.normal(size=(features, kv_heads * size))}
    x = rng.normal(size=(1, steps, features))
    q, k, v = (x[0] @ w[f"g/{p}_kernel"] for p in ("query", "key", "value"))
    theta = base ** (-2.0 * np.arange(size // 2) / size)

    def rotated(u, t):
        z = (u[:size // 2] + 1j * u[size // 2:]) * np.exp(1j * t * theta)
        return np.concatenate([z.real, z.imag])

    outputs = []
    for h in range(heads):
        g = h // (heads // kv_heads)
        qh, kh, vh = q[:, h * size:(h + 1) * size], k[:, g * size:(g + 1) * size], v[:, g * size:(g + 1) * size]
        rows = []
        for t in range(steps):
            scores = np.array([rotated(qh[t], t) @ rotated(kh[s], s) / np.sqrt(size) for s in range(t + 1)])
            share = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
            rows.append(sum(share[s] * vh[s] for s in range(t + 1)))
        outputs.append(np.array(rows))
    expected = np.concatenate(outputs, axis=1) @ w["g/output_kernel"]
    assert np.allclose(grouped_query_attention(x, layer, w, "g/")[0], expected)
    # one group per query head, its key and value columns repeated: the same attention as multi-head
    repeat = [c for h in range(heads) for c in range((h // 2) * size, (h // 2 + 1) * size)]
    full = dict(w, **{f"g/{p}_kernel": w[f"g/{p}_kernel"][:, repeat] for p in ("key", "value")})
    assert np.allclose(grouped_query_attention(x, dict(layer, kv_heads=heads), full, "g/"),
                       grouped_query_attention(x, layer, w, "g/"))


def test_rms_norm_and_swiglu_of_the_numpy_reference_on_known_values():
    from numpy_forward import forward
    spec = ir.model([2], "float32", [ir.rms_norm(0.5)])
    got = forward(spec, {"rms_norm_1/gamma": np.array([1.0, 2.0])}, np.array([[3.0, 4.0]]))
    assert np.allclose(got, [[3.0, 8.0]] / np.sqrt(12.5 + 0.5))
    spec = ir.model([1], "float32", [ir.swiglu(1)])
    weights = {"swiglu_1/gate_kernel": np.array([[2.0]]), "swiglu_1/up_kernel": np.array([[3.0]]),
               "swiglu_1/down_kernel": np.array([[0.5]])}
    x = np.array([[1.5]])
    gate = 3.0
    assert np.allclose(forward(spec, weights, x), gate / (1 + np.exp(-gate)) * 4.5 * 0.5)


def test_llama_pieces_shapes_weights_flops_and_refusals():
    spec = transformer_pieces.llama_model()
    shapes = {layer["name"]: (layer, in_shape) for layer, in_shape, _ in ir.all_shapes(spec)}
    attention, in_shape = shapes["residual_1_grouped_query_attention_1"]
    assert dict(ir.param_shapes(attention, in_shape)) == {
        "query_kernel": (16, 16), "key_kernel": (16, 8), "value_kernel": (16, 8), "output_kernel": (16, 16)}
    swiglu, in_shape = shapes["residual_2_swiglu_1"]
    assert dict(ir.param_shapes(swiglu, in_shape)) == {
        "gate_kernel": (16, 24), "up_kernel": (16, 24), "down_kernel": (24, 16)}
    # 6 steps: attention 4*6*16*(16+8) + 4*36*16, SwiGLU 6*24*(6*16+1), attention 4*6*16*(16+16) + 4*36*16, the
    # dense output 6*30*(2*16+1)
    assert ir.forward_flops(spec) == 9216 + 2304 + 13968 + 12288 + 2304 + 5940
    weights = canonical_init(spec, 0)
    assert np.array_equal(weights["rms_norm_1/gamma"], np.ones(16))
    sequence = [ir.embedding(30, 16)]
    for layers, message in [
        ([ir.grouped_query_attention(3, 1)], "16 features do not split into 3 heads"),
        ([ir.grouped_query_attention(4, 3)], "4 heads do not split into 3 key/value groups"),
        ([ir.dense(12), ir.grouped_query_attention(4, 2)], "heads of 3 features; rotary embeddings need an even"),
        ([ir.grouped_query_attention(4, 2, rope_base=1.0)], "rope_base 1.0; a number above 1"),
        ([ir.grouped_query_attention(4, 0)], "kv_heads 0; a positive integer"),
        ([ir.grouped_query_attention(4, 2, causal=1)], "causal 1; true or false"),
        ([ir.swiglu(0)], "hidden 0; a positive integer"),
        ([ir.rms_norm(0.0)], "epsilon 0.0; a positive number"),
        ([ir.flatten(), ir.grouped_query_attention(4, 2)], "needs a \\(steps, features\\) input"),
    ]:
        with pytest.raises(ir.IRError, match=message):
            ir.model([6], "int32", sequence + layers)


def test_vit_shapes_patches_to_a_sequence_and_pools_it():
    spec = get_workload("vit-cifar10").model()
    shapes = {layer["name"]: out for layer, _, out in ir.all_shapes(spec)}
    assert shapes["conv2d_1"] == (8, 8, 128) and shapes["to_sequence_1"] == (64, 128)
    assert shapes["sequence_mean_1"] == (128,) and shapes["dense_1"] == (10,)
    assert not any(layer["causal"] for layer, _, _ in ir.all_shapes(spec) if layer["type"] == "attention")
    assert all(layer["causal"] for layer, _, _ in ir.all_shapes(get_workload("transformer-lm").model())
               if layer["type"] == "attention")


def test_to_sequence_of_the_numpy_reference_reads_row_by_row():
    from numpy_forward import forward
    image = np.arange(2 * 3 * 4 * 2, dtype=np.float32).reshape(2, 3, 4, 2)
    spec = ir.model([3, 4, 2], "float32", [ir.to_sequence()])
    sequence = forward(spec, {}, image)
    assert sequence.shape == (2, 12, 2)
    assert np.array_equal(sequence[1, 4 * 2 + 3], image[1, 2, 3])  # row 2, column 3
    pooled = forward(ir.model([3, 4, 2], "float32", [ir.to_sequence(), ir.sequence_mean()]), {}, image)
    assert np.allclose(pooled, image.mean(axis=(1, 2)))


@pytest.mark.parametrize("shape, layers, message", [
    ([6], [ir.to_sequence()], r"to_sequence_1 needs an \(H, W, C\) input"),
    ([4, 4, 3], [ir.sequence_mean()], r"sequence_mean_1 needs a \(steps, features\) input"),
    ([4, 4, 3], [ir.to_sequence(), ir.flatten(), ir.sequence_mean()], r"needs a \(steps, features\) input"),
])
def test_bad_vision_pieces_are_refused_with_the_reason(shape, layers, message):
    with pytest.raises(ir.IRError, match=message):
        ir.model(shape, "float32", layers)


@pytest.mark.parametrize("layers, message", [
    ([ir.embedding(10, 6), ir.attention(4)], "6 features do not split into 4 heads"),
    ([ir.embedding(10, 8), ir.attention(2, causal="yes")], "causal 'yes'"),
    ([ir.embedding(10, 8), ir.attention(2, dropout=1.0)], "dropout 1.0"),
    ([ir.embedding(10, 8), ir.attention(0)], "heads 0"),
    ([ir.embedding(10, 8), ir.positional_embedding(3)], "5 steps, more than max_len 3"),
    ([ir.embedding(10, 8), ir.residual([ir.dense(4)])], "a residual block must keep the shape"),
    ([ir.embedding(10, 8), ir.residual([])], "a non-empty list of layers"),
    ([ir.embedding(10, 8), ir.dense(8), ir.tied_output("embedding_2")], "the name of an embedding layer"),
    ([ir.embedding(10, 8), ir.dense(6), ir.tied_output()], "10 units on 6 features"),
    ([ir.embedding(10, 8), ir.attention(2), ir.flatten(), ir.positional_embedding(5)], "(steps, features) input"),
    ([ir.embedding(10, 8), ir.batchnorm(epsilon=0)], "epsilon 0"),
])
def test_bad_transformer_pieces_are_refused_with_the_reason(layers, message):
    with pytest.raises(ir.IRError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ir.model([5], "int32", layers)


SIZE = "a positive integer is needed"
RATE = r"a rate in \[0, 1\) is needed"


@pytest.mark.parametrize("input_shape, layers, message", [
    ([6, 6, 1], [ir.conv2d(0)], f"layer conv2d_1: filters 0; {SIZE}"),
    ([6, 6, 1], [ir.conv2d(4, kernel=-3)], f"layer conv2d_1: kernel -3; {SIZE}"),
    ([6, 6, 1], [ir.conv2d(4, stride=0)], f"layer conv2d_1: stride 0; {SIZE}"),
    ([6, 6, 1], [ir.conv2d(4, stride=True)], f"layer conv2d_1: stride True; {SIZE}"),
    ([6, 6, 1], [ir.conv2d(4, kernel=2.0)], f"layer conv2d_1: kernel 2.0; {SIZE}"),
    ([6, 6, 1], [ir.maxpool2d(0)], f"layer maxpool2d_1: pool 0; {SIZE}"),
    ([6, 6, 1], [ir.maxpool2d(2, stride=-1)], f"layer maxpool2d_1: stride -1; {SIZE}"),
    ([6, 6, 1], [ir.flatten(), ir.dense(0)], f"layer dense_1: units 0; {SIZE}"),
    ([6, 6, 1], [ir.dropout(1.0)], f"layer dropout_1: rate 1.0; {RATE}"),
    ([6, 6, 1], [ir.dropout(-0.1)], fr"layer dropout_1: rate -0.1; {RATE}"),
    ([6, 6, 1], [ir.dropout("0.5")], f"layer dropout_1: rate '0.5'; {RATE}"),
    ([5], [ir.embedding(0, 4)], f"layer embedding_1: vocab 0; {SIZE}"),
    ([5], [ir.embedding(10, -4)], f"layer embedding_1: dim -4; {SIZE}"),
    ([5], [ir.embedding(10, 4), ir.lstm(0)], f"layer lstm_1: units 0; {SIZE}"),
    ([5], [ir.embedding(10, 4), ir.lstm(3, return_sequences=1)], "layer lstm_1: return_sequences 1; true or false"),
    ([9], [ir.seq2seq(4, 10, 0, 8, 16)], f"layer seq2seq_1: target_vocab 0; {SIZE}"),
    ([5], [ir.embedding(10, 8), ir.positional_embedding(0)], f"layer positional_embedding_1: max_len 0; {SIZE}"),
])
def test_every_size_and_rate_is_checked_naming_the_layer_and_the_field(input_shape, layers, message):
    with pytest.raises(ir.IRError, match=message):
        ir.model(input_shape, "int32" if len(input_shape) == 1 else "float32", layers)


def test_each_kind_is_one_record_its_lists_derived_from_it():
    """shared/ir.py's KINDS (issue #42): a record's sizes, rates and booleans are among its settings; the public
    lists are the records'; a weighted kind's rule gives every workload layer of it weights, a weightless one none."""
    for kind, record in ir.KINDS.items():
        assert set(record.positive) | set(record.rates) | set(record.booleans) <= set(record.settings), kind
    assert ir.LAYER_SETTINGS == {kind: record.settings for kind, record in ir.KINDS.items()}
    assert set(ir.WEIGHTED) | set(ir.WEIGHTLESS) == set(ir.KINDS) and not set(ir.WEIGHTED) & set(ir.WEIGHTLESS)
    assert set(ir.UNCOUNTED) == {kind for kind, record in ir.KINDS.items() if record.flops is None}
    seen = set()
    for model in [workload.model() for workload in WORKLOADS.values()] + [transformer_pieces.llama_model()]:
        for layer, in_shape, _ in ir.all_shapes(model):
            seen.add(layer["type"])
            assert bool(ir.param_shapes(layer, in_shape)) == (layer["type"] in ir.WEIGHTED), layer["name"]
    assert seen == set(ir.KINDS)  # the built-in workloads and the tests' tiny LLaMA use every kind


def test_a_hand_written_layer_with_stride_0_is_an_ir_error_in_infer_shapes():
    """A dict that bypasses the constructors and ir.model: divided by its stride (ZeroDivisionError) before."""
    spec = {"input_shape": [6, 6, 1], "input_dtype": "float32",
            "layers": [{"type": "conv2d", "name": "mine", "filters": 2, "kernel": 1, "stride": 0,
                        "padding": "valid"}]}
    with pytest.raises(ir.IRError, match=f"layer mine: stride 0; {SIZE}"):
        ir.infer_shapes(spec)


def test_the_public_ir_exports_every_layer_kind_and_every_name_docs_ir_gives():
    """A user follows docs/ir.md with `from dlbench import ir`: each constructor and table it names is there
    (the detector, which the docs say stays in dlbench.shared.ir, apart)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "ir.md").read_text()
    documented = set(re.findall(r"\| `(\w+)\(", text)) | set(re.findall(r"\bir\.(?!py\b)(\w+)", text))
    assert {"attention", "residual", "tied_output", "POSITIVE_SETTINGS"} <= documented  # the scrape works
    assert documented - {"detector"} <= set(public_ir.__all__)
    assert set(ir.LAYER_SETTINGS) <= set(public_ir.__all__)
    assert all(getattr(public_ir, name) is getattr(ir, name) for name in public_ir.__all__)
