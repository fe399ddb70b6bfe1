"""dlbench's modules that run inside a framework's environment (the worker side) and those both sides
share (the worker's events and the prepared files' names, the model IR, canonical initialisation,
detection's maths): what test_boundary and test_worker_compat check. Every other module of the package
is the harness's."""
from dlbench.sources import PACKAGE_DIR

SHARED = [PACKAGE_DIR / "protocol.py"] + sorted((PACKAGE_DIR / "models").glob("*.py")) + sorted(
    (PACKAGE_DIR / "detection").glob("*.py"))
WORKER = [PACKAGE_DIR / name for name in ("worker.py", "probe.py", "peak.py")] + sorted(
    (PACKAGE_DIR / "frameworks").glob("*.py"))
