"""What a run is measured with, beside the worker's own timings: resource sampling (monitor), energy,
the cores used, NVML, the machine and dlbench's version, and the GEMM peak's figures (peaks)."""
