"""What a user's workload file declares (docs/usage.md, "Your own workload and dataset").

The file defines WORKLOAD, a `dlbench.user.Workload`; a suite entry names the file (`workload: my_model.py`):

    from dlbench import ir, user

    def model(meta):
        return ir.model(meta["input_shape"], meta["input_dtype"], [ir.flatten(), ir.dense(meta["num_classes"])])

    WORKLOAD = user.Workload(description="a linear classifier", model=model,
                             optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.0, "nesterov": False,
                                        "weight_decay": 0.0},
                             loss="softmax_cross_entropy", batch_size=32, epochs=5, metric="accuracy", target=0.9)

A learning-rate schedule is optional: schedule={"name": "warmup_cosine", "warmup_fraction": 0.05 (or
"warmup_steps": N), "total_steps": "auto" (or N), "final_lr_fraction": 0.1}, as the built-in Transformers'.
"""
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The tasks a user's workload may train for, each with the loss it trains by; their metric is accuracy.
TASK_LOSSES = {"classification": "softmax_cross_entropy", "binary": "sigmoid_cross_entropy"}
METRICS = ("accuracy",)


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
    task: str = "classification"  # one of TASK_LOSSES
    name: str | None = None  # the name tables show; None: the file's name without .py
    schedule: dict[str, Any] | None = None  # None: a constant learning rate
