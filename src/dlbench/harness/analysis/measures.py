"""Per-run figures derived from the stored columns for display: energy per sample, MFU, cores used.
Shared by `dlbench results` and the report; reads a run as Store.runs() returns it."""
from collections.abc import Callable, Mapping, Sequence
from statistics import median

from dlbench.harness.measure import cores
from dlbench.harness.measure.machine import hardware

ENERGY_KINDS = (("cpu", "energy_cpu_j"), ("dram", "energy_dram_j"), ("gpu", "energy_gpu_j"))


def metric_format(metric: str | None) -> Callable[[float], str]:
    """How a metric's value reads everywhere dlbench shows one (the report, results, run, compare): an
    accuracy as a percentage with one decimal (74.3%), any other metric to 4 significant digits."""
    if metric == "accuracy":
        return lambda value: f"{value * 100:.1f}%"
    return lambda value: f"{value:.4g}"


def steady_epochs(run: Mapping) -> list[Mapping]:
    """The epochs after the first (compilation, warm-up), or the only one."""
    epochs = list(run.get("epochs") or [])
    return epochs[1:] or epochs


# a detector's training time by where it went (store.EPOCH_COLUMNS): display name, column
TIME_SPLIT = (("host", "host_time_s"), ("NMS", "nms_time_s"), ("framework", "framework_time_s"))


def time_split(run: Mapping) -> dict[str, float]:
    """A detector's steady epoch by where its training time went, each the median over the steady epochs:
    seconds of "host", "NMS", "framework", "rest" (the epoch's training time less those three) and
    "framework share" (framework over the training time). Empty for a run without them (not a
    detector, or stored before they were)."""
    epochs = [e for e in steady_epochs(run) if all(e.get(column) is not None for _, column in TIME_SPLIT)]
    if not epochs:
        return {}
    split = {name: median(e[column] for e in epochs) for name, column in TIME_SPLIT}
    split["rest"] = median(e["train_time_s"] - sum(e[column] for _, column in TIME_SPLIT) for e in epochs)
    split["framework share"] = median(e["framework_time_s"] / e["train_time_s"] for e in epochs)
    return split


def time_split_text(run: Mapping) -> str:
    """"host 0.05, NMS 0.12, framework 0.30, rest 0.01 s (framework 63%)", or "-" for a run without a split."""
    split = time_split(run)
    if not split:
        return "-"
    parts = ", ".join(f"{name} {split[name]:.3g}" for name in ("host", "NMS", "framework", "rest"))
    return f"{parts} s (framework {split['framework share'] * 100:.0f}%)"


def energy_per_sample(run: Mapping) -> dict[str, float]:
    """Joules per training sample of a steady epoch (median over the steady epochs), per counter read:
    cpu (RAPL packages: the whole socket), dram, gpu. Empty where none was read."""
    n = run.get("n_train")
    if not n:
        return {}
    found = {}
    for kind, column in ENERGY_KINDS:
        values = [e[column] for e in steady_epochs(run) if e.get(column) is not None]
        if values:
            found[kind] = median(values) / n
    return found


def energy_reason(run: Mapping) -> str | None:
    """Why a run has no energy: its energy_source's reasons, the GPU's left out for a CPU run."""
    source = run.get("energy_source")
    if not source:
        return None
    parts = [p.strip() for p in source.split(";")]
    if run.get("device") != "gpu":
        parts = [p for p in parts if not p.startswith("gpu:")]
    return "; ".join(p.removeprefix("cpu: ") if len(parts) == 1 else p for p in parts)


def energy_text(run: Mapping) -> str:
    """"cpu 0.012 J, gpu 0.3 J" per sample, or "n/a: reason", or "-" for runs stored before energy was read."""
    per_sample = energy_per_sample(run)
    if per_sample:
        return ", ".join(f"{kind} {value:.3g} J" for kind, value in per_sample.items())
    reason = energy_reason(run)
    return f"n/a: {reason}" if reason else "-"


def gflops_text(run: Mapping) -> str:
    value = run.get("achieved_gflops")
    return "-" if value is None else f"{value:.3g}"


def mfu_text(run: Mapping) -> str:
    """"49.6% of 63 GFLOP/s": the MFU with its denominator, the framework's own measured GEMM peak."""
    value, achieved = run.get("mfu"), run.get("achieved_gflops")
    if value and achieved is not None:
        return f"{value:.1%} of {achieved / value:.3g} GFLOP/s"
    if value is not None:
        return f"{value:.1%}"
    return "no peak" if run.get("peak_id") is not None and run.get("achieved_gflops") is not None else "-"


def cores_text(run: Mapping) -> str:
    """Cores used in steady training, and the flag ("FLAG used 0.9 of 2 cores") when it is far from the ask;
    "n/a: why" where the run has none (cores.missing_reason), "-" for a run stored before they were measured."""
    if run.get("cores_flag"):
        return f"FLAG {run['cores_flag']}"
    value = run.get("cores_used")
    if value is not None:
        return f"{value:.2f}"
    reason = cores.missing_reason(run)
    return f"n/a: {reason}" if reason else "-"


def peak_key(peak: Mapping) -> tuple:
    """Where a GEMM peak was measured: the hardware model, device and threads; any framework."""
    return hardware(dict(peak)), peak.get("device"), peak.get("threads")


def machine_peaks(peaks: Sequence[Mapping]) -> dict[tuple, Mapping]:
    """peak_key -> the peaks row with the best float32 GEMM any framework reached there: the machine's peak,
    one denominator for every framework's MFU (each framework's own peak is its GEMM's efficiency)."""
    best: dict[tuple, Mapping] = {}
    for peak in peaks:
        key = peak_key(peak)
        if peak.get("gflops") and (key not in best or peak["gflops"] > best[key]["gflops"]):
            best[key] = peak
    return best


def gemm_gap(peaks: Sequence[Mapping]) -> list[str]:
    """Per machine, device and threads where two frameworks or more measured a GEMM peak: the slowest and the
    fastest framework's peaks (the best of each), a fact about the frameworks' GEMM libraries, not the runs."""
    by_key: dict[tuple, dict[str, float]] = {}
    for peak in peaks:
        if peak.get("gflops"):
            found = by_key.setdefault(peak_key(peak), {})
            found[peak["framework"]] = max(found.get(peak["framework"], 0.0), peak["gflops"])
    lines = []
    for (model, device, threads), best in by_key.items():
        if len(best) < 2:
            continue
        low, high = min(best, key=best.__getitem__), max(best, key=best.__getitem__)
        lines.append(f"float32 GEMM peaks differ between frameworks on {model or 'this machine'} ({device}, "
                     f"{threads} threads): {low} {best[low]:.3g} GFLOP/s to {high} {best[high]:.3g} GFLOP/s, "
                     f"{best[high] / best[low]:.2g}x")
    return lines
