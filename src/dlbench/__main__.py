"""`python -m dlbench`: the command line, as the `dlbench` script runs it."""
import sys

from dlbench.harness.cli import main

sys.exit(main())
