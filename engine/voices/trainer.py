"""Training a voice: a LoRA on the frozen model, from the user's clips, with the model's own loss.

One run, top to bottom (`train_voice`):

    encode      each clip becomes a sample (engine/voices/samples.py), cached in the work folder
    split       a few clips held out to measure the voice on speech it did not learn from
    plan        every step's batch, sized by tokens (engine/voices/batches.py)
    load        the model as the app loads it (bf16, or the int8 base for small cards), peft's LoRA on top
    resume      the last checkpoint's adapter, optimizer and step, if asked and it matches this run
    steps       forward (liquid-audio's loss), backward, AdamW; a checkpoint, the held-out loss and a preview
                every `checkpoint_every` steps; a stop request ends the run after a checkpoint
    publish     the adapter and its card written into the output folder (engine/voices/voice_card.py)

It runs in its own process (engine/tools/voice_train.py), never in the app's: an out-of-memory error or a crash
there loses at most the steps since the last checkpoint, and the app's window, conversation and data are
untouched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.constants import ANSWER_SAMPLE_RATE
from engine.errors import VoiceTrainingError
from engine.model.quantized import Precision
from engine.voices import adapter as lora
from engine.voices.batches import TokenBudget, collate, epoch_batches, plan_steps, split_held_out
from engine.voices.run_files import SAMPLES_FILE, Checkpoint, TrainingLog, work_dir
from engine.voices.samples import Clip, SampleCache, VoiceSample, encode_samples, make_mapper, model_fingerprint

log = logging.getLogger(__name__)

# Epochs over the data when the steps are not given: enough passes for a short recording to be learned, and
# at least three for a long one (public voice recipes train 20-60 minutes of speech for 2-4 epochs).
TARGET_MINUTES_SEEN = 90.0
MIN_EPOCHS, MAX_EPOCHS = 3.0, 30.0
CHECKPOINTS_PER_RUN = 10
MIN_STEPS_BETWEEN_CHECKPOINTS = 10
WARMUP_SHARE = 0.05
MIN_LR_SHARE = 0.1  # cosine decay to a tenth of the peak, as liquid-audio's own trainer does
MAX_GRAD_NORM = 1.0
# Batches on the CPU (tests, the demo model): small, so that a step stays short.
CPU_BUDGET = TokenBudget(positions=512, audio_frames=256)

Event = dict[str, Any]


@dataclass(frozen=True)
class TrainingOptions:
    steps: int | None = None  # None: from the data's size (`default_epochs`)
    rank: int = lora.DEFAULT_RANK
    alpha: float | None = None  # None: ALPHA_PER_RANK × rank
    targets: str = lora.DEFAULT_TARGETS
    precision: Precision = "bf16"
    learning_rate: float = 2e-4
    budget: TokenBudget | None = None  # None: from the device (engine/voices/plan.py)
    seed: int = 0
    checkpoint_every: int | None = None  # None: about CHECKPOINTS_PER_RUN checkpoints a run
    gradient_checkpointing: bool = True
    previews: bool = True

    @property
    def lora_alpha(self) -> float:
        return self.alpha if self.alpha is not None else lora.ALPHA_PER_RANK * self.rank


def default_epochs(seconds_of_speech: float) -> float:
    minutes = max(seconds_of_speech / 60.0, 1e-6)
    return min(MAX_EPOCHS, max(MIN_EPOCHS, TARGET_MINUTES_SEEN / minutes))


def learning_rate_factor(step: int, steps: int) -> float:
    """Linear warm-up over the first WARMUP_SHARE of the steps, then a cosine down to MIN_LR_SHARE."""
    warmup = max(1, round(steps * WARMUP_SHARE))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return MIN_LR_SHARE + (1 - MIN_LR_SHARE) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@dataclass
class PreparedData:
    train: list[VoiceSample]
    held_out: list[VoiceSample]
    seconds: float  # of speech in all clips

    @property
    def clips(self) -> int:
        return len(self.train) + len(self.held_out)


def prepare_samples(
    clips: Sequence[Clip], model_folder: Path, out_dir: Path, *, device: torch.device, interleave: tuple[int, int],
    codebooks: int, on_event: Callable[[Event], None], should_stop: Callable[[], bool],
) -> PreparedData | None:
    """Every clip encoded (from the cache where it can), split into training and held-out; None if stopped."""
    from liquid_audio import LFM2AudioProcessor

    n_text, n_audio = interleave
    cache = SampleCache(work_dir(out_dir) / SAMPLES_FILE, model_fingerprint(model_folder, interleaved_n_text=n_text, interleaved_n_audio=n_audio))
    processor = LFM2AudioProcessor.from_pretrained(model_folder, device=device).eval()
    try:
        mapper = make_mapper(processor, codebooks=codebooks, interleaved_n_text=n_text, interleaved_n_audio=n_audio)
        samples = encode_samples(
            clips, mapper, cache, should_stop=should_stop,
            progress=lambda done, total: on_event({"event": "encode", "done": done, "total": total}),
        )
    finally:
        processor._mimi = None  # the audio tokenizer is needed only here: its memory goes back before training
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if len(samples) < len(clips):
        return None
    train, held_out = split_held_out(samples)
    seconds = sum(len(clip.samples) for clip in clips) / ANSWER_SAMPLE_RATE
    return PreparedData(train, held_out, seconds)


def label_counts(sample: VoiceSample) -> tuple[int, int]:
    """(text labels, audio labels) the model's loss averages over for this sample: its supervised positions of
    each modality but the first position (liquid-audio's `logits` shifts by one)."""
    from liquid_audio.utils import LFMModality

    supervised = sample.supervision_mask[:, 1:]
    flags = sample.modality_flag[:, 1:]
    return int((supervised & (flags == int(LFMModality.TEXT))).sum()), int((supervised & (flags == int(LFMModality.AUDIO_OUT))).sum())


def run_fingerprint(data: PreparedData, options: TrainingOptions, budget: TokenBudget, steps: int) -> str:
    """What a checkpoint must match to be resumed: the samples, the budget, the steps and the options."""
    digest = hashlib.sha256()
    for sample in [*data.train, *data.held_out]:
        digest.update(sample.name.encode("utf-8"))
        for tensor in sample.tensors().values():
            digest.update(tensor.numpy().tobytes())
    # The options as given (a budget or steps left to be chosen are None) are replaced by what was chosen.
    chosen = {key: value for key, value in asdict(options).items() if key not in ("previews", "checkpoint_every", "budget", "steps")}
    chosen.update(budget=asdict(budget), steps=steps)
    digest.update(json.dumps(chosen, sort_keys=True, default=str).encode())
    return digest.hexdigest()


class VoiceTrainer:
    """The training loop on a loaded model (the adapter attached), one step at a time."""

    def __init__(self, loaded, data: PreparedData, options: TrainingOptions, budget: TokenBudget, steps: int, *, base_model: str | None) -> None:
        self.loaded = loaded
        self.data = data
        self.options = options
        self.steps = steps
        self.device = loaded.device
        self.plan = plan_steps(data.train, budget, steps=steps, seed=options.seed)
        self.fingerprint = run_fingerprint(data, options, budget, steps)
        with torch.random.fork_rng(devices=[]):  # the adapter's initial A from the run's seed, whatever ran before
            torch.manual_seed(options.seed)
            self.model = lora.attach_lora(loaded.model, rank=options.rank, alpha=options.lora_alpha, targets=options.targets,
                                          base_model=base_model)
        if options.gradient_checkpointing:
            lora.enable_gradient_checkpointing(loaded.model)
        self.optimizer = torch.optim.AdamW(lora.trainable_parameters(self.model), lr=options.learning_rate, betas=(0.9, 0.95),
                                           weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: learning_rate_factor(step, steps))
        self.step = 0
        self.budget = budget
        self.parts = 1  # how many parts a batch is run in (more after running out of GPU memory)

    def restore(self, checkpoint: Checkpoint) -> None:
        if checkpoint.fingerprint != self.fingerprint:
            raise VoiceTrainingError.of(
                "The run in {folder} was started with other clips or settings, so it cannot be resumed. "
                "Resume it with the same data and settings, or train into a new folder.",
                folder=self.loaded.folder,
            )
        lora.load_adapter_state(self.model, checkpoint.adapter)
        self.optimizer.load_state_dict(checkpoint.optimizer)
        self.scheduler.load_state_dict(checkpoint.scheduler)
        self.step = checkpoint.step

    def checkpoint(self, log_: TrainingLog) -> Checkpoint:
        return Checkpoint(self.step, self.fingerprint, lora.adapter_state(self.model), self.optimizer.state_dict(),
                          self.scheduler.state_dict(), log_.as_dict())

    def train_step(self) -> dict[str, float]:
        """One optimizer step on the plan's next batch; returns its losses (one host sync, for the log). A batch
        that runs out of GPU memory is split into parts whose gradients add up to the whole batch's (each part's
        loss weighted by its share of the batch's labels), and the run goes on in smaller parts."""
        batch = [self.data.train[i] for i in self.plan[self.step]]
        lora.set_training_mode(self.loaded.model, True)
        while True:
            try:
                losses = self._run_batch(batch, train=True)
                break
            except torch.OutOfMemoryError:
                self.optimizer.zero_grad(set_to_none=True)
                if self.parts >= len(batch):
                    raise
                self.parts = min(len(batch), self.parts * 2)
                log.warning("a batch of %d clips did not fit the GPU; going on in %d parts", len(batch), self.parts)
                torch.cuda.empty_cache()
        torch.nn.utils.clip_grad_norm_(lora.trainable_parameters(self.model), MAX_GRAD_NORM)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return {**losses, "lr": self.scheduler.get_last_lr()[0], "tokens": sum(s.positions for s in batch)}

    def _run_batch(self, batch: list[VoiceSample], *, train: bool) -> dict[str, float]:
        """The batch's losses, exactly as one forward of it would give them, run in `self.parts` parts; with
        `train` the gradients of the whole batch's loss are accumulated too."""
        counts = [label_counts(s) for s in batch]
        text_total = max(1, sum(t for t, _ in counts))
        audio_total = max(1, sum(a for _, a in counts))
        total = max(1, sum(t + a for t, a in counts))
        size = math.ceil(len(batch) / self.parts)
        sums = torch.zeros(3, device=self.device)
        for start in range(0, len(batch), size):
            text = sum(t for t, _ in counts[start : start + size])
            audio = sum(a for _, a in counts[start : start + size])
            output = self.model(collate(batch[start : start + size]).to(self.device))
            if train:
                (output.loss * ((text + audio) / total)).backward()
            sums += torch.stack([output.loss.detach() * (text + audio) / total, output.text_loss.detach() * text / text_total,
                                 output.audio_loss.detach() * audio / audio_total]).float()
        loss, text_loss, audio_loss = sums.tolist()
        return {"loss": loss, "text_loss": text_loss, "audio_loss": audio_loss}

    @torch.no_grad()
    def held_out_loss(self) -> dict[str, float] | None:
        """The model's losses on the held-out clips, as one batch of them all would give them."""
        if not self.data.held_out:
            return None
        lora.set_training_mode(self.loaded.model, False)
        parts = self.parts
        self.parts = max(parts, len(epoch_batches(self.data.held_out, self.budget, seed=0, epoch=0)))
        try:
            return self._run_batch(self.data.held_out, train=False)
        finally:
            self.parts = parts

    def preview(self) -> np.ndarray:
        from engine.chat.generation import Schedule
        from engine.voices.preview import speak_sentence

        lora.set_training_mode(self.loaded.model, False)
        return speak_sentence(self.loaded.model, self.loaded.processor,
                              Schedule(self.loaded.interleaved_n_text, self.loaded.interleaved_n_audio))
