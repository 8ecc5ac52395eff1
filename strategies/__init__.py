"""Server strategies: one FedAvg subclass for every method of docs/algorithms.md#presets, Flower's
FedOpt baselines."""

from .factory import build_strategy, client_train_config
from .lookahead_fedavg import LookaheadFedAvg, NodeWaitTimeout, RoundConfig

__all__ = ["LookaheadFedAvg", "NodeWaitTimeout", "RoundConfig", "build_strategy",
           "client_train_config"]
