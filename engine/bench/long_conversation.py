"""The long conversation: many turns through the app's own ChatSession at the 4096-token context, so the
context fills and trims many times; time to first audio, trims and memory turn by turn."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch

from engine.bench.engine_mode import EngineBench
from engine.bench.workload import CONTEXT, FRAME_SECONDS, Workload, new_conversation, sync
from engine.protocol import SamplingSettings


def long_conversation(bench: EngineBench, workload: Workload, sampling: SamplingSettings, turns: int) -> dict[str, Any]:
    """`turns` turns through the app's own ChatSession at the 4096-token context: takes of 0.6 to 60 s
    (mostly short, some past the 20 s of ordinary speech, some at the 60 s limit), 108-frame answers,
    so the context fills and trims many times. Starts from a freshly opened session's state (the
    allocator emptied, as ChatSession.open leaves it); peak memory is over these turns only."""
    from engine.chat.session import ContextTrimmedInfo, TurnDone

    session = bench.session
    session.start_conversation(new_conversation(bench.loaded, workload))
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    rng = np.random.default_rng(16)
    long_takes = {5: 25.0, 11: 45.0, 17: 59.0, 23: 60.0, 29: 33.0, 35: 52.0, 41: 60.0, 46: 21.0}
    records = []
    for index in range(turns):
        seconds = long_takes.get(index, float(rng.uniform(0.6, 17.5)))
        wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
        sync()
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
                "encoder_graph": bench.encoder_rung_for(len(wave)) is not None,
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
