"""The full-size model with random weights, for speed and memory measurements.

Built from the reference config (bench/lfm2.5-audio-1.5b-jp.config.json) straight on the GPU:
the cost of a step does not depend on the weight values. The stop tokens are suppressed in the
weights (their output rows are zero, so their logit is 0 while the top random logits are several
standard deviations above it): every mode then produces the same number of frames, and no mode
needs extra masking code in its loop.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from engine.chat.generation import END_OF_AUDIO, IM_END, TEXT_END
from engine.model.loading import LoadedModel, drop_unused_audio_head, drop_unused_token_table
from engine.model.store import build_model_from_config

REFERENCE_CONFIG = Path(__file__).resolve().parents[2] / "bench" / "lfm2.5-audio-1.5b-jp.config.json"


def condition_like_a_trained_model(model: torch.nn.Module) -> None:
    """Give the random weights the proportions of a trained model, so bf16 behaves as it will.

    transformers' plain random init (std 0.02 everywhere) makes the input embeddings ~50x smaller
    than the residual branches that are added to them, and lets the residual stream grow layer
    after layer. Measured on the H200: transformers' own bf16 path is then 2.4-2.7 % away from its
    float32 result, so two correct bf16 implementations differ by as much. With unit-scale
    embeddings and the residual branches scaled by 1/sqrt(2 · layers) (GPT-2's init), that floor
    is ~1 %, and bf16 comparisons measure the implementations rather than the random init.
    The cost of a step does not change.
    """
    _condition(model.lfm.layers, (model.lfm.embed_tokens.weight, model.audio_embedding.embedding.weight))


def condition_detokenizer_like_a_trained_model(detokenizer: torch.nn.Module) -> None:
    """`condition_like_a_trained_model` for liquid-audio's audio detokenizer: its codebook embeddings (what its
    transformer is fed) at unit scale, its layers' residual branches scaled by 1/sqrt(2 · layers)."""
    _condition(detokenizer.lfm.layers, (detokenizer.emb.emb.weight,))


@torch.no_grad()
def _condition(layers: torch.nn.ModuleList, tables: tuple[torch.Tensor, ...]) -> None:
    scale = (2 * len(layers)) ** -0.5
    for table in tables:
        table.div_(table.float().std().to(table.dtype))
    for layer in layers:
        operator = layer.self_attn if layer.is_attention_layer else layer.conv
        operator.out_proj.weight.mul_(scale)
        layer.feed_forward.w2.weight.mul_(scale)


def suppress_stop_tokens(model: torch.nn.Module) -> None:
    with torch.no_grad():
        model.lfm.embed_tokens.weight[IM_END].zero_()
        model.lfm.embed_tokens.weight[TEXT_END].zero_()
        # Every codebook: liquid-audio's decode rejects a 2048 anywhere in a frame it is given.
        for embedding in model.depth_embeddings:
            embedding.to_logits.weight[END_OF_AUDIO].zero_()


def random_full_size_model(
    config_path: Path = REFERENCE_CONFIG, *, device: str = "cuda", seed: int = 0, stop_tokens: bool = False,
    keep_unused_token_table: bool = False,
) -> LoadedModel:
    """`keep_unused_token_table`: keep the detokenizer's token table and the audio embedding's output head, which
    the app never loads (a checkpoint written from this model then has every tensor the Hub's has)."""
    from liquid_audio import LFM2AudioProcessor
    from liquid_audio.detokenizer import LFM2AudioDetokenizer
    from liquid_audio.processor import PreprocessorConfig
    from transformers import Lfm2Config

    from engine.model.tiny_checkpoint import write_tokenizer

    config: dict[str, Any] = json.loads(Path(config_path).read_text())
    detok_config = config.pop("audio_detokenizer")
    torch.manual_seed(seed)
    model = build_model_from_config(copy.deepcopy(config), device=device, dtype=torch.bfloat16).eval()
    condition_like_a_trained_model(model)
    if not stop_tokens:
        suppress_stop_tokens(model)

    tokenizer_dir = Path(tempfile.mkdtemp(prefix="voicechat-bench-tokenizer-"))
    write_tokenizer(tokenizer_dir)
    processor = LFM2AudioProcessor(
        text_tokenizer_path=str(tokenizer_dir),
        audio_processor_config=PreprocessorConfig(**config["preprocessor"]),
        name="random full-size",
    ).to(device)
    lfm_config = Lfm2Config(**{k: v for k, v in detok_config.items() if k != "model_type"})
    lfm_config.layer_types = ["full_attention" if t == "sliding_attention" else t for t in lfm_config.layer_types]
    with torch.device(device):
        detokenizer = LFM2AudioDetokenizer(lfm_config)
    if not keep_unused_token_table:  # the tables nothing reads, dropped as load_model drops them
        drop_unused_token_table(detokenizer)
        drop_unused_audio_head(model)
    processor._audio_detokenizer = detokenizer.eval()  # float32, as liquid-audio loads it
    processor.detokenizer_path = "<random>"
    return LoadedModel(
        model=model,
        processor=processor,
        folder=Path(config_path).parent,
        name="random full-size",
        device=torch.device(device),
        dtype=torch.bfloat16,
        interleaved_n_text=int(config["interleaved_n_text"]),
        interleaved_n_audio=int(config["interleaved_n_audio"]),
        codebooks=int(config["codebooks"]),
    )
