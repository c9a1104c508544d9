"""The benchmark's `voice_training` section: training a voice at full size, under the caps of the cards users own,
and a check that the pipeline learns.

Every measurement is its own process (a fresh CUDA context, as a user's training process is), on a full-size
checkpoint written in the Hub layout with its audio tokenizer (random weights: a step's cost does not depend on
them):

- speed: the trainer's own path (engine/voices/trainer.py: the model loaded as the app loads it, bf16 or the int8
  base, peft's LoRA r=16 on the default targets, gradient checkpointing) under the allocator caps that stand for a
  6 GB and an 8 GB card (engine/bench/small_cards.py's method), on samples of 2-14 s clips laid out as a run lays
  them out, the batch budget chosen from the free memory as a run chooses it. Step time, positions per second, the
  achieved share of the GPU's bf16 throughput, the peak by the driver's count, and the audio tokenizer's (Mimi's)
  encoding time per second of speech.
- learning: the random full-size model with a random "teacher" LoRA (on every module the student adapts, or only
  on the audio head) answers reading requests (text and audio, greedy, eager); a student LoRA trained through the
  pipeline (samples labelled on the teacher's answer, batches, VoiceTrainer) on some of those answers is compared
  with the teacher on the others, teacher-forced: the share of text positions, of audio frames' first codebook (and
  of each codebook) where its top-1 choice is the teacher's, against the base model's share; with --eval-every
  also on the way. Beside them: codebook 0's agreement split by the teacher's lead over its runner-up, and the
  ceiling, the teacher itself computed as a student is (what a student that learned it exactly would show).

The card estimates (minutes to train 30 minutes of speech for 3 epochs) come from the measured steps and each
card's published bf16 tensor throughput (`estimate_minutes`): an ESTIMATE, never a measurement.

`python -m engine.bench.voice_training --out DIR` (GPU): writes DIR/voice_training.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

GB = 1e9
GIB = 2**30
# (label, card GiB, precision): the cards a voice is trained on.
SPEED_RUNS = (("6 GB", 6, "int8"), ("6 GB", 6, "bf16"), ("8 GB", 8, "int8"), ("8 GB", 8, "bf16"))
SPEED_STEPS = 12  # timed after WARMUP_STEPS
WARMUP_STEPS = 2
CLIP_SECONDS = (2.0, 14.0)  # the clip lengths a run sees (engine/voices/clip_check.py's limits)
TEXT_TOKENS_PER_SECOND = 7.0  # Japanese speech in the model's tokenizer
SPEECH_MINUTES, EPOCHS = 30.0, 3  # the estimate: 30 minutes of speech for 3 epochs
ESTIMATE_CARDS = ("RTX 3060", "RTX 4060")
LOW_MATMUL_EFFICIENCY = 0.15  # the pessimistic end of the estimate (engine/voices/plan.py MATMUL_EFFICIENCY is the middle)
# The learning check. Its first run (run 96: 1,024 prompts, a rank-16 teacher) missed: the student fitted its 614
# training answers and not the held-out ones, ~1.6 M bits of labels for a 12.8 M-parameter teacher. A voice is a
# low-rank change; the check's teacher is rank 4 (3.2 M parameters) and the student sees 3,712 answers.
TEACHER_RANK = 4
# Where the teacher's change lies: every module the student adapts, or only the audio head (the depthformer and
# the linear that feeds it), where a voice's sound is made from what the backbone says.
TEACHER_TARGETS = {
    "all": None,  # the student's own targets (engine/voices/adapter.py DEFAULT_TARGETS)
    "audio-head": r"^(depthformer\.layers\.\d+\..*\.(qkv_proj|out_proj|w1|w2|w3)|depth_linear)$",
}
LEARNING_PROMPTS = 4096  # generated ANSWER_BATCH at a time; all but the validation and held-out ones trained on
VALIDATION_PROMPTS, HELD_OUT_PROMPTS = 128, 256  # the student's learning rate is chosen on the first, judged on the second
ANSWER_BATCH = 1024
PROBE_PROMPTS = 16  # what the teacher's size is chosen on
REQUEST_TOKENS = 24
ANSWER_BLOCKS = 3  # blocks of the schedule per answer (3 × (6 text + 9 audio) for the JP model)
STUDENT_STEPS = 400
STUDENT_LRS = (1e-3,)
STUDENT_BATCH_POSITIONS = 4096
TEACHER_BASE_AGREEMENT = (0.3, 0.6)  # the teacher's size is chosen so that the base agrees this much with it
MARGIN_EDGES = (0.0, 0.1, 0.3, 1.0, math.inf)  # the teacher's lead over its runner-up (logits) the agreement is split by


# --------------------------------------------------------------------------- samples


def synthetic_samples(tokenizer, count: int, *, seed: int, codebooks: int, n_text: int, n_audio: int) -> list:
    """Reading samples of clips of CLIP_SECONDS, laid out exactly as a run lays out recorded ones (samples.py's
    `sample_from_tokens`), with random text tokens and audio codes: the speed of a step depends on the lengths."""
    import torch

    from engine.voices.reading_script import READING_SCRIPT
    from engine.voices.samples import READING_REQUEST, sample_from_tokens

    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for index in range(count):
        seconds = rng.uniform(*CLIP_SECONDS)
        frames = round(seconds * 12.5)
        text = torch.randint(200, min(512, tokenizer.vocab_size), (round(seconds * TEXT_TOKENS_PER_SECOND),), generator=generator)
        codes = torch.randint(0, 2048, (codebooks, frames), generator=generator)
        request = READING_REQUEST.format(text=READING_SCRIPT[index % len(READING_SCRIPT)])
        samples.append(sample_from_tokens(f"clip-{index:04d}", tokenizer, request, text.tolist(), codes, n_text=n_text, n_audio=n_audio))
    return samples


# --------------------------------------------------------------------------- speed (child)


def measure_speed(folder: Path, cap_bytes: int, precision: str) -> dict[str, Any]:
    import torch

    from engine.bench.workload import driver_used_bytes
    from engine.model.loading import load_model, use_expandable_cuda_segments
    from engine.voices import plan
    from engine.voices.adapter import DEFAULT_RANK, DEFAULT_TARGETS
    from engine.voices.trainer import PreparedData, TrainingOptions, VoiceTrainer, label_counts

    torch.cuda.init()
    use_expandable_cuda_segments()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / total))
    result: dict[str, Any] = {"cap_gb": cap_bytes / GB, "precision": precision}
    device = torch.device("cuda")
    free = plan.device_free_bytes(device)
    budget = plan.budget_for(free, folder, precision=precision, rank=DEFAULT_RANK, targets=DEFAULT_TARGETS)
    result["free_before_gb"] = free / GB
    need = plan.memory_plan(folder, precision=precision, rank=DEFAULT_RANK, targets=DEFAULT_TARGETS,
                            budget=budget or plan.TokenBudget(plan.MIN_BUDGET_POSITIONS, plan.MIN_BUDGET_POSITIONS))
    result["planned_need_gb"] = need.total / GB
    if budget is None:
        result["refused"] = "the plan says this card cannot hold a training at the smallest batch"
        return result
    result["budget"] = {"positions": budget.positions, "audio_frames": budget.audio_frames}
    started = time.perf_counter()
    loaded = load_model(folder, device=device, precision=precision)
    result["load_s"] = time.perf_counter() - started
    tokenizer = loaded.processor.text
    samples = synthetic_samples(tokenizer, 64, seed=1, codebooks=loaded.codebooks, n_text=loaded.interleaved_n_text,
                                n_audio=loaded.interleaved_n_audio)
    data = PreparedData(samples, [], sum(s.audio_frames for s in samples) / 12.5)
    steps = WARMUP_STEPS + SPEED_STEPS
    trainer = VoiceTrainer(loaded, data, TrainingOptions(precision=precision, budget=budget, steps=steps), budget, steps, base_model=None)
    result["adapter_parameters"] = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    torch.cuda.reset_peak_memory_stats()
    times, positions, frames, labels, flop = [], 0, 0, 0, 0.0
    peak_driver = 0
    try:
        for step in range(steps):
            batch = [samples[i] for i in trainer.plan[step]]
            torch.cuda.synchronize()
            began = time.perf_counter()
            trainer.train_step()
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - began
            peak_driver = max(peak_driver, driver_used_bytes() - torch.cuda.memory_reserved() + torch.cuda.max_memory_reserved())
            if step >= WARMUP_STEPS:
                times.append(elapsed)
                batch_positions = sum(s.positions for s in batch)
                batch_frames = sum(s.audio_frames for s in batch)
                batch_text = sum(label_counts(s)[0] for s in batch)
                positions += batch_positions
                frames += batch_frames
                labels += batch_text
                flop += plan.training_flop(batch_positions, batch_frames, batch_text)
    except torch.OutOfMemoryError as error:
        result["out_of_memory"] = f"at step {len(times) + 1}: {error}"[:300]
    result["parts_after_oom_retries"] = trainer.parts
    if times:
        seconds = sum(times)
        result.update(
            step_s_median=statistics.median(times),
            positions_per_s=positions / seconds,
            audio_frames_per_s=frames / seconds,
            speech_seconds_per_s=frames / 12.5 / seconds,
            flop_per_step=flop / len(times),
            achieved_tflops=flop / seconds / 1e12,
            text_labels=labels,
        )
    result["peak_driver_gb"] = peak_driver / GB
    result["peak_allocated_gb"] = torch.cuda.max_memory_allocated() / GB
    result["peak_reserved_gb"] = torch.cuda.max_memory_reserved() / GB
    result["within_cap_and_planned"] = "out_of_memory" not in result and result["peak_reserved_gb"] * GB <= cap_bytes
    result["audio_tokenizer_ms_per_speech_s"] = _mimi_encode_ms(loaded)
    return result


def _mimi_encode_ms(loaded) -> float | None:
    """The audio tokenizer encoding 10 s of audio on the GPU, per second of speech (the run's first stage)."""
    import torch

    try:
        mimi = loaded.processor.mimi
    except AttributeError:
        return None
    audio = 0.1 * torch.randn(1, 1, 240_000, device=loaded.device)
    with torch.no_grad():
        mimi.encode(audio)
        torch.cuda.synchronize()
        began = time.perf_counter()
        mimi.encode(audio)
        torch.cuda.synchronize()
    loaded.processor._mimi = None
    torch.cuda.empty_cache()
    return (time.perf_counter() - began) * 1e3 / 10.0


# --------------------------------------------------------------------------- learning (child)


def learning_check(folder: Path, *, device: str = "cuda", prompts: int = LEARNING_PROMPTS, steps: int = STUDENT_STEPS,
                   learning_rates: tuple[float, ...] = STUDENT_LRS, teacher_rank: int = TEACHER_RANK,
                   eval_every: int = 0, teacher_targets: str = "all") -> dict[str, Any]:
    """The teacher/student check (see the module docstring). The student's learning rate is chosen on a validation
    split (its teacher-forced loss there); the agreement is reported on the held-out prompts only, and with
    `eval_every` also every so many steps on the way."""
    import torch

    from engine.model.loading import load_model
    from engine.model.lora import VoiceSwitcher, load_voice
    from engine.voices.adapter import DEFAULT_RANK, DEFAULT_TARGETS
    from engine.voices.batches import TokenBudget
    from engine.voices.trainer import PreparedData, TrainingOptions, VoiceTrainer

    loaded = load_model(folder, device=device)
    tokenizer, schedule = loaded.processor.text, (loaded.interleaved_n_text, loaded.interleaved_n_audio)
    generator = torch.Generator().manual_seed(11)
    # Requests of random text tokens, all of one length, so that every answer follows the schedule in lockstep and
    # a whole set of them is generated as one batch.
    requests = torch.randint(200, min(512, len(tokenizer)), (prompts, REQUEST_TOKENS), generator=generator).tolist()
    work = Path(tempfile.mkdtemp(prefix="voicechat-learning-"))
    switcher = VoiceSwitcher(loaded.model)
    teacher_pattern = TEACHER_TARGETS[teacher_targets] or DEFAULT_TARGETS
    pristine = {name: p.detach().clone() for name, p in loaded.model.named_parameters() if p.dim() == 2}

    # The teacher: a random LoRA, sized so that the base model agrees with it only in part.
    probe = requests[:PROBE_PROMPTS]
    probe_samples = _samples(tokenizer, probe, _answers(loaded, tokenizer, probe, schedule), schedule)
    base_probe = _choices(loaded.model, probe_samples, schedule)
    scale, teacher_voice, base_agreement = 0.25, None, {}
    for _ in range(10):
        teacher_voice = _random_teacher(loaded.model, work / f"teacher-{scale:g}", scale, teacher_pattern, teacher_rank)
        switcher.apply(load_voice(teacher_voice))
        base_agreement = _agreement(base_probe, _choices(loaded.model, probe_samples, schedule))
        switcher.apply(None)
        if base_agreement["codebook0_top1"] > TEACHER_BASE_AGREEMENT[1]:
            scale *= 1.6
        elif base_agreement["codebook0_top1"] < TEACHER_BASE_AGREEMENT[0]:
            scale /= 1.6
        else:
            break
    switcher.apply(load_voice(teacher_voice))
    started = time.perf_counter()
    samples = _samples(tokenizer, requests, _answers(loaded, tokenizer, requests, schedule), schedule)
    generate_s = time.perf_counter() - started
    cut = [prompts - VALIDATION_PROMPTS - HELD_OUT_PROMPTS, prompts - HELD_OUT_PROMPTS]
    train, validation, held_out = samples[: cut[0]], samples[cut[0] : cut[1]], samples[cut[1] :]
    teacher = _choices(loaded.model, held_out, schedule)
    switcher.apply(None)
    for name, p in loaded.model.named_parameters():  # switching the teacher out is exact: the base, bit for bit
        if name in pristine:
            assert torch.equal(p, pristine[name]), name
    base_choices = _choices(loaded.model, held_out, schedule)
    base = _agreement(base_choices, teacher)

    budget = TokenBudget(STUDENT_BATCH_POSITIONS, STUDENT_BATCH_POSITIONS)
    runs, best = [], None
    for rate in learning_rates:
        reloaded = load_model(folder, device=device)  # a fresh base for each student
        options = TrainingOptions(steps=steps, rank=DEFAULT_RANK, learning_rate=rate, budget=budget, previews=False)
        trainer = VoiceTrainer(reloaded, PreparedData(train, validation, 0.0), options, budget, steps, base_model=None)
        began, losses, curve = time.perf_counter(), [], []
        for step in range(1, steps + 1):
            losses.append({key: round(value, 3) for key, value in trainer.train_step().items() if key.endswith("loss")})
            if eval_every and step % eval_every == 0 and step < steps:  # the agreement on the way (not timed)
                paused = time.perf_counter()
                curve.append({"step": step, **_agreement(_choices(reloaded.model, held_out, schedule), teacher),
                              "validation_losses": trainer.held_out_loss()})
                began += time.perf_counter() - paused
        train_s = time.perf_counter() - began
        validation_loss = trainer.held_out_loss()
        final_choices = _choices(reloaded.model, held_out, schedule)
        final = _agreement(final_choices, teacher)
        run = {"learning_rate": rate, "train_s": train_s, "loss_first": losses[0], "loss_last": losses[-1],
               "validation_losses": validation_loss, "losses_every_25": losses[::25],
               "agreement_on_the_way": [*curve, {"step": steps, **final, "validation_losses": validation_loss}], "held_out_agreement": final,
               "by_teacher_margin": _agreement_by_margin(final_choices, teacher)}
        runs.append(run)
        if best is None or validation_loss["loss"] < best["validation_losses"]["loss"]:
            best = run
        del trainer, reloaded
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    student = best["held_out_agreement"]
    ceiling_choices = _teacher_on_the_students_path(folder, loaded.device, loaded.dtype, teacher_voice, teacher_rank,
                                                    teacher_pattern, held_out, schedule)
    return {
        "teacher": {"rank": teacher_rank, "targets": teacher_targets, "scale": scale, "base_agreement_on_probe": base_agreement},
        "prompts": {"train": len(train), "validation": len(validation), "held_out": len(held_out),
                    "answer_blocks": ANSWER_BLOCKS, "generate_s": generate_s},
        "students": runs,
        "chosen_learning_rate": best["learning_rate"],
        "held_out_agreement_with_teacher": {"base": base, "student": student, "ceiling": _agreement(ceiling_choices, teacher)},
        "by_teacher_margin": {"base": _agreement_by_margin(base_choices, teacher), "student": best["by_teacher_margin"],
                              "ceiling": _agreement_by_margin(ceiling_choices, teacher)},
        "target_halfway": {key: student[key] >= base[key] + 0.5 * (1 - base[key]) for key in ("text_top1", "codebook0_top1")},
        "teacher_forced": True,
    }


def _teacher_on_the_students_path(folder: Path, device, dtype, teacher_voice: Path, rank: int, targets: str, samples,
                                  schedule: tuple[int, int]) -> list[tuple[Any, Any, Any]]:
    """The teacher's choices computed as a student's are (peft's unmerged adapter, float32 A and B, on a fresh
    bf16 base) rather than merged into the weights as the app's VoiceSwitcher merges it: the same function in
    exact arithmetic, so its agreement with the teacher is the most a student that learned the teacher exactly
    could show on this random model."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from engine.model.loading import load_model
    from engine.voices.adapter import attach_lora

    loaded = load_model(folder, device=device, dtype=dtype)
    model = attach_lora(loaded.model, rank=rank, alpha=rank, targets=targets)  # alpha = r: the teacher's scale of 1
    result = set_peft_model_state_dict(model, load_file(str(teacher_voice / "adapter_model.safetensors")))
    assert not result.unexpected_keys, result.unexpected_keys[:3]
    return _choices(loaded.model, samples, schedule)


def _random_teacher(model, folder: Path, scale: float, targets: str, rank: int) -> Path:
    """A LoRA adapter in peft's format with random A and B, sized so that B @ A is `scale` times each weight's own
    spread (a random direction per layer: a different model, as a trained voice is, of a chosen distance)."""
    import re

    import torch
    from safetensors.torch import save_file
    from torch import nn

    folder.mkdir(parents=True, exist_ok=True)
    pattern = re.compile(targets)
    generator = torch.Generator().manual_seed(7)
    tensors = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and pattern.fullmatch(name) and module.weight.numel():
            rows, columns = module.weight.shape
            spread = float(module.weight.detach().float().std())
            # Entries of B @ A have a spread of spread · scale: A's rows unit-norm, B's entries of spread · scale.
            a = torch.randn(rank, columns, generator=generator) / math.sqrt(columns)
            b = torch.randn(rows, rank, generator=generator) * spread * scale * math.sqrt(columns / rank)
            tensors[f"base_model.model.{name}.lora_A.weight"] = a.contiguous()
            tensors[f"base_model.model.{name}.lora_B.weight"] = b.contiguous()
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": targets}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def _answers(loaded, tokenizer, requests: list[list[int]], schedule: tuple[int, int]) -> list[tuple[list[int], Any]]:
    """Each request answered greedily by the model as it is, ANSWER_BATCH at a time (`_answer_batch`)."""
    answers = []
    for start in range(0, len(requests), ANSWER_BATCH):
        answers += _answer_batch(loaded, tokenizer, requests[start : start + ANSWER_BATCH], schedule)
    return answers


def _answer_batch(loaded, tokenizer, requests: list[list[int]], schedule: tuple[int, int]) -> list[tuple[list[int], Any]]:
    """Requests answered greedily by the model as it is, all at once: one batch through liquid-audio's own
    modules (the backbone with transformers' cache, the depthformer with its own), in the interleave schedule,
    ANSWER_BLOCKS blocks of text tokens and audio frames. The requests are of one length, and the random model's
    stop tokens are suppressed (engine/bench/random_model.py), so every answer keeps the schedule in lockstep."""
    import torch

    from engine.voices.samples import chat_prefix_ids

    model, device = loaded.model, loaded.device
    n_text, n_audio = schedule
    prefix = torch.tensor([chat_prefix_ids(tokenizer, request) for request in requests], device=device)
    texts = torch.empty((len(requests), 0), dtype=torch.long, device=device)
    frames = torch.empty((len(requests), model.codebooks, 0), dtype=torch.long, device=device)
    with torch.no_grad():
        output = model.lfm(inputs_embeds=model.lfm.embed_tokens(prefix), use_cache=True)
        for _ in range(ANSWER_BLOCKS):
            for modality, count in (("text", n_text), ("audio", n_audio)):
                for _ in range(count):
                    hidden = output.last_hidden_state[:, -1]
                    if modality == "text":
                        token = torch.nn.functional.linear(hidden, model.lfm.embed_tokens.weight).argmax(-1)
                        texts = torch.cat([texts, token[:, None]], dim=1)
                        embedding = model.lfm.embed_tokens(token)
                    else:
                        frame = _greedy_frames(model, hidden)
                        frames = torch.cat([frames, frame[:, :, None]], dim=2)
                        embedding = model.audio_embedding(frame + model.codebook_offsets).sum(1)
                    output = model.lfm(inputs_embeds=embedding[:, None], cache=output.cache, use_cache=True)
    return [(texts[i].tolist(), frames[i].cpu()) for i in range(len(requests))]


def _greedy_frames(model, hidden):
    """liquid-audio's `_sample_audio_frame` (greedy) for a batch of backbone states: (batch, codebooks) codes."""
    import torch

    inputs = model.depth_linear(hidden).view(hidden.shape[0], model.codebooks, model.depthformer_dim)
    token = torch.zeros_like(inputs[:, 0])
    cache, codes = None, []
    for i in range(model.codebooks):
        out, cache = model.depthformer.forward_cached((inputs[:, i] + token)[:, None, :], cache)
        code = model.depth_embeddings[i].get_logits(out[:, 0]).argmax(-1)
        codes.append(code)
        token = model.depth_embeddings[i](code)
    return torch.stack(codes, dim=1)


def _samples(tokenizer, requests, answers, schedule) -> list:
    from engine.voices.samples import sample_from_tokens

    return [_supervising_only_the_answer(
                sample_from_tokens(f"prompt-{i:03d}", tokenizer, request, text, codes, n_text=schedule[0], n_audio=schedule[1]),
                len(text), codes.shape[1])
            for i, (request, (text, codes)) in enumerate(zip(requests, answers, strict=True))]


def _supervising_only_the_answer(sample, text_count: int, frame_count: int):
    """The sample with labels only on what the teacher generated: not on the <|text_end|>, <|im_end|>, newline and
    end-of-audio frame the layout adds after it. The random model cannot say those (its stop rows are zeroed so that
    answers run in lockstep, engine/bench/random_model.py), and with its tied unit-scale text head they cost ~200
    nats each: three of an answer's 49 labels were 80 % of its loss and of the gradient (measured on the CPU), and
    a student spent its steps on them. A real model says them as it says anything else."""
    import dataclasses

    import torch
    from liquid_audio.utils import LFMModality

    supervised = sample.supervision_mask[0].clone()
    for modality, keep in ((LFMModality.TEXT, text_count), (LFMModality.AUDIO_OUT, frame_count)):
        labelled = torch.nonzero(supervised & (sample.modality_flag[0] == int(modality))).flatten()
        supervised[labelled[keep:]] = False
    return dataclasses.replace(sample, supervision_mask=supervised[None])


def _choices(model, samples, schedule: tuple[int, int]) -> list[tuple[Any, Any]]:
    """Teacher-forced top-1 choices of `model` (with whatever voice or adapter it carries) on each sample, from
    liquid-audio's own `logits` (the loss's forward): at every text position and every codebook of every audio frame
    that the answer's generation chose (the samples label nothing else: `_supervising_only_the_answer`); with each
    code's margin, its logit over the runner-up's (`_agreement_by_margin`)."""
    import torch

    from engine.voices.batches import collate

    device = model.codebook_offsets.device
    text_count, frame_count = ANSWER_BLOCKS * schedule[0], ANSWER_BLOCKS * schedule[1]
    choices = []
    model.eval()  # VoiceTrainer.train_step puts it back in train mode
    with torch.no_grad():
        for sample in samples:
            text_logits, audio_logits, _, _ = model.logits(collate([sample]).to(device))
            frames = audio_logits.view(-1, model.codebooks, audio_logits.shape[-1])[:frame_count].float()
            top2 = frames.topk(2, dim=-1)
            choices.append((text_logits[:text_count].argmax(-1).cpu(), top2.indices[..., 0].cpu(),
                            (top2.values[..., 0] - top2.values[..., 1]).cpu()))
    return choices


def _agreement(got, want) -> dict[str, Any]:
    """Top-1 agreement on text and on codebook 0 (the targets'), and on each codebook (teacher-forced on the
    teacher's earlier codes of the frame, as the loss sees them)."""
    import torch

    text = torch.cat([g[0] == w[0] for g, w in zip(got, want, strict=True)]).float().mean().item()
    codebooks = torch.cat([g[1] == w[1] for g, w in zip(got, want, strict=True)]).float().mean(0).tolist()
    return {"text_top1": text, "codebook0_top1": codebooks[0], "codebooks_top1": [round(c, 4) for c in codebooks]}


def _agreement_by_margin(got, want) -> list[dict[str, Any]]:
    """Codebook-0 agreement split by how far the teacher's choice led its runner-up (in logits, i.e. nats of
    log-probability): the random model's audio logits are nearly flat, so many of its choices are near-ties that
    any change of the computation flips."""
    import torch

    agree = torch.cat([g[1][:, 0] == w[1][:, 0] for g, w in zip(got, want, strict=True)]).float()
    margin = torch.cat([w[2][:, 0] for w in want])
    rows = []
    for low, high in zip(MARGIN_EDGES[:-1], MARGIN_EDGES[1:], strict=True):
        inside = (margin >= low) & (margin < high)
        rows.append({"margin": [low, high], "share": round(inside.float().mean().item(), 4),
                     "codebook0_top1": round(agree[inside].mean().item(), 4) if inside.any() else None})
    return rows


# --------------------------------------------------------------------------- the section (parent)


def estimate_minutes(speed_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Minutes to train SPEECH_MINUTES of speech for EPOCHS on each of ESTIMATE_CARDS, per measured configuration
    (card size and precision, i.e. batch size): an ESTIMATE. Each step on the card takes its host side as measured
    here (the lent GPU's host: these steps are host-bound on it) or its arithmetic at the card's bf16 tensor
    throughput × engine/voices/plan.py MATMUL_EFFICIENCY, whichever is longer; the steps are as many as this
    configuration's batches need for that much speech."""
    from engine.voices import plan

    speech_seconds = SPEECH_MINUTES * 60 * EPOCHS
    estimates: dict[str, Any] = {"speech_minutes": SPEECH_MINUTES, "epochs": EPOCHS, "matmul_efficiency": plan.MATMUL_EFFICIENCY,
                                 "method": "per step max(host seconds measured here, flop / (card bf16 TFLOP/s × efficiency))"}
    for card in ESTIMATE_CARDS:
        tflops = plan.CARD_TENSOR_TFLOPS[card]
        by_run = {}
        for run in speed_runs:
            if not run.get("step_s_median") or not run.get("speech_seconds_per_s"):
                continue
            speech_per_step = run["speech_seconds_per_s"] * run["step_s_median"]
            steps = math.ceil(speech_seconds / speech_per_step)
            step = plan.step_seconds(run["flop_per_step"], tflops, host_seconds=run["step_s_median"])
            low = max(run["step_s_median"], run["flop_per_step"] / (tflops * 1e12 * LOW_MATMUL_EFFICIENCY))
            by_run[f"{run['card']} {run['precision']}"] = {
                "steps": steps, "step_s": step, "arithmetic_s": run["flop_per_step"] / (tflops * 1e12 * plan.MATMUL_EFFICIENCY),
                "minutes": steps * step / 60, f"minutes_at_{LOW_MATMUL_EFFICIENCY:g}_efficiency": steps * low / 60,
            }
        estimates[card] = {"tensor_tflops": tflops, "by_run": by_run}
    return estimates


def run_voice_training(out: Path, *, learning: bool = True, runs: list[int] | None = None,
                       learning_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """`runs`: indices into SPEED_RUNS (default all); `learning_options`: prompts, steps, rates for the check."""
    from engine.bench.small_cards import DESKTOP_GB, OUTSIDE_ALLOCATOR_GB, allocator_cap_bytes, run_child

    work = Path(tempfile.mkdtemp(prefix="voicechat-voice-training-"))
    folder = work / "LFM2.5-Audio-1.5B-JP"
    section: dict[str, Any] = {
        "method": {"desktop_gb": DESKTOP_GB, "outside_allocator_gb": OUTSIDE_ALLOCATOR_GB,
                   "cap": "card GiB − desktop − outside-allocator memory (engine/bench/small_cards.py)",
                   "steps_timed": SPEED_STEPS, "clip_seconds": CLIP_SECONDS},
    }
    started = time.perf_counter()
    section["checkpoint"] = run_child("engine.bench.voice_training", ["--write", str(folder)], timeout=900)
    section["checkpoint"]["write_s"] = time.perf_counter() - started
    speed = []
    for label, gib, precision in [SPEED_RUNS[i] for i in runs] if runs is not None else SPEED_RUNS:
        run = run_child("engine.bench.voice_training", ["--speed", str(folder), "--cap-bytes", str(allocator_cap_bytes(gib)), "--precision", precision],
                        timeout=600)
        run.update(card=label, card_gib=gib, precision=precision)
        speed.append(run)
        print(json.dumps({k: run.get(k) for k in ("card", "precision", "step_s_median", "positions_per_s", "achieved_tflops",
                                                   "peak_driver_gb", "within_cap_and_planned", "out_of_memory", "error")}), flush=True)
    section["speed"] = speed
    section["card_estimates"] = estimate_minutes(speed)
    if learning:
        options = learning_options or {}
        arguments = [f"--{key}={value}" for key, value in options.items()]
        section["learning"] = run_child("engine.bench.voice_training", ["--learn", str(folder), *arguments], timeout=1200)
        print(json.dumps(section["learning"].get("held_out_agreement_with_teacher", section["learning"])), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "voice_training.json").write_text(json.dumps(section, indent=1))
    return section


def write_checkpoint(folder: Path) -> dict[str, Any]:
    from engine.bench.small_cards import write_full_size_checkpoint
    from engine.model.tiny_checkpoint import write_audio_tokenizer

    written = write_full_size_checkpoint(folder)
    write_audio_tokenizer(folder)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--child-out", type=Path)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--speed", type=Path)
    parser.add_argument("--learn", type=Path)
    parser.add_argument("--cap-bytes", type=int)
    parser.add_argument("--precision", choices=("bf16", "int8"), default="bf16")
    parser.add_argument("--no-learning", action="store_true")
    parser.add_argument("--runs", default=None, help="comma-separated indices into SPEED_RUNS (default: all; \"\": none)")
    parser.add_argument("--prompts", type=int, default=LEARNING_PROMPTS, help="the learning check's prompts")
    parser.add_argument("--steps", type=int, default=STUDENT_STEPS, help="the learning check's student steps")
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in STUDENT_LRS), help="the student's learning rates to choose from")
    parser.add_argument("--teacher-rank", type=int, default=TEACHER_RANK, help="the learning check's teacher LoRA rank")
    parser.add_argument("--eval-every", type=int, default=0, help="the student's agreement every so many steps too")
    parser.add_argument("--teacher-targets", choices=sorted(TEACHER_TARGETS), default="all", help="where the teacher's change lies")
    args = parser.parse_args(argv)
    if args.child_out:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from engine.tools.reply import quiet_library_logs

        quiet_library_logs()
        if args.write:
            result = write_checkpoint(args.write)
        elif args.speed:
            result = measure_speed(args.speed, args.cap_bytes, args.precision)
        else:
            result = learning_check(args.learn, prompts=args.prompts, steps=args.steps, teacher_rank=args.teacher_rank,
                                    learning_rates=tuple(float(r) for r in args.rates.split(",")), eval_every=args.eval_every,
                                    teacher_targets=args.teacher_targets)
        args.child_out.write_text(json.dumps(result))
        return 0
    options = {"prompts": args.prompts, "steps": args.steps, "rates": args.rates, "teacher-rank": args.teacher_rank,
               "eval-every": args.eval_every, "teacher-targets": args.teacher_targets}
    run_voice_training(args.out, learning=not args.no_learning, runs=[int(i) for i in args.runs.split(",") if i] if args.runs is not None else None,
                       learning_options=options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
