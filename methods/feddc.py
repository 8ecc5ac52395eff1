"""FedDC (Gao et al. 2022, https://arxiv.org/abs/2203.11751) as its official code runs it,
docs/baselines.md#feddc: a local drift h_i and SCAFFOLD-like corrections G_i, G.

Client (state h_i and G_i, 2x, both start at 0); om_i = n_i N / sum_j n_j, alpha_i = alpha / om_i:
    L = CE + alpha_i/2 * ||w - (phi - h_i)||^2 + <w, G/om_i - G_i>     (added as gradients)
    after the local update (d_i = w_K - phi, undecayed lr):
        h_i += d_i;   G_i+ = G_i - G/om_i - d_i / (K lr)
    K is one number for every client, as FedDC's code takes it (`feddc-steps = 'mean'`):
    local-epochs * ceil(mean_j n_j / batch-size), or local-iterations where set; 'own' takes
    K_i, the steps client i took.
    it sends om_i * (G_i+ - G_i) (the record `feddc-dg`).
Server (state G and H = sum over all clients of h_j, 2x):
    G += (1/N) * sum_{i in S} om_i (G_i+ - G_i)
    H += sum_{i in S} d_i;   theta = mean_S(w_i) + H / N
Down theta and G, up w_i and the G_i change: 2x each way. `alpha` is the key `feddc-alpha`; n_i
is the number of training examples of partition i (its held-out part removed, as the client
reports it): the ClientApp hands every partition's count to the part
(`LocalContext.partition_sizes`, from the partitioning, which every node makes the same way);
this module reads no data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .feddyn import UNTESTED_GC, ModelStepRule
from .parts import ClientPart, MethodDefinition, UpRecord
from .registry import register
from .settings import Key, SettingError, Uses

G_RECORD, DELTA_G_RECORD = "feddc-g", "feddc-dg"
H_I_STATE, G_I_STATE = "feddc-h-i", "feddc-g-i"
UP = {DELTA_G_RECORD: UpRecord()}  # om_i (G_i+ - G_i): one tensor per parameter, screened


def correction_steps(settings, steps_taken: int, sizes: Sequence[int]) -> int:
    """K of the correction d_i / (K lr) (docs/baselines.md#feddc), from `DriftCorrection`'s
    settings. 'mean' (`feddc-steps`), FedDC's code: one K for every client, local-iterations
    where set, else local-epochs * ceil(mean_j n_j / batch-size) over the N partitions'
    training examples `sizes`; 'own' (and a local update outside a federation, no sizes; and a
    loop of one's own, whose settings, a named strategy's, hold None for local-iterations and
    local-epochs: its steps are its user's): the steps this client took."""
    s = settings
    if s.feddc_steps == "own" or not sizes or (s.local_iterations is None
                                               and s.local_epochs is None):
        return steps_taken
    if _given(s.local_iterations, "local-iterations") > 0:
        return int(s.local_iterations)
    return (int(_given(s.local_epochs, "local-epochs"))
            * math.ceil(sum(sizes) / len(sizes) / _given(s.batch_size, "batch-size")))


def _given(value, key: str):
    """`value`, or the SettingError naming `key` where the settings do not know it (None)."""
    if value is None:
        raise SettingError(f"FedDC's K of 'feddc-steps' = 'mean' reads '{key}', which these "
                           "settings do not know (None)")
    return value


def client_weight(partition: int, sizes: Sequence[int]) -> float:
    """om_i = n_i N / sum_j n_j over the N partitions' training examples `sizes` (1 when every
    partition has the same size; 1 for a local update outside a federation, no sizes)."""
    if not sizes:
        return 1.0
    return sizes[partition] * len(sizes) / sum(sizes)


def partition_sizes(ctx) -> tuple[int, ...]:
    """n_j of the N clients as the app hands them (`LocalContext.partition_sizes`); () outside a
    federation (N = 0)."""
    sizes = tuple(ctx.partition_sizes or ())
    if ctx.num_partitions <= 0:
        return ()
    if len(sizes) != ctx.num_partitions or not 0 <= ctx.partition_id < len(sizes):
        raise ValueError(
            f"FedDC weighs client i by om_i = n_i N / sum_j n_j, and this local update has "
            f"{len(sizes)} training-set size(s) for N = {ctx.num_partitions} clients: hand the "
            "training examples of every client (a ClientApp of your own: LocalMethod(..., "
            "partition_sizes=[n_0, ..., n_N-1]))")
    return sizes


class DriftCorrection(ClientPart):
    """FedDC's drift prox and gradient correction; h_i and G_i kept on the node."""

    name = "feddc"
    settings = (
        Key("feddc-alpha", float, 0.01, "FedDC's alpha: drift penalty "
            "alpha/om_i/2 ||w - (phi - h_i)||^2 (docs/baselines.md#feddc).", "client", low=0.0,
            low_open=True, high=1e4, strategy=True, topic="Baselines"),
        Key("feddc-steps", str, "mean", "FedDC: K of the correction d_i/(K lr): 'mean', as its "
            "code, one K for all clients (local-epochs * ceil(mean n_j / batch-size), or "
            "local-iterations); 'own', the steps each client took (docs/baselines.md#feddc).",
            "client", choices=("mean", "own"), strategy=True, topic="Baselines"),
    )
    down = (G_RECORD,)
    up = UP
    client_state = True
    untested = {"local-gc": UNTESTED_GC}
    uses_partition_sizes = True  # om_i and the authors' K
    uses_lr = True  # G_i's d_i / (K lr)
    # the clients' learning rate, and the local loop that makes FedDC's K ('mean'): None in a
    # named strategy's settings (its clients' loop is its user's: K is the steps taken)
    uses = (Uses("lr", float, 0.05), Uses("local-iterations", int | None, None),
            Uses("local-epochs", int | None, None), Uses("batch-size", int | None, None))

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.alpha: float = settings.feddc_alpha
        self.lr: float = settings.lr  # the undecayed base lr of K lr
        self.k_settings = settings  # feddc-steps and the local loop: K (`correction_steps`)

    def begin(self, ctx) -> None:
        import torch

        self.sizes = partition_sizes(ctx)
        self.om = client_weight(ctx.partition_id, self.sizes)
        self.names = [n for n, _ in ctx.model.named_parameters()]

        def load(name):
            found = ctx.load_state(name, like=dict(ctx.model.named_parameters()))
            return ([found[n].to(p.device) for n, p in zip(self.names, ctx.params)] if found
                    else [torch.zeros_like(p) for p in ctx.params])

        self.h_i, self.g_i = load(H_I_STATE), load(G_I_STATE)
        g = ctx.down[G_RECORD].to_torch_state_dict()
        self.g_over_om = [g[n].to(p.device) / self.om for n, p in zip(self.names, ctx.params)]
        self.phi = [p.detach().clone() for p in ctx.params]
        self.center = torch._foreach_sub(self.phi, self.h_i)  # phi - h_i
        self.linear = torch._foreach_sub(self.g_over_om, self.g_i)  # G/om_i - G_i

    def correct_grad_(self, ctx) -> None:
        import torch

        grads = [p.grad for p in ctx.params]
        # + alpha_i (w - (phi - h_i))
        torch._foreach_add_(grads, torch._foreach_sub([p.detach() for p in ctx.params],
                                                      self.center), alpha=self.alpha / self.om)
        torch._foreach_add_(grads, self.linear)  # + G/om_i - G_i

    def end(self, ctx) -> dict:
        import torch
        from flwr.app import ArrayRecord

        d = torch._foreach_sub([p.detach() for p in ctx.params], self.phi)  # d_i = w_K - phi
        h_i = torch._foreach_add(self.h_i, d)
        # G_i+ - G_i = -G/om_i - d_i / (K lr)
        k = correction_steps(self.k_settings, ctx.steps_done, self.sizes)
        delta = torch._foreach_mul(d, -1.0 / (k * self.lr))
        torch._foreach_sub_(delta, self.g_over_om)
        g_i = torch._foreach_add(self.g_i, delta)
        ctx.save_state(H_I_STATE, dict(zip(self.names, h_i)))
        ctx.save_state(G_I_STATE, dict(zip(self.names, g_i)))
        sent = torch._foreach_mul(delta, self.om)  # om_i (G_i+ - G_i)
        return {DELTA_G_RECORD: ArrayRecord({n: t.cpu() for n, t in zip(self.names, sent)})}


class FedDCRule(ModelStepRule):
    """G += (1/N) sum_S om_i delta-G_i; H += sum_S d_i; theta = mean_S w_i + H / N."""

    name = "feddc"
    down = (G_RECORD,)
    up = UP
    state_names = ("feddc-g", "feddc-h")
    summary = ("FedDC: server drift sum H and correction G sent with theta "
               "(docs/baselines.md#feddc)")

    def describe(self) -> str:
        return "feddc: theta = mean + H/N, G sent with theta"

    def start(self, theta_record) -> None:
        super().start(theta_record)
        self.feddc_g = {n: self.feddc_g[n] for n in self.param_names}  # G: the parameters

    def down_records(self, server_round: int) -> dict:
        from flwr.app import ArrayRecord

        return {G_RECORD: ArrayRecord(self.feddc_g)}

    def up_centers(self) -> dict:
        # om_i (G_i+ - G_i) = -G - om_i d_i / (K lr): from -G, its norm is client i's drift (from
        # 0 it is close to 0 for typical clients, and honest ratios reached 1248x the median)
        return {DELTA_G_RECORD: {k: -v for k, v in self.feddc_g.items()}}

    def step(self, d, d_sum, phi, good, up):
        import torch

        n = self.num_clients
        for records in up:  # G += (1/N) om_i delta-G_i (the clients send om_i delta-G_i)
            delta = records[DELTA_G_RECORD]
            torch._foreach_add_([self.feddc_g[k] for k in self.param_names],
                                [delta[k] for k in self.param_names], alpha=1.0 / n)
        keys = list(d)
        torch._foreach_add_([self.feddc_h[k] for k in keys], [d_sum[k] for k in keys])
        # theta = mean_S w_i + H / N = phi + d + H / N
        new = torch._foreach_add([phi[k] for k in keys], [d[k] for k in keys])
        torch._foreach_add_(new, [self.feddc_h[k] for k in keys], alpha=1.0 / n)
        return dict(zip(keys, new))


register(DriftCorrection, FedDCRule)
register(MethodDefinition(
    "feddc", "Gao 2022 https://arxiv.org/abs/2203.11751", "feddc", ("feddc",),
    {"aggregation": "uniform"}))
