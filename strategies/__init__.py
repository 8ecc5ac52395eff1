"""Server strategies: one FedAvg subclass for every SPEC 1.5 method, Flower's FedOpt baselines."""

from .factory import build_strategy, client_train_config
from .lookahead_fedavg import LookaheadFedAvg, NodeWaitTimeout, RoundConfig

__all__ = ["LookaheadFedAvg", "NodeWaitTimeout", "RoundConfig", "build_strategy",
           "client_train_config"]
