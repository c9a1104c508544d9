"""The benchmark's `small_cards` section: the app's own open path, from a full-size checkpoint on disk,
under allocator caps that stand for the GeForce cards users own.

Each measurement is its own process, as a user's launch is: a fresh CUDA context, torch's allocator
capped with `set_per_process_memory_fraction`, and device memory read as the driver counts it
(`torch.cuda.mem_get_info`: total − free, this process being the only one on the lent GPU) beside the
allocator's own figures. The parent never touches CUDA, so it holds nothing on the card.

The cap for a card: its memory, less what a Windows desktop holds on it (DESKTOP_GB: the compositor
and a browser with hardware acceleration take 0.3-1 GB), less what this process holds outside torch's
allocator (OUTSIDE_ALLOCATOR_GB: the CUDA context, cuBLAS/cuDNN kernels and workspaces, NVRTC
modules, measured on the H200 where the context alone is ~0.55 GB; a consumer card's is smaller, so
the cap errs on the safe side).

Steps, per card: ChatSession.open (each phase's time and memory, the peak allocated while the weights
load; the session's own stage times; a first turn before any encoder rung is in, then the rungs left behind
"ready" captured at once, as an idle engine thread does one per tick, and how long that took), a 48-turn
conversation at the 4096-token context with takes up to 60 s, then voices switched in and out, a turn after
each switch: a q+v voice, an attention+MLP voice (r=16 on q,k,v,out_proj,w1,w2,w3, the shape of community
adapters) and an all-linear one (every linear layer, the codebook heads tied to their embeddings included, as
PEFT's "all-linear" makes them), each three times, and back to the model's own voice five times; per switch its
time, the driver's count after it and the host memory the process holds. `voice_switches` sums them up per
kind, and `open_to_ready` per precision and launch.

`python -m engine.bench.small_cards --out DIR` (GPU): writes DIR/small_cards.json and returns it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GB = 1e9
GIB = 2**30
DESKTOP_GB = 0.6
OUTSIDE_ALLOCATOR_GB = 0.9
CONTEXT = 4096
TURNS = 48
# (label, card memory as sold in GiB, launch, precision): the first launch of a card after the checkpoint is
# written (its own empty folders for every compile cache: the app's kernel cache, the driver's and PyTorch's
# JIT caches, as on a user's first launch), then a second one that finds what the first left on disk (those
# caches, the page cache); and the int8 engine (engine/model/quantized.py) on a card of 4 GB.
CARDS = (("6 GB", 6, "first", "bf16"), ("6 GB", 6, "second", "bf16"), ("8 GB", 8, "first", "bf16"), ("4 GB", 4, "first", "int8"))
VOICE_TARGETS = {
    "qv": ("q_proj", "v_proj"),
    "attention_mlp": ("q_proj", "k_proj", "v_proj", "out_proj", "w1", "w2", "w3"),
    "all_linear": None,  # every linear layer the app loads, the codebook heads tied to their embeddings included
}
VOICE_SEQUENCE = ("qv", None, "attention_mlp", None, "all_linear", None, "qv", "attention_mlp", "all_linear", "qv", None,
                  "attention_mlp", "all_linear", None)
# The limits (45): a switch's median per voice kind, and open to ready on a first and a second launch.
VOICE_SWITCH_MEDIAN_S = 0.25
READY_S = {"first": 8.0, "second": 3.0}
LORA_RANK = 16
# Where the app's limits stand (issue 25).
LOADING_PEAK_OVER_WEIGHTS = 1.1
STEADY_STATE_DRIVER_GB = 4.6
INT8_WEIGHTS_GB = 1.8  # issue 29


def allocator_cap_bytes(card_gib: float) -> int:
    return int((card_gib * GIB) - (DESKTOP_GB + OUTSIDE_ALLOCATOR_GB) * GB)


# --------------------------------------------------------------------------- the checkpoint


def write_full_size_checkpoint(folder: Path, *, config_path: Path | None = None, device: str = "cuda") -> dict[str, Any]:
    """The random model of `config_path` (default: the full-size reference config) in the Hub layout, with
    two LoRA voices beside it (`voice-attention_mlp`, `voice-all_linear`)."""
    import torch
    from torch import nn

    from engine.bench.random_model import REFERENCE_CONFIG, random_full_size_model
    from engine.model.tiny_checkpoint import save_module, write_tokenizer

    config_path = config_path or REFERENCE_CONFIG
    loaded = random_full_size_model(config_path, device=device, keep_unused_token_table=True)
    config = json.loads(config_path.read_text())
    detokenizer_config = config.pop("audio_detokenizer")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_module(loaded.model, folder / "model.safetensors")
    (folder / "audio_detokenizer").mkdir(exist_ok=True)
    (folder / "audio_detokenizer" / "config.json").write_text(json.dumps({"model_type": "lfm2", **detokenizer_config}, indent=2))
    save_module(loaded.processor.audio_detokenizer, folder / "audio_detokenizer" / "model.safetensors")
    write_tokenizer(folder)

    voices: dict[str, Any] = {}
    generator = torch.Generator().manual_seed(25)
    # The audio embedding's own output head is never loaded (engine/model/loading.py: nothing reads it).
    linears = {name: m for name, m in loaded.model.named_modules() if isinstance(m, nn.Linear) and name != "audio_embedding.to_logits"}
    for voice, suffixes in VOICE_TARGETS.items():
        targets = sorted(n for n in linears if suffixes is None or n.rsplit(".", 1)[-1] in suffixes)
        write_lora_voice(folder.parent / f"voice-{voice}", {n: tuple(linears[n].weight.shape) for n in targets}, generator)
        voices[voice] = {
            "modules": len(targets),
            "rows_touched_gb": sum(linears[n].weight.numel() * 2 for n in targets) / GB,
        }
    return {"model_safetensors_gb": (folder / "model.safetensors").stat().st_size / GB, "voices": voices}


def write_lora_voice(folder: Path, shapes: dict[str, tuple[int, int]], generator: Any) -> None:
    """A LoRA adapter as PEFT's `save_pretrained` writes it (keys, config), with small random weights."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for module, (rows, columns) in shapes.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = (0.01 * torch.randn(LORA_RANK, columns, generator=generator)).to(torch.bfloat16)
        tensors[f"base_model.model.{module}.lora_B.weight"] = (0.01 * torch.randn(rows, LORA_RANK, generator=generator)).to(torch.bfloat16)
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    targets = sorted({module.rsplit(".", 1)[-1] for module in shapes})
    config = {"peft_type": "LORA", "r": LORA_RANK, "lora_alpha": LORA_RANK, "target_modules": targets, "base_model_name_or_path": None}
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))


