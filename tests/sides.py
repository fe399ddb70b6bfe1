"""dlbench's modules that run inside a framework's environment (the worker side: dlbench.worker) and
those both sides share (dlbench.shared: the worker's events and the prepared files' names, the model IR,
canonical initialisation, detection's maths): what test_boundary and test_worker_compat check. Every
other module of the package is the harness's (dlbench.harness, and the package's own __init__ and
__main__)."""
from dlbench.harness.environments.sources import PACKAGE_DIR

SHARED = sorted((PACKAGE_DIR / "shared").rglob("*.py"))
WORKER = sorted((PACKAGE_DIR / "worker").rglob("*.py"))
