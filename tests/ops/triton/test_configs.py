"""gdn.ops.triton.configs: the named configurations of the Triton forward and their "a&b" merging."""
import pytest

pytest.importorskip("triton")
from gdn.ops.triton.configs import CONFIGS, config  # noqa: E402  (needs triton)


def test_config_merges_left_to_right():
    assert config("walk st3") == CONFIGS["walk st3"]
    assert config("walk st3 & pieces 1") == dict(walk_stages=3, pieces=1)
    assert config("pieces 8&pieces 1") == dict(pieces=1)       # the later config wins


def test_config_names_the_unknown_part():
    with pytest.raises(ValueError, match="'no such'"):
        config("walk st3&no such")
