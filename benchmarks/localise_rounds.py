"""Rounds and probes localisation needs for 1 bad node among N, against log2(N) and naive.

A simulated cluster: a group's test measures 100 (a little less for larger groups,
as an all-reduce's busbw does), half that when the bad node is in it. For each N the
bad node sits at random positions (one per seed); localisation
(``toolkit.preflight.localise.find``) runs from nothing measured, so its first round is the
whole cluster. Printed per N: mean and max rounds and probes (reference groups
included, their share shown), rounds against log2(N), and the naive ways as ratios:
every node tested once against a known-good one, serially (N rounds), and every pair
tested once (N (N - 1) / 2 probes). A wrong or missing culprit is counted and fails
the run.

    python benchmarks/localise_rounds.py [--seeds 10] [--fanout 2] [--verdict floor]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.preflight.localise.find import (  # noqa: E402
    LocaliseOptions,
    Probe,
    ProbeResult,
    Verdict,
    localise,
)

SIZES = (2, 3, 4, 5, 8, 12, 16, 32, 64, 100, 128, 256, 500, 512, 1000, 1024)
VERDICTS = {
    "floor": Verdict(floor=60.0, fraction=0.8),  # absolute and relative (references)
    "relative": Verdict(floor=None, fraction=0.8),
    "absolute": Verdict(floor=60.0, fraction=None),
}


def probe_for(bad: str) -> Probe:
    """A group measures 100, a little less the larger it is, half with ``bad`` in it."""

    def probe(groups: Sequence[tuple[str, ...]]) -> list[ProbeResult]:
        return [100.0 * (1 - 0.02 * math.log2(len(g))) * (0.5 if bad in g else 1.0) for g in groups]

    return probe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="bad positions per N")
    parser.add_argument("--fanout", type=int, default=2, help="parts per bad group")
    parser.add_argument("--verdict", choices=sorted(VERDICTS), default="floor")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = parser.parse_args()
    verdict = VERDICTS[args.verdict]
    options = LocaliseOptions(fanout=args.fanout)
    began = time.perf_counter()
    wrong = 0
    print(f"1 bad node, {args.seeds} random positions per N, fanout {args.fanout}, {verdict}")
    header = (
        f"{'N':>5} {'log2N':>6} {'rounds':>7} {'max':>4} {'r/log2N':>7} "
        f"{'probes':>7} {'max':>4} {'refs':>5} "
        f"{'serial N':>8} {'N/rounds':>8} {'all-pairs':>9} {'pairs/probes':>12}"
    )
    print(header)
    print("-" * len(header))
    excess = []
    for n in (int(s) for s in args.sizes.split(",")):
        nodes = [f"n{i:04d}" for i in range(n)]
        rounds, probes, refs = [], [], []
        for seed in range(args.seeds):
            bad = nodes[random.Random(seed * 7919 + n).randrange(n)]
            found = localise(nodes, probe_for(bad), verdict, options=options)
            named = found.bad_nodes == (bad,) and len(found.culprits) == 1
            if n == 2 or (n == 3 and verdict.floor is None):
                # no known-good partner (2 nodes), or no two groups to compare (a
                # relative verdict on 3): nothing to tell the nodes apart with
                named = found.conclusion == "cluster-wide" and not found.culprits
            wrong += not named
            rounds.append(found.rounds_used)
            probes.append(found.probes_run)
            refs.append(sum(1 for r in found.readings if r.role == "reference"))
        log2n = math.log2(n)
        mean_r, mean_p = statistics.mean(rounds), statistics.mean(probes)
        pairs = n * (n - 1) // 2
        excess.append(max(rounds) - log2n)
        print(
            f"{n:>5} {log2n:>6.2f} {mean_r:>7.2f} {max(rounds):>4} {mean_r / log2n:>7.2f} "
            f"{mean_p:>7.1f} {max(probes):>4} {statistics.mean(refs):>5.1f} "
            f"{n:>8} {n / mean_r:>8.1f} {pairs:>9} {pairs / mean_p:>12.1f}"
        )
    print(
        f"max rounds - log2(N) over all N: {max(excess):+.2f}; wrong culprits: {wrong}; "
        f"{time.perf_counter() - began:.1f} s"
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
