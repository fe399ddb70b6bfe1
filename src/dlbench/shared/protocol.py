"""What the worker and the harness both name, defined once: the events of the worker's stream and the
files of a prepared dataset and its pad id. Shared by both sides: Python 3.8, the standard library alone.

The worker writes one JSON object a line on its stdout, its kind under KIND: START as it starts,
READY once the model is built, then per epoch EPOCH_START and EPOCH_TRAINED around the training (the
harness reads energy counters when they arrive) and EPOCH with the epoch's figures (the first's with
FIRST_STEP); DONE at the end, ERROR with a message instead when it fails. An inference cell (worker/serve.py)
emits, after READY, SERVE_FIRST_CALL, SERVE_LATENCY and SERVE_THROUGHPUT instead of epochs.

What the harness tells the worker about its cell, the cell file, is a record of its own: shared/cell_file.py.
"""

KIND = "event"
# every event also carries the seconds since the worker's start (worker/cell.Events)
ELAPSED = "elapsed_s"
START = "start"
READY = "ready"
EPOCH_START = "epoch_start"
EPOCH_TRAINED = "epoch_trained"
EPOCH = "epoch"
DONE = "done"
ERROR = "error"
# A detector's EPOCH also carries where its training time went, in seconds (worker/detector.py):
# the shared numpy on the host, the framework's NMS, and the framework's network calls.
EPOCH_SPLIT = ("host_time_s", "nms_time_s", "framework_time_s")
# The first EPOCH also carries the seconds from its start to its first step's end (worker/base.BaseAdapter.step_done)
FIRST_STEP = "first_step_s"
SERVE_FIRST_CALL = "serve_first_call"
SERVE_LATENCY = "serve_latency"
SERVE_THROUGHPUT = "serve_throughput"
# Named by the harness alone: a line of the stream that is not a JSON object, and the GEMM peak it
# measures before a cell (for the progress display).
GARBLED = "garbled"
PEAK = "peak"

# A prepared dataset's folder: these arrays as .npy files, in this order (its hash walks them so), and
# its meta. A detection dataset has its own arrays (detection.pipeline).
ARRAY_NAMES = ("x_train", "y_train", "x_test", "y_test")
META_FILE = "meta.json"
# the token id that pads a sequence dataset's token ids and labels (data preparation writes it); the masked
# sequence loss and its accuracy leave out labels of this id
PAD_ID = 0


def array_file(name: str) -> str:
    return name + ".npy"


def kind_of(event: dict) -> object:
    return event.get(KIND)
