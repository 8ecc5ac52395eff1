"""The methods: one module per method, gathered in one registry (docs/extending.md).

A method module declares a `MethodDefinition` (name, paper, server rule, client parts, preset
values) and the parts it adds, each with the run-config keys it owns (`settings`, `Key`s) and
the app keys it reads (`uses`), which make its settings object (`Part.Settings`), and registers
them with `register` (`register_from_file` imports such a module from anywhere). The
run config's keys and allowed `method`, `server-rule` and `client-objective` values, the presets
and the docs' method table all come from here; the strategy and the ClientApp build their parts
from here and never name a method.
"""

from __future__ import annotations

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split

from .parts import (FLOATS, PARAMETERS, ClientPart, Config, MethodDefinition, ReplyMetric,
                    ServerRule, SettingError, UplinkCodec, UpRecord)
from .registry import (CLIENT_PARTS, METHODS, SERVER_RULES, UPLINK_CODECS, check_parts,
                       client_part_names, method_names, register, register_from_file,
                       server_rule_names, setting_owners, unregister, untested_combinations,
                       uplink_codec)
from .settings import PRESET, Key, Settings, Uses

# The built-in methods (each module registers itself on import).
from . import fedavg, fedprox, fedavgm, fedacg, fedagm  # noqa: E402,F401,I001
from . import localgc, globalgc, gcfed, fedacg_gcfed  # noqa: E402,F401
from . import fedadam, fedyogi, fedadagrad  # noqa: E402,F401
from . import fedsol, fedmlb  # noqa: E402,F401
from . import scaffold, feddyn, feddc  # noqa: E402,F401
from . import moon, fedlc, fedntd, feddecorr  # noqa: E402,F401
from . import fedcm, fedvarp, fedpaq  # noqa: E402,F401

__all__ = ["CLIENT_PARTS", "ClientPart", "Config", "FLOATS", "Key", "METHODS",
           "MethodDefinition", "PARAMETERS", "PRESET", "ReplyMetric", "SERVER_RULES",
           "ServerRule", "SettingError", "Settings", "UPLINK_CODECS", "UpRecord", "UplinkCodec",
           "Uses",
           "check_parts", "client_part_names", "method_names", "register",
           "register_from_file", "server_rule_names", "setting_owners", "unregister",
           "untested_combinations", "uplink_codec"]
