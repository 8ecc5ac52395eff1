"""What a node says of itself before it is sampled: its client id (`partition-id` in the
report) of how many (`num-partitions`). A report outside the ranges is refused, and N is what
most nodes report, so one node cannot set it (docs/security.md). The refusals name the settings
as the operator gives them: the node config's `client-id` / `num-clients` (deploy/supernode.sh;
`partition-id` / `num-partitions` are older names of the same settings).
"""

from __future__ import annotations


# A node may say it holds partition `partition-id` of `num-partitions`; more partitions than
# this are refused (each needs examples; no dataset here has more than ~1e6 examples per class).
MAX_PARTITIONS = 1_000_000


def check_node_report(pid: object, nparts: object, limit: int = MAX_PARTITIONS) -> str | None:
    """None when (partition-id, num-partitions) is a valid report, else why it is not."""
    for name, v in (("client-id", pid), ("num-clients", nparts)):
        if isinstance(v, bool) or not isinstance(v, int):
            return f"its {name} = {v!r} is not an integer"
    if not 1 <= nparts <= limit:
        return f"its num-clients = {nparts} is outside [1, {limit}]"
    if not 0 <= pid < nparts:
        return f"its client-id = {pid} is outside [0, num-clients = {nparts})"
    return None


def screen_node_reports(reports: dict[int, tuple[object, object]], num_slots: int = 0,
                        slots_from: str = "the federation's N") -> tuple[
                            dict[int, int], int, dict[int, str]]:
    """Nodes' (partition-id, num-partitions) reports -> (node -> partition-id of the accepted
    ones, num-partitions, node -> why refused). num-partitions is `num_slots` when already
    known (`slots_from` says where it came from, for the refusals), else the value most nodes
    report (ties: the smallest), so one node cannot set it."""
    valid = {n: r for n, r in reports.items() if check_node_report(*r) is None}
    refused = {n: check_node_report(*r) for n, r in reports.items() if n not in valid}
    if not num_slots and valid:
        slots_from = "the number most nodes report"
        counts: dict[int, int] = {}
        for _, nparts in valid.values():
            counts[nparts] = counts.get(nparts, 0) + 1
        num_slots = min(counts, key=lambda k: (-counts[k], k))
    accepted = {}
    for n, (pid, nparts) in valid.items():
        if nparts != num_slots:
            refused[n] = f"its num-clients = {nparts}, but {slots_from} is {num_slots}"
        else:
            accepted[n] = pid
    return accepted, num_slots, refused
