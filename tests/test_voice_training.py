"""Training a voice on the CPU, end to end on the tiny model with Japanese speech from Open JTalk: the losses fall,
a stopped run resumes to exactly the uninterrupted one, the published adapter is a voice the app switches in (in
both precisions) and it changes the answer; everything that cannot be done is refused before anything changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine.errors import ModelFilesError, VoiceTrainingError
from engine.model.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, VoiceSwitcher, load_voice
from engine.voices.batches import TokenBudget, collate
from engine.voices.run import RunRequest, train_voice
from engine.voices.run_files import LOG_FILE, TrainingLog, checkpoint_path
from engine.voices.trainer import TrainingOptions
from engine.voices.voice_card import VOICE_CARD, VoiceCard
from tests.voice_training_helpers import speech_clips

STEPS = 8
OPTIONS = TrainingOptions(steps=STEPS, rank=4, checkpoint_every=4, learning_rate=1e-3, budget=TokenBudget(400, 200))


@pytest.fixture(scope="module")
def clips():
    return speech_clips()


def _train(clips, out: Path, model: Path, *, stop_after: int | None = None, resume: bool = False,
           options: TrainingOptions = OPTIONS, replace: bool = False) -> tuple[TrainingLog, list[dict]]:
    events: list[dict] = []
    request = RunRequest(clips, out, model, None, options, torch.device("cpu"), resume=resume, replace=replace)
    steps_seen = [0]

    def on_event(event: dict) -> None:
        events.append(event)
        if event["event"] == "step":
            steps_seen[0] = event["step"]

    record = train_voice(request, on_event=on_event,
                         should_stop=lambda: stop_after is not None and steps_seen[0] >= stop_after)
    return record, events


@pytest.fixture(scope="module")
def trained(tmp_path_factory, clips, tiny_model_with_tokenizer_dir: Path) -> tuple[Path, TrainingLog, list[dict]]:
    out = tmp_path_factory.mktemp("voices") / "straight"
    record, events = _train(clips, out, tiny_model_with_tokenizer_dir)
    return out, record, events


def test_the_losses_fall_and_the_voice_is_published_with_its_card(trained) -> None:
    out, record, events = trained
    assert record.status == "done" and record.step == STEPS
    losses = [entry["loss"] for entry in record.losses]
    assert len(losses) == STEPS
    assert sum(losses[-2:]) / 2 < 0.9 * sum(losses[:2]) / 2, losses
    held_out = [entry["loss"] for entry in record.held_out]
    assert [entry["step"] for entry in record.held_out] == [4, 8]
    assert held_out[-1] < held_out[0], held_out
    assert {event["event"] for event in events} >= {"encode", "start", "loaded", "step", "held_out", "preview", "checkpoint", "done"}
    # Published: the adapter peft wrote, the card, the last preview, the log; no work folder left.
    assert sorted(p.name for p in out.iterdir()) == sorted([ADAPTER_CONFIG, ADAPTER_WEIGHTS, VOICE_CARD, "preview.wav", LOG_FILE])
    card = VoiceCard.read(out)
    assert card is not None and card.steps == STEPS and card.rank == 4 and card.clips == 6
    assert card.held_out_loss == pytest.approx(held_out[-1])
    config = json.loads((out / ADAPTER_CONFIG).read_text())
    assert config["r"] == 4 and config["peft_type"] == "LORA"
    log = json.loads((out / LOG_FILE).read_text())
    assert log["status"] == "done" and len(log["losses"]) == STEPS and log["tokens_per_second"] > 0


def test_a_stopped_run_is_no_voice_and_resumes_to_exactly_the_uninterrupted_one(trained, clips, tmp_path, tiny_model_with_tokenizer_dir) -> None:
    straight, _, _ = trained
    out = tmp_path / "stopped"
    record, events = _train(clips, out, tiny_model_with_tokenizer_dir, stop_after=5)
    assert record.status == "cancelled" and record.step == 5
    assert events[-1] == {"event": "cancelled", "step": 5}
    assert not (out / ADAPTER_CONFIG).exists() and not (out / ADAPTER_WEIGHTS).exists()  # no half-trained voice
    assert checkpoint_path(out).is_file()
    assert json.loads((out / LOG_FILE).read_text())["status"] == "cancelled"
    with pytest.raises(VoiceTrainingError, match="unfinished training"):
        _train(clips, out, tiny_model_with_tokenizer_dir)  # a new run would drop it: refused unless asked

    resumed, events = _train(clips, out, tiny_model_with_tokenizer_dir, resume=True)
    assert resumed.status == "done" and [e["step"] for e in events if e["event"] == "step"] == [6, 7, 8]
    expected, got = load_file(straight / ADAPTER_WEIGHTS), load_file(out / ADAPTER_WEIGHTS)
    assert expected.keys() == got.keys() and len(got) > 20
    for name in expected:
        assert torch.equal(expected[name], got[name]), name


def test_the_trained_voice_switches_in_both_precisions_and_changes_the_answer(trained, tiny_model_with_tokenizer_dir) -> None:
    from engine.chat.session import ChatSession
    from engine.protocol import SamplingSettings
    from tests.voice_training_helpers import speech

    out, _, _ = trained
    question = speech("今日の予定を教えてください。", 16_000)
    for precision in ("bf16", "int8"):
        answers = {}
        for voice in (None, str(out)):
            session = ChatSession.open(str(tiny_model_with_tokenizer_dir), lora=voice, device="cpu", precision=precision)
            assert session.voice_problem is None
            done = [o for o in session.respond(question, SamplingSettings(greedy=True), max_answer_seconds=1.0) if hasattr(o, "stats")]
            answers[voice] = done[-1].stats.token_ids
            session.close()
        assert answers[None] != answers[str(out)], precision


def test_the_voice_merges_exactly_what_peft_computes(trained, tiny_loaded) -> None:
    """The switch merges the published adapter as peft's own merge does (the same weights to float32 rounding)."""
    import copy

    from peft import PeftModel

    out, _, _ = trained
    model = copy.deepcopy(tiny_loaded.model)
    merged = PeftModel.from_pretrained(copy.deepcopy(tiny_loaded.model), str(out)).merge_and_unload()
    VoiceSwitcher(model).apply(load_voice(out))
    for (name, got), (_, want) in zip(model.named_parameters(), merged.named_parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6, msg=name)


