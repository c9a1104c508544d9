"""Write a complete, tiny LFM2-Audio checkpoint in the exact Hugging Face repository layout.

The folder looks like LiquidAI/LFM2.5-Audio-1.5B-JP on the Hub (config.json, model.safetensors with
accelerate's `{"format": "pt"}` metadata, a fast tokenizer with the special tokens at the ids
liquid-audio hard-codes, audio_detokenizer/), only with random weights and small shapes. It goes
through exactly the same loading code as the real model, so tests and the app's demo mode exercise
the real paths. It takes about a second to write, so nothing large is committed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

# Ids liquid-audio hard-codes in its generation loops (`generate_interleaved`, `generate_sequential`).
IM_START_ID = 6
IM_END_ID = 7
AUDIO_START_ID = 128
TEXT_END_ID = 130

_SPECIAL_TOKENS: dict[int, str] = {
    0: "<|pad|>",
    1: "<|startoftext|>",
    2: "<|endoftext|>",
    IM_START_ID: "<|im_start|>",
    IM_END_ID: "<|im_end|>",
    AUDIO_START_ID: "<|audio_start|>",
    TEXT_END_ID: "<|text_end|>",
}
_N_SPECIAL = TEXT_END_ID + 1

TINY_TEXT_VOCAB = 512

# A little text to train the tiny byte-level BPE on, so that Japanese and English both round-trip.
_CORPUS = [
    "こんにちは。今日はいい天気ですね。",
    "ずんだもんなのだ。よろしくお願いしますなのだ。",
    "音声で会話できるアプリです。ボタンを押しながら話してください。",
    "東京の天気は晴れ、気温は二十度です。",
    "ありがとうございます。また話しましょう。",
    "Hello, how are you today? I am fine, thank you.",
    "Respond with interleaved text and audio.",
    "You are a helpful assistant that answers in Japanese.",
    "user assistant system",
] * 4

# Shapes of the tiny model. Everything that liquid-audio fixes (128 mel features, 8 codebooks of
# 2048 codes, a 512-wide detokenizer) keeps its real value; the rest is small.
_PREPROCESSOR: dict[str, Any] = {
    "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
    "window": "hann", "features": 128, "n_fft": 512, "log": True, "frame_splicing": 1,
    "dither": 1e-05, "pad_to": 0, "pad_value": 0.0,
}
_ENCODER: dict[str, Any] = {
    "feat_in": 128, "feat_out": -1, "n_layers": 2, "d_model": 32, "subsampling": "dw_striding",
    "subsampling_factor": 8, "subsampling_conv_channels": 16, "causal_downsampling": False,
    "reduction": None, "reduction_position": None, "reduction_factor": 1, "ff_expansion_factor": 2,
    "self_attention_model": "rel_pos", "n_heads": 2, "att_context_size": [-1, -1], "xscaling": False,
    "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
    "conv_context_size": None, "dropout": 0.1, "dropout_pre_encoder": 0.1, "dropout_emb": 0.0, "dropout_att": 0.1,
}
_LFM: dict[str, Any] = {
    "vocab_size": TINY_TEXT_VOCAB, "hidden_size": 64, "intermediate_size": 128, "block_auto_adjust_ff_dim": False,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "norm_eps": 1e-05, "conv_bias": False, "conv_L_cache": 3,
    "layer_types": ["conv", "full_attention", "conv", "full_attention"],
    "rope_theta": 1000000.0, "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 7,
}
# The depthformer's attention has 32 heads and 8 kv groups hard-coded in liquid-audio: dim % 32 == 0.
_DEPTHFORMER: dict[str, Any] = {"layers": 2, "dim": 128, "tie": True}
_DETOKENIZER: dict[str, Any] = {
    "model_type": "lfm2",
    # The detokenizer never embeds text (it gets inputs_embeds), so its vocabulary is kept tiny.
    "vocab_size": 16, "hidden_size": 512, "intermediate_size": 256, "block_auto_adjust_ff_dim": False,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
    "max_position_embeddings": 4096, "norm_eps": 1e-05, "conv_L_cache": 3, "conv_bias": False,
    "sliding_window": 30, "layer_types": ["conv", "sliding_attention"],
}


def tiny_config(*, interleaved_n_text: int = 6, interleaved_n_audio: int = 9) -> dict[str, Any]:
    """The tiny model's config.json, in the real repository's schema."""
    return {
        "architectures": ["Lfm2AudioForConditionalGeneration"],
        "codebooks": 8,
        "tie_audio_embeddings": False,
        "semantic_codebook_factor": 100,
        "codebook_weight": "log",
        "interleaved_n_text": interleaved_n_text,
        "interleaved_n_audio": interleaved_n_audio,
        "preprocessor": copy.deepcopy(_PREPROCESSOR),
        "encoder": copy.deepcopy(_ENCODER),
        "lfm": copy.deepcopy(_LFM),
        "depthformer": copy.deepcopy(_DEPTHFORMER),
    }


def write_tokenizer(folder: Path) -> None:
    """A byte-level BPE fast tokenizer with the LFM2 special tokens at their real ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [_SPECIAL_TOKENS.get(i, f"<|reserved_{i}|>") for i in range(_N_SPECIAL)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_TEXT_VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|startoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
    )
    fast.save_pretrained(str(folder))


