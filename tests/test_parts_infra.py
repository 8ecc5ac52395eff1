"""What the client parts get from the local update (teacher, per-client state) and the refusal of
combinations no paper defines (docs/extending.md)."""

from __future__ import annotations

import pytest
import torch
from flwr.app import RecordDict
from torch import nn

import methods
from client_app.client_step import LocalContext
from client_app.local_update import LocalConfig, local_update
from methods.parts import ClientPart, MethodDefinition
from run_config import ConfigError, resolve


class _Probe(ClientPart):
    name = "probe-untested"
    untested = {"lookahead": "no paper combines the probe with a look-ahead broadcast"}

    def begin(self, ctx):
        self.teacher = ctx.teacher()


@pytest.fixture
def probe():
    items = (_Probe, MethodDefinition("probe", "test only", "momentum", ("probe-untested",)))
    methods.register(*items)
    yield _Probe
    methods.unregister(*items)


def test_untested_combination_refused_unless_allowed(probe):
    assert resolve({"method": "probe"})["client-objective"] == "probe-untested"
    with pytest.raises(ConfigError, match="look-ahead broadcast.*allow-untested-combinations"):
        resolve({"method": "probe", "lookahead": True, "lam": 0.5})
    cfg = resolve({"method": "probe", "lookahead": True, "lam": 0.5,
                   "allow-untested-combinations": True})
    assert methods.untested_combinations(cfg) == [
        "'lookahead' = true with client part 'probe-untested' is untested: no paper combines "
        "the probe with a look-ahead broadcast"]
    assert methods.untested_combinations(resolve({"method": "probe"})) == []


def test_teacher_is_phi_frozen_and_made_once(probe):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    phi = {k: v.clone() for k, v in model.state_dict().items()}
    part = probe(probe.Settings())
    ctx = LocalContext()
    local_update(model, torch.randn(8, 3), torch.randint(0, 2, (8,)), LocalConfig(lr=0.5),
                 parts=[part], ctx=ctx)
    assert ctx.steps_done == 1
    assert ctx.teacher() is part.teacher  # the same copy, not a new one of the trained model
    for k, v in part.teacher.state_dict().items():
        assert torch.equal(v, phi[k]) and not torch.equal(v, model.state_dict()[k])
    assert not any(p.requires_grad for p in part.teacher.parameters())
    late = LocalContext(model=model, steps_done=1)
    with pytest.raises(RuntimeError, match="begin"):
        late.teacher()


def test_client_state_is_kept_per_partition():
    state, like = RecordDict(), {"w": torch.zeros(2)}
    a, b = LocalContext(state=state, partition_id=3), LocalContext(state=state, partition_id=4)
    assert a.load_state("c", like=like) is None
    a.save_state("c", {"w": torch.ones(2)})
    assert b.load_state("c", like=like) is None
    assert torch.equal(LocalContext(state=state, partition_id=3).load_state("c", like=like)["w"],
                       torch.ones(2))
    with pytest.raises(ValueError, match=r"client state 'c' in the node's Context.state holds "
                       r"'w' as \(2,\) torch.float32, its part declares \(3,\) torch.float32"):
        a.load_state("c", like={"w": torch.zeros(3)})


def test_the_apps_find_the_uplink_codec_the_config_switches_on():
    """FedPAQ's quantizer is a registered uplink codec: the apps ask the registry, by the run
    config, and never import a method; two codecs on at once are refused."""
    from methods.fedpaq import UplinkDecoder, UplinkQuantizer

    assert methods.UPLINK_CODECS["fedpaq"] is UplinkQuantizer
    cfg = resolve({"method": "fedpaq"})
    assert methods.uplink_codec(cfg) is UplinkQuantizer
    assert isinstance(UplinkQuantizer.decoder(UplinkQuantizer.Settings.from_config(cfg)),
                      UplinkDecoder)
    assert methods.uplink_codec(resolve({"method": "fedavg"})) is None

    class Other(methods.UplinkCodec):
        name = "other-codec"

        uses = UplinkQuantizer.settings[:1]  # uplink-bits

        @classmethod
        def on(cls, settings):
            return settings.uplink_bits > 4

    methods.register(Other)
    try:
        with pytest.raises(methods.registry.RegistryError, match="2 uplink codecs"):
            methods.uplink_codec(cfg)
        assert methods.uplink_codec(resolve({"method": "fedpaq", "uplink-bits": 2})) \
            is UplinkQuantizer
    finally:
        methods.unregister(Other)
    assert "other-codec" not in methods.UPLINK_CODECS
