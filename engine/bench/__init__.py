"""`voicechat bench`: eager vs recipe vs engine, side by side, in one run, on the full-size model.

Workload (all modes): the interleave schedule read from the config (6:9 for -JP); turn 1 is 20
system text tokens + 4 s of user audio; each turn generates 12 interleaved blocks (108 frames) with
the stop tokens suppressed, so every mode produces exactly the same number of frames; five turns
(time to first audio is reported for turns 1 and 5); audio and text sampled with top_k=4,
temperature 1.0, and again greedy.

Modes:
- eager: liquid-audio's `generate_interleaved`, unchanged (re-prefills the whole history each turn);
- recipe: the published method (engine.bench.recipe): liquid-audio's loop with the depthformer frame
  and the backbone step over transformers' StaticCache captured as CUDA graphs;
- engine: this product's ChatSession (static cache across turns, three captured step graphs, the
  streaming decoder graph on a side stream).
eager and recipe decode each frame with liquid-audio's detokenizer as it arrives (one call per
frame, as a streaming app built on them would); the engine streams with its decoder graph.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.files import write_atomically
from engine.protocol import SamplingSettings

FRAME_SECONDS = 0.08
SYSTEM_TOKENS = 20
USER_SECONDS = 4.0
BLOCKS = 12
TURNS = 5
CONTEXT = 4096


@dataclass
class Workload:
    system_ids: list[int]
    takes: list[np.ndarray]  # 16 kHz float32
    n_text: int
    n_audio: int

    @property
    def max_new_tokens(self) -> int:
        return BLOCKS * (self.n_text + self.n_audio)

    @property
    def frames(self) -> int:
        return BLOCKS * self.n_audio


def _sync() -> None:
    torch.cuda.synchronize()


def _median_ms(fn, *, repeats: int = 30, inner: int = 10) -> float:
    """Median over `repeats` of the mean time of `inner` back-to-back calls, timed with CUDA events."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def _memory_gb() -> dict[str, float]:
    return {"allocated": torch.cuda.memory_allocated() / 1e9, "reserved": torch.cuda.memory_reserved() / 1e9}


def _pools() -> dict[str, dict[str, float]]:
    """Reserved and allocated GB per caching-allocator pool: 'default', or one CUDA graph pool each."""
    summary: dict[str, dict[str, float]] = {}
    for segment in torch.cuda.memory_snapshot():
        pool = tuple(segment.get("segment_pool_id", (0, 0)))
        entry = summary.setdefault("default" if pool == (0, 0) else f"graph pool {pool}", {"reserved": 0.0, "allocated": 0.0})
        entry["reserved"] += segment["total_size"] / 1e9
        entry["allocated"] += segment["allocated_size"] / 1e9
    return summary


def _copy_bandwidth_gbs() -> float:
    """Achievable device memory bandwidth: a 2 GiB device-to-device copy, bytes read + written."""
    source = torch.empty(2**30, dtype=torch.bfloat16, device="cuda").normal_()
    target = torch.empty_like(source)
    ms = _median_ms(lambda: target.copy_(source), repeats=10, inner=5)
    return 2 * 2**31 / (ms / 1e3) / 1e9


def _bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def _stage_bytes(loaded) -> dict[str, int]:
    model = loaded.model
    backbone = _bytes(p for name, p in model.lfm.named_parameters() if not name.startswith("embed_tokens"))
    text_head = model.lfm.embed_tokens.weight.numel() * model.lfm.embed_tokens.weight.element_size()
    depth_stack = _bytes(model.depthformer.parameters())
    depth_heads = sum(e.to_logits.weight.numel() * e.to_logits.weight.element_size() for e in model.depth_embeddings)
    depth_linear = _bytes(model.depth_linear.parameters())
    detok = loaded.processor.audio_detokenizer
    decoder = _bytes(p for name, p in detok.named_parameters() if not name.startswith("emb.") and not name.startswith("lfm.embed_tokens"))
    return {
        "backbone_step": backbone,
        "text_head": text_head,
        "depthformer_frame": loaded.codebooks * depth_stack + depth_heads + depth_linear,
        "decoder_frame": decoder,
    }


def make_workload(loaded, seed: int = 0) -> Workload:
    generator = np.random.default_rng(seed)
    vocab = loaded.model.lfm.config.vocab_size
    system_ids = [int(x) for x in generator.integers(1000, vocab, SYSTEM_TOKENS)]
    takes = [(0.1 * generator.standard_normal(int(USER_SECONDS * 16000))).astype(np.float32) for _ in range(TURNS)]
    return Workload(system_ids, takes, loaded.interleaved_n_text, loaded.interleaved_n_audio)


def _new_conversation(loaded, workload: Workload):
    from engine.chat.conversation import Conversation, TextPiece, Turn

    conversation = Conversation(loaded.processor.text, codebooks=loaded.codebooks)
    conversation.turns.append(Turn("system", [TextPiece(workload.system_ids)]))
    return conversation