def test_int8_base_trains_with_the_engines_own_weights(clips, tmp_path, tiny_model_with_tokenizer_dir) -> None:
    options = TrainingOptions(steps=4, rank=4, checkpoint_every=4, learning_rate=1e-3, budget=TokenBudget(400, 200),
                              precision="int8", previews=False)
    record, _ = _train(clips, tmp_path / "int8", tiny_model_with_tokenizer_dir, options=options)
    assert record.status == "done" and record.precision == "int8"
    losses = [entry["loss"] for entry in record.losses]
    assert losses[-1] < losses[0], losses
    assert VoiceCard.read(tmp_path / "int8").precision == "int8"
    load_voice(tmp_path / "int8")


def test_a_batch_split_in_parts_gives_the_whole_batchs_gradients(clips, tiny_model_with_tokenizer_dir) -> None:
    """What happens after running out of GPU memory: the same loss and gradients from smaller parts."""
    from engine.model.loading import load_model
    from engine.voices import adapter
    from engine.voices.trainer import PreparedData, VoiceTrainer, prepare_samples

    data = prepare_samples(clips, tiny_model_with_tokenizer_dir, Path(tiny_model_with_tokenizer_dir).parent / "cache-check",
                           device=torch.device("cpu"), interleave=(6, 9), codebooks=8, on_event=lambda e: None, should_stop=lambda: False)
    data = PreparedData(data.train[:4], [], data.seconds)
    trainer = VoiceTrainer(load_model(tiny_model_with_tokenizer_dir, device="cpu"), data, OPTIONS, TokenBudget(10_000, 10_000), 1,
                           base_model=None)
    for parameter in adapter.trainable_parameters(trainer.model):
        torch.nn.init.normal_(parameter, std=0.02)  # B starts at zero: give every weight a gradient
    results = []
    for parts in (1, 3):
        trainer.parts = parts
        losses = trainer._run_batch(data.train, train=True)
        results.append((losses, [p.grad.clone() for p in adapter.trainable_parameters(trainer.model)]))
        trainer.optimizer.zero_grad(set_to_none=True)
    (whole, whole_grads), (split, split_grads) = results
    assert whole == pytest.approx(split, rel=1e-5)
    for a, b in zip(whole_grads, split_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    one_forward = trainer.model(collate(data.train))
    assert whole["loss"] == pytest.approx(float(one_forward.loss.detach()), rel=1e-5)


@pytest.mark.parametrize("case", ["voice there", "nothing to resume", "no audio tokenizer", "broken model", "no clips"])
def test_what_cannot_be_done_is_refused_before_anything_changes(case, clips, tmp_path, trained, tiny_model_dir, tiny_model_with_tokenizer_dir) -> None:
    straight, _, _ = trained
    model, out, kwargs = tiny_model_with_tokenizer_dir, tmp_path / "out", {}
    if case == "voice there":
        out = straight
    elif case == "nothing to resume":
        kwargs = {"resume": True}
    elif case == "no audio tokenizer":
        model = tiny_model_dir
    elif case == "broken model":
        model = tmp_path / "not-a-model"
        model.mkdir()
    before = {p.name: p.read_bytes() for p in straight.iterdir()}
    error = ModelFilesError if case == "broken model" else VoiceTrainingError
    with pytest.raises(error) as raised:
        _train([] if case == "no clips" else clips, out, model, **kwargs)
    message = raised.value.message
    assert {"voice there": "already holds a voice", "nothing to resume": "no unfinished training",
            "no audio tokenizer": "no audio tokenizer", "broken model": "cannot be used", "no clips": "no clips"}[case] in message
    assert {p.name: p.read_bytes() for p in straight.iterdir()} == before
    if case != "voice there":
        assert not out.exists() or not any(out.iterdir())


def test_a_replaced_voice_stays_until_the_new_one_is_finished(clips, tmp_path, tiny_model_with_tokenizer_dir) -> None:
    out = tmp_path / "voice"
    options = TrainingOptions(steps=2, rank=4, checkpoint_every=1, budget=TokenBudget(400, 200), previews=False)
    _train(clips, out, tiny_model_with_tokenizer_dir, options=options)
    first = (out / ADAPTER_WEIGHTS).read_bytes()
    other_seed = TrainingOptions(steps=2, rank=4, checkpoint_every=1, budget=TokenBudget(400, 200), previews=False, seed=1)
    record, _ = _train(clips, out, tiny_model_with_tokenizer_dir, options=other_seed, replace=True, stop_after=1)
    assert record.status == "cancelled"
    assert (out / ADAPTER_WEIGHTS).read_bytes() == first and (out / ADAPTER_CONFIG).is_file()  # still the old voice
    load_voice(out)
    _train(clips, out, tiny_model_with_tokenizer_dir, options=options, resume=True)
    assert (out / ADAPTER_WEIGHTS).read_bytes() != first
    load_voice(out)


def test_a_damaged_checkpoint_is_named_and_kept(clips, tmp_path, tiny_model_with_tokenizer_dir) -> None:
    out = tmp_path / "voice"
    options = TrainingOptions(steps=3, rank=4, checkpoint_every=1, budget=TokenBudget(400, 200), previews=False)
    _train(clips, out, tiny_model_with_tokenizer_dir, options=options, stop_after=1)
    checkpoint_path(out).write_bytes(checkpoint_path(out).read_bytes()[:100])
    with pytest.raises(VoiceTrainingError, match="damaged"):
        _train(clips, out, tiny_model_with_tokenizer_dir, resume=True)
    assert checkpoint_path(out).stat().st_size == 100


def test_a_sample_made_from_tokens_is_the_mappers_own_layout(clips, tiny_model_with_tokenizer_dir) -> None:
    """The benchmark's teacher answers exist only as tokens; their samples must be laid out as the mapper lays out
    recorded speech (liquid-audio's LFM2AudioChatMapper at the model's schedule)."""
    from liquid_audio import LFM2AudioProcessor

    from engine.voices.samples import READING_REQUEST, make_mapper, reading_chat, sample_from_mapped, sample_from_tokens, wav_bytes

    processor = LFM2AudioProcessor.from_pretrained(tiny_model_with_tokenizer_dir, device="cpu")
    for n_text, n_audio in ((6, 9), (6, 12), (2, 3)):
        mapper = make_mapper(processor, codebooks=8, interleaved_n_text=n_text, interleaved_n_audio=n_audio)
        clip = clips[n_audio % len(clips)]
        mapped = sample_from_mapped(clip.name, mapper(reading_chat(clip.text, wav_bytes(clip.samples))))
        ids = processor.text.encode(clip.text, add_special_tokens=False)
        made = sample_from_tokens(clip.name, processor.text, READING_REQUEST.format(text=clip.text), ids, mapped.audio_out[:, :-1],
                                  n_text=n_text, n_audio=n_audio)
        for field in ("text", "audio_out", "modality_flag", "supervision_mask"):
            assert torch.equal(getattr(made, field), getattr(mapped, field)), (field, n_text, n_audio)


def test_the_learning_checks_samples_label_only_what_the_teacher_generated(tiny_model_with_tokenizer_dir) -> None:
    """The benchmark's learning check supervises the teacher's own tokens and frames, not the stops the layout adds
    (the random model cannot say them): the model's own `logits` see exactly the answer's labels."""
    from engine.bench.voice_training import _samples
    from engine.model.loading import load_model

    loaded = load_model(tiny_model_with_tokenizer_dir, device="cpu")
    generator = torch.Generator().manual_seed(3)
    requests = torch.randint(200, 400, (3, 5), generator=generator).tolist()
    answers = [(torch.randint(200, 400, (n_text,), generator=generator).tolist(),
                torch.randint(0, 2048, (loaded.model.codebooks, frames), generator=generator))
               for n_text, frames in ((12, 18), (7, 9), (1, 3))]
    for sample, (text, codes) in zip(_samples(loaded.processor.text, requests, answers, (6, 9)), answers, strict=True):
        with torch.no_grad():
            _, _, text_labels, audio_labels = loaded.model.logits(collate([sample]))
        assert text_labels.tolist() == text
        assert torch.equal(audio_labels.view(-1, loaded.model.codebooks).T, codes)


def test_the_learning_checks_ceiling_is_the_teacher_itself_on_the_students_path(tiny_model_with_tokenizer_dir, tmp_path) -> None:
    """The check's ceiling runs the teacher's own adapter through peft as a student runs (float32 here, so it must
    agree with the merged teacher everywhere, and not merely as the base does); the split by the teacher's margin
    covers every frame once and averages back to the whole."""
    from engine.bench.voice_training import (_agreement, _agreement_by_margin, _answers, _choices, _random_teacher, _samples,
                                             _teacher_on_the_students_path)
    from engine.model.loading import load_model
    from engine.voices.adapter import DEFAULT_TARGETS

    loaded = load_model(tiny_model_with_tokenizer_dir, device="cpu")
    schedule = (loaded.interleaved_n_text, loaded.interleaved_n_audio)
    requests = torch.randint(200, 400, (4, 6), generator=torch.Generator().manual_seed(5)).tolist()
    teacher_voice = _random_teacher(loaded.model, tmp_path / "teacher", 0.5, DEFAULT_TARGETS, 4)
    switcher = VoiceSwitcher(loaded.model)
    switcher.apply(load_voice(teacher_voice))
    samples = _samples(loaded.processor.text, requests, _answers(loaded, loaded.processor.text, requests, schedule), schedule)
    teacher = _choices(loaded.model, samples, schedule)
    switcher.apply(None)
    base = _agreement(_choices(loaded.model, samples, schedule), teacher)
    ceiling_choices = _teacher_on_the_students_path(tiny_model_with_tokenizer_dir, loaded.device, loaded.dtype, teacher_voice, 4,
                                                    DEFAULT_TARGETS, samples, schedule)
    ceiling = _agreement(ceiling_choices, teacher)
    assert base["codebook0_top1"] < 0.9
    assert ceiling["codebook0_top1"] == 1.0 and ceiling["text_top1"] == 1.0

    rows = _agreement_by_margin(_choices(loaded.model, samples, schedule), teacher)
    assert sum(row["share"] for row in rows) == pytest.approx(1.0, abs=1e-3)
    averaged = sum(row["share"] * row["codebook0_top1"] for row in rows if row["codebook0_top1"] is not None)
    assert averaged == pytest.approx(base["codebook0_top1"], abs=2e-3)


def test_a_voice_is_shared_as_one_zip_and_a_bad_zip_changes_nothing(trained, tmp_path) -> None:
    import zipfile

    from engine.voices.voice_card import export_voice, import_voice

    out, _, _ = trained
    shared = tmp_path / "mine.zip"
    export_voice(out, shared)
    voices = tmp_path / "voices"
    first = import_voice(shared, voices)
    second = import_voice(shared, voices)  # the same name again: a new folder beside it
    assert first.name == "mine" and second.name == "mine (2)"
    for folder in (first, second):
        assert (folder / "adapter_model.safetensors").read_bytes() == (out / "adapter_model.safetensors").read_bytes()
        load_voice(folder)
        assert VoiceCard.read(folder).steps == STEPS

    def make(name: str, files: dict[str, bytes]) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as archive:
            for member, data in files.items():
                archive.writestr(member, data)
        return path

    good = {name: (out / name).read_bytes() for name in ("adapter_config.json", "adapter_model.safetensors")}
    cases = {
        "not a zip": (tmp_path / "text.zip", "not a voice file"),
        "a stranger inside": (make("stranger.zip", {**good, "../evil.py": b"x"}), "files a voice does not have"),
        "no weights": (make("half.zip", {"adapter_config.json": good["adapter_config.json"]}), "holds no voice"),
        "damaged weights": (make("damaged.zip", {**good, "adapter_model.safetensors": b"\x00" * 64}), "unreadable"),
    }
    (tmp_path / "text.zip").write_text("hello")
    before = sorted(p.name for p in voices.iterdir())
    for label, (path, message) in cases.items():
        with pytest.raises(Exception) as raised:
            import_voice(path, voices)
        assert message in str(getattr(raised.value, "message", raised.value)), label
        assert sorted(p.name for p in voices.iterdir()) == before, label  # nothing half-imported is left
    assert not (tmp_path / "evil.py").exists()


@pytest.mark.parametrize("arguments, message", [
    (["missing-folder", "out"], "does not exist"),
    (["{data}", "out", "--resume", "--replace"], "cannot be given together"),
    (["{data}", "out", "--steps", "0"], "--steps"),
    (["{data}", "out", "--rank", "1000"], "--rank"),
    (["{data}", "out", "--resume", "--steps", "5"], "leave out --steps"),
])
def test_the_cli_refuses_bad_input_with_one_line_and_status_2(arguments, message, tmp_path) -> None:
    import subprocess
    import sys

    (tmp_path / "data").mkdir()
    command = [sys.executable, "-m", "app", "voice-train", *(a.format(data=tmp_path / "data") for a in arguments)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_the_int8_product_keeps_only_the_int8_rows_and_gives_the_plain_gradient() -> None:
    """QuantizedLinear under autograd (training on the int8 base): the same output and input gradient as the plain
    product with the dequantized weight, and nothing of the dequantized weight kept for the backward."""
    from engine.model.quantized import Int8Matrix, QuantizedLinear, dequantize, quantize_rows

    torch.manual_seed(0)
    weight = torch.randn(48, 32)
    matrix = Int8Matrix.empty(48, 32, "cpu")
    quantize_rows(weight, matrix.values, matrix.scales)
    layer = QuantizedLinear(matrix, None, torch.float32)
    x = torch.randn(5, 32, requires_grad=True)
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = layer(x)
    assert {t.dtype for t in saved} <= {torch.int8, torch.float32} and all(t.shape != (48, 32) or t.dtype == torch.int8 for t in saved)
    y.square().sum().backward()
    reference_x = x.detach().clone().requires_grad_(True)
    reference = torch.nn.functional.linear(reference_x, dequantize(matrix.values, matrix.scales, torch.float32))
    reference.square().sum().backward()
    assert torch.equal(y, reference) and torch.equal(x.grad, reference_x.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_a_voice_trains_on_the_gpu_and_switches_into_the_graphs(precision, tmp_path, tiny_model_with_tokenizer_dir) -> None:
    """On the GPU machine (no Open JTalk there): clips of a voiced, syllable-paced tone; what matters is the path."""
    import numpy as np

    from engine.chat.session import ChatSession
    from engine.protocol import SamplingSettings
    from tests.voice_training_helpers import SENTENCES, SpeechClip

    def voiced(seconds: float, pitch: float, rate: int = 24_000) -> np.ndarray:
        t = np.arange(int(seconds * rate)) / rate
        tone = sum(np.sin(2 * np.pi * pitch * k * t) / k for k in range(1, 8))
        return (0.2 * tone * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2)).astype(np.float32)

    clips = [SpeechClip(f"clip-{i}", voiced(2.0 + 0.5 * i, 110 + 20 * i), text) for i, text in enumerate(SENTENCES)]
    options = TrainingOptions(steps=6, rank=4, checkpoint_every=3, learning_rate=1e-3, budget=TokenBudget(400, 200), precision=precision)
    events: list[dict] = []
    request = RunRequest(clips, tmp_path / "voice", tiny_model_with_tokenizer_dir, None, options, torch.device("cuda"))
    record = train_voice(request, on_event=events.append, should_stop=lambda: False)
    assert record.status == "done" and record.peak_memory_bytes and record.peak_memory_bytes > 0
    losses = [entry["loss"] for entry in record.losses]
    assert losses[-1] < losses[0], losses
    assert [e for e in events if e["event"] == "preview"]
    question = voiced(1.5, 140, 16_000)
    answers = {}
    for voice in (None, str(tmp_path / "voice")):
        session = ChatSession.open(str(tiny_model_with_tokenizer_dir), lora=voice, device="cuda", precision=precision)
        assert session.voice_problem is None and session.info.graphs_ready
        done = [o for o in session.respond(question, SamplingSettings(greedy=True), max_answer_seconds=1.0) if hasattr(o, "stats")]
        answers[voice] = done[-1].stats.token_ids
        session.close()
    assert answers[None] != answers[str(tmp_path / "voice")]
