"""FedAdagrad (Reddi et al. 2021, https://arxiv.org/abs/2003.00295): Flower's own server update
(methods.flower_fedopt), plain cross-entropy on the client; eta as in FedAGM's Sec. 5.1."""

from . import flower_fedopt  # noqa: F401  (registers the server rule)
from .parts import MethodDefinition
from .registry import register

register(MethodDefinition("fedadagrad", "Reddi et al. 2021, https://arxiv.org/abs/2003.00295",
                          "fedadagrad", (), {"eta": 0.01}))
