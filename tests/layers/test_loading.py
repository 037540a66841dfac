"""GatedDeltaNet.from_pretrained: sharded and single-file checkpoints, the multimodal Qwen3.5 prefix,
and errors that name the missing / unexpected / misshaped tensor or the wrong layer."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from gdn.layers import GatedDeltaNet
from tests.layers.tiny_models import FULL_ATTENTION_LAYER, tiny_model

LAYER = 1


def all_tensors(path):
    tensors = {}
    for f in sorted(path.glob("*.safetensors")):
        tensors.update(load_file(f))
    return tensors


def write_checkpoint(path, tensors, config):
    """One model.safetensors + config.json."""
    path.mkdir()
    save_file({k: v.contiguous() for k, v in tensors.items()}, path / "model.safetensors")
    (path / "config.json").write_text(json.dumps(config))
    return path


def config_of(path):
    return json.loads((path / "config.json").read_text())


def test_loads_exactly_the_transformers_weights(saved):
    kind, model, path = saved
    if kind == "qwen3_5":
        assert (path / "model.safetensors.index.json").exists()       # the sharded one
    layer = GatedDeltaNet.from_pretrained(path, LAYER)
    expected = model.model.layers[LAYER].linear_attn.state_dict()
    got = layer.state_dict()
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    assert not layer.training


def test_multimodal_prefix_and_nested_config(tmp_path):
    """Qwen3.5 as published: text tower under model.language_model, config under text_config."""
    model = tiny_model("qwen3_5", seed=2)
    model.save_pretrained(tmp_path / "text")
    tensors = {k.replace("model.", "model.language_model.", 1): v for k, v in all_tensors(tmp_path / "text").items()}
    config = {"model_type": "qwen3_5", "text_config": config_of(tmp_path / "text")}
    ckpt = write_checkpoint(tmp_path / "mm", tensors, config)
    layer = GatedDeltaNet.from_pretrained(ckpt, LAYER, dtype=torch.bfloat16)
    ref = model.model.layers[LAYER].linear_attn
    assert layer.in_proj_qkv.weight.dtype == torch.bfloat16
    assert torch.equal(layer.A_log, ref.A_log.bfloat16())


@pytest.fixture
def single(saved, tmp_path):
    """The checkpoint's tensors and config, to be edited then written as one file."""
    kind, _, path = saved
    return kind, all_tensors(path), config_of(path), tmp_path / "edited"


def test_missing_tensor(single):
    kind, tensors, config, out = single
    key = f"model.layers.{LAYER}.linear_attn.dt_bias"
    del tensors[key]
    with pytest.raises(ValueError, match=f"missing tensor.*{key}"):
        GatedDeltaNet.from_pretrained(write_checkpoint(out, tensors, config), LAYER)


def test_unexpected_tensor(single):
    kind, tensors, config, out = single
    key = f"model.layers.{LAYER}.linear_attn.conv1d.bias"
    tensors[key] = torch.zeros(160)
    with pytest.raises(ValueError, match=f"unexpected tensor.*{key}"):
        GatedDeltaNet.from_pretrained(write_checkpoint(out, tensors, config), LAYER)


def test_wrong_shape(single):
    kind, tensors, config, out = single
    key = f"model.layers.{LAYER}.linear_attn.out_proj.weight"
    tensors[key] = tensors[key][:, :-1]
    with pytest.raises(ValueError, match=rf"{key} has shape \[64, 95\], expected \[64, 96\]"):
        GatedDeltaNet.from_pretrained(write_checkpoint(out, tensors, config), LAYER)


def test_full_attention_and_out_of_range_layer(saved):
    _, _, path = saved
    with pytest.raises(ValueError, match=f"layer_idx {FULL_ATTENTION_LAYER} is a 'full_attention' layer"):
        GatedDeltaNet.from_pretrained(path, FULL_ATTENTION_LAYER)
    with pytest.raises(ValueError, match="out of range"):
        GatedDeltaNet.from_pretrained(path, 4)
    with pytest.raises(ValueError, match="layer_idx must"):
        GatedDeltaNet.from_pretrained(path, "1")


