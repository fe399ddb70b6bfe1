"""The framework environments: their recipes and builds (envs), what is on disk (disk), and the digest
of the worker code each one runs (sources)."""