# --------------------------------------------------------------------------- one launch (child process)


def _memory(torch: Any) -> dict[str, float]:
    from engine.bench.workload import driver_used_bytes

    return {
        "driver_used_gb": driver_used_bytes() / GB,
        "reserved_gb": torch.cuda.memory_reserved() / GB,
        "allocated_gb": torch.cuda.memory_allocated() / GB,
    }


def measure_launch(folder: Path, cap_bytes: int, spawned_at: float, precision: str = "bf16") -> dict[str, Any]:
    import numpy as np
    import torch

    from engine.chat.session import ChatSession, TurnDone
    from engine.model.memory import model_need
    from engine.model.quantized import weight_bytes
    from engine.protocol import SamplingSettings

    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / total))
    result: dict[str, Any] = {"cap_gb": cap_bytes / GB, "precision": precision, "after_cuda_init": _memory(torch)}
    phases: list[dict[str, Any]] = []
    opened = time.perf_counter()

    def progress(p: Any) -> None:
        if phases and phases[-1]["phase"] == p.stage:
            return
        torch.cuda.synchronize()
        if phases:  # the peak of the phase that just ended
            phases[-1]["peak_allocated_gb"] = torch.cuda.max_memory_allocated() / GB
            phases[-1]["peak_reserved_gb"] = torch.cuda.max_memory_reserved() / GB
        torch.cuda.reset_peak_memory_stats()
        phases.append({"phase": p.stage, "at_s": time.perf_counter() - opened, **_memory(torch)})

    try:
        session = ChatSession.open(str(folder), context_tokens=CONTEXT, progress=progress, precision=precision)
    except Exception as error:  # what the user would see instead of a ready window
        result.update(opened=False, error=f"{type(error).__name__}: {error}", phases=phases)
        return result
    result["open_s"] = time.perf_counter() - opened
    result["process_start_to_ready_s"] = time.time() - spawned_at
    result["phases"] = phases
    result["startup_stages_s"] = dict(session.startup)  # the session's own clock, from open's call
    result["step_graphs_setup_s"] = getattr(session.backend, "setup_timings", None)
    result["graphs_ready"] = session.info.graphs_ready
    result["fallback_reason"] = session.info.fallback_reason
    need = model_need(folder, context_tokens=CONTEXT, precision=precision)
    result["weights_gb"] = need.weights / GB
    result["estimated_need_gb"] = need.total / GB
    result["weights_held_gb"] = (weight_bytes(session.loaded.model) + weight_bytes(session.loaded.processor.audio_detokenizer)) / GB
    loading = next((p for p in phases if p["phase"] == "load_weights"), None)
    result["loading_peak_allocated_gb"] = loading.get("peak_allocated_gb") if loading else None
    result["ready"] = _memory(torch)
    pools: dict[str, dict[str, float]] = {}
    for segment in torch.cuda.memory_snapshot():
        pool = "default" if tuple(segment.get("segment_pool_id", (0, 0))) == (0, 0) else "graph pools"
        entry = pools.setdefault(pool, {"reserved_gb": 0.0, "allocated_gb": 0.0})
        entry["reserved_gb"] += segment["total_size"] / GB
        entry["allocated_gb"] += segment["allocated_size"] / GB
    result["ready_pools"] = pools

    sampling = SamplingSettings(False, 1.0, 4, 1.0, 4)
    max_new_tokens = 12 * (session.schedule.n_text + session.schedule.n_audio)
    rng = np.random.default_rng(25)

    def turn(seconds: float) -> dict[str, Any]:
        wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
        stats = None
        for output in session.respond(wave, sampling, max_new_tokens=max_new_tokens, max_take_seconds=60):
            if isinstance(output, TurnDone):
                stats = output.stats
        torch.cuda.synchronize()
        return {"take_s": seconds, "ttfa_ms": stats.first_pcm_s * 1e3, "frames": stats.frames, **_memory(torch)}

    long_takes = {5: 25.0, 11: 45.0, 17: 59.0, 23: 60.0, 29: 33.0, 35: 52.0, 41: 60.0, 46: 21.0}
    torch.cuda.reset_peak_memory_stats()
    turns = []
    for i in range(TURNS):  # the first at once after ready, by the eager encoder; then every rung is in
        turns.append({**turn(long_takes.get(i, float(rng.uniform(0.6, 17.5)))), "rungs_pending": _rungs_pending(session)})
        if i == 0:
            result["lazy_capture"] = _lazy_capture(session)
    result["conversation"] = {
        "turns": turns,
        "ttfa_ms_max": max(t["ttfa_ms"] for t in turns),
        "ttfa_ms_median": float(np.median([t["ttfa_ms"] for t in turns])),
        "driver_used_gb_max": max(t["driver_used_gb"] for t in turns),
        "peak_reserved_gb": torch.cuda.max_memory_reserved() / GB,
        "peak_allocated_gb": torch.cuda.max_memory_allocated() / GB,
    }
    session.reset()

    switches = []
    previous = "none"
    for voice in VOICE_SEQUENCE:
        before = _memory(torch)
        entry: dict[str, Any] = {"voice": voice or "none", "from": previous, "before": before}
        started = time.perf_counter()
        try:
            session.switch_voice(str(folder.parent / f"voice-{voice}") if voice else None)
            entry["switch_s"] = time.perf_counter() - started
            entry["after"] = _memory(torch)
            entry["merge"] = dict(session.voices.last_switch)  # bytes read, chunks, weights written, seconds
            entry["host"] = _host_memory(session)
            entry["turn"] = turn(3.0)
        except Exception as error:
            entry["error"] = f"{type(error).__name__}: {error}"
        entry["voice_now"] = session.voices.voice_name
        previous = entry["voice_now"] or "none"
        switches.append(entry)
    result["voices"] = switches
    result["voice_switches"] = summarize_switches(switches)
    result["end"] = _memory(torch)
    session.close()
    return result


