"""The Transformer family's pieces (issue #30) in a tiny token classifier that no workload declares
yet: the exact GELU after an embedding (a layer of its own in every framework) and after dense layers
(Keras folds it into the Dense), each followed by layer normalisation, on sequence (steps, features) and
flat (features,) activations. The first layer normalisation sees the embeddings' small variance (about
8e-4), where its epsilon (1e-5) moves the outputs by far more than the checks' tolerance. The adapter
checks (test_adapters.py) and the certificate (test_certify.py) run it in every framework; a few seconds
a framework."""
import numpy as np

from dlbench.harness.plan.workloads import Workload
from dlbench.shared import ir

NAME = "transformer-pieces"
META = {"task": "classification", "num_classes": 3, "seq_len": 6, "vocab_size": 30}
RECIPE = {"optimizer": {"name": "adam", "lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
          "batch_size": 8, "epochs": 1, "loss": "softmax_cross_entropy"}


def model(meta: dict = META) -> dict:
    return ir.model([meta["seq_len"]], "int32", [
        ir.embedding(meta["vocab_size"], 8), ir.activation("gelu"), ir.layer_norm(),
        ir.dense(16), ir.activation("gelu"), ir.layer_norm(), ir.flatten(),
        ir.dense(12), ir.activation("gelu"), ir.layer_norm(), ir.dense(meta["num_classes"]),
    ])


def case() -> dict:
    """An adapter_check case."""
    return {"workload": NAME, "model": model(), "recipe": RECIPE, "task": "classification",
            "n_classes": META["num_classes"], "target_len": None}


GELU_GRID = [float(x) for x in np.linspace(-6.0, 6.0, 97)]  # the tanh form strays 4.7e-4 from the erf form here


def gelu_grid_case() -> dict:
    """An adapter_check grid case: the exact GELU alone on GELU_GRID."""
    return {"workload": "gelu on a grid", "grid": GELU_GRID, "task": "classification", "recipe": RECIPE,
            "model": ir.model([len(GELU_GRID)], "float32", [ir.dense(len(GELU_GRID)), ir.activation("gelu")])}


def workload() -> Workload:
    """A workload object for the certificate's probes only: not in WORKLOADS, no dataset behind it."""
    return Workload(NAME, "GELU and layer normalisation in a tiny token classifier (test only)", "none", META,
                    model, RECIPE, {"metric": "accuracy", "value": 0.0, "higher_is_better": True})


# ---- a tiny GPT-style decoder: residual blocks, causal multi-head attention, learned positions, tied output ----

GPT_NAME = "transformer-blocks"
GPT_META = {"task": "language_model", "seq_len": 6, "vocab_size": 30}


def gpt_model(meta: dict = GPT_META) -> dict:
    """Token and position embeddings, two pre-LN blocks (attention with 2 heads and dropout on its weights, then a
    GELU MLP and dropout), a final layer normalisation and an output tied to the token embedding: every new IR
    piece, on (6, 8) activations. The dropout is what the certificate's serving and dropout checks must see."""
    return ir.model([meta["seq_len"]], "int32", [
        ir.embedding(meta["vocab_size"], 8), ir.positional_embedding(meta["seq_len"]),
        ir.residual([ir.layer_norm(), ir.attention(2, causal=True, dropout=0.1)]),
        ir.residual([ir.layer_norm(), ir.dense(16), ir.activation("gelu"), ir.dense(8), ir.dropout(0.1)]),
        ir.layer_norm(), ir.tied_output("embedding_1"),
    ])


GPT_RECIPE = dict(RECIPE, loss="sequence_softmax_cross_entropy")


def gpt_case() -> dict:
    """An adapter_check case: labels per position (a language model's next tokens)."""
    return {"workload": GPT_NAME, "model": gpt_model(), "recipe": GPT_RECIPE, "task": "language_model",
            "n_classes": GPT_META["vocab_size"], "target_len": None}


def gpt_workload() -> Workload:
    """A workload object for the certificate's probes only: not in WORKLOADS, no dataset behind it."""
    return Workload(GPT_NAME, "residual blocks, causal attention, positions and a tied output (test only)", "none",
                    GPT_META, gpt_model, GPT_RECIPE, {"metric": "perplexity", "value": 1e9, "higher_is_better": False})


# ---- a tiny LLaMA-style decoder: RMSNorm, grouped-query attention with rotary embeddings, SwiGLU ----------

LLAMA_NAME = "llama-blocks"
LLAMA_META = {"task": "language_model", "seq_len": 6, "vocab_size": 30}


def llama_model(meta: dict = LLAMA_META) -> dict:
    """Token embeddings (no learned positions: the rotations place the tokens), three pre-norm blocks (grouped-query
    attention of 4 query heads over 2 key/value heads, rotary base 10,000; a SwiGLU of 24 hidden units; attention
    with a key/value head per query head, not causal, rotary base 500, the other paths of the kind), a final RMS
    normalisation and an untied output, on (6, 16) activations: heads of 4 features."""
    return ir.model([meta["seq_len"]], "int32", [
        ir.embedding(meta["vocab_size"], 16),
        ir.residual([ir.rms_norm(), ir.grouped_query_attention(4, 2)]),
        ir.residual([ir.rms_norm(), ir.swiglu(24)]),
        ir.residual([ir.rms_norm(), ir.grouped_query_attention(4, 4, causal=False, rope_base=500.0)]),
        ir.rms_norm(), ir.dense(meta["vocab_size"]),
    ])


def llama_case() -> dict:
    """An adapter_check case: labels per position (a language model's next tokens)."""
    return {"workload": LLAMA_NAME, "model": llama_model(), "recipe": GPT_RECIPE, "task": "language_model",
            "n_classes": LLAMA_META["vocab_size"], "target_len": None}


def llama_workload() -> Workload:
    """A workload object for the certificate's probes only: not in WORKLOADS, no dataset behind it."""
    return Workload(LLAMA_NAME, "RMSNorm, grouped-query attention with rotary embeddings, SwiGLU (test only)",
                    "none", LLAMA_META, llama_model, GPT_RECIPE,
                    {"metric": "perplexity", "value": 1e9, "higher_is_better": False})
