"""What a workload's recipe may name, for both sides: the harness checks a recipe against it (a user's workload
file, certification's optimiser rule) and every adapter builds exactly these. The learning-rate schedule has
its own module (schedule.py), the losses are the IR's (ir.LOSSES). Python 3.8, the standard library alone."""

# each optimizer a recipe may name and the settings it takes, exactly: every adapter reads each of them, and
# the certificate's rule (harness/certification/optimizer.py) applies each
OPTIMIZER_SETTINGS = {"sgd": ("lr", "momentum", "nesterov", "weight_decay"),
                      "adam": ("lr", "beta1", "beta2", "epsilon"), "adadelta": ("lr", "rho", "epsilon"),
                      "adamw": ("lr", "beta1", "beta2", "epsilon", "weight_decay")}