def _rungs_pending(session: Any) -> int:
    return len(session.encoder_graphs.pending) if session.encoder_graphs is not None else 0


def _lazy_capture(session: Any) -> dict[str, Any]:
    """The encoder's rungs left behind "ready", captured now (`wait_for_graphs`: what the engine thread's idle ticks
    do one rung at a time): how long that took, when the last was in (seconds after ready, the first turn included),
    each rung's seconds, problems."""
    capture = session.lazy_capture
    if capture is None:
        return {"jobs": 0}
    started = time.perf_counter()
    session.wait_for_graphs()
    return {"jobs": len(capture.jobs), "done": capture.done, "capture_s": time.perf_counter() - started,
            "all_in_after_ready_s": capture.finished_after_s, "seconds": dict(capture.seconds),
            "problems": capture.problems, "rungs": sorted(session.encoder_graphs.rungs) if session.encoder_graphs else []}


def _host_memory(session: Any) -> dict[str, float]:
    """The process's resident host memory (Linux: /proc/self/statm) and what the voice switcher keeps (its pinned ring)."""
    resident = None
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        resident = pages * os.sysconf("SC_PAGE_SIZE") / GB
    except (OSError, ValueError, AttributeError):
        pass
    return {"process_resident_gb": resident, "switcher_kept_gb": session.voices.host_bytes / GB}


