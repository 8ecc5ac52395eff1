"""FedPAQ (Reisizadeh et al., AISTATS 2020, https://arxiv.org/abs/1909.13014): uplink
quantization of the client's update, for any method (docs/baselines.md#fedpaq).

Per quantized tensor x of d_i = w_K - phi (b = uplink-bits, s = 2^(b-1)):

    nu = ||x||_2;  r_j = s |x_j| / nu;  l_j = floor(r_j) + Bernoulli(r_j - floor(r_j))
    Q(x)_j = nu * sign(x_j) * l_j / s                  (nu = 0: Q(x) = 0)

The rounding is seeded per client and round. The client replaces its model by phi + Q(d_i)
before the method's own end-of-update hooks (client state sees what the server sees), and sends:

* each quantized tensor as its codes u_j = sign(x_j) l_j + s in [0, 2s] = [0, 2^b]: 2^b + 1
  values, so b + 1 bits each (exact: no level is clipped), bit-packed into a uint8 array;
* the norms nu of the quantized tensors as one float32 array (4 bytes per tensor);
* every other tensor as it is (fp32): the model's w_K.

The server rebuilds w_i = phi + Q(d_i) with the same arithmetic before screening and
aggregation (`UplinkDecoder`), so the byte meter counts the packed bytes and every rule sees a
plain model. Presets: `fedpaq` (FedAvg + 8 bits) and `fedacg+fedpaq` (FedACG Table 6).
"""

from __future__ import annotations

from . import momentum  # noqa: F401  (registers the server rule)
from . import fedprox  # noqa: F401  (registers the proximal term)
from .parts import MethodDefinition, UplinkCodec
from .registry import register
from .settings import PRESET, Key, Uses

NORMS = "fedpaq.norms"  # the reply's array of per-tensor norms


# --- the maths (plain PyTorch) ---------------------------------------------------------------
def quantize(x, s: int, generator=None):
    """(signed levels sign(x_j) * l_j as int64, nu = ||x||_2 as a float32 scalar tensor)."""
    import torch

    x = x.reshape(-1).to(torch.float32)
    nu = torch.linalg.vector_norm(x)
    if nu == 0:
        return torch.zeros(x.shape, dtype=torch.int64), nu
    r = s * x.abs() / nu
    low = torch.floor(r)
    # float32 draws whatever the process's default dtype: the same stream, the same rounding
    up = torch.rand(x.shape, generator=generator, dtype=torch.float32) < (r - low)
    levels = (low + up.to(low.dtype)).clamp_(0, s).to(torch.int64)  # (r <= s: the clamp is a
    return torch.sign(x).to(torch.int64) * levels, nu                # guard against rounding)


def dequantize(levels, nu, s: int):
    """Q(x) = nu * levels / s (float32)."""
    import torch

    return levels.to(torch.float32) * (nu.to(torch.float32) / s)


def code_bits(bits: int) -> int:
    """Bits per element of the exact code: levels -s..s are 2^b + 1 values."""
    return bits + 1


def pack_codes(levels, bits: int):
    """Signed levels in [-s, s] -> uint8 tensor of ceil(n * (b + 1) / 8) bytes (little-endian
    bit order, element after element)."""
    import numpy as np
    import torch

    s, k = 2 ** (bits - 1), code_bits(bits)
    u = (levels + s).numpy().astype(np.int64)
    planes = ((u[:, None] >> np.arange(k)) & 1).astype(np.uint8)
    return torch.from_numpy(np.packbits(planes.reshape(-1), bitorder="little"))


