"""What a node says of itself before it is sampled: its partition (`partition-id`) of how many
(`num-partitions`). A report outside the ranges is refused, and N is what most nodes report, so
one node cannot set it (docs/security.md).
"""

from __future__ import annotations


# A node may say it holds partition `partition-id` of `num-partitions`; more partitions than
# this are refused (each needs examples; no dataset here has more than ~1e6 examples per class).
MAX_PARTITIONS = 1_000_000


def check_node_report(pid: object, nparts: object, limit: int = MAX_PARTITIONS) -> str | None:
    """None when (partition-id, num-partitions) is a valid report, else why it is not."""
    for name, v in (("partition-id", pid), ("num-partitions", nparts)):
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{name} = {v!r} is not an integer"
    if not 1 <= nparts <= limit:
        return f"num-partitions = {nparts} is outside [1, {limit}]"
    if not 0 <= pid < nparts:
        return f"partition-id = {pid} is outside [0, num-partitions = {nparts})"
    return None


def screen_node_reports(reports: dict[int, tuple[object, object]], num_slots: int = 0
                        ) -> tuple[dict[int, int], int, dict[int, str]]:
    """Nodes' (partition-id, num-partitions) reports -> (node -> partition-id of the accepted
    ones, num-partitions, node -> why refused). num-partitions is `num_slots` when already
    known, else the value most nodes report (ties: the smallest), so one node cannot set it."""
    valid = {n: r for n, r in reports.items() if check_node_report(*r) is None}
    refused = {n: check_node_report(*r) for n, r in reports.items() if n not in valid}
    if not num_slots and valid:
        counts: dict[int, int] = {}
        for _, nparts in valid.values():
            counts[nparts] = counts.get(nparts, 0) + 1
        num_slots = min(counts, key=lambda k: (-counts[k], k))
    accepted = {}
    for n, (pid, nparts) in valid.items():
        if nparts != num_slots:
            refused[n] = f"num-partitions = {nparts}, the other nodes say {num_slots}"
        else:
            accepted[n] = pid
    return accepted, num_slots, refused
