"""The real-time backend: static cache + CUDA graphs captured once, at start-up.

Graphs captured before the first turn (no lazy capture, so turn 1 is as fast as turn 5):
- `decode`: one backbone step over the static cache (input embedding → final hidden state);
- `text_head`: text logits, sampling, and the sampled token's embedding as the next input;
- `audio_head`: the depthformer frame (8 codebooks with their sampling), the end-of-audio rule,
  and the frame's summed audio embedding as the next input;
- `prefill_<rows>`: the backbone over a turn's new positions, zero-padded up to one of a few fixed
  row counts (`PREFILL_BUCKETS`); longer spans go through in chunks of the largest. Eager, every new
  span length cost its own kernel choices and launches: 6-27 ms on the H200 for ~60-80 positions.
Decoding settings are device tensors read inside the graphs, so greedy/sampling switches need no
recapture. Capture warms up and records on copies of nothing: it runs on the real buffers and then
restores the cache from a snapshot, so capturing never corrupts the conversation.

The same methods run eagerly when `capture=False` (CPU, or after a capture failure); a graph
replay is bitwise equal to that eager step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from engine.chat.decoding import SamplingSettings
from engine.realtime import graphs
from engine.realtime.sampling import DeviceSampling
from engine.model.quantized import Int8Matrix
from engine.realtime.static_depthformer import StaticDepthformer
from engine.realtime.static_model import StaticBackbone
from engine.realtime.static_weights import layer_weight, lookup, plain
from engine.realtime.streaming import StreamingState

if TYPE_CHECKING:  # the real-time layer does not import the loading layer (and through it the protocol)
    from engine.model.loading import LoadedModel


# Row counts of the captured prefill graphs. A 1 s take is ~25 new positions (12.5 audio frames a
# second plus the turn's template tokens), a 20 s take ~265, a 60 s take ~770; a rebuild after a trim
# prefills up to ~3000. Below ~300 rows a batch-1 prefill costs about one read of the weights whatever
# its row count, so padding up to twice the rows is cheap. H200, one replay: 256 / 512 / 768 / 1024
# rows 3.7 / 4.9 / 6.3 / 7.6 ms, so one 768 or 1024 graph beats chunks of 512 + 256 or 512 + 512.
PREFILL_BUCKETS = (32, 64, 128, 256, 512, 768, 1024)
# The prefill graphs attend with FlashAttention where it runs (StaticBackbone.flash_prefill: it skips the key
# blocks past each row, so its work follows the context used, not the cache's 4096 slots). H200, a whole prefill
# graph from cache position 0 / 2048 (bench/results/run-76-prefill-tensor-cores, bench/probes/probe_prefill_int8.py):
# bf16 32 rows 1584 / 1865 µs with it against 1818 / 1805 with the batched matmuls, 64 rows 1621 / 1903 against
# 2024 / 1996, 128 rows 1762 / 2044 against 2540 / 2484. Without it: the batched matmuls up to this many rows (they
# materialize the scores, 8 kv heads × 4 rows per query × 4096 keys, so their cost grows with the rows), above it
# the memory-efficient SDPA kernel (flat: one block per 64 query rows along all the keys). Runs 19 and 20, kernel
# time: SDPA 2.98 / 3.03 / 3.19 / 3.55 / 4.77 ms at 32 / 64 / 128 / 256 / 512 rows, matmuls 1.69 / 1.90 / 2.43 /
# 3.63 / 6.24 ms.
MATMUL_ATTENTION_MAX_ROWS = 128


def prefill_attention(rows: int, flash: bool) -> str:
    """The attention of the prefill graph of `rows` rows (`StaticBackbone.prefill_rows`' `attention`)."""
    if flash:
        return "flash"
    return "matmul" if rows <= MATMUL_ATTENTION_MAX_ROWS else "masked"


class GraphedBackend(StreamingState):
    """Implements `engine.chat.generation.StepBackend` with fixed buffers and (on CUDA) CUDA graphs."""

    # The memory pool the step graphs share (None until captured); the encoder's graphs join it.
    graph_pool: object | None = None

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        context_tokens: int = 4096,
        capture: bool | None = None,
        prefill_buckets: Sequence[int] | None = None,
    ) -> None:
        """`prefill_buckets`: padded prefill row counts; by default `PREFILL_BUCKETS` when the graphs are
        captured and none otherwise (eager, a padded row is pure waste)."""
        started = time.perf_counter()
        model = loaded.model
        self.model = model
        self.device = loaded.device
        dtype = loaded.dtype
        self.dtype = dtype
        self.embed = layer_weight(model.lfm.embed_tokens)  # the tied token table: text input and text head
        self.text_sampling = DeviceSampling(self.device)
        self.audio_sampling = DeviceSampling(self.device)
        # Where the set-up's time goes (the benchmark's start-up sections): the kernels' waits and checks, the timings.
        self.setup_timings: dict[str, float] = {"sampling_s": time.perf_counter() - started}
        self.backbone = StaticBackbone(model.lfm, context_tokens)
        self.setup_timings["backbone_s"] = time.perf_counter() - started - sum(self.setup_timings.values())
        self.depthformer = StaticDepthformer(model, self.audio_sampling)
        self.setup_timings["depthformer_s"] = time.perf_counter() - started - sum(self.setup_timings.values())
        # The int8 text head: the backbone's int8 matrix-vector kernel (65,536 rows), when it runs there.
        matvec = self.backbone.matvec
        int8_head = isinstance(self.embed, Int8Matrix) and matvec is not None and matvec.supports(self.embed.shape[1], int8=True)
        self.text_product = matvec if int8_head and self.embed.is_aligned() else None
        hidden = self.backbone.hidden
        self.input = torch.zeros((1, hidden), device=self.device, dtype=dtype)  # next backbone input
        self.hidden = torch.zeros((1, hidden), device=self.device, dtype=dtype)  # last backbone output
        self.token = torch.zeros((1,), dtype=torch.long, device=self.device)
        self.frame = self.depthformer.frame
        on_cuda = self.device.type == "cuda"
        self.token_host = torch.zeros((1,), dtype=torch.long, pin_memory=on_cuda)
        self.frame_host = torch.zeros((self.frame.shape[0],), dtype=torch.long, pin_memory=on_cuda)
        self._token_view = self.token_host.numpy()
        self._frame_view = self.frame_host.numpy()
        self._ready = torch.cuda.Event() if on_cuda else None
        self._applied: SamplingSettings | None = None
        capturing = capture if capture is not None else on_cuda
        if prefill_buckets is None:
            prefill_buckets = PREFILL_BUCKETS if capturing else ()
        self.prefill_buckets = tuple(sorted(rows for rows in prefill_buckets if rows <= context_tokens))
        largest = self.prefill_buckets[-1] if self.prefill_buckets else 0
        self.prefill_input = torch.zeros((largest, hidden), device=self.device, dtype=dtype)
        self.steps = self._steps()  # every graph's eager twin, by graph name
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self.capture_seconds = 0.0
        self.setup_seconds = time.perf_counter() - started  # static buffers, fused kernels and their checks
        if capturing:
            self.capture()

    # ------------------------------------------------------------------ the steps

    def _decode(self) -> None:
        self.hidden.copy_(self.backbone.decode_step(self.input))

    def text_logits(self) -> torch.Tensor:
        """The text head's logits (vocab,) of the last backbone output: the tied token table's product."""
        table = self.embed
        if isinstance(table, Int8Matrix) and self.text_product is not None:
            return self.text_product(self.hidden, table)[0]
        return torch.mm(self.hidden, plain(table, self.dtype).t())[0]

    def feed_token(self, token: torch.Tensor) -> None:
        """Make text token (1,) the next backbone input."""
        self.input.copy_(lookup(token, self.embed, self.dtype))

    def feed_frame(self, codes: torch.Tensor) -> None:
        """Make an audio frame (codebooks,) the next backbone input."""
        self.input.copy_(self.depthformer.frame_embedding(codes))

    def _text_head(self) -> None:
        self.text_sampling.sample_beside(self.text_logits, out=self.token)
        self.feed_token(self.token)

    def _audio_head(self) -> None:
        self.input.copy_(self.depthformer.frame_step(self.hidden))

    def _prefill_padded(self, rows: int) -> None:
        """The first `backbone.span_length` of `prefill_input[:rows]` → `hidden` (last real row)."""
        backbone = self.backbone
        attention = prefill_attention(rows, backbone.flash_prefill)
        self.hidden.copy_(backbone.prefill_rows(self.prefill_input[:rows], keys=backbone.max_positions, attention=attention))

    def _steps(self) -> dict[str, Callable[[], None]]:
        steps: dict[str, Callable[[], None]] = {
            "decode": self._decode,
            "text_head": self._text_head,
            "audio_head": self._audio_head,
        }
        for rows in self.prefill_buckets:
            steps[f"prefill_{rows}"] = functools.partial(self._prefill_padded, rows)
        return steps

    # ------------------------------------------------------------------ capture

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every graph once; the cache is restored afterwards, so nothing is lost."""
        started = time.perf_counter()
        saved = self.snapshot()
        steps = self.steps

        def run_every_step() -> None:
            for _ in range(3):  # warm up: cuBLAS handles, workspace, lazy module loading
                for name, step in steps.items():
                    self.stage_standalone_run(name)
                    step()

        graphs.warm_up(self.device, run_every_step)
        self.graph_pool = torch.cuda.graph_pool_handle()  # one pool: the steps never run at the same time
        for name, step in steps.items():
            self.graphs[name], _ = graphs.capture(step, pool=self.graph_pool)
        self.restore(saved)
        torch.cuda.synchronize(self.device)
        self.capture_seconds = time.perf_counter() - started

    @torch.inference_mode()
    def fit_depthformer_grid(self, beside: Callable[[], None], frames: int = 4) -> None:
        """Choose the depthformer kernel's grid as a turn runs it: per candidate grid (the audio head
        captured with it), `frames` times the backbone step's graph, then `beside` (the streaming decoder's
        work for a frame: PipelinedDecoder.timing_step, a group's step at every group's first frame) on a
        side stream together with the audio head's graph, timed on the main stream. A graph keeps the
        launch settings it was captured with, so the audio head is captured once per candidate (~0.15 s
        in all). H200: alone, 132 and 66 blocks time within 2 % of each other, but with the decoder
        beside them a turn took 3.31 / 3.19 ms per frame (bench/results/run-33-frame-probes/4-grid-fitted-as-in-a-turn).
        The conversation's state is left as it was."""
        depthformer, fused = self.depthformer, self.depthformer.fused
        if fused is None or "audio_head" not in self.graphs or "decode" not in self.graphs:
            return
        saved = self.snapshot()
        main = torch.cuda.current_stream(self.device)
        side = graphs.side_stream(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        timings: dict[int, float] = {}
        captured: dict[int, torch.cuda.CUDAGraph] = {fused.blocks: self.graphs.pop("audio_head")}
        for blocks in depthformer.grid_candidates():
            fused.blocks = blocks
            if blocks not in captured:
                captured[blocks], _ = graphs.capture(self.steps["audio_head"], pool=self.graph_pool)
            audio_head = captured[blocks]
            for repeat in range(2):  # the first round warms up
                start.record(main)
                for _ in range(frames):
                    self.backbone.position.zero_()
                    self.graphs["decode"].replay()
                    side.wait_stream(main)
                    with torch.cuda.stream(side):
                        beside()
                    audio_head.replay()
                main.wait_stream(side)
                end.record(main)
                end.synchronize()
            timings[blocks] = start.elapsed_time(end) / frames
        fused.blocks = min(timings, key=timings.__getitem__)
        self.graphs["audio_head"] = captured.pop(fused.blocks)
        captured.clear()
        depthformer.grid_timings_ms["backbone_step_and_frame_beside_the_decoder"] = timings
        self.restore(saved)

    def stage_standalone_run(self, name: str) -> None:
        """Set up a run of one step outside a turn (warm-up, profiling) so that all its writes land
        inside the cache: from position 0, a prefill over all of its rows. The caller restores the state."""
        self.backbone.position.zero_()
        if name.startswith("prefill_"):
            self.backbone.span_length.fill_(int(name.removeprefix("prefill_")))

    def _run(self, name: str) -> None:
        graph = self.graphs.get(name)
        if graph is not None:
            graph.replay()
        else:
            self.steps[name]()

    # ------------------------------------------------------------------ StepBackend

    def _apply(self, sampling: SamplingSettings) -> None:
        if sampling == self._applied:
            return
        self.text_sampling.set(greedy=sampling.greedy, temperature=sampling.text_temperature, top_k=sampling.text_top_k)
        self.audio_sampling.set(greedy=sampling.greedy, temperature=sampling.audio_temperature, top_k=sampling.audio_top_k)
        self._applied = sampling

    @property
    def positions(self) -> int:
        """How many positions the cache holds: the backbone's count, its one owner (it keeps the device
        copy, `backbone.position`, in step)."""
        return self.backbone.positions

    @positions.setter
    def positions(self, value: int) -> None:
        self.backbone.positions = value

    def state_tensors(self) -> list[torch.Tensor]:
        """The backbone's cache, then the next input and the last output (the `StreamingState` protocol)."""
        return [*self.backbone.state_tensors(), self.input, self.hidden]

    def reset(self) -> None:
        self.backbone.reset()

    @torch.inference_mode()
    def prefill(self, embeddings: torch.Tensor) -> None:
        """Positions [positions, positions + n) from embeddings (1, n, hidden): in padded chunks through
        the prefill graphs where they fit in the context, eagerly otherwise."""
        x = embeddings[0].to(self.input.dtype)
        backbone = self.backbone
        if backbone.positions + x.shape[0] > backbone.max_positions:  # before any chunk is written
            raise ValueError(f"the context holds {backbone.max_positions} positions; {backbone.positions + x.shape[0]} were asked for")
        done = 0
        while done < x.shape[0]:
            rows = min(x.shape[0] - done, self.prefill_buckets[-1]) if self.prefill_buckets else 0
            bucket = next(
                (b for b in self.prefill_buckets if b >= rows and backbone.positions + b <= backbone.max_positions),
                None,
            )
            if bucket is None:  # no buckets (CPU), or too near the end of the context for padding
                self.hidden.copy_(backbone.prefill(x[done:]))
                break
            self.prefill_input[:rows].copy_(x[done : done + rows])
            self.prefill_input[rows:bucket].zero_()
            backbone.span_length.fill_(rows)
            self._run(f"prefill_{bucket}")
            backbone.positions += rows
            done += rows

    @torch.inference_mode()
    def decode(self) -> None:
        self._run("decode")
        self.backbone.positions += 1

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