def summarize_switches(switches: list[dict[str, Any]]) -> dict[str, Any]:
    """Per voice kind ("none": back to the model's own voice): every switch's seconds, their median and most, and
    the driver's count after them (most)."""
    import statistics

    kinds: dict[str, dict[str, Any]] = {}
    for entry in switches:
        if "switch_s" not in entry:
            continue
        kind = kinds.setdefault(entry["voice"], {"switch_s": [], "driver_used_gb_after": []})
        kind["switch_s"].append(entry["switch_s"])
        kind["driver_used_gb_after"].append(entry["after"]["driver_used_gb"])
    for kind in kinds.values():
        kind["median_s"] = statistics.median(kind["switch_s"])
        kind["max_s"] = max(kind["switch_s"])
        kind["driver_used_gb_after_max"] = max(kind["driver_used_gb_after"])
    return kinds


# --------------------------------------------------------------------------- the section (parent)


def data_home(work: Path, label: str, launch: str) -> Path:
    """The folder a launch keeps its compile caches in (`cache_environment`): a new, empty one for a card's
    first launch, the one its first launch left for the second."""
    folder = work / f"data-{label.replace(' ', '')}"
    if launch == "first" and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def cache_environment(data: Path) -> dict[str, str]:
    """Every compile cache a launch fills, in `data`: the app's data folder (its NVRTC kernel cache), the CUDA
    driver's JIT cache (PTX to machine code) and PyTorch's jiterator cache (the SwiGLU kernel)."""
    return {"XDG_DATA_HOME": str(data), "CUDA_CACHE_PATH": str(data / "nv"), "PYTORCH_KERNEL_CACHE_PATH": str(data / "torch-kernels")}


