"""Which nodes take part: waiting for enough nodes, seeded sampling, the nodes' partition
identity (asked once per node, or once in all for simulated nodes) and, with dynamic clients,
which data partition each one holds.

Node ids change from run to run (simulation draws them at random); nodes are asked for their
partition-id once (a QUERY message; no data is loaded) and sampled in that order, so the same
seed samples the same partitions in every run, a resumed one included. Simulated nodes are
interchangeable: only the first is asked, and slot (partition) p goes to the p-th node by id.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import sample_nodes

from run_config import node_data_mismatch
from server_math.node_reports import screen_node_reports
from server_math.reply_screen import short_reason


class NodeWaitTimeout(RuntimeError):
    """Too few nodes connected within the wait limit."""


class NodesRefused(RuntimeError):
    """Every connected node was refused when first asked, and none was ever accepted: no node
    can be sampled, and the run stops at once, saying why (rather than skip every round). (A
    run whose accepted nodes all left waits for them as before: they keep their slots.)"""


def wait_for_nodes(grid: Grid, fraction: float, min_nodes: int, min_available: int,
                   timeout: float) -> tuple[list[int], int]:
    """The connected node ids and the sample size max(floor(fraction * connected), min_nodes),
    once at least max(size, min_available) nodes are connected; NodeWaitTimeout after `timeout` s
    (Flower's own sampling waits forever). A grid with `fixed_size = True` (the simulation's:
    its node count never grows) fails as soon as the count is the same on two polls."""
    deadline = time.monotonic() + timeout
    seen = None
    while True:
        nodes = sorted(grid.get_node_ids())
        size = max(int(len(nodes) * fraction), min_nodes)
        needed = max(size, min_available)
        if len(nodes) >= needed:
            return nodes, size
        if getattr(grid, "fixed_size", False) and nodes and len(nodes) == seen:
            raise NodeWaitTimeout(
                f"the simulated federation has {len(nodes)} node(s), {needed} needed per round: "
                f"raise num-supernodes (--federation-config \"num-supernodes={needed}\") or "
                "lower min-train-nodes / min-evaluate-nodes.")
        seen = len(nodes)
        if time.monotonic() > deadline:
            raise NodeWaitTimeout(
                f"only {len(nodes)} node(s) connected after {timeout:.0f} s, {needed} needed: "
                "start more SuperNodes (simulation: raise num-supernodes), or lower "
                "min-train-nodes / min-evaluate-nodes, or raise node-wait-timeout."
            )
        log(INFO, "Waiting for nodes: %d connected, %d needed.", len(nodes), needed)
        time.sleep(1.0)


Construct = Callable[[RecordDict, list[int], str], Iterable[Message]]


def _says_simulated(msg: Message) -> bool:
    """Whether a node's reply to the partition-id query says it is a simulated node."""
    return not msg.has_error() and any(rec.get("simulated") == 1
                                       for rec in msg.content.metric_records.values())


