"""Integrations with model libraries. ``gdn.integrations.transformers``: run transformers' Qwen3.5 /
Qwen3-Next linear-attention layers on gdn (``patch(model)``, ``patch_transformers()``)."""