def save_module(module: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import save_file

    # Tied weights are stored once, under their first name, as in the Hub checkpoints; accelerate's
    # loader puts them back into every tied parameter. accelerate refuses files without "format".
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in module.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = tensor.detach().contiguous().clone()
    save_file(tensors, str(path), metadata={"format": "pt"})


def write_audio_tokenizer(folder: str | Path, *, seed: int = 0) -> Path:
    """Add the audio tokenizer (Mimi, which training a voice encodes speech with) to a tiny checkpoint: liquid-audio
    builds Mimi at its one real size, so this is the real architecture with random weights, stored in bf16 (160 MB;
    liquid-audio loads it into its float32 model). Its codes are as random as the rest of the tiny model."""
    from liquid_audio import moshi
    from safetensors.torch import save_file

    from engine.model.store import MIMI_CHECKPOINT

    path = Path(folder) / MIMI_CHECKPOINT
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        mimi = moshi.models.loaders.get_mimi(None, device="cpu")
        tensors = {name: (t.to(torch.bfloat16) if t.is_floating_point() else t).contiguous() for name, t in mimi.state_dict().items()}
    finally:
        torch.random.set_rng_state(generator_state)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def write_tiny_checkpoint(
    folder: str | Path,
    *,
    seed: int = 0,
    interleaved_n_text: int = 6,
    interleaved_n_audio: int = 9,
    logit_scale: float = 4.0,
    layer_output_scale: float = 256.0,
) -> Path:
    """Write the tiny random checkpoint into `folder` (created if needed) and return its path.

    `logit_scale` multiplies the text and codebook output embeddings so that random logits are
    spread out: float32 greedy decoding then has no near-ties, which keeps token-for-token
    comparisons between two correct implementations meaningful. `layer_output_scale` multiplies
    the backbone layers' output projections: a random model with tied text embeddings otherwise
    just repeats its input token, which would make text-token tests trivially pass.
    """
    from liquid_audio.model.conformer.encoder import ConformerEncoderConfig
    from liquid_audio.model.lfm2_audio import DepthformerConfig, LFM2AudioConfig, LFM2AudioModel
    from liquid_audio.detokenizer import LFM2AudioDetokenizer
    from transformers import Lfm2Config

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = tiny_config(interleaved_n_text=interleaved_n_text, interleaved_n_audio=interleaved_n_audio)
    (folder / "config.json").write_text(json.dumps(config, indent=2))

    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        raw = copy.deepcopy(config)
        conf = LFM2AudioConfig(
            lfm=Lfm2Config(**raw.pop("lfm")),
            encoder=ConformerEncoderConfig(**raw.pop("encoder")),
            depthformer=DepthformerConfig(**raw.pop("depthformer")),
            **raw,
        )
        model = LFM2AudioModel(conf).eval()
        with torch.no_grad():
            model.lfm.embed_tokens.weight.mul_(logit_scale)
            for layer in model.lfm.layers:
                operator = layer.self_attn if layer.is_attention_layer else layer.conv
                operator.out_proj.weight.mul_(layer_output_scale)
                layer.feed_forward.w2.weight.mul_(layer_output_scale)
            for embedding in model.depth_embeddings:
                embedding.to_logits.weight.mul_(logit_scale)
        save_module(model, folder / "model.safetensors")

        detok_folder = folder / "audio_detokenizer"
        detok_folder.mkdir(exist_ok=True)
        (detok_folder / "config.json").write_text(json.dumps(_DETOKENIZER, indent=2))
        detok_config = Lfm2Config(**{k: v for k, v in _DETOKENIZER.items() if k != "model_type"})
        # liquid-audio renames llama.cpp's "sliding_attention" before building the module; so do we.
        detok_config.layer_types = ["full_attention" if t == "sliding_attention" else t for t in detok_config.layer_types]
        detokenizer = LFM2AudioDetokenizer(detok_config).eval()
        save_module(detokenizer, detok_folder / "model.safetensors")
    finally:
        torch.random.set_rng_state(generator_state)

    write_tokenizer(folder)
    (folder / "README.md").write_text(
        "# Tiny random LFM2-Audio checkpoint\n\n"
        "Written by `engine.model.tiny_checkpoint` for tests and the app's demo mode. The weights are random:\n"
        "it speaks noise. It has the same file layout as LiquidAI/LFM2.5-Audio-1.5B-JP.\n"
    )
    return folder
