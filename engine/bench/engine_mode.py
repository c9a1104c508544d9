"""The engine mode: this product's ChatSession (static cache across turns, the captured step graphs, the
streaming decoder graph on a side stream), built once as ChatSession.open builds it, its start-up timed
phase by phase, then measured turn by turn, stage by stage and kernel by kernel."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from engine.bench.workload import CONTEXT, FRAME_SECONDS, Workload, median_ms, memory_gb, new_conversation, pools, sync
from engine.protocol import SamplingSettings


class EngineBench:
    """Built once: the graphs are captured a single time and reused for every sampling mode."""

    def __init__(self, loaded) -> None:
        from engine.chat.audio_decoding import make_audio_decoder
        from engine.realtime.backend import GraphedBackend
        from engine.chat.session import ChatSession, _encoder_graphs_or_none, fit_depthformer_to_decoder

        torch.cuda.reset_peak_memory_stats()
        memory = {"weights_loaded": memory_gb()}
        started = time.perf_counter()
        self.backend = GraphedBackend(loaded, context_tokens=CONTEXT)
        sync()
        backend_s = time.perf_counter() - started
        memory["step_and_prefill_graphs"] = memory_gb()
        self.decoder = make_audio_decoder(loaded, use_cuda_graphs=True)
        fit_depthformer_to_decoder(self.backend, self.decoder)  # as ChatSession.open does
        sync()
        self.capture_s = time.perf_counter() - started  # the step and prefill graphs, and the decoder's
        memory["decoder_graph"] = memory_gb()
        self.encoder_graphs = _encoder_graphs_or_none(loaded, pool=self.backend.graph_pool)  # as ChatSession.open does
        sync()
        self.encoder_capture_s = time.perf_counter() - started - self.capture_s
        memory["encoder_graphs"] = memory_gb()
        self.session = ChatSession(
            loaded, self.backend, self.decoder, context_tokens=CONTEXT, fallback_reason=None, graphs_ready=True,
            model_id=None, encoder_graphs=self.encoder_graphs,
        )
        warm_started = time.perf_counter()
        self.session.warm_up()  # as ChatSession.open does at start-up, after the capture
        sync()
        memory["warm_up"] = memory_gb()
        torch.cuda.empty_cache()  # as ChatSession.open does after the warm-up
        self.startup = {
            "startup_s": time.perf_counter() - started,
            "step_and_prefill_graphs_s": backend_s,
            "step_graphs_setup_s": self.backend.setup_seconds,  # of which: buffers, NVRTC kernels, their checks
            "step_graphs_setup_timings_s": self.backend.setup_timings,  # the backbone's and the depthformer's share
            "step_graphs_capture_s": self.backend.capture_seconds,  # of which: warm-up runs and captures
            "decoder_graph_s": self.capture_s - backend_s,
            "encoder_graphs_s": self.encoder_capture_s,
            "warm_up_s": time.perf_counter() - warm_started,
            "encoder_rung_capture_s": {str(k): v for k, v in (self.encoder_graphs.capture_seconds if self.encoder_graphs else {}).items()},
            "memory_gb_after_each_phase": memory,
            "memory_gb_after_empty_cache": memory_gb(),
            "pools_after_startup": pools(),
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
        session.start_conversation(new_conversation(self.loaded, workload))
        turns = []
        for wave in workload.takes:
            sync()
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

    def encoder_rung_for(self, samples: int) -> int | None:
        """The encoder graphs' rung a take of `samples` runs on, or None (encoded eagerly)."""
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
        session.start_conversation(new_conversation(self.loaded, workload))
        lengths, ttfa = [], []
        for _ in range(4):
            self._unseen += 1
            seconds = 2.0 + 0.37 * self._unseen  # a new length on every call, in both sampling modes
            wave = np.resize(workload.takes[0], int(seconds * 16000))
            sync()
            budget = workload.n_text + 2  # through the first audio frame
            for output in session.respond(wave, sampling, max_new_tokens=budget, max_take_seconds=60):
                if isinstance(output, TurnDone) and output.stats.first_pcm_s is not None:
                    lengths.append(seconds)
                    ttfa.append(output.stats.first_pcm_s * 1e3)
        session.reset()
        return {"take_seconds": lengths, "ttfa_ms": ttfa, "median_ms": statistics.median(ttfa) if ttfa else None}

    @torch.inference_mode()
    def prefill_breakdown(self, workload: Workload) -> dict[str, float]:
        """Where the time before the first decode step goes, for one 4 s take (medians of 5), as the first
        turn of a conversation spends it: the take to its features and rows (the encoder graphs), the span's
        rows laid out, the backbone prefill. The system prompt is in the cache before the take (the session
        prefills a conversation's start ahead), so the span is the take's turn and the assistant's opening."""
        loaded = self.loaded
        session = self.session
        wave = workload.takes[0]
        timings: dict[str, list[float]] = {"take_to_rows": [], "span_assembly": [], "backbone_prefill": []}
        for _ in range(5):
            conversation = new_conversation(loaded, workload)
            ahead = conversation.positions  # the system prompt, prefilled before the take
            sync()
            t0 = time.perf_counter()
            mel, rows = session.encode_take(wave)
            sync()
            t1 = time.perf_counter()
            conversation.add_audio_turn("user", mel, rows)
            conversation.open_assistant_turn()
            kept, session.conversation = session.conversation, conversation
            try:
                embeddings = session.embed_from(ahead)
            finally:
                session.conversation = kept
            sync()
            t2 = time.perf_counter()
            backend = self.backend
            saved, hidden, positions = backend.backbone.snapshot(), backend.hidden.clone(), backend.positions
            backend.backbone.position.fill_(ahead)
            backend.positions = backend.backbone.positions = ahead
            backend.prefill(embeddings)  # through the prefill graphs, as in a turn
            sync()
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
            sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(repeats):
                    backend.stage_standalone_run(name)
                    graph.replay()
                sync()
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
        group = self.decoder.group_frames[-1]
        graph = getattr(decoder, "_graphs", {}).get(group)
        if graph is not None:  # per frame: a group's step over its frames (engine/chat/audio_decoding.py)
            decoder.reset()
            graph.replay()
            sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(repeats):
                    graph.replay()
                sync()
            events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            report["decoder_frame"] = {
                "kernels": len(events) / repeats / group,
                "kernel_time_us": sum(e.time_range.elapsed_us() for e in events) / repeats / group,
                "replay_span_us": 0.0,
                "top_by_time": [],
                "frames_per_step": group,
            }
            decoder.reset()
        return report

    @torch.inference_mode()
    def components(self) -> dict[str, float]:
        backend = self.backend
        saved = backend.backbone.snapshot()
        backbone = median_ms(backend.graphs["decode"].replay)
        backend.backbone.restore(saved)
        decoder = self.decoder.decoder
        group = self.decoder.group_frames[-1]
        decoder.reset()
        decoder_ms = median_ms(decoder._graphs[group].replay, repeats=20, inner=5) / group  # per frame, in groups
        decoder.reset()
        return {
            "backbone_step": backbone,
            "text_head": median_ms(backend.graphs["text_head"].replay),
            "depthformer_frame": median_ms(backend.graphs["audio_head"].replay),
            "decoder_frame": decoder_ms,
        }