def _mel(loaded, wave: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(wave)[None].to(loaded.device)
    mel, _ = loaded.processor.audio(tensor, torch.tensor([tensor.shape[1]], device=loaded.device))
    return mel[0].float()


# --------------------------------------------------------------------------- eager and recipe


def _run_liquid_style(loaded, workload: Workload, sampling: SamplingSettings, generate) -> list[dict[str, float]]:
    """Turns through a liquid-audio-style generator (full re-prefill each turn), decoding every frame."""
    from engine.chat.conversation import AudioOutPiece, TextPiece

    processor = loaded.processor
    # One short untimed turn first, so process-wide lazy set-up (cuBLAS handles, cuDNN plans for
    # the conformer) is not billed to these modes; the engine pays it during its capture.
    warm = _new_conversation(loaded, workload)
    warm.add_audio_turn("user", _mel(loaded, workload.takes[0]))
    warm.open_assistant_turn()
    for token in generate(warm.span(0, loaded.device).as_kwargs(), 2 * (workload.n_text + workload.n_audio)):
        if token.numel() > 1:
            processor.decode(token[None, :, None])
    _sync()
    conversation = _new_conversation(loaded, workload)
    turns = []
    for wave in workload.takes:
        _sync()
        started = time.perf_counter()
        conversation.add_audio_turn("user", _mel(loaded, wave))
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
        _sync()
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
        "depthformer_frame": _median_ms(lambda: model._sample_audio_frame(hidden, temperature=audio_t, top_k=audio_k), repeats=10, inner=3),
        "decoder_frame": _median_ms(lambda: loaded.processor.decode(codes), repeats=10, inner=3),
    }
    if backbone is None:
        prompt = torch.randn(1, 100, model.lfm.config.hidden_size, device=loaded.device, dtype=loaded.dtype)
        cache = model.lfm(inputs_embeds=prompt, use_cache=True).cache
        step = prompt[:, :1]
        result["backbone_step"] = _median_ms(lambda: model.lfm(inputs_embeds=step, cache=cache, use_cache=True), repeats=10, inner=3)
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
            return _median_ms(recipe.backbone_graph.replay)

        components = _liquid_components(loaded, sampling, backbone=backbone)
        components["depthformer_frame"] = _median_ms(recipe.depth_graph.replay)
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


# --------------------------------------------------------------------------- engine