def run_child(module: str, args: list[str], timeout: float, data: Path | None = None) -> dict[str, Any]:
    """`python -m module --child-out FILE args` in a process of its own (a fresh CUDA context, as a user's launch);
    what it wrote to FILE, or the error and the end of its stderr. `data`: the folder its compile caches live in."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = Path(out.name)
    command = [sys.executable, "-m", module, "--child-out", str(path), *args]
    env = {**os.environ, **cache_environment(data)} if data is not None else None
    try:
        completed = subprocess.run(command, timeout=timeout, capture_output=True, text=True, env=env)
    except subprocess.TimeoutExpired as error:
        stderr = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else str(error.stderr or "")
        return {"error": f"timed out after {timeout} s", "stderr_tail": stderr[-3000:]}
    if completed.returncode != 0 or not path.stat().st_size:
        return {"error": f"exit {completed.returncode}", "stderr_tail": completed.stderr[-3000:]}
    return json.loads(path.read_text())


def _verdicts(run: dict[str, Any]) -> dict[str, Any]:
    """The issue's limits, checked on one launch's figures."""
    if not run.get("graphs_ready"):
        return {"opened_with_graphs": False}
    voices_ok = all("error" not in s and abs(s["after"]["driver_used_gb"] - s["before"]["driver_used_gb"]) < 0.1 for s in run["voices"])
    switches = run.get("voice_switches") or {}
    speed = {
        "every_voice_switched": all("error" not in s for s in run["voices"]),
        f"voice_switch_median_at_most_{VOICE_SWITCH_MEDIAN_S}_s": bool(switches) and all(
            k["median_s"] <= VOICE_SWITCH_MEDIAN_S for k in switches.values()),
        f"ready_within_{READY_S.get(run.get('launch'), 8.0):g}_s": run["open_s"] <= READY_S.get(run.get("launch"), 8.0),
        "encoder_rungs_all_captured_behind_ready": bool(run.get("lazy_capture", {}).get("done")) and not run["lazy_capture"].get("problems"),
    }
    if run.get("precision") == "int8":
        return {
            "opened_with_graphs": True,
            "weights_on_gpu_at_most_1.8_gb": run["weights_held_gb"] <= INT8_WEIGHTS_GB,
            "all_turns_full_length": all(t["frames"] == run["conversation"]["turns"][0]["frames"] for t in run["conversation"]["turns"]),
            "voice_switches_keep_memory": voices_ok,
            "driver_used_gb_max": max([run["conversation"]["driver_used_gb_max"]] + [s["after"]["driver_used_gb"] for s in run["voices"] if "after" in s]),
            **speed,
        }
    return {
        **speed,
        "opened_with_graphs": True,
        "loading_peak_within_1.1x_weights": run["loading_peak_allocated_gb"] <= LOADING_PEAK_OVER_WEIGHTS * run["weights_gb"],
        "all_turns_full_length": all(t["frames"] == run["conversation"]["turns"][0]["frames"] for t in run["conversation"]["turns"]),
        "voice_switches_keep_memory": voices_ok,
        "driver_used_gb_after_conversation": run["conversation"]["turns"][-1]["driver_used_gb"],
        f"steady_state_driver_at_most_{STEADY_STATE_DRIVER_GB}_gb": run["conversation"]["driver_used_gb_max"] <= STEADY_STATE_DRIVER_GB,
    }


def voice_switch_summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per precision and voice kind, over every launch of that precision: the switches' median and most seconds,
    the driver's count after them (most), and the host memory the process held after them (most)."""
    import statistics

    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        for entry in run.get("voices", []):
            if "switch_s" not in entry:
                continue
            kind = out.setdefault(run.get("precision", "bf16"), {}).setdefault(entry["voice"], {"switch_s": [], "driver_gb": [], "host_gb": []})
            kind["switch_s"].append(entry["switch_s"])
            kind["driver_gb"].append(entry["after"]["driver_used_gb"])
            kind["host_gb"].append((entry.get("host") or {}).get("process_resident_gb") or 0.0)
    return {
        precision: {
            name: {"median_s": statistics.median(k["switch_s"]), "max_s": max(k["switch_s"]), "switches": len(k["switch_s"]),
                   "driver_used_gb_after_max": max(k["driver_gb"]), "process_resident_gb_max": max(k["host_gb"])}
            for name, k in kinds.items()
        }
        for precision, kinds in out.items()
    }


