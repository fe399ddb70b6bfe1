"""How long a plan's cells take on N identical nodes, scheduled as the Ray executor schedules them.

The Ray driver (harness/run/ray_cluster.py, Driver.fill) hands each node with a free slot the next waiting
cell in plan order, one cell per node by default: greedy list scheduling in plan order, not longest cells
first. The plan's order is shuffled on purpose (plan/suite.py, `shuffled`: no framework always runs first),
so the executor keeps it; `longest_first` gives what sorting the cells would save, for comparison."""
import heapq
from collections.abc import Callable, Sequence


def list_schedule(durations: Sequence[float], nodes: int, keys: Sequence[str] = (),
                  setup: Callable[[str], float] = lambda key: 0.0) -> float:
    """The makespan of the cells run in the order given, each on the node that frees first (all free at 0).
    Ties go to the node listed first, as the driver's loop over its nodes does; with one node it is the sum.
    A cell whose key (its framework) a node has not run yet costs setup(key) more there: the GEMM peak
    each executor measures once per framework environment, on each node (harness/run/plan_peaks.py)."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    free = [(0.0, node) for node in range(min(nodes, max(len(durations), 1)))]
    heapq.heapify(free)
    seen: list[set[str]] = [set() for _ in free]
    end = 0.0
    for index, seconds in enumerate(durations):
        start, node = heapq.heappop(free)
        if index < len(keys) and keys[index] not in seen[node]:
            seen[node].add(keys[index])
            seconds += setup(keys[index])
        end = max(end, start + seconds)
        heapq.heappush(free, (start + seconds, node))
    return end


def longest_first(durations: Sequence[float], nodes: int, keys: Sequence[str] = (),
                  setup: Callable[[str], float] = lambda key: 0.0) -> float:
    """The makespan had the cells been dispatched longest first (Graham's LPT rule, within 4/3 of the best)."""
    order = sorted(range(len(durations)), key=lambda index: -durations[index])
    return list_schedule([durations[i] for i in order], nodes, [keys[i] for i in order if i < len(keys)], setup)


def lower_bound(durations: Sequence[float], nodes: int) -> float:
    """No schedule on `nodes` nodes ends sooner: the longest cell, or the total spread evenly."""
    return max(max(durations, default=0.0), sum(durations) / nodes)