def unpack_codes(packed, n: int, bits: int):
    """The inverse of `pack_codes`: n signed levels (int64)."""
    import numpy as np
    import torch

    s, k = 2 ** (bits - 1), code_bits(bits)
    buf = packed.numpy().astype(np.uint8, copy=False).reshape(-1)
    if buf.size != -(-n * k // 8):
        raise ValueError(f"{buf.size} bytes for {n} codes of {k} bits")
    planes = np.unpackbits(buf, count=n * k, bitorder="little").reshape(n, k).astype(np.int64)
    return torch.from_numpy((planes << np.arange(k)).sum(axis=1) - s)


def quantized_names(state: dict, tensors: str) -> list[str]:
    """The tensors uplink-tensors quantizes: every float tensor ('all'), or the gymlab code's
    conv weights (4-D) without the first one, the stem ('gymlab'), or all of them and the last
    2-D weight, the classifier ('gymlab-first-last')."""
    floats = [k for k, v in state.items() if v.is_floating_point()]
    if tensors == "all":
        return floats
    convs = [k for k in floats if state[k].dim() == 4]
    if tensors == "gymlab":
        return convs[1:]
    linear = [k for k in floats if state[k].dim() == 2]
    chosen = set(convs) | set(linear[-1:])
    return [k for k in floats if k in chosen]


def round_generator(seed: int, server_round: int, partition_id: int):
    """The stochastic rounding's generator: one per client and round (and run seed), apart from
    the mini-batch generator of the same client and round."""
    import torch

    return torch.Generator().manual_seed(
        ((seed * 1_000_003 + server_round) * 100_003 + partition_id) * 7 + 5)


# --- the client's side -----------------------------------------------------------------------
class UplinkQuantizer(UplinkCodec):
    """The uplink codec uplink-bits > 0 switches on, for any method (put first among the local
    update's parts): `begin` keeps phi, `end` (before the method's own `end` hooks) replaces the
    model by phi + Q(w_K - phi) and keeps the codes for the reply; the server's `decoder`
    rebuilds phi + Q(d_i)."""

    name = "fedpaq"
    settings = (
        Key("uplink-bits", int, PRESET,
            "FedPAQ uplink quantization: each client sends d_i = w - phi quantized to this many "
            "bits per element (s = 2^(b-1) levels, stochastic rounding); 0 = off "
            "(docs/baselines.md#fedpaq).",
            "client", choices=(PRESET,), low=0, high=16, strategy=True, topic="Baselines", base=0),
        Key("uplink-tensors", str, "all",
            "Which tensors uplink-bits quantizes: every float tensor, or the gymlab code's conv "
            "weights without the stem (gymlab) or with the stem conv and the classifier weight "
            "(gymlab-first-last); the others are sent in fp32.",
            "client", choices=("all", "gymlab", "gymlab-first-last"), strategy=True,
            topic="Baselines"),
    )
    uses = (Uses("seed", int, 0),)  # of the stochastic rounding

    @classmethod
    def on(cls, settings) -> bool:
        return settings.uplink_bits > 0

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.bits: int = settings.uplink_bits
        self.tensors: str = settings.uplink_tensors
        self.seed: int = settings.seed

    def begin(self, ctx) -> None:
        self.phi = {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}
        self.names = quantized_names(self.phi, self.tensors)

    def end(self, ctx) -> dict:
        import torch

        s = 2 ** (self.bits - 1)
        gen = round_generator(self.seed, ctx.server_round, ctx.partition_id)
        state = ctx.model.state_dict()
        self.codes, norms = {}, []
        with torch.no_grad():
            for k in self.names:
                w = state[k]
                levels, nu = quantize((w - self.phi[k]).cpu(), s, gen)
                w.copy_(self.phi[k] + dequantize(levels, nu, s).to(w.device)
                        .reshape(w.shape).to(w.dtype))
                self.codes[k] = pack_codes(levels, self.bits)
                norms.append(nu)
        self.norms = torch.stack(norms) if norms else torch.zeros(0)
        return {}

    def reply_arrays(self, model):
        """The reply's 'arrays': codes for the quantized tensors, the others as they are."""
        from flwr.app import ArrayRecord

        out = {k: self.codes.get(k, v.detach().cpu()) for k, v in model.state_dict().items()}
        out[NORMS] = self.norms
        return ArrayRecord(out)


# --- the server's side -----------------------------------------------------------------------
class UplinkDecoder:
    """Rebuilds each reply's model w_i = phi + Q(d_i) in place, before screening."""

    def __init__(self, settings) -> None:
        """`settings`: `UplinkQuantizer.Settings` (uplink-bits, uplink-tensors)."""
        self.bits: int = settings.uplink_bits
        self.tensors: str = settings.uplink_tensors

    def decode(self, record, phi: dict):
        """The model of an encoded reply record (name -> tensor); ValueError when it is not
        one (wrong keys or sizes)."""
        import torch

        from models.wire import state_view

        s = 2 ** (self.bits - 1)
        got = state_view(record)  # read-only views: decoding makes new tensors
        names = quantized_names(phi, self.tensors)
        if set(got) != set(phi) | {NORMS}:
            raise ValueError(f"expected the model's tensors and '{NORMS}'")
        norms = got.pop(NORMS).reshape(-1)
        if norms.dtype != torch.float32:
            raise ValueError(f"'{NORMS}' of dtype {norms.dtype}, expected float32")
        if norms.numel() != len(names):
            raise ValueError(f"{norms.numel()} norms for {len(names)} quantized tensors")
        out = dict(got)
        for nu, k in zip(norms, names):
            if got[k].dtype != torch.uint8:
                raise ValueError(f"'{k}': codes of dtype {got[k].dtype}, expected uint8")
            levels = unpack_codes(got[k], phi[k].numel(), self.bits)
            if levels.numel() and (levels.min() < -s or levels.max() > s):
                raise ValueError(f"'{k}': levels outside [-{s}, {s}]")
            out[k] = phi[k] + dequantize(levels, nu, s).reshape(phi[k].shape).to(phi[k].dtype)
        return out

    def decode_replies(self, replies: list, phi: dict) -> dict[int, str]:
        """Replace each good reply's 'arrays' by its decoded model; id(reply) -> why, for the
        replies that do not decode (left as they are: screening drops them, with that reason).
        Nothing a client sends makes this raise."""
        from flwr.app import ArrayRecord

        from server_math.reply_screen import short_reason

        failed = {}
        for msg in replies:
            if msg.has_error() or "arrays" not in msg.content.array_records:
                continue  # (screening drops a reply without its model)
            try:
                msg.content["arrays"] = ArrayRecord(self.decode(msg.content["arrays"], phi))
            except Exception as err:  # anything a malformed reply can cause
                failed[id(msg)] = (f"its arrays are not an uplink-bits = {self.bits} encoding "
                                   f"({type(err).__name__}: {short_reason(str(err))})")
        return failed


UplinkQuantizer.decoder = UplinkDecoder
register(UplinkQuantizer)
register(MethodDefinition(
    "fedpaq", "Reisizadeh 2020 https://arxiv.org/abs/1909.13014 (FedAvg, uplink-bits 8)",
    "momentum", (),
    {"uplink-bits": 8}))
register(MethodDefinition(
    "fedacg+fedpaq", "FedACG Table 6: FedACG with FedPAQ's 8-bit uplink quantization",
    "momentum", ("proximal",), {"lookahead": True, "lam": 0.85, "beta": 0.01, "uplink-bits": 8}))
