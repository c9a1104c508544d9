"""Voices of every kind for the switching tests (CPU: tests/test_voice_switching.py, GPU: tests/test_gpu_engine.py):
real peft adapters with random A and B on the tiny model, saved as `save_pretrained` writes them."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch

# The voices, by the layers they adapt (suffixes of module names, or whole names; None: every linear layer there is).
KINDS: dict[str, tuple[str, ...] | None] = {
    "qv": ("q_proj", "v_proj"),
    "attention_mlp": ("q_proj", "k_proj", "v_proj", "out_proj", "w1", "w2", "w3"),
    "all_linear": None,  # the tied codebook heads (depth_embeddings.N.to_logits) too, as community voices have them
    "tied_heads": ("to_logits",),  # only the heads tied to their codebook's embedding (stored once in the checkpoint)
    "partial": ("lfm.layers.1.self_attn.q_proj", "depthformer.layers.0.operator.qkv_proj", "depth_linear"),
}


def linear_names(model: torch.nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m.weight.numel()]


def make_voice(model: torch.nn.Module, folder: Path, kind: str, seed: int) -> None:
    """A real peft adapter (random A and B) on the layers of `kind` of `model` (the tiny model, any precision's shapes)."""
    from peft import LoraConfig, get_peft_model

    suffixes = KINDS[kind]
    names = [n for n in linear_names(model) if suffixes is None or n.rsplit(".", 1)[-1] in suffixes or n in suffixes]
    torch.manual_seed(seed)
    extra = {"rank_pattern": {"depth_linear": 2}, "alpha_pattern": {"depth_linear": 3}} if kind == "partial" else {}
    config = LoraConfig(r=4, lora_alpha=8, target_modules="^(" + "|".join(re.escape(n) for n in names) + ")$",
                        init_lora_weights=False, **extra)
    get_peft_model(copy.deepcopy(model), config).save_pretrained(str(folder))
