"""The two baselines the engine is compared with, each turn re-prefilling the whole history:

- eager: liquid-audio's `generate_interleaved`, unchanged;
- recipe: the published method (engine/bench/recipe.py): liquid-audio's loop with the depthformer frame
  and the backbone step over transformers' StaticCache captured as CUDA graphs.
Both decode each frame with liquid-audio's detokenizer as it arrives (one call per frame, as a streaming
app built on them would).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from engine.bench.workload import CONTEXT, FRAME_SECONDS, Workload, median_ms, mel, new_conversation, sync
from engine.protocol import SamplingSettings


def _run_liquid_style(loaded, workload: Workload, sampling: SamplingSettings, generate) -> list[dict[str, float]]:
    """Turns through a liquid-audio-style generator (full re-prefill each turn), decoding every frame."""
    from engine.chat.conversation import AudioOutPiece, TextPiece

    processor = loaded.processor
    # One short untimed turn first, so process-wide lazy set-up (cuBLAS handles, cuDNN plans for
    # the conformer) is not billed to these modes; the engine pays it during its capture.
    warm = new_conversation(loaded, workload)
    warm.add_audio_turn("user", mel(loaded, workload.takes[0]))
    warm.open_assistant_turn()
    for token in generate(warm.span(0, loaded.device).as_kwargs(), 2 * (workload.n_text + workload.n_audio)):
        if token.numel() > 1:
            processor.decode(token[None, :, None])
    sync()
    conversation = new_conversation(loaded, workload)
    turns = []
    for wave in workload.takes:
        sync()
        started = time.perf_counter()
        conversation.add_audio_turn("user", mel(loaded, wave))
        turn = conversation.open_assistant_turn()
        inputs = conversation.span(0, loaded.device).as_kwargs()
        first_pcm = None
        decode_s = 0.0
        frames = 0
        samples = 0
        for token in generate(inputs, workload.max_new_tokens):
            if token.numel() == 1:
                turn.pieces.append(TextPiece([int(token)]))
                continue
            turn.pieces.append(AudioOutPiece(token.cpu()))
            if token[0] == 2048:
                continue
            frames += 1
            decode_started = time.perf_counter()
            pcm = processor.decode(token[None, :, None]).float().cpu()
            decode_s += time.perf_counter() - decode_started
            samples += pcm.shape[-1]
            if first_pcm is None:
                first_pcm = time.perf_counter() - started
        sync()
        total = time.perf_counter() - started
        conversation.close_assistant_turn()
        audio = frames * FRAME_SECONDS
        turns.append(
            {
                "frames": frames,
                "ttfa_ms": (first_pcm or float("nan")) * 1e3,
                "total_s": total,
                "rtf": total / audio,
                "rtf_without_decoding": (total - decode_s) / audio,
                "ms_per_frame": total / frames * 1e3,
                "context_positions": conversation.positions,
            }
        )
    return turns


def run_eager(loaded, workload: Workload, sampling: SamplingSettings) -> dict[str, Any]:
    from engine.chat.generation import liquid_sampling_args

    model = loaded.model
    audio_t, audio_k = liquid_sampling_args(sampling, audio=True)
    text_t, text_k = liquid_sampling_args(sampling, audio=False)

    def generate(inputs, max_new_tokens):
        return model.generate_interleaved(
            **inputs, max_new_tokens=max_new_tokens,
            text_temperature=text_t, text_top_k=text_k, audio_temperature=audio_t, audio_top_k=audio_k,
        )

    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        turns = _run_liquid_style(loaded, workload, sampling, generate)
        components = _liquid_components(loaded, sampling, backbone=None)
    return {"turns": turns, "components_ms": components, "capture_s": 0.0, "peak_vram_gb": torch.cuda.max_memory_allocated() / 1e9}


def _liquid_components(loaded, sampling: SamplingSettings, backbone) -> dict[str, float]:
    from engine.chat.generation import liquid_sampling_args

    model = loaded.model
    audio_t, audio_k = liquid_sampling_args(sampling, audio=True)
    hidden = torch.randn(model.lfm.config.hidden_size, device=loaded.device, dtype=loaded.dtype)
    codes = torch.randint(0, 2048, (1, 8, 1), device=loaded.device)
    result = {
        "depthformer_frame": median_ms(lambda: model._sample_audio_frame(hidden, temperature=audio_t, top_k=audio_k), repeats=10, inner=3),
        "decoder_frame": median_ms(lambda: loaded.processor.decode(codes), repeats=10, inner=3),
    }
    if backbone is None:
        prompt = torch.randn(1, 100, model.lfm.config.hidden_size, device=loaded.device, dtype=loaded.dtype)
        cache = model.lfm(inputs_embeds=prompt, use_cache=True).cache
        step = prompt[:, :1]
        result["backbone_step"] = median_ms(lambda: model.lfm(inputs_embeds=step, cache=cache, use_cache=True), repeats=10, inner=3)
    else:
        result["backbone_step"] = backbone()
    return result


def run_recipe(loaded, workload: Workload, sampling: SamplingSettings) -> dict[str, Any]:
    from engine.bench.recipe import RecipeGenerator
    from engine.chat.generation import liquid_sampling_args

    audio_t, audio_k = liquid_sampling_args(sampling, audio=True)
    text_t, text_k = liquid_sampling_args(sampling, audio=False)
    torch.cuda.reset_peak_memory_stats()
    recipe = RecipeGenerator(
        loaded.model, max_cache_len=CONTEXT, audio_temperature=audio_t, audio_top_k=audio_k,
        text_temperature=text_t, text_top_k=text_k,
    )
    recipe.capture()

    def generate(inputs, max_new_tokens):
        return recipe.generate(inputs, n_text=workload.n_text, n_audio=workload.n_audio, max_new_tokens=max_new_tokens)

    with torch.inference_mode():
        turns = _run_liquid_style(loaded, workload, sampling, generate)

        def backbone() -> float:
            if recipe.backbone_graph is None:
                return float("nan")
            return median_ms(recipe.backbone_graph.replay)

        components = _liquid_components(loaded, sampling, backbone=backbone)
        components["depthformer_frame"] = median_ms(recipe.depth_graph.replay)
    result = {
        "turns": turns,
        "components_ms": components,
        "capture_s": recipe.capture_seconds,
        "peak_vram_gb": torch.cuda.max_memory_allocated() / 1e9,
        "backbone_capture_error": recipe.backbone_capture_error,
    }
    recipe.close()
    torch.cuda.empty_cache()
    return result
