"""The real-time backend: static cache + CUDA graphs captured once, at start-up.

Three graphs, captured before the first turn (no lazy capture, so turn 1 is as fast as turn 5):
- `decode`: one backbone step over the static cache (input embedding → final hidden state);
- `text_head`: text logits, sampling, and the sampled token's embedding as the next input;
- `audio_head`: the depthformer frame (8 codebooks with their sampling), the end-of-audio rule,
  and the frame's summed audio embedding as the next input.
Decoding settings are device tensors read inside the graphs, so greedy/sampling switches need no
recapture. Capture warms up and records on copies of nothing: it runs on the real buffers and then
restores the cache from a snapshot, so capturing never corrupts the conversation.

The same methods run eagerly when `capture=False` (CPU, or after a capture failure); a graph
replay is bitwise equal to that eager step.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from engine.loading import LoadedModel
from engine.protocol import SamplingSettings
from engine.realtime.sampling import DeviceSampling
from engine.realtime.static_model import StaticBackbone, StaticDepthformer


class GraphedBackend:
    """Implements `engine.generation.StepBackend` with fixed buffers and (on CUDA) CUDA graphs."""

    def __init__(self, loaded: LoadedModel, *, context_tokens: int = 4096, capture: bool | None = None) -> None:
        model = loaded.model
        self.model = model
        self.device = loaded.device
        embed = model.lfm.embed_tokens.weight
        self.embed = embed
        self.text_sampling = DeviceSampling(self.device)
        self.audio_sampling = DeviceSampling(self.device)
        self.backbone = StaticBackbone(model.lfm, context_tokens)
        self.depthformer = StaticDepthformer(model, self.audio_sampling)
        hidden = self.backbone.hidden
        self.input = torch.zeros((1, hidden), device=self.device, dtype=embed.dtype)  # next backbone input
        self.hidden = torch.zeros((1, hidden), device=self.device, dtype=embed.dtype)  # last backbone output
        self.token = torch.zeros((1,), dtype=torch.long, device=self.device)
        self.frame = self.depthformer.frame
        on_cuda = self.device.type == "cuda"
        self.token_host = torch.zeros((1,), dtype=torch.long, pin_memory=on_cuda)
        self.frame_host = torch.zeros((self.frame.shape[0],), dtype=torch.long, pin_memory=on_cuda)
        self._token_view = self.token_host.numpy()
        self._frame_view = self.frame_host.numpy()
        self._ready = torch.cuda.Event() if on_cuda else None
        self._applied: SamplingSettings | None = None
        self.positions = 0
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self.capture_seconds = 0.0
        if capture if capture is not None else on_cuda:
            self.capture()

    # ------------------------------------------------------------------ the three steps

    def _decode(self) -> None:
        self.hidden.copy_(self.backbone.decode_step(self.input))

    def _text_head(self) -> None:
        logits = torch.mm(self.hidden, self.embed.t())[0]
        self.text_sampling.sample(logits, out=self.token)
        self.input.copy_(F.embedding(self.token, self.embed))

    def _audio_head(self) -> None:
        self.input.copy_(self.depthformer.frame_step(self.hidden))

    # ------------------------------------------------------------------ capture

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture the three graphs once; the cache is restored afterwards, so nothing is lost."""
        started = time.perf_counter()
        saved = self.backbone.snapshot()
        saved_io = (self.input.clone(), self.hidden.clone())
        steps = {"decode": self._decode, "text_head": self._text_head, "audio_head": self._audio_head}
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(3):  # warm up: cuBLAS handles, workspace, lazy module loading
                for step in steps.values():
                    step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        for name, step in steps.items():
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                step()
            self.graphs[name] = graph
        self.backbone.restore(saved)
        self.input.copy_(saved_io[0])
        self.hidden.copy_(saved_io[1])
        torch.cuda.synchronize(self.device)
        self.capture_seconds = time.perf_counter() - started

    def _run(self, name: str) -> None:
        graph = self.graphs.get(name)
        if graph is not None:
            graph.replay()
        elif name == "decode":
            self._decode()
        elif name == "text_head":
            self._text_head()
        else:
            self._audio_head()

    # ------------------------------------------------------------------ StepBackend

    def _apply(self, sampling: SamplingSettings) -> None:
        if sampling == self._applied:
            return
        self.text_sampling.set(greedy=sampling.greedy, temperature=sampling.text_temperature, top_k=sampling.text_top_k)
        self.audio_sampling.set(greedy=sampling.greedy, temperature=sampling.audio_temperature, top_k=sampling.audio_top_k)
        self._applied = sampling

    def reset(self) -> None:
        self.backbone.reset()
        self.positions = 0

    @torch.inference_mode()
    def prefill(self, embeddings: torch.Tensor) -> None:
        hidden = self.backbone.prefill(embeddings[0].to(self.input.dtype))
        self.hidden.copy_(hidden[-1:])
        self.positions = self.backbone.positions

    @torch.inference_mode()
    def decode(self) -> None:
        self._run("decode")
        self.positions += 1
        self.backbone.positions = self.positions

    @torch.inference_mode()
    def text_head(self, sampling: SamplingSettings) -> torch.Tensor:
        self._apply(sampling)
        self._run("text_head")
        self.token_host.copy_(self.token, non_blocking=True)
        if self._ready is not None:
            self._ready.record()
        return self.token

    @torch.inference_mode()
    def audio_head(self, sampling: SamplingSettings) -> torch.Tensor:
        self._apply(sampling)
        self._run("audio_head")
        self.frame_host.copy_(self.frame, non_blocking=True)
        if self._ready is not None:
            self._ready.record()
        return self.frame

    def read_token(self, token: torch.Tensor) -> int:
        if self._ready is not None:
            self._ready.synchronize()  # waits for the head only; the next decode keeps running
        return int(self._token_view[0])

    def read_frame(self, frame: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        if self._ready is not None:
            self._ready.synchronize()
        values = tuple(int(v) for v in self._frame_view)
        return torch.tensor(values, dtype=torch.long), values

    def refresh_weights(self) -> None:
        """Nothing to do: the fused matrices ARE the parameters (views), so merges land in them."""

    def close(self) -> None:
        self.graphs.clear()
