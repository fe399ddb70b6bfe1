"""A small CNN for scikit-learn's 8x8 digits, declared with dlbench's IR (docs/ir.md)."""
from dlbench import ir, user


def model(meta):
    # meta is the prepared dataset's: input_shape [8, 8, 1], input_dtype "uint8", num_classes 10, ...
    return ir.model(meta["input_shape"], "float32", [
        ir.conv2d(16, kernel=3, padding="same"), ir.relu(), ir.maxpool2d(2),
        ir.flatten(), ir.dense(64), ir.relu(), ir.dropout(0.25), ir.dense(meta["num_classes"]),
    ])


WORKLOAD = user.Workload(
    name="digits-cnn",
    description="conv 16 + pool + dense 64 on 8x8 digits",
    model=model,
    optimizer={"name": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
    loss="softmax_cross_entropy", batch_size=32, epochs=8,
    metric="accuracy", target=0.9,
)