def open_to_ready(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per precision and launch ("first": every compile cache empty; "second": what the first left), ChatSession.open
    to ready (the most over the cards measured), with the session's own stages of the fastest, and when the
    encoder's rungs behind "ready" were all in."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        if "open_s" not in run:
            continue
        key = f"{run.get('precision', 'bf16')} {run.get('launch')}"
        entry = out.setdefault(key, {"open_s": [], "limit_s": READY_S.get(run.get("launch"), 8.0)})
        entry["open_s"].append(run["open_s"])
        entry["stages_s"] = run.get("startup_stages_s")
        entry["rungs_all_in_after_ready_s"] = (run.get("lazy_capture") or {}).get("all_in_after_ready_s")
    for entry in out.values():
        entry["most_s"] = max(entry["open_s"])
        entry["within_limit"] = entry["most_s"] <= entry["limit_s"]
    return out


# Consumer cards: memory as sold (GiB). The bench's speed estimates per card are `card_estimates`.
CONSUMER_CARDS = {"RTX 3060 12 GB": 12, "RTX 4060 8 GB": 8, "RTX 4060 Laptop 8 GB": 8, "RTX 4050 Laptop 6 GB": 6}


def _card_memory(runs: list[dict[str, Any]], precision: str = "bf16") -> dict[str, Any]:
    """Whether each consumer card holds the app with a desktop on it (an estimate from the H200's counts:
    the most the process held, by the driver's count, over the conversation and the voice switches)."""
    measured = [r for r in runs if r.get("graphs_ready") and r.get("precision", "bf16") == precision]
    if not measured:
        return {}
    held = max(
        max([r["conversation"]["driver_used_gb_max"]] + [s["after"]["driver_used_gb"] for s in r["voices"] if "after" in s])
        for r in measured
    )
    return {
        name: {"card_gb": gib * GIB / GB, "app_gb": held, "desktop_gb": DESKTOP_GB, "headroom_gb": gib * GIB / GB - DESKTOP_GB - held}
        for name, gib in CONSUMER_CARDS.items()
    }


def run_small_cards(out: Path, cards: list[int] | None = None) -> dict[str, Any]:
    """`cards`: indices into CARDS to measure (default: all)."""
    work = Path(tempfile.mkdtemp(prefix="voicechat-small-cards-"))
    folder = work / "LFM2.5-Audio-1.5B-JP"
    started = time.perf_counter()
    section: dict[str, Any] = {
        "method": {
            "desktop_gb": DESKTOP_GB,
            "outside_allocator_gb": OUTSIDE_ALLOCATOR_GB,
            "cap": "card GiB − desktop − outside-allocator memory, as torch.cuda.set_per_process_memory_fraction",
            "driver_count": "NVML's per-process used memory where reported, else torch.cuda.mem_get_info's total − free",
            "context_tokens": CONTEXT,
            "turns": TURNS,
        },
        "checkpoint": run_child("engine.bench.small_cards", ["--write", str(folder)], timeout=600),
    }
    section["checkpoint"]["write_s"] = time.perf_counter() - started
    runs = []
    for label, gib, launch, precision in [CARDS[i] for i in cards] if cards is not None else CARDS:
        cap = allocator_cap_bytes(gib)
        command = ["--measure", str(folder), "--cap-bytes", str(cap), "--spawned-at", repr(time.time()), "--precision", precision]
        run = run_child("engine.bench.small_cards", command, timeout=900, data=data_home(work, f"{label}-{precision}", launch))
        run.update(card=label, card_gib=gib, launch=launch, verdicts=_verdicts(run) if "error" not in run else {})
        runs.append(run)
        print(json.dumps({k: run.get(k) for k in ("card", "precision", "launch", "open_s", "process_start_to_ready_s", "graphs_ready",
                                                  "loading_peak_allocated_gb", "voice_switches", "verdicts", "error")}), flush=True)
    section["runs"] = runs
    section["voice_switches"] = voice_switch_summary(runs)
    section["open_to_ready"] = open_to_ready(runs)
    section["cards"] = _card_memory(runs)
    section["cards_int8"] = _card_memory(runs, "int8")
    out.mkdir(parents=True, exist_ok=True)
    (out / "small_cards.json").write_text(json.dumps(section, indent=1))
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--child-out", type=Path)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--measure", type=Path)
    parser.add_argument("--cap-bytes", type=int)
    parser.add_argument("--spawned-at", type=float)
    parser.add_argument("--precision", choices=("bf16", "int8"), default="bf16")
    parser.add_argument("--cards", default=None, help="comma-separated indices into CARDS (default: all)")
    args = parser.parse_args(argv)
    if args.write or args.measure:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from engine.tools.reply import quiet_library_logs

        quiet_library_logs()
        result = write_full_size_checkpoint(args.write) if args.write else measure_launch(args.measure, args.cap_bytes, args.spawned_at, args.precision)
        args.child_out.write_text(json.dumps(result))
        return 0
    section = run_small_cards(args.out, [int(i) for i in args.cards.split(",")] if args.cards else None)
    print(json.dumps({"runs": [{k: r.get(k) for k in ("card", "launch", "verdicts")} for r in section["runs"]]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
