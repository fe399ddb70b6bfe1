"""This machine's run-to-run noise, from a store with repeated runs: per cell, the coefficient of variation
of one figure over the cell's successful runs (one value per run), and the repetitions a side a
Mann-Whitney test needs to show a difference of --effect with 80 % power at alpha 0.05.

    python benchmarks/noise.py RESULTS [--metric steady_epoch_s] [--effect 0.10]

RESULTS is a results folder or a dlbench.sqlite file; dlbench must be importable (the harness venv).
"""
import argparse
import statistics
import sys

from scipy import stats as scipy_stats

from dlbench.harness.analysis import stats
from dlbench.harness.analysis.load import AnalysisError, read_runs
from dlbench.harness.analysis.summary import TIME_FIGURES, summarise
from dlbench.harness.present.listing import aligned


def needed(cv: float, effect: float) -> str:
    try:
        return str(stats.repetitions_needed(cv, effect))
    except ValueError:
        return f">{stats.MAX_REPETITIONS}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="results folder or dlbench.sqlite file")
    parser.add_argument("--metric", choices=TIME_FIGURES, default="steady_epoch_s")
    parser.add_argument("--effect", type=float, default=0.10, help="the relative difference to show (0.10: 10 %%)")
    args = parser.parse_args(argv)
    try:
        cells = summarise(read_runs(args.results))
    except AnalysisError as error:
        print(f"noise.py: error: {error}", file=sys.stderr)
        return 2
    rows = [["framework", "workload", "dataset", "device", "runs", f"median {args.metric}", "cv",
             f"repetitions for {args.effect:.0%}"]]
    cvs, single = [], []
    for cell in cells:
        values = cell.samples[args.metric]
        name = [cell.framework, cell.workload, str(cell.dataset), str(cell.device)]
        if len(values) < 2:
            single.append(f"{' '.join(name)} ({len(values)} run{'' if len(values) == 1 else 's'})")
            continue
        cv = float(scipy_stats.variation(values, ddof=1))
        cvs.append(cv)
        rows.append([*name, str(len(values)), f"{statistics.median(values):.4g}", f"{cv:.3f}",
                     needed(cv, args.effect)])
    print(aligned(rows) if len(rows) > 1 else "no cell has 2 or more successful runs with this figure")
    if single:
        print("\nno cv (fewer than 2 successful runs): " + "; ".join(single))
    if cvs:
        typical = statistics.median(cvs)
        print(f"\nmedian cv over {len(cvs)} cells: {typical:.3f}; a {args.effect:.0%} difference needs "
              f"{needed(typical, args.effect)} repetitions a side to be shown (Mann-Whitney, alpha 0.05, power 0.8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