class EngineBench:
    """Built once: the graphs are captured a single time and reused for every sampling mode."""

    def __init__(self, loaded) -> None:
        from engine.chat.audio_decoding import make_audio_decoder
        from engine.realtime.backend import GraphedBackend
        from engine.chat.session import ChatSession, _encoder_graphs_or_none, fit_depthformer_to_decoder

        torch.cuda.reset_peak_memory_stats()
        memory = {"weights_loaded": _memory_gb()}
        started = time.perf_counter()
        self.backend = GraphedBackend(loaded, context_tokens=CONTEXT)
        _sync()
        backend_s = time.perf_counter() - started
        memory["step_and_prefill_graphs"] = _memory_gb()
        self.decoder = make_audio_decoder(loaded, use_cuda_graphs=True)
        fit_depthformer_to_decoder(self.backend, self.decoder)  # as ChatSession.open does
        _sync()
        self.capture_s = time.perf_counter() - started  # the step and prefill graphs, and the decoder's
        memory["decoder_graph"] = _memory_gb()
        self.encoder_graphs = _encoder_graphs_or_none(loaded)
        _sync()
        self.encoder_capture_s = time.perf_counter() - started - self.capture_s
        memory["encoder_graphs"] = _memory_gb()
        self.session = ChatSession(
            loaded, self.backend, self.decoder, context_tokens=CONTEXT, fallback_reason=None, graphs_ready=True,
            model_id=None, encoder_graphs=self.encoder_graphs,
        )
        warm_started = time.perf_counter()
        self.session.warm_up()  # as ChatSession.open does at start-up, after the capture
        _sync()
        memory["warm_up"] = _memory_gb()
        torch.cuda.empty_cache()  # as ChatSession.open does after the warm-up
        self.startup = {
            "startup_s": time.perf_counter() - started,
            "step_and_prefill_graphs_s": backend_s,
            "step_graphs_setup_s": self.backend.setup_seconds,  # of which: buffers, NVRTC kernels, their checks
            "step_graphs_capture_s": self.backend.capture_seconds,  # of which: warm-up runs and captures
            "decoder_graph_s": self.capture_s - backend_s,
            "encoder_graphs_s": self.encoder_capture_s,
            "warm_up_s": time.perf_counter() - warm_started,
            "encoder_rung_capture_s": {str(k): v for k, v in (self.encoder_graphs.capture_seconds if self.encoder_graphs else {}).items()},
            "memory_gb_after_each_phase": memory,
            "memory_gb_after_empty_cache": _memory_gb(),
            "pools_after_startup": _pools(),
            "peak_reserved_gb_during_startup": torch.cuda.max_memory_reserved() / 1e9,
            "peak_allocated_gb_during_startup": torch.cuda.max_memory_allocated() / 1e9,
            "depthformer_grid": {
                "blocks": self.backend.depthformer.fused.blocks if self.backend.depthformer.fused else None,
                "timings_ms": {way: {str(k): v for k, v in t.items()} for way, t in self.backend.depthformer.grid_timings_ms.items()},
            },
            # µs per decode product, the kernel against cuBLAS (or the separate SwiGLU), and those it won
            "matvec_timings_us": self.backend.backbone.matvec_timings_us,
            "matvec_products_chosen": sorted(str(shape) for shape in self.backend.backbone.matvec_shapes),
        }
        self._unseen = 0
        self.loaded = loaded

    def run(self, workload: Workload, sampling: SamplingSettings) -> dict[str, Any]:
        from engine.chat.session import TurnDone

        session = self.session
        session.reset()
        session.conversation = _new_conversation(self.loaded, workload)
        turns = []
        for wave in workload.takes:
            _sync()
            stats = None
            for output in session.respond(wave, sampling, max_new_tokens=workload.max_new_tokens, max_take_seconds=60):
                if isinstance(output, TurnDone):
                    stats = output.stats
            assert stats is not None and stats.frames == workload.frames, stats
            total = stats.prefill_done_s + stats.generation_s
            audio = stats.frames * FRAME_SECONDS
            turns.append(
                {
                    "frames": stats.frames,
                    "ttfa_ms": stats.first_pcm_s * 1e3,
                    "audio_encoded_ms": stats.audio_encoded_s * 1e3,
                    "prefill_done_ms": stats.prefill_done_s * 1e3,
                    "first_text_ms": stats.first_text_s * 1e3,
                    "first_audio_frame_ms": stats.first_audio_frame_s * 1e3,
                    "total_s": total,
                    "rtf": total / audio,
                    "rtf_after_prefill": stats.generation_s / audio,
                    "ms_per_frame": total / stats.frames * 1e3,
                    "context_positions": session.context_used,
                }
            )
        try:
            unseen = self.unseen_lengths_ttfa(workload, sampling)
        except Exception as error:  # an extra measurement must not lose the main numbers
            unseen = {"error": f"{type(error).__name__}: {error}"}
        return {
            "turns": turns,
            "ttfa_unseen_take_lengths": unseen,
            "prefill_breakdown_ms": self.prefill_breakdown(workload),
            "components_ms": self.components(),
            "capture_s": self.capture_s + self.encoder_capture_s,  # everything captured at start-up
            "startup": self.startup,
            "step_graphs_capture_s": self.capture_s,
            "encoder_graphs": {
                "capture_s": self.encoder_capture_s,
                "rungs": sorted(self.encoder_graphs.rungs) if self.encoder_graphs else [],
                "problems": self.encoder_graphs.problems if self.encoder_graphs else ["not captured (see the log)"],
            },
            "peak_vram_gb": torch.cuda.max_memory_allocated() / 1e9,
            "peak_reserved_gb": torch.cuda.max_memory_reserved() / 1e9,
        }

    def long_conversation(self, workload: Workload, sampling: SamplingSettings, turns: int) -> dict[str, Any]:
        """`turns` turns through the app's own ChatSession at the 4096-token context: takes of 0.6 to 60 s
        (mostly short, some past the 20 s of ordinary speech, some at the 60 s limit), 108-frame answers,
        so the context fills and trims many times. Starts from a freshly opened session's state (the
        allocator emptied, as ChatSession.open leaves it); peak memory is over these turns only."""
        from engine.chat.session import ContextTrimmedInfo, TurnDone

        session = self.session
        session.reset()
        session.conversation = _new_conversation(self.loaded, workload)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rng = np.random.default_rng(16)
        long_takes = {5: 25.0, 11: 45.0, 17: 59.0, 23: 60.0, 29: 33.0, 35: 52.0, 41: 60.0, 46: 21.0}
        records = []
        for index in range(turns):
            seconds = long_takes.get(index, float(rng.uniform(0.6, 17.5)))
            wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
            _sync()
            stats, in_turn, seen_output = None, 0, False
            for output in session.respond(wave, sampling, max_new_tokens=workload.max_new_tokens, max_take_seconds=60):
                if isinstance(output, TurnDone):
                    stats = output.stats
                elif isinstance(output, ContextTrimmedInfo) and not seen_output:
                    in_turn += output.dropped_turns  # before the prefill: its rebuild is in this turn's TTFA
                else:
                    seen_output = True
            assert stats is not None and stats.frames == workload.frames, stats
            audio = stats.frames * FRAME_SECONDS
            records.append(
                {
                    "turn": index + 1,
                    "take_s": seconds,
                    "ttfa_ms": stats.first_pcm_s * 1e3,
                    "trimmed": in_turn > 0 or stats.trimmed_ahead_turns > 0,
                    "trimmed_in_turn_turns": in_turn,
                    "trimmed_after_answer_turns": stats.trimmed_ahead_turns,
                    "trim_after_answer_ms": stats.trim_ahead_s * 1e3,
                    "audio_encoded_ms": stats.audio_encoded_s * 1e3,
                    "prefill_done_ms": stats.prefill_done_s * 1e3,
                    "first_text_ms": stats.first_text_s * 1e3,
                    "first_audio_frame_ms": stats.first_audio_frame_s * 1e3,
                    "rtf": (stats.prefill_done_s + stats.generation_s) / audio,
                    "context_positions": session.context_used,
                    "encoder_graph": self._encoder_rung_for(len(wave)) is not None,
                    "reserved_gb": torch.cuda.memory_reserved() / 1e9,
                    "allocated_gb": torch.cuda.memory_allocated() / 1e9,
                }
            )
        session.reset()
        ttfa = [r["ttfa_ms"] for r in records]
        return {
            "context_tokens": CONTEXT,
            "answer_frames": workload.frames,
            "turns": records,
            "ttfa_ms_max": max(ttfa),
            "ttfa_ms_median": statistics.median(ttfa),
            "turns_over_25_ms": [r["turn"] for r in records if r["ttfa_ms"] > 25.0],
            "turns_trimmed": sum(r["trimmed"] for r in records),
            "turns_trimmed_in_turn": sum(r["trimmed_in_turn_turns"] > 0 for r in records),
            "rtf_median": statistics.median(r["rtf"] for r in records),
            "peak_reserved_gb": torch.cuda.max_memory_reserved() / 1e9,
            "peak_allocated_gb": torch.cuda.max_memory_allocated() / 1e9,
            "takes_encoded_eagerly": sum(not r["encoder_graph"] for r in records),
        }

    def _encoder_rung_for(self, samples: int) -> int | None:
        frames = samples // 160 + 1  # the preprocessor's 10 ms hop, centred
        rungs = self.encoder_graphs.rungs if self.encoder_graphs else {}
        return next((rung for rung in sorted(rungs) if rung >= frames), None)

    def unseen_lengths_ttfa(self, workload: Workload, sampling: SamplingSettings) -> dict[str, Any]:
        """Time to first audio for takes whose lengths this process has not encoded before.

        The main workload repeats one 4 s take, so from turn 2 on its shapes are familiar; in real use
        every take has its own length, and the eager encoder and prefill meet new shapes each turn.
        """
        from engine.chat.session import TurnDone

        session = self.session
        session.reset()
        session.conversation = _new_conversation(self.loaded, workload)
        lengths, ttfa = [], []
        for _ in range(4):
            self._unseen += 1
            seconds = 2.0 + 0.37 * self._unseen  # a new length on every call, in both sampling modes
            wave = np.resize(workload.takes[0], int(seconds * 16000))
            _sync()
            budget = workload.n_text + 2  # through the first audio frame
            for output in session.respond(wave, sampling, max_new_tokens=budget, max_take_seconds=60):
                if isinstance(output, TurnDone) and output.stats.first_pcm_s is not None:
                    lengths.append(seconds)
                    ttfa.append(output.stats.first_pcm_s * 1e3)
        session.reset()
        return {"take_seconds": lengths, "ttfa_ms": ttfa, "median_ms": statistics.median(ttfa) if ttfa else None}

    @torch.inference_mode()
    def prefill_breakdown(self, workload: Workload) -> dict[str, float]:
        """Where the time before the first decode step goes, for one 4 s take (medians of 5), as a turn
        spends it: the take to its features and rows (the encoder graphs), the span's rows laid out,
        the backbone prefill."""
        loaded = self.loaded
        session = self.session
        wave = workload.takes[0]
        timings: dict[str, list[float]] = {"take_to_rows": [], "span_assembly": [], "backbone_prefill": []}
        for _ in range(5):
            conversation = _new_conversation(loaded, workload)
            _sync()
            t0 = time.perf_counter()
            mel, rows = session.encode_take(wave)
            _sync()
            t1 = time.perf_counter()
            conversation.add_audio_turn("user", mel, rows)
            conversation.open_assistant_turn()
            kept, session.conversation = session.conversation, conversation
            try:
                embeddings = session.embed_from(0)
            finally:
                session.conversation = kept
            _sync()
            t2 = time.perf_counter()
            backend = self.backend
            saved, hidden, positions = backend.backbone.snapshot(), backend.hidden.clone(), backend.positions
            backend.backbone.position.zero_()
            backend.positions = backend.backbone.positions = 0
            backend.prefill(embeddings)  # through the prefill graphs, as in a turn
            _sync()
            t3 = time.perf_counter()
            backend.backbone.restore(saved)
            backend.hidden.copy_(hidden)
            backend.positions = backend.backbone.positions = positions
            for key, value in zip(timings, (t1 - t0, t2 - t1, t3 - t2)):
                value_ms = value * 1e3
                timings[key].append(value_ms)
        result = {key: statistics.median(values) for key, values in timings.items()}
        result["prefill_positions"] = float(embeddings.shape[1])
        return result

    @torch.inference_mode()
    def kernel_profile(self) -> dict[str, Any]:
        """The kernels of one replay of each captured graph, with their device time, by kernel name.

        Run once, after every timed turn: an active profiler slows the host's launches (measured:
        eager encode + prefill took twice as long in the turns that followed a profile).
        """
        from collections import defaultdict

        from torch.profiler import ProfilerActivity, profile

        backend = self.backend
        saved = backend.backbone.snapshot()
        report: dict[str, Any] = {}
        repeats = 3
        for name, graph in backend.graphs.items():
            backend.stage_standalone_run(name)
            graph.replay()
            _sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(repeats):
                    backend.stage_standalone_run(name)
                    graph.replay()
                _sync()
            per_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
            events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            for event in events:
                entry = per_name[event.name[:100]]
                entry[0] += 1
                entry[1] += event.time_range.elapsed_us()
            ranked = sorted(per_name.items(), key=lambda item: -item[1][1])
            span = (max(e.time_range.end for e in events) - min(e.time_range.start for e in events)) if events else 0
            report[name] = {
                "kernels": sum(count for count, _ in per_name.values()) / repeats,
                "kernel_time_us": sum(us for _, us in per_name.values()) / repeats,
                "replay_span_us": span / repeats,
                "top_by_time": [[kernel, count / repeats, round(us / repeats, 1)] for kernel, (count, us) in ranked[:12]],
            }
        backend.backbone.restore(saved)
        decoder = self.decoder.decoder
        graph = getattr(decoder, "_graph", None)
        if graph is not None:
            decoder.reset()
            graph.replay()
            _sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(repeats):
                    graph.replay()
                _sync()
            events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            report["decoder_frame"] = {
                "kernels": len(events) / repeats,
                "kernel_time_us": sum(e.time_range.elapsed_us() for e in events) / repeats,
                "replay_span_us": 0.0,
                "top_by_time": [],
            }
            decoder.reset()
        return report

    @torch.inference_mode()
    def components(self) -> dict[str, float]:
        backend = self.backend
        saved = backend.backbone.snapshot()
        backbone = _median_ms(backend.graphs["decode"].replay)
        backend.backbone.restore(saved)
        decoder = self.decoder.decoder
        decoder.reset()
        decoder_ms = _median_ms(decoder._graph.replay, repeats=20, inner=5)
        decoder.reset()
        return {
            "backbone_step": backbone,
            "text_head": _median_ms(backend.graphs["text_head"].replay),
            "depthformer_frame": _median_ms(backend.graphs["audio_head"].replay),
            "decoder_frame": decoder_ms,
        }


