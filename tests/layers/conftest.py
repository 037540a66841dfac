"""Checkpoints of tiny random models saved once per test session with transformers' save_pretrained:
real safetensors files, the Qwen3.5 one sharded (a layer's tensors spread over several shards)."""
import pytest

from tests.layers.tiny_models import no_grad_and_torch_code, tiny_model  # noqa: F401 (fixture)


@pytest.fixture(scope="session", params=["qwen3_5", "qwen3_next"])
def saved(request, tmp_path_factory):
    """``(kind, transformers model, checkpoint dir)``."""
    kind = request.param
    model = tiny_model(kind, seed=1)
    path = tmp_path_factory.mktemp(kind)
    # Qwen3.5 sharded (model.safetensors.index.json), Qwen3-Next as one model.safetensors.
    model.save_pretrained(path, max_shard_size="40KB" if kind == "qwen3_5" else "1GB")
    return kind, model, path


@pytest.fixture(autouse=True)
def _reference_setup(no_grad_and_torch_code):
    """The reference is transformers' own torch code; no autograd."""
