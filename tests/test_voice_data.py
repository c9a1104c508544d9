"""Speech for a voice: importing a folder (audio formats, transcripts and list files, long recordings split at
their pauses), the data folder the wizard writes (atomic, a redo keeps the old take, a full disk loses nothing),
and what the trainer loads -- with every bad input of the data side refused or reported in words, in Japanese.

The speech is Open JTalk's (pyopenjtalk-plus), written with soundfile in each format.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyopenjtalk
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QApplication

from app.engine_messages import CONTEXT, TEMPLATES, engine_text
from app.i18n import install_translator
from engine.audio.resample import resample
from engine.errors import Message, UserFacingError, VoiceDataError
from engine.voices import clip_check as cc
from engine.voices import dataset, importing
from engine.voices.dataset import ScriptLine, SourceSpan, VoiceData, load_training_clips, load_training_set, summarize_minutes
from engine.voices.importing import DATA_SAMPLE_RATE, read_audio, scan_folder

EXAMPLES = int(os.environ.get("VOICECHAT_VOICE_DATA_EXAMPLES", "8"))
RATE = DATA_SAMPLE_RATE
SENTENCES = (
    "こんにちは、今日はいい天気ですね。",
    "はい、わかりました。すぐに調べてみますね。",
    "駅の近くの小さなカフェで、コーヒーを飲みながら本を読みました。",
    "ええと、たしか先週の金曜日だったと思います。",
    "冬の朝は空気が澄んでいて、富士山がくっきりと見えます。",
)


@functools.cache
def speech(index: int, rate: int = RATE) -> np.ndarray:
    """A sentence read by Open JTalk, float32 peaking at -6 dBFS, with its own short silence around it."""
    samples, source_rate = pyopenjtalk.tts(SENTENCES[index])
    return resample((samples * (0.5 / np.abs(samples).max())).astype(np.float32), source_rate, rate)


@pytest.fixture(scope="module")
def japanese(qapp) -> Iterator[None]:  # noqa: ANN001
    install_translator(QApplication.instance(), "ja")
    yield
    install_translator(QApplication.instance(), "en")


def in_japanese(message: Message) -> str:
    """The message as the window shows it in Japanese; fails when its template has no translation."""
    assert message.template in TEMPLATES, message.template
    assert QCoreApplication.translate(CONTEXT, message.template) != message.template, message.template
    text = engine_text(message, message.template, message.values.items())
    assert any("\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" for ch in text), text
    return text


def assert_clear(error: UserFacingError, *names: str) -> None:
    """The data's own error (kind voice_data), one line, in Japanese, naming what it is about."""
    assert isinstance(error, VoiceDataError) and error.kind == "voice_data"
    assert "\n" not in error.message and "Traceback" not in error.message
    in_japanese(Message(error.template, **error.values))
    for name in names:
        assert name in error.message, (name, error.message)


def write(path: Path, samples: np.ndarray, rate: int = RATE, **kwargs: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), samples, rate, **kwargs)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------------------------- reading files


