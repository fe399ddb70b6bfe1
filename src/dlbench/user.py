"""What a user's workload file declares (docs/usage.md, "Your own workload and dataset").

The file defines WORKLOAD, a `dlbench.user.Workload`; a suite entry names the file (`workload: my_model.py`):

    from dlbench import ir, user

    def model(meta):
        return ir.model(meta["input_shape"], meta["input_dtype"], [ir.flatten(), ir.dense(meta["num_classes"])])

    WORKLOAD = user.Workload(description="a linear classifier", model=model,
                             optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": False,
                                        "weight_decay": 0.0},
                             loss="softmax_cross_entropy", batch_size=32, epochs=5, metric="accuracy", target=0.9)

A language model (task="language_model", loss="sequence_softmax_cross_entropy", metric="perplexity", a target
above 1) predicts the next token at every position of its dataset's windows (examples/llama-lm).

A learning-rate schedule is optional: schedule={"name": "warmup_cosine", "warmup_fraction": 0.05 (or
"warmup_steps": N), "total_steps": "auto" (or N), "final_lr_fraction": 0.1}, as the built-in Transformers'.
"""
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The tasks a user's workload may train for, each with the loss it trains by and the metric its target is in:
# an accuracy (higher is better, a target in (0, 1]) or a language model's perplexity (lower is better, above 1).
TASK_LOSSES = {"classification": "softmax_cross_entropy", "binary": "sigmoid_cross_entropy",
               "language_model": "sequence_softmax_cross_entropy"}
TASK_METRICS = {"classification": "accuracy", "binary": "accuracy", "language_model": "perplexity"}


@dataclass(frozen=True)
class Workload:
    """A workload of the user's: the model (a function of the dataset's meta that returns dlbench.ir.model(...)),
    the recipe (optimizer, loss, batch size, epochs, and a learning-rate schedule or None), the metric and its
    target, and a description."""
    description: str
    model: Callable[[dict[str, Any]], dict]
    optimizer: dict[str, Any]
    loss: str
    batch_size: int
    epochs: int
    metric: str
    target: float
    task: str = "classification"  # one of TASK_LOSSES: its loss and (TASK_METRICS) its metric
    name: str | None = None  # the name tables show; None: the file's name without .py
    schedule: dict[str, Any] | None = None  # None: a constant learning rate
