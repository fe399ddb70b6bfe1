"""What to run: suites and their cells, the workloads, a suite entry's starting weights."""
