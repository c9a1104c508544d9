"""The benchmark's report: the machine it ran on, each mode's summary, bench.json and bench.md (written
atomically after every mode, so a run cut short keeps what it measured)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from engine.bench.workload import BLOCKS, CONTEXT, SYSTEM_TOKENS, TURNS, USER_SECONDS
from engine.files import write_atomically


def environment() -> dict[str, Any]:
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


def summary(mode: dict[str, Any]) -> dict[str, float]:
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


def markdown(results: dict[str, Any]) -> str:
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
        for mode in sorted(modes, key=("eager", "recipe", "engine", "engine-int8").index):  # baselines first
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
        app = startup.get("app_open_to_ready") or {}
        if app:
            lines += ["The app's own open path (small_cards, ChatSession.open to ready): " + "; ".join(
                f"{key} {entry['most_s']:.2f} s" for key, entry in app.items()) + ".", ""]
    small = results.get("small_cards")
    if isinstance(small, dict) and small.get("runs"):
        lines += small_cards_lines(small)
    int8 = results.get("int8")
    if int8:
        lines += _int8_lines(int8, results.get("stage_bytes", {}))
    estimate = results.get("card_estimates")
    if estimate:
        lines += _card_lines(f"## Other GPUs: {estimate['label']}", estimate)
    lines += ["## Notes", "", *results.get("notes", [])]
    return "\n".join(lines) + "\n"


def small_cards_lines(small: dict[str, Any]) -> list[str]:
    """small_cards' launches through the app's own open path: open to ready per precision and launch, and the voice
    switches per precision and kind (median and most seconds, the driver's count and the process's resident host
    memory after them)."""
    lines = ["## The app's own start-up and voice switches (small_cards)", ""]
    ready = small.get("open_to_ready") or {}
    if ready:
        lines += ["| precision, launch | open → ready s (most) | limit s | within | encoder rungs all in after ready s |", "|---|---|---|---|---|"]
        for key, entry in ready.items():
            behind = entry.get("rungs_all_in_after_ready_s")
            lines.append(f"| {key} | {entry['most_s']:.2f} | {entry['limit_s']:g} | {'yes' if entry['within_limit'] else 'NO'} | "
                         f"{'n/a' if behind is None else f'{behind:.2f}'} |")
        lines.append("")
    switches = small.get("voice_switches") or {}
    if switches:
        lines += ["| precision | voice | switches | median s | most s | driver GB after (most) | process resident GB (most) |",
                  "|---|---|---|---|---|---|---|"]
        for precision, kinds in switches.items():
            for kind, entry in kinds.items():
                lines.append(f"| {precision} | {kind} | {entry['switches']} | {entry['median_s']:.3f} | {entry['max_s']:.3f} | "
                             f"{entry['driver_used_gb_after_max']:.3f} | {entry['process_resident_gb_max']:.2f} |")
        lines.append("")
    return lines


def _card_lines(title: str, estimate: dict[str, Any]) -> list[str]:
    """A card estimate's table (engine/bench/cards.py), under `title`."""
    conservative = all("conservative" in e for e in estimate["cards"].values())  # int8: also all excess as latency
    extra = " RTF (all H200 excess as per-kernel cost) |" if conservative else ""
    lines = [
        title,
        "",
        "| card | bandwidth GB/s (published) | backbone step ms | depthformer frame ms | ms/frame | RTF | RTF floor | TTFA ms | VRAM GB |" + extra,
        "|---|---|---|---|---|---|---|---|---|" + "---|" * conservative,
    ]
    for card, e in estimate["cards"].items():
        lines.append(
            f"| {card} | {e['published_bandwidth_gbs']:.0f} | {e['backbone_step_ms']:.2f} | {e['depthformer_frame_ms']:.2f} | "
            f"{e['ms_per_frame']:.2f} | {e['rtf']:.3f} | {e['rtf_bandwidth_floor']:.3f} | {e['ttfa_ms']:.0f} | {e['vram_gb']:.0f} |"
            + (f" {e['conservative']['rtf']:.3f} |" if conservative else "")
        )
    memory = estimate.get("memory_gb")
    if memory:  # measured (small_cards): the app's most by the driver's count, and what a desktop leaves
        lines += ["", "| card (memory, small_cards) | card GB | app GB (driver, most) | desktop GB | headroom GB |", "|---|---|---|---|---|"]
        for card, m in memory.items():
            lines.append(f"| {card} | {m['card_gb']:.1f} | {m['app_gb']:.2f} | {m['desktop_gb']:.1f} | {m['headroom_gb']:.2f} |")
    return lines + [""]


def _int8_lines(int8: dict[str, Any], bf16_bytes: dict[str, int]) -> list[str]:
    """The int8 engine's bytes and its teacher-forced agreement with bf16, per stream."""
    frame = int8["bytes_per_audio_frame"]
    bf16_frame = bf16_bytes.get("backbone_step", 0) + bf16_bytes.get("depthformer_frame", 0)
    lines = [
        "## int8 weights (W8A16)",
        "",
        f"Bytes per audio frame {frame / 1e9:.3f} GB (bf16 {bf16_frame / 1e9:.3f} GB); weights on the GPU "
        f"{int8['weights_on_gpu_bytes'] / 1e9:.3f} GB (bf16 {int8.get('bf16_weights_on_gpu_bytes', 0) / 1e9:.3f} GB).",
        "",
    ]
    agreement = int8.get("agreement_with_bf16")
    if agreement:
        lines += [
            f"Teacher-forced agreement with bf16 (passed the app's thresholds: {agreement['passed']}):",
            "",
            "| stream | steps | top-1 | top-4 overlap | KL mean (nats) | KL max |",
            "|---|---|---|---|---|---|",
        ]
        for name, s in agreement["streams"].items():
            lines.append(f"| {name} | {s['steps']} | {s['top1']:.3f} | {s['top_k_overlap']:.3f} | {s['kl_mean']:.4f} | {s['kl_max']:.4f} |")
        lines.append("")
        decoder = agreement.get("decoder")
        if decoder:  # the detokenizer with its transformer in bf16 (int8's) against float32 (bf16's)
            lines += [f"Audio decoder (transformer in bf16) against float32: SNR {decoder['snr_db']:.1f} dB over "
                      f"{decoder['frames']} frames (threshold {agreement['thresholds'].get('min_decoder_snr_db', float('nan')):.0f} dB).", ""]
    estimate = int8.get("card_estimates")
    if estimate:
        lines += _card_lines(f"int8 on other GPUs: {estimate['label']}", estimate)
    return lines


def summaries(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    return {label: {mode: summary(data) for mode, data in runs.items()} for label, runs in results["modes"].items()}


def write_results(results: dict[str, Any], out: Path) -> None:
    """bench.json and bench.md in `out`, the summary rebuilt from the modes measured so far."""
    results["summary"] = summaries(results)
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / "bench.json", json.dumps(results, indent=2).encode())
    write_atomically(out / "bench.md", markdown(results).encode())