def test_bad_directories(saved, tmp_path):
    _, _, path = saved
    with pytest.raises(ValueError, match="checkpoint directory"):
        GatedDeltaNet.from_pretrained(tmp_path / "nope", LAYER)
    empty = tmp_path / "no_weights"
    empty.mkdir()
    shutil.copy(path / "config.json", empty / "config.json")
    with pytest.raises(ValueError, match=r"no \*.safetensors"):
        GatedDeltaNet.from_pretrained(empty, LAYER)
    if (path / "model.safetensors.index.json").exists():
        broken = tmp_path / "broken_index"
        shutil.copytree(path, broken)
        shard = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"][
            f"model.layers.{LAYER}.linear_attn.A_log"]
        (broken / shard).unlink()
        with pytest.raises(ValueError, match=f"lists {shard}"):
            GatedDeltaNet.from_pretrained(broken, LAYER)


def test_tensor_under_both_prefixes(saved, tmp_path):
    """A checkpoint holding a layer's tensor under both the text and the multimodal prefix is
    ambiguous: refused, naming both keys (mutant: the check dropped, the last file's key won)."""
    _, _, path = saved
    tensors = {}
    for f in sorted(path.glob("*.safetensors")):
        tensors.update(load_file(f))
    key = f"model.layers.{LAYER}.linear_attn.A_log"
    tensors[key.replace("model.", "model.language_model.", 1)] = tensors[key] + 1
    out = tmp_path / "both"
    out.mkdir()
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors")
    (out / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(ValueError, match="'A_log' found under two prefixes"):
        GatedDeltaNet.from_pretrained(out, LAYER)


def test_tensor_in_two_files(single):
    """Without an index every *.safetensors is read: the same tensor in two of them is refused,
    naming both files (before: the last file's values were loaded)."""
    kind, tensors, config, out = single
    key = f"model.layers.{LAYER}.linear_attn.A_log"
    write_checkpoint(out, tensors, config)
    save_file({key: tensors[key] + 7}, out / "zz_old.safetensors")
    with pytest.raises(ValueError, match="is in two files.*model.safetensors and .*zz_old.safetensors"):
        GatedDeltaNet.from_pretrained(out, LAYER)


def test_malformed_files_are_named(single):
    kind, tensors, config, out = single
    write_checkpoint(out, tensors, config)
    (out / "config.json").write_text("{")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        GatedDeltaNet.from_pretrained(out, LAYER)
    (out / "config.json").write_text(json.dumps(config))
    index = out / "model.safetensors.index.json"
    index.write_text("[]")
    with pytest.raises(ValueError, match="must be a JSON object with a \"weight_map\""):
        GatedDeltaNet.from_pretrained(out, LAYER)
    key = f"model.layers.{LAYER}.linear_attn.A_log"
    save_file({"other": torch.zeros(1)}, out / "other.safetensors")
    weight_map = {k: "model.safetensors" for k in tensors}
    weight_map[key] = "other.safetensors"
    index.write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ValueError, match=f"lists {key} in other.safetensors, which does not hold it"):
        GatedDeltaNet.from_pretrained(out, LAYER)


def test_dtype_device_and_integer_tensors_are_checked(single):
    kind, tensors, config, out = single
    key = f"model.layers.{LAYER}.linear_attn.A_log"
    ckpt = write_checkpoint(out, tensors, config)
    for dtype in ("bfloat16", torch.int32, torch.float8_e4m3fn):
        with pytest.raises(ValueError, match="dtype must be one of"):
            GatedDeltaNet.from_pretrained(ckpt, LAYER, dtype=dtype)
    with pytest.raises(ValueError, match="device must be a torch.device"):
        GatedDeltaNet.from_pretrained(ckpt, LAYER, device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            GatedDeltaNet.from_pretrained(ckpt, LAYER, device="cuda")
    assert GatedDeltaNet.from_pretrained(ckpt, LAYER, dtype=torch.float64).A_log.dtype == torch.float64
    tensors[key] = tensors[key].to(torch.int32)
    (out / "model.safetensors").unlink()
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors")
    with pytest.raises(ValueError, match=f"tensor {key} is torch.int32, expected a floating-point"):
        GatedDeltaNet.from_pretrained(ckpt, LAYER)
