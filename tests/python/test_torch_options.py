"""dlpg.torch.Options: every field checked when made, with the field and value named; NCCL
communicator fields kept (and applied to NCCL communicators: test_torch_cuda_surface.py)."""

import datetime

import pytest

from conftest import require_torch_backend


@pytest.fixture(scope="module")
def Options():
    require_torch_backend()
    import dlpg.torch
    return dlpg.torch.Options


def test_defaults(Options):
    o = Options()
    assert (o.name, o.timeout, o.nccl_config) == ("torch", None, {})


def test_fields_kept(Options):
    o = Options.of({"name": "g", "timeout": datetime.timedelta(seconds=90), "cga_cluster_size": 4,
                    "min_ctas": 2, "max_ctas": 16, "net_name": "IB", "comm_name": "tp",
                    "traffic_class": 3})
    assert o.name == "g" and o.timeout == 90.0
    assert o.nccl_config == {"cga_cluster_size": 4, "min_ctas": 2, "max_ctas": 16,
                             "net_name": "IB", "comm_name": "tp", "traffic_class": 3}
    assert "max_ctas=16" in repr(o)


@pytest.mark.parametrize("kw,words", [
    ({"cga_cluster_size": 9}, ["cga_cluster_size=9", "0..8"]),
    ({"min_ctas": 0}, ["min_ctas=0", "1..64"]),
    ({"max_ctas": 65}, ["max_ctas=65", "1..64"]),
    ({"max_ctas": 2.0}, ["max_ctas=2.0", "integer"]),
    ({"traffic_class": -1}, ["traffic_class=-1"]),
    ({"min_ctas": 8, "max_ctas": 4}, ["min_ctas=8, max_ctas=4", "must not exceed"]),
    ({"net_name": ""}, ["net_name=''", "non-empty string"]),
    ({"comm_name": 5}, ["comm_name=5"]),
    ({"timeout": 0}, ["timeout=0", "above 0"]),
    ({"timeout": "1"}, ["timeout='1'"]),
])
def test_bad_values_named(Options, kw, words):
    with pytest.raises(ValueError) as e:
        Options(**kw)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_unknown_field_named(Options):
    with pytest.raises(ValueError, match="'min_cta'.*min_ctas"):
        Options.of({"min_cta": 1})
