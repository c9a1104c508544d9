"""The LoRA a voice trains: peft's own adapter on the engine's frozen weights, bf16 or int8.

peft wraps liquid-audio's linear layers as it wraps any model's; the int8 layers (engine/model/quantized.py's
QuantizedLinear, whose forward dequantizes inside an autograd function that keeps only the int8 rows for the
backward) are handed to peft's own LoRA Linear through peft's custom-module registry, so the base can stay in
int8 on a small card. The adapter weights are float32 (peft's `autocast_adapter_dtype`), whatever the base.

What is saved is what peft's `save_pretrained` writes (adapter_config.json + adapter_model.safetensors), the
format the app's VoiceSwitcher merges (engine/model/lora.py).
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import torch
from torch import nn

# The layers a voice adapts by default: in the backbone, the attention's projections, the convolutions' in and
# out projections and the feed-forward's three matrices; the projection into the depthformer and, in the
# depthformer (which speaks every code of a frame), its attention and feed-forward. Not the audio encoder (it hears the user, not the voice) and not
# the embeddings and heads (tied tables that a LoRA would make untied).
DEFAULT_TARGETS = (
    r"^(lfm\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|out_proj)|conv\.(in_proj|out_proj)|feed_forward\.(w1|w2|w3))"
    r"|depthformer\.layers\.\d+\..*\.(qkv_proj|out_proj|w1|w2|w3)|depth_linear)$"
)
DEFAULT_RANK = 16
# alpha = 2 r: peft's scale alpha / r = 2, the common choice for voice adapters.
ALPHA_PER_RANK = 2.0


def attach_lora(model: nn.Module, *, rank: int, alpha: float, targets: str = DEFAULT_TARGETS, base_model: str | None = None):
    """`model` (liquid-audio's LFM2AudioModel as the engine loads it) wrapped by peft with a fresh LoRA;
    only the adapter's weights require gradients."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora.layer import Linear as LoraLinear

    from engine.model.quantized import QuantizedLinear

    for parameter in model.parameters():
        parameter.requires_grad_(False)
    config = LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none", target_modules=targets, base_model_name_or_path=base_model
    )
    config._register_custom_module({QuantizedLinear: LoraLinear})
    with warnings.catch_warnings():  # peft warns that it does not know QuantizedLinear: the registry above says how
        warnings.filterwarnings("ignore", message="Unsupported layer type")
        return get_peft_model(model, config)


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each layer's activations in the backward instead of keeping them: the backbone through
    transformers' own switch, the depthformer's blocks (8 positions per audio frame, the larger share of a
    voice batch's activations) wrapped one by one."""
    enable = getattr(model.lfm, "activation_checkpointing_enable", None)  # its name since transformers 5.2x
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.lfm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for block in model.depthformer.layers:
        if not getattr(block, "_checkpointed", False):
            block.forward = functools.partial(_checkpointed_call, block.forward)
            block._checkpointed = True


def _checkpointed_call(forward, *args, **kwargs):
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)


def set_training_mode(model: nn.Module, training: bool) -> None:
    """Train mode where it matters (transformers only checkpoints layers in train mode); the audio encoder
    stays in eval mode (its dropout would only waste time: voice samples have no audio input)."""
    model.train(training)
    model.conformer.eval()


def adapter_state(peft_model) -> dict[str, torch.Tensor]:
    """The trainable weights by name (what a checkpoint keeps), on the host."""
    return {name: p.detach().to("cpu", copy=True) for name, p in peft_model.named_parameters() if p.requires_grad}


@torch.no_grad()
def load_adapter_state(peft_model, state: dict[str, torch.Tensor]) -> None:
    params = {name: p for name, p in peft_model.named_parameters() if p.requires_grad}
    if set(params) != set(state):
        raise ValueError("the checkpoint's adapter does not match this run's adapter")
    for name, param in params.items():
        param.copy_(state[name])


def trainable_parameters(peft_model) -> list[nn.Parameter]:
    return [p for p in peft_model.parameters() if p.requires_grad]


def save_adapter(peft_model, folder: Path) -> None:
    """peft's own files: adapter_config.json and adapter_model.safetensors."""
    peft_model.save_pretrained(str(folder), safe_serialization=True)