# --------------------------------------------------------------------------- other GPUs (estimate)

# Published memory bandwidth (GB/s) and VRAM (GB) of the cards users of this app have.
CARDS: dict[str, tuple[float, float]] = {
    "RTX 3060 12GB": (360.0, 12.0),
    "RTX 4060": (272.0, 8.0),
    "RTX 4070 Ti SUPER": (672.0, 16.0),
    "RTX 4090": (1008.0, 24.0),
    "RTX 5090": (1792.0, 32.0),
}
H200_PUBLISHED_GBS = 4800.0
_STAGE_GRAPHS = {"backbone_step": "decode", "text_head": "text_head", "depthformer_frame": "audio_head", "decoder_frame": "decoder_frame"}


def estimate_cards(results: dict[str, Any], sampling_label: str) -> dict[str, Any]:
    """ESTIMATE, not a measurement: each stage on another card from what this run measured.

    Per stage (one graph replay): time = bytes / bandwidth + kernels × per-kernel cost. The H200 run gives
    the stage's bytes, its kernel count, and (measured time − bytes at the measured copy bandwidth) /
    kernels as the per-kernel cost, which is kept for every card (batch-1 kernels are latency-bound,
    and the recipe's depthformer frame measured 6.07 ms here against 5.7-6.2 ms published on a 4070 Ti
    SUPER). Each card gets the H200's achieved share of its published bandwidth. Per frame: the 6:9
    block's steps, the H200's measured host/overlap overhead per frame, and the decoder's bytes (it runs
    beside the steps and shares the memory). First audio: the H200's turn-1 value plus each card's
    extra bytes time for one prefill read of the backbone, the six text steps, one frame and one decoder
    call. Not modelled: L2 size (the depthformer's 135 MB stack re-read per codebook may hit a 72-96 MB L2
    on the 4090/5090: faster there), clocks, Windows' driver model.
    """
    engine = results["summary"][sampling_label]["engine"]
    kernels = results.get("engine_kernels", {})
    measured_gbs = results["copy_bandwidth_gbs"]
    share = measured_gbs / H200_PUBLISHED_GBS
    n_text, n_audio = (int(x) for x in results["workload"]["schedule"].split(":"))
    stages: dict[str, dict[str, float]] = {}
    for stage, graph in _STAGE_GRAPHS.items():
        count = float(kernels.get(graph, {}).get("kernels", 0.0))
        measured = float(engine[f"{stage}_ms"])
        floor = results["stage_bytes"][stage] / (measured_gbs * 1e9) * 1e3
        stages[stage] = {
            "bytes": results["stage_bytes"][stage],
            "kernels": count,
            "h200_ms": measured,
            "per_kernel_us": max(0.0, (measured - floor) * 1e3 / count) if count else 0.0,
        }

    def stage_ms(stage: str, gbs: float) -> float:
        data = stages[stage]
        return data["bytes"] / (gbs * 1e9) * 1e3 + data["kernels"] * data["per_kernel_us"] / 1e3

    def block_ms(gbs: float) -> float:
        return n_text * (stage_ms("backbone_step", gbs) + stage_ms("text_head", gbs)) + n_audio * (
            stage_ms("backbone_step", gbs) + stage_ms("depthformer_frame", gbs)
        )

    h200_gbs = measured_gbs
    overhead = engine["ms_per_frame"] - block_ms(h200_gbs) / n_audio  # host loop, prefill share, side stream
    backbone_bytes = results["stage_bytes"]["backbone_step"]
    ttfa_bytes = backbone_bytes + n_text * (backbone_bytes + results["stage_bytes"]["text_head"]) + (
        results["stage_bytes"]["depthformer_frame"] + results["stage_bytes"]["decoder_frame"]
    )
    floor_block_bytes = n_text * (backbone_bytes + results["stage_bytes"]["text_head"]) + n_audio * (
        backbone_bytes + results["stage_bytes"]["depthformer_frame"] + results["stage_bytes"]["decoder_frame"]
    )
    cards = {}
    for card, (published, vram) in CARDS.items():
        gbs = published * share
        frame = block_ms(gbs) / n_audio + overhead + results["stage_bytes"]["decoder_frame"] / (gbs * 1e9) * 1e3
        cards[card] = {
            "published_bandwidth_gbs": published,
            "assumed_bandwidth_gbs": gbs,
            "vram_gb": vram,
            "backbone_step_ms": stage_ms("backbone_step", gbs),
            "depthformer_frame_ms": stage_ms("depthformer_frame", gbs),
            "ms_per_frame": frame,
            "rtf": frame / (FRAME_SECONDS * 1e3),
            "ttfa_ms": engine["ttfa_turn1_ms"] + ttfa_bytes * (1 / gbs - 1 / h200_gbs) / 1e9 * 1e3,
            "rtf_bandwidth_floor": floor_block_bytes / (gbs * 1e9) * 1e3 / n_audio / (FRAME_SECONDS * 1e3),
        }
    return {"label": "ESTIMATE from the H200 run's bytes and kernel counts, not a measurement", "stages": stages, "cards": cards}


