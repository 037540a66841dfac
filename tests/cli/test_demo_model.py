"""The model part of `gdn demo` runs and reports agreement (small prompt to stay fast)."""
from gdn.cli.demo_model import run_demo_model
from tests.layers.tiny_models import use_transformers_torch_code


def test_demo_model_reports_agreement(monkeypatch):
    use_transformers_torch_code(monkeypatch)       # the "transformers" side must run on CPU
    lines = []
    run_demo_model("cpu", print=lines.append, prompt_tokens=40, new_tokens=4)
    text = "\n".join(lines)
    assert "greedy tokens agree: yes (4/4)" in text, text
    diff = float(text.split("max |logit difference|: ")[1].split()[0])
    assert diff < 1e-4, text
    assert "transformers + gdn patch" in text and "speed-up" in text
