"""One package per framework, each its own room: adapter (the Adapter that builds the IR's models and
trains them), detector (its Faster R-CNN, where it has one) and peak (its float32 GEMM). A recipe names
the adapter; the worker side finds the detector and the peak beside it (base.sibling_module)."""
