"""Analysis of stored runs: read-only over the results store; imports nothing of dlbench.harness.run and
prints nothing."""
