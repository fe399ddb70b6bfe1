"""A small LLaMA-style language model (Touvron et al. 2023), declared with dlbench's IR (docs/ir.md): RMSNorm
before each block, grouped-query attention with rotary position embeddings, a SwiGLU feed-forward block, no
biases inside the blocks, no learned positions, an untied output layer."""
from dlbench import ir, user

DIM, HEADS, KV_HEADS, BLOCKS = 64, 4, 2, 2
HIDDEN = 172  # LLaMA's 8/3 of DIM, rounded up to a multiple of 4


def model(meta):
    # meta is the prepared dataset's: input_shape [64], input_dtype "int32", vocab_size, seq_len 64, ...
    blocks = []
    for _ in range(BLOCKS):
        blocks += [ir.residual([ir.rms_norm(1e-6), ir.grouped_query_attention(HEADS, KV_HEADS, causal=True,
                                                                             rope_base=10000.0)]),
                   ir.residual([ir.rms_norm(1e-6), ir.swiglu(HIDDEN)])]
    return ir.model(meta["input_shape"], "int32", [
        ir.embedding(meta["vocab_size"], DIM), *blocks, ir.rms_norm(1e-6), ir.dense(meta["vocab_size"]),
    ])


# AdamW as LLaMA trained (beta2 0.95, epsilon 1e-5, weight decay 0.1), with a warm-up and cosine schedule
WORKLOAD = user.Workload(
    name="llama-lm",
    description="a 2-block LLaMA-style decoder (GQA 4/2 heads, RoPE, SwiGLU, RMSNorm), character level",
    model=model,
    task="language_model",
    optimizer={"name": "adamw", "lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "epsilon": 1e-5, "weight_decay": 0.1},
    schedule={"name": "warmup_cosine", "warmup_fraction": 0.05, "total_steps": "auto", "final_lr_fraction": 0.1},
    loss="sequence_softmax_cross_entropy", batch_size=32, epochs=20,
    metric="perplexity", target=10.0,
)
