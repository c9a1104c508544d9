"""Turn-taking's pure parts: the segmenter's backchannel rule and its continuation window (generated frame
sequences), the provisional records (engine/worker/records.py), and the advice on devices that make echo
cancellation unreliable (engine/audio/echo_advice.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.audio.devices import AudioDevice
from engine.audio.echo_advice import BLUETOOTH, LARGE_BUFFER, NOT_WASAPI, TWO_CLOCKS, echo_risks
from engine.audio.turn_taking import (Segmenter, SpeechEnded, SpeechStarted, TalkOver, TalkOverEnded, TurnOver,
                                      TurnSettled)
from engine.audio.voice import VoiceOptions
from engine.worker.records import RecordBook, TurnRecord


def events_of(frames: list[bool], options: VoiceOptions, playing: bool = False) -> list[tuple[int, object]]:
    segmenter = Segmenter(options)
    return [(i, e) for i, v in enumerate(frames) if (e := segmenter.push(i, v, playing=playing)) is not None]


@settings(max_examples=60, deadline=None)
@given(speech_s=st.floats(0.12, 2.0))
def test_over_a_playing_answer_speech_ducks_it_and_only_speech_longer_than_a_backchannel_starts_a_take(speech_s: float) -> None:
    options = VoiceOptions(barge_in_s=0.8)
    voiced = round(speech_s * 100)
    events = events_of([False] * 50 + [True] * voiced + [False] * 300, options, playing=True)
    starts = [(i, e) for i, e in events if isinstance(e, SpeechStarted)]
    # The answer is ducked as soon as the speech counts (min_speech_s): the user hears they were noticed.
    assert events[0] == (50 + 10 - 1, TalkOver(50))
    if voiced < 80:
        assert starts == [], f"{speech_s:.2f} s of speech over the answer started a take"
        # ...and back to full level once it has ended as a backchannel (a little after: not in a comma's pause).
        last = 50 + voiced - 1
        assert events[1:] == [(last + Segmenter.DUCK_HOLD_FRAMES + 1, TalkOverEnded(50, last))]
    else:
        assert len(starts) == 1 and starts[0][0] == 50 + 80 - 1  # as soon as it outlasts a backchannel
        assert starts[0][1].start == 50 - round(options.preroll_s * 100)  # dated back: nothing of it is lost
        assert not any(isinstance(e, TalkOverEnded) for _, e in events)


@settings(max_examples=30, deadline=None)
@given(first_s=st.floats(0.15, 0.7), comma_s=st.floats(0.21, 0.5))
def test_an_interruption_with_a_comma_keeps_the_answer_down_through_the_comma(first_s: float, comma_s: float) -> None:
    """「すみません、」 (short, a backchannel's length), a comma's pause, 「もう一度説明してもらえますか」: the answer goes down
    with the first word and stays down through the pause (no pumping) until the speech stops it; the take starts
    with the first word."""
    options = VoiceOptions(barge_in_s=0.8)
    first, comma = round(first_s * 100), round(comma_s * 100)
    events = events_of([False] * 50 + [True] * first + [False] * comma + [True] * 120 + [False] * 300, options,
                       playing=True)
    second = 50 + first + comma
    assert events[0] == (59, TalkOver(50))
    assert not any(isinstance(e, TalkOverEnded) for i, e in events if i < second + 79)
    started = events[1]
    assert started[0] == second + 79 and isinstance(started[1], SpeechStarted)
    assert started[1].start == 50 - round(options.preroll_s * 100)


@settings(max_examples=60, deadline=None)
@given(pause_s=st.floats(0.0, 2.5), first_s=st.floats(0.3, 2.0), second_s=st.floats(0.3, 2.0))
def test_speech_after_a_pause_continues_the_take_within_the_join_window(pause_s: float, first_s: float,
                                                                       second_s: float) -> None:
    options = VoiceOptions(end_silence_s=0.3, handover_s=0.2, join_s=1.5)
    pause = round(pause_s * 100)
    frames = [False] * 50 + [True] * round(first_s * 100) + [False] * pause + [True] * round(second_s * 100) + [False] * 300
    events = [e for _, e in events_of(frames, options)]
    kinds = [type(e) for e in events]
    ended = [e for e in events if isinstance(e, SpeechEnded)]
    assert kinds[-2:] == [TurnOver, TurnSettled]  # the last take's turn ends, then nothing can join it
    if pause < 20:  # shorter than the handover: one take, nothing handed over in between
        assert kinds == [SpeechStarted, SpeechEnded, TurnOver, TurnSettled]
    elif pause < 150:  # the new speech starts within the join window (its confirmation may come later): one take
        assert len(ended) == 2 and ended[1].continues and ended[1].start == ended[0].start
        assert (TurnOver in kinds[:kinds.index(SpeechEnded, 2)]) == (pause >= 30)  # heard before it went on
    else:
        assert len(ended) == 2 and not ended[1].continues and ended[1].start > ended[0].end
    assert ended[-1].last_voiced == len(frames) - 301


@settings(max_examples=40, deadline=None)
@given(pause_s=st.floats(0.35, 0.85), click=st.booleans())  # (the click, the hold and the speech within join_s)
def test_over_the_half_answer_the_first_voiced_frame_fades_it_and_a_click_brings_it_back(pause_s: float,
                                                                                      click: bool) -> None:
    """The answer to a take that speech may still continue plays (its turn was over after end_silence_s): the
    continuation's first voiced frame is TalkOver(continues) (the listener fades the half-answer out, before the
    speech counts and the engine withdraws it); a click (shorter than min_speech_s) is TalkOverEnded (back)."""
    options = VoiceOptions(end_silence_s=0.3, handover_s=0.2, join_s=1.5, min_speech_s=0.1)
    segmenter = Segmenter(options)
    resume = 50 + 100 + round(pause_s * 100)
    hold = Segmenter.DUCK_HOLD_FRAMES
    voice = [False] * 50 + [True] * 100 + [False] * (resume - 150)
    voice += [True] * 3 + [False] * (hold + 5) if click else []
    voice += [True] * 60 + [False] * 300
    events = []
    for i, v in enumerate(voice):
        answered = 150 + 30 <= i < len(voice) - 300  # the half-answer is heard from the end of the turn on
        if (event := segmenter.push(i, v, playing=answered)) is not None:
            events.append((i, event))
    over = [(i, e) for i, e in events if isinstance(e, (TalkOver, TalkOverEnded))]
    first_voiced = resume
    if click:
        assert over[:2] == [(resume, TalkOver(resume, continues=True)),
                            (resume + 2 + hold + 1, TalkOverEnded(resume, resume + 2))]
        first_voiced = resume + 3 + hold + 5
        over = over[2:]
    assert over == [(first_voiced, TalkOver(first_voiced, continues=True))]
    started = [(i, e) for i, e in events if isinstance(e, SpeechStarted)]
    assert started[-1][0] == first_voiced + 9 and started[-1][1].continues  # it counts: the take goes on


def record(turn_id: int, role: str) -> TurnRecord:
    return TurnRecord(turn_id, role, np.zeros(160, np.float32), 16_000)


def test_provisional_records_reach_the_seam_only_when_settled_and_never_when_withdrawn() -> None:
    finished: list[int] = []
    book = RecordBook(lambda r: finished.append(r.turn_id))
    book.finish(book.add(record(1, "user")))
    book.begin_provisional()
    book.finish(book.add(record(2, "user")))
    book.finish(book.add(record(3, "assistant")))
    assert finished == [1]
    assert [r.turn_id for r in book.withdraw()] == [2, 3]
    assert [r.turn_id for r in book.records] == [1] and finished == [1]
    book.begin_provisional()
    book.finish(book.add(record(4, "user")))
    answer = book.add(record(5, "assistant"))
    book.settle()
    assert finished == [1, 4]
    book.finish(answer)  # its metrics came after the settling
    assert finished == [1, 4, 5]


def device(name: str, host_api: str = "ALSA") -> AudioDevice:
    return AudioDevice(name, 0, host_api, 2, 2, 48_000.0)


def test_devices_that_make_echo_cancellation_unreliable_are_named() -> None:
    card = (device("Microphone Array (Realtek(R) Audio)", "Windows WASAPI"),
            device("Speakers (Realtek(R) Audio)", "Windows WASAPI"))
    assert echo_risks(*card, input_latency_s=0.01, output_latency_s=0.02) == []
    mme = echo_risks(device("Microphone (USB Audio)", "MME"), device("Speakers (USB Audio)", "Windows WASAPI"))
    assert [t for t, _ in mme] == [NOT_WASAPI] and mme[0][1]["host_api"] == "MME"
    assert [t for t, _ in echo_risks(card[0], device("Speakers (USB DAC)", "Windows WASAPI"))] == [TWO_CLOCKS]
    bt = echo_risks(device("Headset (WH-1000XM4 Hands-Free AG Audio)", "Windows WASAPI"),
                    device("Headset (WH-1000XM4 Hands-Free AG Audio)", "Windows WASAPI"))
    assert [t for t, _ in bt] == [BLUETOOTH]
    slow = echo_risks(*card, output_latency_s=0.2)
    assert slow == [(LARGE_BUFFER, {"name": card[1].name, "ms": "200"})]
