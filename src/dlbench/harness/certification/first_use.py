"""Certificates made when they are first needed: `dlbench run` certifies each framework version other than the
default (name@version) on each workload of its plan before the version's first cell runs, so every version a run
compares trains the same model as the reference; a version whose certificate fails runs none of those cells."""
import contextlib
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dlbench.harness import folders
from dlbench.harness.certification import machine_store, probes
from dlbench.harness.environments import envs
from dlbench.harness.plan import executions, modes, precisions
from dlbench.harness.plan.suite import Cell
from dlbench.harness.plan.workloads import Workload
from dlbench.harness.store import Store


def certify_now(pairs: Sequence[tuple[str, Workload]], results: Path, store: Store,
                progress: Callable[[dict], None], keep_passed: bool = True) -> list[dict]:
    """Certificates of the pairs, into `store`: the reference probed once for all their workloads, then each
    framework's probes, in a folder of its own under results/certify. Without keep_passed, that folder is removed
    when every certificate passed: the probes of ten workloads take over a GB (the reference's in float64 and
    float32), and a passed certificate holds what they showed."""
    if not pairs:
        return []
    # a folder of its own: a certify started in the same second writes its probes elsewhere
    workdir = folders.new_folder(results / "certify", time.strftime("%Y%m%d-%H%M%S"))
    reference = probes.reference_probes([workload for _, workload in pairs], workdir)
    by_framework: dict[str, list[Workload]] = {}
    for framework, workload in pairs:
        by_framework.setdefault(framework, []).append(workload)
    certificates = []
    for framework, workloads in by_framework.items():
        certificates += probes.certify([framework], workloads, store, workdir, progress, reference)
    if not keep_passed and all(cert["passed"] for cert in certificates):
        shutil.rmtree(workdir)
        with contextlib.suppress(OSError):  # results/certify itself, where nothing else is in it
            workdir.parent.rmdir()
    return certificates


def is_other_version(framework: str) -> bool:
    """name@version of a version other than the recipe's default."""
    return envs.get_recipe(framework) is not envs.RECIPES[envs.framework_name(framework)]


def label(cert: dict) -> str:
    """pytorch 2.8.0 cnn-mnist, its mode beside the framework where not the default."""
    name = modes.label(cert["framework"], cert.get("execution"), cert.get("precision"))
    return f"{name} {cert.get('framework_version') or ''} {cert['workload']}".replace("  ", " ")


def certified_versions(cells: list[Cell], results: Path, log: Callable[[str], None] = print) -> list[Cell]:
    """The plan's cells, those of a version whose certificate on their workload failed left out (log says why);
    each version's pairs without a certificate certified first. A pair the reference cannot run in its precision
    cannot be certified, and runs as any uncertified pair does."""
    pairs = [(framework, workload) for framework, workload in machine_store.pairs_of(cells)
             if is_other_version(framework) and precisions.reference_refusal(workload) is None]
    if not pairs:
        return cells
    for framework in dict.fromkeys(framework for framework, _ in pairs):
        envs.require(framework)  # built by `dlbench env create`, as every CPU environment a plan runs in
    with machine_store.open_store() as store:
        todo = [(framework, workload) for framework, workload in pairs
                if store.newest_certificate(*machine_store.key_now(framework, workload)) is None]
        if todo:
            log(f"certifying {len(todo)} framework version x workload pair{'s' if len(todo) > 1 else ''} before "
                "their first run (certified on first use)")
        # a run's folder keeps the probes of a failed certificate only, for its inspection
        certify_now(todo, results, store, lambda cert: log(
            f"certified on first use: {label(cert)}: {'pass' if cert['passed'] else 'FAIL'}"), keep_passed=False)
        failed = {}
        for framework, workload in pairs:
            cert = store.newest_certificate(*machine_store.key_now(framework, workload))
            if not cert["passed"]:
                failed[_key(framework, workload.name, *modes.of_workload(workload))] = cert
    for (framework, workload, *_), cert in failed.items():
        log(f"left out: {label(cert)} ({framework}): its certificate against the reference failed (worst "
            f"{cert['worst_tensor']}, {cert['worst_scaled_deviation']:.3g} relative), so it would not train the "
            f"same model; `dlbench certify -f {framework} -w {workload} --again` certifies it anew")
    return [cell for cell in cells if _key(cell.framework, cell.workload, cell.execution, cell.precision) not in failed]


def _key(framework: str, workload: str, execution: str | None, precision: str | None) -> tuple[str, str, str, str]:
    """A cell's or a pair's framework, workload and mode, the framework's defaults written out."""
    return (framework, workload, executions.resolved(framework, execution), precisions.resolved(framework, precision))
