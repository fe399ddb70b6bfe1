"""Everything that runs in dlbench's own environment and never imports a framework: planning (plan),
framework environments (environments), data, running a plan's cells (run) and measuring them (measure),
the store, certificates, analysis (read-only) and presentation (present). The command line is cli."""
from pathlib import Path

# the installed dlbench package: the worker's code that a framework environment imports from it, and the
# checkout `git describe` names
PACKAGE_DIR = Path(__file__).resolve().parent.parent
