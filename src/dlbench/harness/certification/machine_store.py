"""The machine's equivalence certificates: one store under DLBENCH_HOME that `dlbench certify` fills and
that every results folder's runs, `results`, report and compare read. A certificate holds for its key: the
framework, its environment's packages digest, the worker code of the framework and of the reference
(environments.sources), and the workload's model and recipe as certified (certified_model.workload_digest)."""
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from dlbench.harness.certification.certified_model import workload_digest
from dlbench.harness.environments import envs, sources
from dlbench.harness.plan import executions, modes, precisions
from dlbench.harness.plan.suite import Cell
from dlbench.harness.plan.workloads import Workload, get_workload, known_workloads
from dlbench.harness.store import Store

FILENAME = "certificates.sqlite"
# What certifying every pair cost where it was measured, with an empty certificate store (README,
# "Certificates"): `dlbench certify` of the study's eight workloads, and of the two Transformers apart.
CERTIFY_TIMES = ("the study's eight workloads' 64 pairs took 8 min 52 s on a 2-core AMD EPYC shared with other "
                 "jobs, 2026-12-05; the two Transformers' 16 pairs 3 min 49 s on an idle 2-core Intel Xeon, "
                 "2026-12-06")


class Key(NamedTuple):
    """What a certificate vouches for, in Store.certificate_status's order."""
    framework: str  # the name without a version: each version's environment has its own digest
    framework_env: str
    workload: str
    worker_source: str
    reference_source: str
    workload_digest: str


def store_path() -> Path:
    """DLBENCH_CERTIFICATES, else certificates.sqlite in DLBENCH_HOME. Its own variable, so that a test can
    point the certificates elsewhere without hiding the framework environments in DLBENCH_HOME/envs."""
    return Path(os.environ.get("DLBENCH_CERTIFICATES") or envs.dlbench_home() / FILENAME)


def open_store() -> Store:
    """The machine's store, created if missing: for writing certificates."""
    return Store(store_path())


def existing_store() -> Store | None:
    """The machine's store for reading, or None where there is none yet (nothing is created)."""
    path = store_path()
    return Store(path, for_reading=True) if path.is_file() else None


def key_now(framework: str, workload: Workload) -> Key:
    """The key a certificate of this framework (name or name@version) and workload gets if certified now, in the
    execution and precision the workload's recipe holds (else the framework's defaults)."""
    certified = modes.as_run(workload, framework, *modes.of_workload(workload))
    return Key(envs.framework_name(framework), envs.require(framework).packages_digest(), workload.name,
               sources.framework_source(framework), sources.framework_source(envs.REFERENCE),
               workload_digest(certified))


def run_key(run: dict) -> Key | None:
    """The key of the certificate that vouches for a stored run, against the reference's code now; None for a
    run stored before runs recorded their workload's digest (store schema 10)."""
    packages = (run.get("config") or {}).get("env_packages")
    if not (run.get("workload_digest") and run.get("worker_source") and packages):
        return None
    return Key(run["framework"].partition("@")[0], envs.digest_of(packages), run["workload"], run["worker_source"],
               sources.framework_source(envs.REFERENCE), run["workload_digest"])


def status(key: Key) -> str:
    """passed or failed by the newest certificate of this key in the machine's store, else none."""
    store = existing_store()
    if store is None:
        return "none"
    with store:
        return store.certificate_status(*key)


def with_current_verdicts(runs: list[dict]) -> list[dict]:
    """The runs, each one's certificate status the machine store's verdict now where the store holds one for
    the run's key, else the status it recorded when stored: runs count as certified once `dlbench certify` has
    certified their environment, code and workload, before or after they ran."""
    store = existing_store()
    if store is None:
        return runs
    keys = [None if run.get("certificate") == "reference" else run_key(run) for run in runs]
    with store:
        verdicts = {key: store.certificate_status(*key) for key in set(keys) - {None}}
    return [run if verdicts.get(key, "none") == "none" else dict(run, certificate=verdicts[key])
            for run, key in zip(runs, keys, strict=True)]


def certificates_of(runs: Sequence[dict]) -> list[dict]:
    """The machine's certificates of the frameworks and workloads of these runs, oldest first."""
    store = existing_store()
    if store is None:
        return []
    with store:
        certificates = store.certificates()
    pairs = {(run["framework"].partition("@")[0], run["workload"]) for run in runs}
    return [cert for cert in certificates if (cert["framework"], cert["workload"]) in pairs]


def workload_state(cert: dict) -> str:
    """"current" when a certificate covers the workload's model and recipe as this dlbench defines them,
    "older" when they have changed since, "unrecorded" for one stored before certificates recorded them
    (store schema 10), "unknown" for a workload this dlbench does not know."""
    if cert.get("workload_digest") is None:
        return "unrecorded"
    known = known_workloads()  # a user's workload where its suite was loaded in this process
    if cert["workload"] not in known or cert["framework"] not in envs.RECIPES:
        return "unknown"
    try:
        now = modes.as_run(known[cert["workload"]], cert["framework"], cert.get("execution"), cert.get("precision"))
    except (executions.ExecutionError, precisions.PrecisionError):  # a mode this dlbench no longer runs for it
        return "older"
    return "current" if cert["workload_digest"] == workload_digest(now) else "older"


def pairs_of(cells: Sequence[Cell]) -> list[tuple[str, Workload]]:
    """The (framework, workload in the cell's execution and precision) pairs of a plan's CPU cells that a certificate
    is for (the reference's own in its default execution and float32 are not), in plan order. Certification probes
    run in the CPU environments: a GPU run's environment has another digest, so no certificate covers it."""
    chosen = dict.fromkeys((cell.framework, cell.workload, executions.resolved(cell.framework, cell.execution),
                            precisions.resolved(cell.framework, cell.precision))
                           for cell in cells if cell.device == "cpu")
    return [(framework, modes.as_run(get_workload(workload), framework, execution, precision))
            for framework, workload, execution, precision in chosen
            if not modes.is_reference(framework, execution, precision)]


def missing(pairs: Sequence[tuple[str, Workload]]) -> list[tuple[str, Workload]]:
    """The pairs with no certificate of their key now in the machine's store, of those a certificate can be made for
    (not those whose precision the reference cannot run: precisions.reference_refusal)."""
    return [(framework, workload) for framework, workload in pairs
            if precisions.reference_refusal(workload) is None and status(key_now(framework, workload)) == "none"]


def certify_command(suite: str, frameworks: Sequence[str] | None, workloads: Sequence[str] | None) -> str:
    """The command that certifies the missing pairs of a suite, narrowed as `dlbench run` was."""
    words = ["dlbench", "certify", "--suite", suite]
    words += [word for name in frameworks or () for word in ("-f", name)]
    words += [word for name in workloads or () for word in ("-w", name)]
    return shlex.join(words)