# --------------------------------------------------------------------------- report


def _environment() -> dict[str, Any]:
    import transformers

    commit = os.environ.get("VOICECHAT_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    driver = "unknown"
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def _summary(mode: dict[str, Any]) -> dict[str, float]:
    turns = mode["turns"]
    key = "rtf"
    return {
        "ms_per_frame": statistics.median(t["ms_per_frame"] for t in turns),
        "rtf": statistics.median(t[key] for t in turns),
        "ttfa_turn1_ms": turns[0]["ttfa_ms"],
        "ttfa_turn5_ms": turns[-1]["ttfa_ms"],
        **(
            {"ttfa_unseen_lengths_ms": mode["ttfa_unseen_take_lengths"]["median_ms"]}
            if (mode.get("ttfa_unseen_take_lengths") or {}).get("median_ms") is not None
            else {}
        ),
        **{f"{k}_ms": v for k, v in mode["components_ms"].items()},
        "capture_s": mode["capture_s"],
        "peak_vram_gb": mode["peak_vram_gb"],
    }


def _markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    floors = results["floors_ms"]
    lines = [
        "# Benchmark: eager vs recipe vs engine",
        "",
        f"GPU {env['gpu']} (driver {env['driver']}, CUDA {env['cuda']}), torch {env['torch']}, "
        f"transformers {env['transformers']}, Python {env['python']}, commit `{env['commit'][:12]}`, {env['date']}.",
        f"Full-size random weights from the reference config; schedule {results['workload']['schedule']}; "
        f"turn 1 = {SYSTEM_TOKENS} system tokens + {USER_SECONDS:g} s of audio; {BLOCKS} blocks = "
        f"{results['workload']['frames']} frames per turn, {TURNS} turns; stop tokens suppressed; context {CONTEXT}.",
        f"Measured copy bandwidth {results['copy_bandwidth_gbs']:.0f} GB/s (read + write).",
        "",
    ]
    if results.get("modes_not_run_yet"):
        lines += [f"**Partial results**: written before these modes ran: {', '.join(results['modes_not_run_yet'])}.", ""]
    columns = [
        ("ms/frame", "ms_per_frame", "{:.2f}"), ("RTF (incl. decoding)", "rtf", "{:.3f}"),
        ("backbone step ms", "backbone_step_ms", "{:.3f}"), ("depthformer frame ms", "depthformer_frame_ms", "{:.3f}"),
        ("decoder frame ms", "decoder_frame_ms", "{:.3f}"), ("TTFA turn 1 ms", "ttfa_turn1_ms", "{:.1f}"),
        ("TTFA turn 5 ms", "ttfa_turn5_ms", "{:.1f}"), ("TTFA new take lengths ms (median)", "ttfa_unseen_lengths_ms", "{:.1f}"),
        ("capture s", "capture_s", "{:.2f}"), ("peak VRAM GB", "peak_vram_gb", "{:.2f}"),
    ]
    for sampling, modes in results["summary"].items():
        lines += [f"## {sampling}", "", "| mode | " + " | ".join(c[0] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for mode in sorted(modes, key=("eager", "recipe", "engine").index):  # baselines first, whatever the run order
            summary = modes[mode]
            cells = [fmt.format(summary[key]) if key in summary else "n/a" for _, key, fmt in columns]
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
        lines.append(
            "| bandwidth floor | {:.2f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | | | | | |".format(
                floors["frame"], floors["rtf"], floors["backbone_step"], floors["depthformer_frame"], floors["decoder_frame"]
            )
        )
        lines.append("")
    kernels = results.get("engine_kernels")
    if kernels:
        lines += [
            "## Engine: kernels per graph replay",
            "",
            "| graph | kernels | sum of kernel times µs | replay span µs | largest items (count, µs) |",
            "|---|---|---|---|---|",
        ]
        for name, data in kernels.items():
            largest = "; ".join(f"{kernel[:48]} ({count:g}, {us:.0f})" for kernel, count, us in data["top_by_time"][:4])
            lines.append(
                f"| {name} | {data['kernels']:.0f} | {data['kernel_time_us']:.0f} | {data['replay_span_us']:.0f} | {largest} |"
            )
        lines.append("")
    long = results.get("long_conversation")
    if long and "turns" in long:
        lines += [
            f"## Long conversation ({len(long['turns'])} turns, context {long['context_tokens']}, sampled)",
            "",
            f"TTFA max {long['ttfa_ms_max']:.1f} ms, median {long['ttfa_ms_median']:.1f} ms; turns over 25 ms: "
            f"{long['turns_over_25_ms'] or 'none'}; turns that trimmed: {long['turns_trimmed']} "
            f"({long['turns_trimmed_in_turn']} before their answer); takes encoded eagerly: {long['takes_encoded_eagerly']}; "
            f"RTF median {long['rtf_median']:.4f}; peak reserved {long['peak_reserved_gb']:.2f} GB, "
            f"peak allocated {long['peak_allocated_gb']:.2f} GB.",
            "",
            "| turn | take s | TTFA ms | encoded ms | prefill done ms | trimmed (in turn / after answer) | trim after answer ms | positions | reserved GB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in long["turns"]:
            lines.append(
                f"| {r['turn']} | {r['take_s']:.1f} | {r['ttfa_ms']:.1f} | {r['audio_encoded_ms']:.1f} | {r['prefill_done_ms']:.1f} | "
                f"{r['trimmed_in_turn_turns']} / {r['trimmed_after_answer_turns']} | {r['trim_after_answer_ms']:.1f} | "
                f"{r['context_positions']} | {r['reserved_gb']:.2f} |"
            )
        lines.append("")
    startup = results.get("engine_startup")
    if startup:
        lines += [
            "## Engine start-up",
            "",
            "| all | step + prefill graphs | decoder graph | encoder graphs | warm-up turn | peak reserved | reserved after |",
            "|---|---|---|---|---|---|---|",
            f"| {startup['startup_s']:.2f} s | {startup['step_and_prefill_graphs_s']:.2f} s | {startup['decoder_graph_s']:.2f} s | "
            f"{startup['encoder_graphs_s']:.2f} s | {startup['warm_up_s']:.2f} s | {startup['peak_reserved_gb_during_startup']:.2f} GB | "
            f"{startup['memory_gb_after_empty_cache']['reserved']:.2f} GB |",
            "",
        ]
    estimate = results.get("card_estimates")
    if estimate:
        lines += [
            f"## Other GPUs: {estimate['label']}",
            "",
            "| card | bandwidth GB/s (published) | backbone step ms | depthformer frame ms | ms/frame | RTF | RTF floor | TTFA ms | VRAM GB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for card, e in estimate["cards"].items():
            lines.append(
                f"| {card} | {e['published_bandwidth_gbs']:.0f} | {e['backbone_step_ms']:.2f} | {e['depthformer_frame_ms']:.2f} | "
                f"{e['ms_per_frame']:.2f} | {e['rtf']:.3f} | {e['rtf_bandwidth_floor']:.3f} | {e['ttfa_ms']:.0f} | {e['vram_gb']:.0f} |"
            )
        lines.append("")
    lines += ["## Notes", "", *results.get("notes", [])]
    return "\n".join(lines) + "\n"


def run_bench(args: argparse.Namespace) -> int:
    from engine.bench.random_model import random_full_size_model
    from engine.tools.reply import quiet_library_logs

    quiet_library_logs()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - {"eager", "recipe", "engine"})
    if unknown or not modes:
        print(f"error: unknown benchmark mode(s) {', '.join(unknown) or '(none given)'}; choose from engine, recipe, eager")
        return 2
    if not torch.cuda.is_available():
        print("error: the benchmark needs a CUDA GPU")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    from engine.model.loading import use_expandable_cuda_segments

    expandable_segments = use_expandable_cuda_segments()  # as ChatSession.open does, before any weight
    from engine.realtime.kernels import compile_in_background

    compile_in_background(torch.device("cuda"))  # as ChatSession.open does: while the weights load
    if args.model:
        from engine.model.loading import load_model
        from engine.bench.random_model import suppress_stop_tokens

        loaded = load_model(args.model, device="cuda")
        suppress_stop_tokens(loaded.model)
    else:
        loaded = random_full_size_model()
    workload = make_workload(loaded)
    bandwidth = _copy_bandwidth_gbs()
    stage_bytes = _stage_bytes(loaded)
    floors = {k: v / (bandwidth * 1e9) * 1e3 for k, v in stage_bytes.items()}
    n_text, n_audio = workload.n_text, workload.n_audio
    block = n_text * (floors["backbone_step"] + floors["text_head"]) + n_audio * (
        floors["backbone_step"] + floors["depthformer_frame"] + floors["decoder_frame"]
    )
    floors["frame"] = block / n_audio
    floors["rtf"] = block / (n_audio * FRAME_SECONDS * 1e3)
    results: dict[str, Any] = {
        "environment": _environment(),
        "workload": {"schedule": f"{n_text}:{n_audio}", "frames": workload.frames, "turns": TURNS, "max_new_tokens": workload.max_new_tokens},
        "copy_bandwidth_gbs": bandwidth,
        "allocator": {"expandable_segments": expandable_segments},
        "stage_bytes": stage_bytes,
        "floors_ms": floors,
        "modes": {},
        "summary": {},
        "notes": [],
    }
    samplings = {
        "sampled (top_k=4, temperature 1.0)": SamplingSettings(False, 1.0, 4, 1.0, 4),
        "greedy": SamplingSettings(greedy=True),
    }
    engine = EngineBench(loaded) if "engine" in modes else None
    for label in samplings:
        results["modes"][label] = {}
    out = Path(args.out)
    # Mode by mode, both samplings each: the engine (first, as in the app's own process) is then
    # measured before any baseline has run, and no mode's leftovers land between another mode's runs.
    for done, mode in enumerate(modes):
        for label, sampling in samplings.items():
            print(f"[bench] {label}: {mode}", flush=True)
            try:
                if mode == "engine":
                    data = engine.run(workload, sampling)
                elif mode == "recipe":
                    data = run_recipe(loaded, workload, sampling)
                else:
                    data = run_eager(loaded, workload, sampling)
            except Exception as error:  # one broken mode must not lose the others' numbers
                import traceback

                traceback.print_exc()
                results["notes"].append(f"{mode} ({label}) failed: {type(error).__name__}: {error}")
                torch.cuda.synchronize()
                continue
            results["modes"][label][mode] = data
            print(json.dumps(_summary(data)), flush=True)
        if mode == "engine" and engine is not None:
            results["engine_startup"] = engine.startup
            if getattr(args, "long_turns", 0):
                print(f"[bench] long conversation: {args.long_turns} turns", flush=True)
                try:
                    long = engine.long_conversation(workload, next(iter(samplings.values())), args.long_turns)
                except Exception as error:
                    import traceback

                    traceback.print_exc()
                    long = {"error": f"{type(error).__name__}: {error}"}
                results["long_conversation"] = long
                print(json.dumps({k: v for k, v in long.items() if k != "turns"}), flush=True)
        results["modes_not_run_yet"] = modes[done + 1 :]
        _write_results(results, out)  # after every mode: what a call cut short by a time limit measured is kept
    if engine is not None:
        # Last: a profiler can leave its hooks behind, which would slow the baselines' launches.
        results["engine_kernels"] = engine.kernel_profile()
        results["summary"] = _summaries(results)
        first = next(iter(samplings))
        if "engine" in results["summary"].get(first, {}):
            results["card_estimates"] = estimate_cards(results, first)
    recipe_error = next(
        (d.get("backbone_capture_error") for m in results["modes"].values() for d in m.values() if d.get("backbone_capture_error")), None
    )
    if recipe_error:
        results["notes"].append(f"recipe: the backbone graph over StaticCache could not be captured ({recipe_error}); it ran eagerly.")
    _write_results(results, out)
    print(_markdown(results))
    return 0


def _summaries(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    return {label: {mode: _summary(data) for mode, data in runs.items()} for label, runs in results["modes"].items()}


def _write_results(results: dict[str, Any], out: Path) -> None:
    """bench.json and bench.md in `out`, the summary rebuilt from the modes measured so far."""
    results["summary"] = _summaries(results)
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / "bench.json", json.dumps(results, indent=2).encode())
    write_atomically(out / "bench.md", _markdown(results).encode())
