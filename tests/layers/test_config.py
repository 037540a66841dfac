"""GatedDeltaNetConfig from transformers-style config dicts."""
import pytest

from gdn.layers import GatedDeltaNetConfig
from tests.layers.tiny_models import tiny_config


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe", "qwen3_next"])
def test_from_transformers_config(kind):
    c = GatedDeltaNetConfig.from_dict(tiny_config(kind).to_dict())
    assert (c.hidden_size, c.num_k_heads, c.num_v_heads, c.head_k_dim, c.head_v_dim, c.conv_kernel_size) == \
        (64, 2, 4, 16, 24, 4)
    assert c.layout == ("qwen3_next" if kind == "qwen3_next" else "qwen3_5")
    assert c.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert (c.key_dim, c.value_dim, c.conv_dim) == (32, 96, 160)


def test_nested_text_config_of_multimodal_qwen3_5():
    from transformers import Qwen3_5Config

    d = Qwen3_5Config(text_config=tiny_config("qwen3_5").to_dict()).to_dict()
    assert d["model_type"] == "qwen3_5" and "hidden_size" not in d
    c = GatedDeltaNetConfig.from_dict(d)
    assert (c.hidden_size, c.num_v_heads, c.layout) == (64, 4, "qwen3_5")


def test_layer_types_from_full_attention_interval():
    d = {k: v for k, v in tiny_config("qwen3_next").to_dict().items() if k != "layer_types"}
    d.update(num_hidden_layers=6, full_attention_interval=3)
    assert GatedDeltaNetConfig.from_dict(d).layer_types == \
        ["linear_attention", "linear_attention", "full_attention"] * 2


def test_errors_name_the_problem():
    d = tiny_config("qwen3_5").to_dict()
    with pytest.raises(ValueError, match="model_type 'llama'"):
        GatedDeltaNetConfig.from_dict({**d, "model_type": "llama"})
    with pytest.raises(ValueError, match="linear_num_key_heads"):
        GatedDeltaNetConfig.from_dict({k: v for k, v in d.items() if k != "linear_num_key_heads"})
    with pytest.raises(ValueError, match="num_v_heads"):
        GatedDeltaNetConfig(num_k_heads=3, num_v_heads=4)
    with pytest.raises(ValueError, match="layout"):
        GatedDeltaNetConfig(layout="mamba")
    with pytest.raises(ValueError, match="hidden_size must be a positive int, got True"):
        GatedDeltaNetConfig(hidden_size=True)
    with pytest.raises(ValueError, match="rms_norm_eps"):
        GatedDeltaNetConfig(rms_norm_eps=-1.0)
    with pytest.raises(ValueError, match="full_attention_interval must be a positive int, got 0"):
        GatedDeltaNetConfig.from_dict({**{k: v for k, v in d.items() if k != "layer_types"},
                                       "num_hidden_layers": 4, "full_attention_interval": 0})
    no_types = {k: v for k, v in d.items() if k != "layer_types"}
    for bad in (None, "4", 2.0):
        with pytest.raises(ValueError, match=f"num_hidden_layers must be an int >= 0, got {bad!r}"):
            GatedDeltaNetConfig.from_dict({**no_types, "num_hidden_layers": bad})
    with pytest.raises(ValueError, match="text_config must be a dict, got str"):
        GatedDeltaNetConfig.from_dict({"model_type": "qwen3_5", "text_config": "oops"})
    for bad in ("linear_attention", ["linear_attention", 3], 7):    # (a string was split into letters)
        with pytest.raises(ValueError, match="layer_types must be a list of strings"):
            GatedDeltaNetConfig.from_dict({**d, "layer_types": bad})