class Nodes:
    """The node side of a strategy: sampling, partition identity, dynamic-client assignment.

    `sampling = 'seeded'`: the strategy's own RNG (its state is in checkpoints) over the nodes in
    partition-id order. `sampling = 'flower'`: Flower's own `sample_nodes` (Python's global
    `random`, node-id order), as Flower's strategies sample; not resumable.
    """

    def __init__(self, *, seed: int = 0, min_available_nodes: int = 2,
                 node_wait_timeout: float = 120.0, identify_nodes: bool = False,
                 population=None, sampling: str = "seeded", num_clients: int = 0,
                 client_data: str | None = None) -> None:
        """`num_clients`: N, the federation's client slots (run config num-clients); 0 = the
        num-partitions the nodes report, else the number of nodes connected when first asked.
        `client_data`: the run config's client-data; a node whose report says otherwise (its
        own data in a run on partitions, or the reverse) is refused (None: not checked)."""
        if sampling not in ("seeded", "flower"):
            raise ValueError(f"sampling must be 'seeded' or 'flower', got {sampling!r}")
        self.sampling = sampling
        self.rng = random.Random(seed)  # node sampling; Flower's FedAvg uses the global `random`
        self.min_available_nodes = min_available_nodes
        self.node_wait_timeout = node_wait_timeout
        self.identify_nodes = identify_nodes
        self.partition_of: dict[int, int] = {}
        self._queried: set[int] = set()
        self.refused: dict[int, str] = {}  # node -> why its report was refused: never sampled
        # Nodes whose client-id a connected node holds: not sampled, their claim tried again
        # each round (a restarted node gets its slot once its old node id has left)
        self.waiting: dict[int, int] = {}
        self.num_slots = num_clients  # N: run config num-clients, or what the nodes reported
        # where N came from, as the refusals of a node whose num-clients differs say it
        self.slots_from = "the run config's num-clients" if num_clients else ""
        self.num_clients = num_clients
        self.client_data = client_data
        # Nodes with their own data and no client-id: the server gives each a free slot, in the
        # order they are first seen (docs/deployment.md#client-identity), named in its messages
        self.slotted: set[int] = set()
        self._connected: list[int] = []
        self.seen: list[int] = []  # the nodes connected at the last sampling
        # Simulated nodes (the first node asked says so) can train on any partition: no node is
        # asked again; slot p is the p-th node by id, and each message names its partition.
        self.virtual_nodes: bool | None = None  # None: not known yet
        self._bound: frozenset[int] = frozenset()
        # Dynamic clients (population.ClientPopulation): each node (slot = its partition-id) is
        # told which data partition to train on this round; None = every node keeps its own.
        self.population = population
        if population is not None and not identify_nodes:
            raise ValueError("a dynamic client population needs identify_nodes=True")

    # --- state (checkpoints) ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The sampling RNG. Sampling is by partition-id order, so the RNG state means the same
        partitions in a new run with other node ids; the node-id -> partition map is learnt
        again."""
        return {"sampling-rng": self.rng.getstate(),
                "slots": {node: self.partition_of[node] for node in sorted(self.slotted)},
                "num-slots": self.num_slots if self.slotted else 0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The RNG, and the slots given to nodes without a client id (a resumed run gives each
        such node the slot, and so the per-client state, it had)."""
        self.rng.setstate(state["sampling-rng"])
        slots = state.get("slots") or {}
        if slots:
            self.num_slots = int(state["num-slots"])
            self.slots_from = self.slots_from or "the federation's N in the checkpoint"
            self.partition_of.update({int(n): int(p) for n, p in slots.items()})
            self.slotted.update(int(n) for n in slots)
            self._queried.update(int(n) for n in slots)

    # --- identity ---------------------------------------------------------------------------
    def describe(self, node: int) -> str:
        """A node in log lines: its id and, when known, its partition."""
        known = node in self.partition_of
        return f"node {node}" + (f" (partition {self.partition_of[node]})" if known else "")

    def describe_sample(self, nodes: list[int]) -> str:
        """The sampled nodes in a log line: their partitions where every one is known, else the
        node ids (with the partitions that are known)."""
        if nodes and all(n in self.partition_of for n in nodes):
            return f"partitions {[self.partition_of[n] for n in nodes]}"
        return f"nodes {[self.describe(n) if n in self.partition_of else n for n in nodes]}"

    def identify(self, grid: Grid, nodes: list[int], construct: Construct) -> None:
        """Learn each node's partition (its slot in the sampling order).

        The first node is asked alone (a QUERY message; no data is loaded). A simulated node
        says so: simulated nodes are interchangeable (every one can load any partition), so
        instead of asking all of them (a message each: about 4 ms per node in round 1), slot
        p is bound to the p-th node by id and every message names the partition to train on.
        Deployment nodes hold their own data: every node not asked before is asked.
        Either way slots are partitions 0..n-1, so the seed samples the same partitions.
        """
        if self.virtual_nodes:
            self._bind_virtual(nodes)
            return
        self._connected = nodes
        for node in sorted(set(self.waiting) & set(nodes)):
            if not self._claim(node, self.waiting[node]):
                del self.waiting[node]
        asked = [n for n in nodes if n not in self._queried]
        if not asked:
            return
        new, anonymous, replies = asked, [], []
        if self.virtual_nodes is None:
            replies, new = self._ask(grid, new[:1], construct), new[1:]
            if any(_says_simulated(msg) for msg in replies):
                self.virtual_nodes, anonymous = self._screen(replies)
                if self.virtual_nodes:
                    log(INFO, "Simulated nodes: partition p is trained by the p-th node by id "
                        "(%d partitions)", self.num_slots)
                    self._bind_virtual(nodes)
                    return
                replies = []
            self.virtual_nodes = False
        if new:  # (a deployment's first node is screened with these: N is what most report)
            replies += self._ask(grid, new, construct)
        if replies:
            anonymous += self._screen(replies)[1]
        if anonymous:  # once every node asked has reported: a client-id claims its slot first
            self._refuse(self._give_slots(sorted(anonymous), asked))

    def _bind_virtual(self, nodes: list[int]) -> None:
        if self._bound != frozenset(nodes):
            self._bound = frozenset(nodes)
            self.partition_of = {node: p for p, node in enumerate(sorted(nodes)[:self.num_slots])}

    def _ask(self, grid: Grid, nodes: list[int], construct: Construct) -> list[Message]:
        """Ask `nodes` for their partition-id (a QUERY message each): their replies."""
        self._queried.update(nodes)  # a node that does not answer is not asked again every round
        content = RecordDict({"config": ConfigRecord({"want": "partition-id"})})
        return list(grid.send_and_receive(construct(content, nodes, MessageType.QUERY),
                                          timeout=self.node_wait_timeout))

    def _screen(self, replies: list[Message]) -> tuple[bool, list[int]]:
        """The nodes' reports, screened together: (whether the replies say they are simulated,
        the nodes with their own data and no client-id, which wait for a slot)."""
        simulated, reports, anonymous, refused = False, {}, [], {}
        for msg in replies:
            if msg.has_error():
                log(WARNING, "node %d did not say its partition-id: %s", msg.metadata.src_node_id,
                    short_reason(msg.error.reason))
                continue
            for rec in msg.content.metric_records.values():
                node = msg.metadata.src_node_id
                mismatch = self._client_data_mismatch(rec)
                if mismatch:
                    refused[node] = mismatch
                    continue
                if rec.get("own-data") == 1 and "partition-id" not in rec:
                    anonymous.append(node)  # no client-id: given a slot
                    continue
                nparts = rec.get("num-partitions")
                if rec.get("own-data") == 1 and nparts == 0:  # a client-id, N left to the server
                    nparts = self.num_slots or len(self._connected)
                reports[node] = (rec.get("partition-id"), nparts)
                simulated = simulated or rec.get("simulated") == 1
        decided = self.num_slots
        accepted, self.num_slots, screened = screen_node_reports(
            reports, self.num_slots, self.slots_from or "the federation's N")
        if not decided and self.num_slots:
            self.slots_from = "the number most nodes report"
        refused.update({n: why + self._num_clients_fix(why) for n, why in screened.items()})
        claimed = False
        for node in sorted(accepted):
            why = self._claim(node, accepted[node])
            if why:
                log(WARNING, "node %d is not sampled while %s", node, why)
                self.waiting[node] = accepted[node]
            claimed = claimed or not why
        self._refuse(refused)
        return simulated and claimed and self.num_slots > 0, anonymous

    def _num_clients_fix(self, why: str) -> str:
        """The fix for a node whose num-clients is not the federation's N."""
        if not why.startswith("its num-clients = ") or ", but " not in why:
            return ""
        if self.num_clients:
            return (f": start the node with --num-clients {self.num_slots}, or with its own data "
                    "(--data-path) without --num-clients: it then takes the run config's")
        return (f": start the node with --num-clients {self.num_slots}, or set num-clients in "
                "the run config (nodes with their own data may then leave --num-clients out)")

    def _client_data_mismatch(self, report) -> str | None:
        """Why a node's report does not fit the run's client-data (None: it fits, or either is
        not known): docs/deployment.md#own-data."""
        if self.client_data is None or "own-data" not in report:
            return None
        return node_data_mismatch(report.get("own-data") == 1, self.client_data)

    def _claim(self, node: int, slot: int) -> str | None:
        """Give `node` the client slot its client id names, unless a connected node holds it
        (then why not); a slot held by a node that left passes to `node` (a node restarted
        with a new node id). Two nodes never hold one slot."""
        holder = next((n for n, p in self.partition_of.items() if p == slot and n != node), None)
        if holder is not None and holder in self._connected:
            return (f"client-id {slot} is held by node {holder}, which is connected: give every "
                    "node its own client-id (or none: the server then gives it a free slot); "
                    "it takes the slot once that node has left")
        if holder is not None:
            log(INFO, "node %d takes client %d, held by node %d, which left", node, slot, holder)
            del self.partition_of[holder]
            self.slotted.discard(holder)
            self._queried.discard(holder)  # asked again if it comes back
        self.partition_of[node] = slot
        return None

    def _refuse(self, refused: dict[int, str]) -> None:
        for node, why in refused.items():  # node_reports.check_node_report, a clash, client-data
            log(WARNING, "node %d: its report was refused (%s); it is not sampled", node, why)
            self.refused[node] = why

    def refusals(self, nodes: list[int]) -> str:
        """Why `nodes` were refused, each reason once with how many nodes gave it (most first)."""
        counts: dict[str, int] = {}
        for node in nodes:
            counts[self.refused[node]] = counts.get(self.refused[node], 0) + 1
        return "; ".join(f"{n} node{'s' * (n > 1)}: {why}"
                         for why, n in sorted(counts.items(), key=lambda item: -item[1]))

    def _give_slots(self, anonymous: list[int], asked: list[int]) -> dict[int, str]:
        """Free slots 0..N-1 to the nodes without a client id, by node id; returns the nodes
        refused for want of one. N: num-clients, else what the other nodes report, else the
        nodes connected now (a node that joins after every slot is taken is refused: the rules'
        N cannot grow during a run)."""
        if not self.num_slots:
            self.num_slots = len(set(self._connected) | set(asked) | set(self.partition_of))
            self.slots_from = "the federation's N, the nodes connected when first asked"
            log(INFO, "N = %d clients: the nodes connected now (no num-clients in the run "
                "config); a node that joins later is refused once every slot is taken",
                self.num_slots)
        free = iter(sorted(set(range(self.num_slots)) - set(self.partition_of.values())))
        refused = {}
        for node in anonymous:
            slot = next(free, None)
            if slot is None:
                refused[node] = (f"it has no client-id and the federation's N = {self.num_slots} "
                                 "client slots are taken: raise num-clients in the run config "
                                 "(nodes that left keep their slot)")
                continue
            self.partition_of[node] = slot
            self.slotted.add(node)
            log(INFO, "node %d (own data, no client-id) is client %d of %d", node, slot,
                self.num_slots)
        return refused

    def ordered(self, nodes: list[int]) -> list[int]:
        """Nodes by partition-id where known (stable across runs), then by node id."""
        return sorted(nodes, key=self.order_key)

    def order_key(self, node: int) -> tuple:
        return (node not in self.partition_of, self.partition_of.get(node, 0), node)

    # --- sampling ---------------------------------------------------------------------------
    def sample(self, grid: Grid, fraction: float, min_nodes: int,
               construct: Construct) -> list[int]:
        """Sample max(floor(fraction * connected), min_nodes) nodes.

        Waits at most `node_wait_timeout` seconds for enough nodes to connect.
        """
        nodes, size = wait_for_nodes(grid, fraction, min_nodes, self.min_available_nodes,
                                     self.node_wait_timeout)
        self.seen = nodes
        if self.sampling == "flower":  # Flower's own, as its FedAvg.configure_train samples
            return sample_nodes(grid, self.min_available_nodes, size)[0]
        if self.identify_nodes:
            self.identify(grid, nodes, construct)
            if nodes and not self.partition_of and all(n in self.refused for n in nodes):
                raise NodesRefused(
                    f"every connected node ({len(nodes)}) was refused when the server first "
                    f"asked it, so no node can be sampled: {self.refusals(nodes)}. Fix the "
                    "nodes' config (deploy/supernode.sh) or the run config as the reasons say, "
                    "and submit the run again (docs/deployment.md#client-identity).")
            nodes = [n for n in nodes if n not in self.refused and n not in self.waiting]
            size = min(size, len(nodes))
        return self.rng.sample(self.ordered(nodes), size)

    def counts(self) -> dict[str, int]:
        """Of the nodes connected at the last sampling: how many, how many refused (never
        sampled: their report was refused) and how many waiting for their client id's slot
        (docs/results.md#failures-and-bad-updates)."""
        return {"nodes-connected": len(self.seen),
                "nodes-refused": sum(n in self.refused for n in self.seen),
                "nodes-waiting": sum(n in self.waiting for n in self.seen)}

    # --- dynamic clients --------------------------------------------------------------------
    def messages(self, record: RecordDict, node_ids: list[int], message_type: str,
                 server_round: int, construct: Construct, config_key: str) -> list[Message]:
        """One message per node; with a dynamic population (or simulated nodes) each node's
        config also says which data partition it holds this round (`partition-id`,
        `num-partitions` of the pool; simulated nodes: the partition of their slot)."""
        if self.population is None and not self.virtual_nodes:
            if not self.slotted.intersection(node_ids):
                return list(construct(record, node_ids, message_type))
            messages = []  # nodes without a client id are told the slot the server gave them
            for node in node_ids:
                content = RecordDict(dict(record.items()))
                if node in self.slotted:
                    config = ConfigRecord(dict(record[config_key]))
                    config["client-slot"] = self.partition_of[node]
                    config["num-clients"] = self.num_slots
                    content[config_key] = config
                messages.extend(construct(content, [node], message_type))
            return messages
        unknown = [n for n in node_ids if n not in self.partition_of]
        if unknown or not self.num_slots:
            raise RuntimeError(f"nodes {unknown} have no partition: they did not report their "
                               "partition-id")
        if self.population is None:  # simulated nodes: each trains the partition of its slot
            held, pool = list(range(self.num_slots)), self.num_slots
        else:
            held = self.population.assignment(server_round, self.num_slots)
            pool = self.population.pool_size(self.num_slots)
        if message_type == MessageType.TRAIN and self.population is not None:
            every = self.population.replace_every  # the test below only chooses a log line
            if server_round > 1 and (server_round - 1) % every == 0:  # pragma: no mutate
                log(INFO, "dynamic clients: %d of %d clients replaced by fresh ones (pool of %d "
                    "partitions)", self.population.replaced(server_round, self.num_slots),
                    self.num_slots, pool)
            log(INFO, "dynamic clients: they hold data partitions %s",
                [held[self.partition_of[n]] for n in node_ids])
        messages = []
        for node in node_ids:
            content = RecordDict(dict(record.items()))
            config = ConfigRecord(dict(record[config_key]))
            config["partition-id"], config["num-partitions"] = held[self.partition_of[node]], pool
            content[config_key] = config
            messages.extend(construct(content, [node], message_type))
        return messages
