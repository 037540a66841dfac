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


def test_demo_skips_the_model_without_transformers(monkeypatch, capsys):
    """Without transformers (the hf extra) `gdn demo` says the model part is skipped and why,
    instead of a traceback from inside it."""
    import sys

    from gdn.cli.demo import print_model_part
    monkeypatch.setitem(sys.modules, "transformers", None)          # import transformers now fails
    print_model_part("cpu")
    out = capsys.readouterr().out
    assert "(tiny-model part skipped:" in out and "transformers" in out and "[hf]" in out
