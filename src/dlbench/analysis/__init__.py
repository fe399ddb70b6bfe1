"""Analysis of stored runs: read-only over the results store; imports nothing of the runner or executors."""