@pytest.mark.parametrize(("suffix", "options", "lossy"), [
    (".wav", {"subtype": "PCM_24"}, False),
    (".flac", {}, False),
    (".ogg", {"format": "OGG", "subtype": "VORBIS"}, True),
    (".mp3", {"format": "MP3", "subtype": "MPEG_LAYER_III"}, True),
])
def test_every_format_reads_back_as_the_same_speech_in_mono_at_24_khz(tmp_path: Path, suffix: str, options: dict, lossy: bool) -> None:
    original = speech(1, 44_100)
    stereo = np.stack((original, original * np.float32(0.5)), axis=1)  # the channels are averaged
    path = write(tmp_path / f"take{suffix}", stereo, 44_100, **options)
    samples = read_audio(path)
    expected = speech(1) * np.float32(0.75)
    assert samples.dtype == np.float32 and samples.ndim == 1
    if lossy:  # an encoder's delay and padding: the same speech, a little longer
        assert len(expected) <= len(samples) < len(expected) + RATE // 5
        lag = int(np.argmax(np.correlate(samples[:RATE], expected[:RATE // 2], "valid")))
        aligned = samples[lag:lag + len(expected)]
        assert np.corrcoef(aligned, expected[:len(aligned)])[0, 1] > 0.9
    else:
        assert abs(len(samples) - len(expected)) <= 1
        assert np.max(np.abs(samples[:len(expected)] - expected[:len(samples)])) < 2e-3
    assert cc.check_clip(samples, RATE).ok


def test_files_that_are_not_audio_damaged_or_empty_are_named_with_the_reason(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    good = write(tmp_path / "good.flac", speech(0))
    (tmp_path / "notes.wav").write_text("これは音声ではありません", encoding="utf-8")
    (tmp_path / "zero.wav").write_bytes(b"")
    write(tmp_path / "header-only.wav", np.zeros(0, np.float32))
    data = good.read_bytes()
    (tmp_path / "cut.flac").write_bytes(data[:len(data) // 2])  # a copy that stopped half-way
    damaged = bytearray(data)
    damaged[len(data) // 3:len(data) // 3 + 4000] = bytes(4000)
    (tmp_path / "damaged.flac").write_bytes(bytes(damaged))
    (tmp_path / "random.mp3").write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    write(tmp_path / "nan.wav", np.full(RATE, np.nan, np.float32), subtype="FLOAT")
    expected = {
        "notes.wav": "is not an audio file",
        "zero.wav": "is empty",
        "header-only.wav": "is empty",
        "cut.flac": "is damaged",
        "damaged.flac": "is damaged",
        "random.mp3": "is not an audio file",
        "nan.wav": "invalid samples",
    }
    for name, reason in expected.items():
        with pytest.raises(VoiceDataError) as caught:
            read_audio(tmp_path / name)
        assert_clear(caught.value, str(tmp_path / name), reason)
    scan = scan_folder(tmp_path)
    assert [clip.source.name for clip in scan.clips] == ["good.flac"]
    assert {problem.path.name: problem.message.template for problem in scan.problems} == {
        name: next(t for t in TEMPLATES if reason in t and "{path}" in t) for name, reason in expected.items()}
    for problem in scan.problems:
        assert problem.path.name in in_japanese(problem.message)


# ----------------------------------------------------------------------------------------------- folders


def test_a_folder_that_cannot_be_used_is_refused_with_one_clear_message(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file.txt").write_text("x")
    (tmp_path / "no-audio").mkdir()
    (tmp_path / "no-audio" / "readme.txt").write_text("録音はまだです")
    (tmp_path / "no-audio" / ".hidden.wav").write_bytes(b"RIFF")  # hidden files are not looked at
    cases = {
        tmp_path / "missing": "does not exist",
        tmp_path / "a-file.txt": "is not a folder",
        tmp_path / "empty": "is empty",
        tmp_path / "no-audio": "holds no audio files",
    }
    for folder, reason in cases.items():
        for load in (scan_folder, load_training_clips):
            with pytest.raises(VoiceDataError) as caught:
                load(folder)
            assert_clear(caught.value, str(folder), reason)


def test_transcripts_come_from_same_name_text_files_and_every_list_form(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    """file|text and file|speaker|lang|text; names with or without extension, beside the list or in wavs/, in
    another case, or as a path from another machine; UTF-8 with a BOM, CRLF, Shift_JIS; LJSpeech's metadata.csv."""
    texts = {f"c{i}": f"文その{i}。" for i in range(12)}
    for name in texts:
        write(tmp_path / "wavs" / f"{name}.wav", speech(int(name[1:]) % len(SENTENCES)))
    write(tmp_path / "other" / "c12.flac", speech(0))
    texts["c12"] = "フラックの文。"
    write(tmp_path / "solo" / "own.wav", speech(1))
    (tmp_path / "solo" / "own.txt").write_text("\ufeff自分の\n文字起こし。\n", encoding="utf-8")
    (tmp_path / "esd.list").write_bytes(
        "\ufeffwavs/c0.wav|voice|JP|文その0。\r\nc1|voice|ja|文その1。\r\n\r\nwavs/C2.WAV|文その2。\n".encode("utf-8"))
    (tmp_path / "gpt.list").write_text(
        "C:\\Users\\me\\GPT-SoVITS\\output\\slicer_opt\\c3.wav|me|JA|文その3。\n/home/me/old/c4|文その4。\n"
        f"{tmp_path / 'wavs' / 'c5.wav'}|文その5。\n", encoding="utf-8")
    (tmp_path / "wavs" / "sjis.list").write_bytes("c6.wav|文その6。\nc7|文その7。\n".encode("cp932"))
    (tmp_path / "metadata.csv").write_text("c8|文その8。|ぶんその8。\nc9|文|その9。\n", encoding="utf-8")
    (tmp_path / "other" / "list.txt").write_text("c12|フラックの文。\n../wavs/c10.wav|文その10。\n", encoding="utf-8")
    (tmp_path / "wavs" / "c11.txt").write_text("文その11。", encoding="utf-8")
    (tmp_path / "readme.txt").write_text("このフォルダーには録音があります。\n", encoding="utf-8")  # not a list: no |
    scan = scan_folder(tmp_path)
    assert scan.problems == ()
    found = {clip.source.stem: clip.transcript for clip in scan.clips}
    assert found.pop("own") == "自分の 文字起こし。"
    assert found == {**texts, "c9": "文"}  # LJSpeech: file|text|normalized text
    assert all(clip.check.ok and clip.notes == () for clip in scan.clips)


def test_damaged_list_lines_and_missing_transcripts_are_reported_per_file(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    for name in ("a", "b", "c", "d"):
        write(tmp_path / f"{name}.wav", speech(0))
    (tmp_path / "c.txt").write_text("  \n", encoding="utf-8")
    (tmp_path / "take.list").write_text(
        "a.wav|ちゃんとした文。\njust some words\n|名前のない行\nghost.wav|ない音声。\nb.wav|\na.wav|二度目の文。\n",
        encoding="utf-8")
    (tmp_path / "broken.list").write_bytes(b"a.wav|\xff\xfe\x81\x00 text\n")
    scan = scan_folder(tmp_path)
    problems = [(problem.path.name, problem.message) for problem in scan.problems]
    templates = [message.template for _, message in problems]
    assert templates == [
        "{path} is neither UTF-8 nor Shift_JIS text. Save it as UTF-8 and scan again.",
        "Line {line} of {file} is not in the form file|text and was skipped: {text}",
        "Line {line} of {file} is not in the form file|text and was skipped: {text}",
        "Line {line} of {file} names {name}, which is not an audio file in the folder.",
        "Line {line} of {file} lists {name} again; the text of line {first} is used.",
    ]
    assert [message.values.get("line") for _, message in problems[1:]] == ["2", "3", "4", "6"]
    for name, message in problems:
        assert name in in_japanese(message)
    clips = {clip.source.name: clip for clip in scan.clips}
    assert clips["a.wav"].transcript == "ちゃんとした文。"
    for name, template in (("b.wav", "Line {line} of {file} has no text for {name}; the model will write one for you to check."),
                           ("c.wav", "The transcript {file} is empty; the model will write one for you to check."),
                           ("d.wav", "{file} has no transcript; the model will write one for you to check.")):
        assert clips[name].transcript is None
        assert [note.template for note in clips[name].notes] == [template]
        in_japanese(clips[name].notes[0])
    assert clips["a.wav"].check.usable and scan.usable_seconds == pytest.approx(
        sum(clip.check.speech_seconds for clip in scan.clips))


def test_bad_clips_are_shown_per_file_and_left_out_of_training(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    quiet_room = np.random.default_rng(1).standard_normal(RATE * 2).astype(np.float32) * np.float32(1e-4)
    clips = {
        "good": speech(2),
        "silent": quiet_room,
        "clipped": np.clip(speech(0) * np.float32(8.0), -1.0, 1.0),
        "short": cc.trim_silence(speech(1), RATE)[: int(0.8 * RATE)],
        "noisy": speech(3) + np.random.default_rng(2).standard_normal(len(speech(3))).astype(np.float32) * np.float32(0.01),
        "pause": np.concatenate((speech(0)[: len(speech(0)) // 2], np.zeros(2 * RATE, np.float32), speech(0)[len(speech(0)) // 2:])),
    }
    for name, samples in clips.items():
        write(tmp_path / f"{name}.wav", samples)
        (tmp_path / f"{name}.txt").write_text(f"{name}の文。", encoding="utf-8")
    scan = scan_folder(tmp_path)
    codes = {clip.source.stem: clip.check.codes for clip in scan.clips}
    assert codes == {"good": set(), "silent": {cc.NO_SPEECH}, "clipped": {cc.CLIPPED}, "short": {cc.TOO_SHORT},
                     "noisy": {cc.NOISY}, "pause": {cc.SILENCE_INSIDE}}
    for clip in scan.clips:
        for message in clip.problems:
            in_japanese(message)
    training = load_training_set(tmp_path)
    assert sorted(clip.name for clip in training.clips) == ["clipped.wav", "good.wav", "noisy.wav", "pause.wav"]
    assert sorted(name for name, _ in training.skipped) == ["short.wav", "silent.wav"]
    for clip in training.clips:
        assert clip.samples.dtype == np.float32 and len(clip.samples) <= cc.MAX_TRAINING_CLIP_SECONDS * RATE
        assert cc.check_clip(clip.samples, RATE).leading_silence_seconds <= cc.TRIM_PAD_SECONDS + 0.02
        assert clip.text == f"{clip.name.removesuffix('.wav')}の文。"


def test_the_trainer_is_told_which_clips_lack_a_transcript_a_few_then_how_many_more(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    for i in range(3):
        write(tmp_path / f"take{i}.wav", speech(i))
    (tmp_path / "take0.txt").write_text("最初の文。", encoding="utf-8")
    with pytest.raises(VoiceDataError) as caught:
        load_training_clips(tmp_path)
    assert_clear(caught.value, "2 clips have no transcript: take1.wav, take2.wav.")
    for i in range(3, 9):
        write(tmp_path / "more" / f"take{i}.wav", speech(i % len(SENTENCES)))
    with pytest.raises(VoiceDataError) as caught:
        load_training_clips(tmp_path)
    assert_clear(caught.value, "8 clips have no transcript: take1.wav, take2.wav, more/take3.wav, more/take4.wav, "
                               "more/take5.wav and 3 more.")
    text = engine_text(caught.value.message, caught.value.template, caught.value.values.items())
    assert "ほか 3 個" in text


def test_no_usable_clip_at_all_is_refused_naming_the_first_reason(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    write(tmp_path / "hum.wav", np.zeros(RATE * 2, np.float32))
    (tmp_path / "hum.txt").write_text("無音。", encoding="utf-8")
    (tmp_path / "fake.wav").write_text("not audio")
    with pytest.raises(VoiceDataError) as caught:
        load_training_clips(tmp_path)
    assert_clear(caught.value, "all 2 were left out", "hum.wav: No speech was heard")
    text = engine_text(caught.value.message, caught.value.template, caught.value.values.items(),
                       caught.value.part_lists.items())
    assert "hum.wav: この録音には声が入っていません。" in text  # the reason, translated too


# ----------------------------------------------------------------------------------------------- long recordings


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(len(SENTENCES))), pauses=st.lists(st.floats(0.4, 2.5), min_size=4, max_size=4),
       rate=st.sampled_from((24_000, 44_100)))
def test_a_long_reading_is_split_in_its_pauses_into_pieces_that_fit(
    tmp_path_factory: pytest.TempPathFactory, order: list[int], pauses: list[float], rate: int
) -> None:
    """Five sentences read one after another with pauses between them (over 14 s in all): every piece fits the
    clip limits, every cut lies inside a pause, and no sentence's speech is lost."""
    folder = tmp_path_factory.mktemp("long")
    parts, spans, position = [], [], 0
    for k, index in enumerate(order):
        sentence = cc.trim_silence(speech(index), RATE, 0.0)
        parts.append(sentence)
        spans.append((position, position + len(sentence)))
        position += len(sentence)
        if k < len(pauses):
            gap = np.zeros(int(pauses[k] * RATE), np.float32)
            parts.append(gap)
            position += len(gap)
    reading = np.concatenate(parts)
    room = np.random.default_rng(0).standard_normal(len(reading)).astype(np.float32) * np.float32(3e-4)  # -70 dBFS
    write(folder / "reading.wav", resample(reading + room, RATE, rate), rate)
    (folder / "reading.txt").write_text("全部の文。", encoding="utf-8")  # for the whole file: no use for a piece
    scan = scan_folder(folder)
    pieces = sorted(scan.clips, key=lambda clip: clip.start)
    assert len(pieces) >= 2 and [clip.part for clip in pieces] == list(range(1, len(pieces) + 1))
    for clip in pieces:
        assert clip.transcript is None and clip.parts == len(pieces)
        assert clip.check.usable and not clip.check.codes & {cc.SILENCE_INSIDE, cc.TOO_LONG}, clip.check
        assert cc.MIN_CLIP_SECONDS <= clip.check.speech_seconds <= cc.MAX_CLIP_SECONDS
        assert "split at its pauses" in clip.notes[0]
    heard = cc.speech_activity(reading, RATE)
    for start, end in heard.speech_runs():  # every cut in a pause, and no speech lost: each run of it in one piece
        first, last = heard.frame_start(start), heard.frame_end(end - 1)
        assert sum(clip.start <= first and last <= clip.end for clip in pieces) == 1, (first / RATE, last / RATE)
    assert all(before.end <= after.start for before, after in zip(pieces, pieces[1:]))


def test_the_pieces_of_a_long_file_are_imported_with_their_span(tmp_path: Path) -> None:
    reading = np.concatenate([np.concatenate((speech(i), np.zeros(RATE, np.float32))) for i in range(5)])
    write(tmp_path / "in" / "朗読.ogg", reading, format="OGG", subtype="VORBIS")
    scan = scan_folder(tmp_path / "in")
    data = VoiceData(tmp_path / "data")
    added, problems = data.import_clips(scan.clips)
    assert problems == [] and len(added) == len(scan.clips) >= 2
    assert [clip.name for clip in data.clips()] == [
        f"朗読-{round(clip.start / RATE * 1000):08d}" if clip.start else "朗読" for clip in scan.clips]
    for clip, piece in zip(data.clips(), scan.clips):
        assert clip.origin == SourceSpan(str(piece.source), piece.start / RATE, piece.end / RATE)
        assert clip.text == "" and clip.seconds <= piece.seconds
    assert data.total_seconds() == pytest.approx(sum(clip.seconds for clip in data.clips()))


# ----------------------------------------------------------------------------------------------- the data folder


def test_the_data_folder_is_a_folder_that_scan_folder_reads(tmp_path: Path) -> None:
    data = VoiceData(tmp_path / "voice")
    first = data.add_clip(cc.trim_silence(speech(0), RATE), RATE, "こんにちは、今日はいい天気ですね。", ScriptLine(0))
    second = data.add_clip(cc.trim_silence(speech(1, 48_000), 48_000), 48_000, "はい|わかりました。\n", ScriptLine(7))
    third = data.add_clip(cc.trim_silence(speech(2), RATE), RATE, "", SourceSpan("D:\\録音\\a.mp3", 12.5, 20.0))
    assert [first.name, second.name, third.name] == ["script-001", "script-008", "a-00012500"]
    assert (tmp_path / "voice" / "transcripts.list").read_text(encoding="utf-8") == (
        "wavs/script-001.wav|こんにちは、今日はいい天気ですね。\nwavs/script-008.wav|はい｜わかりました。\nwavs/a-00012500.wav|\n")
    info = sf.info(str(data.wav_path("script-008")))
    assert (info.samplerate, info.channels, info.subtype) == (24_000, 1, "PCM_16")
    assert second.seconds == pytest.approx(info.frames / 24_000)
    assert data.script_clip(7) == data.clips()[1] and data.script_clip(3) is None
    scan = scan_folder(tmp_path / "voice")
    assert scan.problems == ()
    assert {clip.source.stem: clip.transcript for clip in scan.clips} == {
        "script-001": "こんにちは、今日はいい天気ですね。", "script-008": "はい｜わかりました。", "a-00012500": None}
    data.set_text("a-00012500", "駅の近くの小さなカフェで。")
    assert [clip.text for clip in data.clips()][2] == "駅の近くの小さなカフェで。"
    training = load_training_clips(tmp_path / "voice")
    assert sorted(clip.name for clip in training) == ["wavs/a-00012500.wav", "wavs/script-001.wav", "wavs/script-008.wav"]
    data.remove_clip("script-001")
    assert [clip.name for clip in data.clips()] == ["script-008", "a-00012500"]
    assert not data.wav_path("script-001").exists()
    assert data.total_seconds() == pytest.approx(second.seconds + third.seconds)


def test_hand_edits_are_kept(tmp_path: Path) -> None:
    """A user who edits the list by hand: their text is read, lines naming other files are written back as they
    were, a .wav they dropped into wavs/ shows up without text, a stale bookkeeping file does not matter."""
    data = VoiceData(tmp_path)
    data.add_clip(speech(0), RATE, "元の文。", ScriptLine(0))
    data.add_clip(speech(1), RATE, "二番目。", ScriptLine(1))
    lines = data.list_path.read_text(encoding="utf-8").replace("元の文。", "直した文。")
    data.list_path.write_text("# my notes|keep me\n" + lines + "other/x.wav|よその行。\n", encoding="utf-8")
    write(data.wavs_dir / "dropped.wav", speech(2))
    data.clips_path.write_text("{not json", encoding="utf-8")
    assert [(clip.name, clip.text) for clip in data.clips()] == [
        ("script-001", "直した文。"), ("script-002", "二番目。"), ("dropped", "")]
    assert data.clips()[0].seconds == pytest.approx(len(speech(0)) / RATE)
    data.set_text("dropped", "落とした文。")
    data.remove_clip("script-002")
    assert data.list_path.read_text(encoding="utf-8") == (
        "# my notes|keep me\nwavs/script-001.wav|直した文。\nother/x.wav|よその行。\nwavs/dropped.wav|落とした文。\n")


def test_a_redo_keeps_the_old_take_until_the_new_one_is_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, japanese) -> None:  # noqa: ANN001
    data = VoiceData(tmp_path)
    data.add_clip(speech(0), RATE, "文。", ScriptLine(4))
    before = snapshot(tmp_path)
    real = dataset.write_atomically

    def full_disk(path: Path, payload: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dataset, "write_atomically", full_disk)
    for redo in (lambda: data.add_clip(speech(1), RATE, "文。", ScriptLine(4)), lambda: data.replace_clip("script-005", speech(1), RATE)):
        with pytest.raises(VoiceDataError) as caught:
            redo()
        assert_clear(caught.value, "script-005.wav", "No space left on device")
        assert snapshot(tmp_path) == before
    monkeypatch.setattr(dataset, "write_atomically", real)
    redone = data.replace_clip("script-005", speech(1), RATE)
    assert redone.text == "文。" and redone.origin == ScriptLine(4) and len(data.clips()) == 1
    assert np.abs(data.read_clip("script-005") - speech(1)).max() < 1e-3


def test_a_redo_with_new_text_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = VoiceData(tmp_path)
    data.add_clip(speech(0), RATE, "古い文。", ScriptLine(2))
    before = snapshot(tmp_path)
    real = dataset.write_atomically
    for fails_on in (".wav", ".list"):
        def full_disk(path: Path, payload: bytes, fails_on: str = fails_on) -> None:
            if path.name.endswith(fails_on):
                raise OSError(28, "No space left on device")
            real(path, payload)

        monkeypatch.setattr(dataset, "write_atomically", full_disk)
        with pytest.raises(VoiceDataError):
            data.add_clip(speech(1), RATE, "新しい文。", ScriptLine(2))
        assert snapshot(tmp_path) == before, fails_on
    monkeypatch.setattr(dataset, "write_atomically", real)
    data.add_clip(speech(1), RATE, "新しい文。", ScriptLine(2))
    assert [(clip.name, clip.text) for clip in data.clips()] == [("script-003", "新しい文。")]


def test_an_import_stopped_half_way_keeps_what_it_read_and_names_a_vanished_source(tmp_path: Path) -> None:
    for i in range(4):
        write(tmp_path / "in" / f"take{i}.wav", speech(i))
        (tmp_path / "in" / f"take{i}.txt").write_text(f"文{i}。", encoding="utf-8")
    scan = scan_folder(tmp_path / "in")
    (tmp_path / "in" / "take3.wav").unlink()  # moved away after the scan

    class Stop(Exception):
        pass

    def progress(done: int, total: int) -> None:
        assert total == 4
        if done == 2:
            raise Stop

    data = VoiceData(tmp_path / "data")
    with pytest.raises(Stop):
        data.import_clips(scan.clips, progress)
    assert [(clip.name, clip.text) for clip in data.clips()] == [("take0", "文0。"), ("take1", "文1。")]
    added, problems = data.import_clips(scan.clips[2:])
    assert [clip.name for clip in added] == ["take2"]
    assert [(problem.path.name, problem.message.template) for problem in problems] == [("take3.wav", "{path} does not exist.")]
    assert [clip.name for clip in data.clips()] == ["take0", "take1", "take2"]


def test_script_takes_are_found_without_the_bookkeeping_file(tmp_path: Path) -> None:
    data = VoiceData(tmp_path)
    data.add_clip(speech(0), RATE, "文。", ScriptLine(41))
    data.clips_path.unlink()
    assert data.script_clip(41) is not None and data.script_clip(41).name == "script-042"


@pytest.mark.parametrize("fails_on", ["wav", "clips.json", "transcripts.list"])
def test_a_full_disk_while_adding_leaves_the_folder_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails_on: str, japanese) -> None:  # noqa: ANN001, E501
    data = VoiceData(tmp_path)
    data.add_clip(speech(0), RATE, "最初。", ScriptLine(0))
    before = snapshot(tmp_path)
    real = dataset.write_atomically

    def full_disk(path: Path, payload: bytes) -> None:
        if path.name.endswith(fails_on):
            raise OSError(28, "No space left on device")
        real(path, payload)

    monkeypatch.setattr(dataset, "write_atomically", full_disk)
    with pytest.raises(VoiceDataError) as caught:
        data.add_clip(speech(1), RATE, "二番目。", SourceSpan("x.wav", 0.0, 3.0))
    assert_clear(caught.value, "No space left on device")
    assert snapshot(tmp_path) == before
    assert [clip.name for clip in data.clips()] == ["script-001"]


def test_a_crash_half_way_through_a_write_leaves_every_clip_readable(tmp_path: Path) -> None:
    """What a killed process leaves: write_atomically's hidden .part file, and a take whose list line was never
    written. The take is listed without text; the .part file is neither a clip nor a problem."""
    data = VoiceData(tmp_path)
    data.add_clip(speech(0), RATE, "最初。", ScriptLine(0))
    (data.wavs_dir / ".script-002.wav.x1y2.part").write_bytes(data.wav_path("script-001").read_bytes()[:1000])
    write(data.wavs_dir / "script-002.wav", speech(1))
    assert [(clip.name, clip.text) for clip in data.clips()] == [("script-001", "最初。"), ("script-002", "")]
    scan = scan_folder(tmp_path)
    assert scan.problems == () and len(scan.clips) == 2


def test_a_missing_clip_is_named(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    data = VoiceData(tmp_path)
    for action in (lambda: data.set_text("nope", "x"), lambda: data.remove_clip("nope"), lambda: data.replace_clip("nope", speech(0), RATE)):
        with pytest.raises(VoiceDataError) as caught:
            action()
        assert_clear(caught.value, "nope")


class VoiceDataMachine(RuleBasedStateMachine):
    """The wizard's operations in any order, some of them hit by a full disk at any one of their writes: the folder
    always matches what succeeded, every listed clip has its audio, and scan_folder reads it without a problem."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="voice-data-"))
        self.data = VoiceData(self.folder)
        self.expected: dict[str, str] = {}
        self.fail_at: int | None = None
        self.writes = 0
        self.real = dataset.write_atomically
        dataset.write_atomically = self._write

    def _write(self, path: Path, payload: bytes) -> None:
        self.writes += 1
        if self.fail_at is not None and self.writes == self.fail_at:
            raise OSError(28, "No space left on device")
        self.real(path, payload)

    def _attempt(self, fail_at: int | None, action) -> bool:  # noqa: ANN001
        self.fail_at, self.writes = fail_at, 0
        try:
            action()
        except VoiceDataError as error:
            assert fail_at is not None and "No space left" in error.message
            return False
        finally:
            self.fail_at = None
        return True

    @rule(index=st.integers(0, 5), text=st.text("あいうえお文。|", max_size=8), fail_at=st.none() | st.integers(1, 3))
    def record(self, index: int, text: str, fail_at: int | None) -> None:
        if self._attempt(fail_at, lambda: self.data.add_clip(speech(index % len(SENTENCES))[:RATE], RATE, text, ScriptLine(index))):
            self.expected[f"script-{index + 1:03d}"] = text.replace("|", "｜")

    @rule(start=st.integers(0, 3), fail_at=st.none() | st.integers(1, 3))
    def import_piece(self, start: int, fail_at: int | None) -> None:
        taken = set(self.expected)
        if self._attempt(fail_at, lambda: self.data.add_clip(speech(start)[:RATE], RATE, "", SourceSpan("in.wav", float(start), start + 1.0))):
            (name,) = {clip.name for clip in self.data.clips()} - taken
            self.expected[name] = ""

    @precondition(lambda self: self.expected)
    @rule(pick=st.integers(0, 100), text=st.text("かきくけこ", min_size=1, max_size=5), fail_at=st.none() | st.just(1))
    def set_text(self, pick: int, text: str, fail_at: int | None) -> None:
        name = sorted(self.expected)[pick % len(self.expected)]
        if self._attempt(fail_at, lambda: self.data.set_text(name, text)):
            self.expected[name] = text

    @precondition(lambda self: self.expected)
    @rule(pick=st.integers(0, 100), fail_at=st.none() | st.just(1))
    def remove(self, pick: int, fail_at: int | None) -> None:
        name = sorted(self.expected)[pick % len(self.expected)]
        if self._attempt(fail_at, lambda: self.data.remove_clip(name)):
            del self.expected[name]

    @invariant()
    def the_folder_holds_what_succeeded(self) -> None:
        assert {clip.name: clip.text for clip in self.data.clips()} == self.expected
        for clip in self.data.clips():
            assert clip.path.is_file() and clip.seconds == pytest.approx(1.0, abs=0.01)
        assert not list(self.folder.rglob("*.part"))
        if self.expected:
            scan = scan_folder(self.folder)
            assert scan.problems == () and len(scan.clips) == len(self.expected)

    def teardown(self) -> None:
        import shutil

        dataset.write_atomically = self.real
        shutil.rmtree(self.folder, ignore_errors=True)


TestVoiceDataMachine = VoiceDataMachine.TestCase
TestVoiceDataMachine.settings = settings(max_examples=EXAMPLES, stateful_step_count=12, deadline=None)


# ----------------------------------------------------------------------------------------------- how much


@given(seconds=st.floats(0.0, 4 * 3600.0))
def test_the_minutes_verdict_warns_below_ten_minutes_and_recommends_twenty_to_sixty(seconds: float) -> None:
    verdict = summarize_minutes(seconds)
    minutes = seconds / 60
    assert verdict.warning == (minutes < dataset.MIN_MINUTES)
    expected = ("too_little" if minutes < 10 else "enough" if minutes < 20 else "recommended" if minutes <= 60 else "plenty")
    assert verdict.level == expected
    assert verdict.message.values["minutes"] == f"{minutes:.1f}" and verdict.message.template in TEMPLATES


def test_the_verdicts_read_in_japanese(japanese) -> None:  # noqa: ANN001
    texts = [in_japanese(summarize_minutes(minutes * 60).message) for minutes in (5, 15, 30, 90)]
    assert texts[0].startswith("音声は 5.0 分です。") and "20〜60 分がおすすめです" in texts[0]
    assert len(set(texts)) == 4
