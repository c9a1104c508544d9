"""The published recipe, as the baseline the engine is measured against.

liquid-audio's own `generate_interleaved` loop, unchanged in structure, with two CUDA graphs:
1. the depthformer frame: liquid-audio's `_sample_audio_frame` (8 codebooks, sampling included)
   captured as one graph for a fixed (temperature, top_k);
2. the backbone decode step: transformers' `Lfm2Model` over its `StaticCache`, captured as one
   graph with a static input embedding and position.
Prefill stays eager and, as in liquid-audio, covers the whole history every turn. The loop keeps
liquid-audio's per-token host syncs (`if next_token == 7`, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch
from torch import nn

from engine.chat.generation import END_OF_AUDIO, IM_END, TEXT_END
from engine.realtime import graphs


class RecipeGenerator:
    def __init__(
        self,
        model: nn.Module,
        *,
        max_cache_len: int,
        audio_temperature: float | None,
        audio_top_k: int | None,
        text_temperature: float | None,
        text_top_k: int | None,
    ) -> None:
        from transformers import StaticCache

        self.model = model
        self.sampling = (audio_temperature, audio_top_k, text_temperature, text_top_k)
        device = model.lfm.embed_tokens.weight.device
        dtype = model.lfm.embed_tokens.weight.dtype
        hidden = model.lfm.config.hidden_size
        self.device = device
        self.cache = StaticCache(config=model.lfm.config, max_cache_len=max_cache_len)
        self.static_input = torch.zeros((1, 1, hidden), device=device, dtype=dtype)
        self.static_position = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.depth_hidden = torch.zeros((hidden,), device=device, dtype=dtype)
        self.backbone_graph: torch.cuda.CUDAGraph | None = None
        self.depth_graph: torch.cuda.CUDAGraph | None = None
        self.backbone_capture_error: str | None = None
        self.capture_seconds = 0.0

    @torch.inference_mode()
    def capture(self) -> None:
        started = time.perf_counter()
        model = self.model
        audio_t, audio_k, _, _ = self.sampling
        # The StaticCache allocates its buffers on first use: prefill a few positions eagerly first.
        warm = torch.zeros((1, 4, self.static_input.shape[-1]), device=self.device, dtype=self.static_input.dtype)
        model.lfm(inputs_embeds=warm, past_key_values=self.cache, use_cache=True)
        self.static_position.fill_(4)

        def depth_step() -> None:
            self.depth_out = model._sample_audio_frame(self.depth_hidden, temperature=audio_t, top_k=audio_k)

        def backbone_step() -> None:
            out = model.lfm(
                inputs_embeds=self.static_input,
                past_key_values=self.cache,
                position_ids=self.static_position,
                use_cache=True,
            )
            self.backbone_out = out.last_hidden_state

        def run_both_steps() -> None:
            for _ in range(3):
                depth_step()
                backbone_step()

        # Each graph in its own private pool (pool=None), as the recipe has it.
        graphs.warm_up(self.device, run_both_steps)
        self.depth_graph, _ = graphs.capture(depth_step)
        try:
            self.backbone_graph, _ = graphs.capture(backbone_step)
        except Exception as error:  # recorded in the results: the recipe then runs its backbone eagerly
            self.backbone_capture_error = f"{type(error).__name__}: {error}"
            torch.cuda.synchronize(self.device)
        self.cache.reset()
        torch.cuda.synchronize(self.device)
        self.capture_seconds = time.perf_counter() - started

    def close(self) -> None:
        """Free the graphs and the static cache (the benchmark measures each mode's memory separately)."""
        self.backbone_graph = None
        self.depth_graph = None
        self.cache = None

    def _backbone(self, embeddings: torch.Tensor, position: int) -> torch.Tensor:
        if self.backbone_graph is None or embeddings.shape[1] != 1:
            positions = torch.arange(position, position + embeddings.shape[1], device=self.device)[None]
            return self.model.lfm(
                inputs_embeds=embeddings, past_key_values=self.cache, position_ids=positions, use_cache=True
            ).last_hidden_state
        self.static_input.copy_(embeddings)
        self.static_position.fill_(position)
        self.backbone_graph.replay()
        return self.backbone_out

    def _audio_frame(self, hidden: torch.Tensor) -> torch.Tensor:
        self.depth_hidden.copy_(hidden)
        self.depth_graph.replay()
        return self.depth_out.clone()

    @torch.inference_mode()
    def generate(self, prefill_inputs: dict[str, torch.Tensor], *, n_text: int, n_audio: int, max_new_tokens: int) -> Iterator[torch.Tensor]:
        """liquid-audio's `generate_interleaved`, line for line, on the two graphs."""
        model = self.model
        _, _, text_t, text_k = self.sampling
        self.cache.reset()
        in_emb = model._prefill(**prefill_inputs)
        position = 0
        current_text = True
        modality_left = n_text
        text_done = False
        for _ in range(max_new_tokens):
            modality_left -= 1
            output = self._backbone(in_emb, position)
            position += in_emb.shape[1]
            if current_text:
                logits = nn.functional.linear(output[0, -1], model.lfm.embed_tokens.weight)
                next_token = model._sample_text_token(logits, temperature=text_t, top_k=text_k)
                if next_token == IM_END:
                    break
                yield next_token
                if next_token == TEXT_END:
                    text_done = True
                if not modality_left or text_done:
                    current_text = False
                    modality_left = n_audio
                in_emb = model.lfm.embed_tokens(next_token)[None, :]
            else:
                next_token = self._audio_frame(output[0, -1])
                if not modality_left and not text_done:
                    current_text = True
                    modality_left = n_text
                if next_token[0] == END_OF_AUDIO:
                    next_token[:] = END_OF_AUDIO
                    current_text = True
                yield next_token
                in_emb = model.audio_embedding(next_token + model.codebook_offsets).sum(0)[None, None, :]
