"""The reading script covers every mora of standard Japanese, each sentence fits a clip, and none repeats.

Every sentence is phonemized by Open JTalk (pyopenjtalk-plus, a test dependency): its katakana pronunciation
(`g2p(kana=True)`), split into morae, is what the coverage counts, so a kanji reading the script's author had in
mind but Open JTalk reads otherwise does not count as covered.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import pyopenjtalk
import pytest

from engine.voices import reading_script as rs
from engine.voices.clip_check import MAX_CLIP_SECONDS, MIN_CLIP_SECONDS, check_clip


@pytest.fixture(scope="module")
def readings() -> dict[str, str]:
    return {sentence: pyopenjtalk.g2p(sentence, kana=True) for sentence in rs.READING_SCRIPT}


def minimum_count(mora: str) -> int:
    if mora in rs.LOAN_MORAE:
        return rs.MIN_LOAN_COUNT
    if mora in rs.YOON_MORAE:
        return rs.MIN_YOON_COUNT
    return rs.MIN_COMMON_COUNT


def coverage_gaps(readings: list[str]) -> dict[str, int]:
    """Each mora of the inventory said fewer times than its minimum, with how often it is said."""
    counts = rs.mora_counts(readings)
    return {mora: counts.get(mora, 0) for mora in sorted(rs.MORA_INVENTORY) if counts.get(mora, 0) < minimum_count(mora)}


def test_the_mora_splitter_joins_small_kana_and_reads_wo_as_o() -> None:
    assert rs.split_morae("キョーワ、ヴァイオリンヲ ヒキマシタ。") == [
        "キョ", "ー", "ワ", "ヴァ", "イ", "オ", "リ", "ン", "オ", "ヒ", "キ", "マ", "シ", "タ"]
    assert rs.split_morae("ガッコー") == ["ガ", "ッ", "コ", "ー"]
    assert rs.split_morae("ツァ ティ デュ") == ["ツァ", "ティ", "デュ"]


def test_the_inventory_holds_every_kind_of_mora() -> None:
    inventory = rs.MORA_INVENTORY
    assert len(rs.PLAIN_MORAE) == 44 and len(rs.VOICED_MORAE) == 18 and len(rs.SEMI_VOICED_MORAE) == 5
    assert len(rs.YOON_MORAE) == 33 and {"キャ", "ニョ", "ピュ", "ビャ", "リョ"} <= inventory
    assert {"ン", "ッ", "ー"} <= inventory
    assert {"ファ", "フィ", "フェ", "フォ", "ティ", "ディ", "トゥ", "ドゥ", "ウィ", "ウェ", "ウォ", "シェ", "ジェ", "チェ",
            "ツァ", "デュ", "ヴ"} <= inventory


def test_the_script_is_long_and_repeats_no_sentence(readings: dict[str, str]) -> None:
    script = rs.READING_SCRIPT
    assert len(script) >= 150
    assert len(set(script)) == len(script)

    def bare(text: str) -> str:  # the same words with other punctuation or spacing are the same sentence
        return re.sub(r"[\W_]", "", unicodedata.normalize("NFKC", text))

    assert len({bare(sentence) for sentence in script}) == len(script)
    assert len(set(readings.values())) == len(script)


def test_every_sentence_is_plain_japanese_that_open_jtalk_reads(readings: dict[str, str]) -> None:
    for sentence, reading in readings.items():
        assert not re.search(r"[A-Za-z0-9Ａ-Ｚａ-ｚ０-９]", sentence), sentence  # digits and letters are read in many ways
        assert sentence[-1] in "。？！", sentence
        assert reading and not re.search(r"[A-Za-z0-9]", reading), (sentence, reading)


def test_every_mora_of_the_inventory_is_covered_and_the_common_ones_several_times(readings: dict[str, str]) -> None:
    assert coverage_gaps(list(readings.values())) == {}


def test_dropping_the_one_sentence_with_a_rare_mora_leaves_a_gap(readings: dict[str, str]) -> None:
    """The coverage check can fail: for each mora that only one sentence says, the script without that sentence
    misses it (ツァ is in モーツァルト only, for instance)."""
    sole: dict[str, str] = {}
    for mora in rs.MORA_INVENTORY:
        saying = [s for s, reading in readings.items() if mora in rs.split_morae(reading)]
        if len(saying) == 1 and minimum_count(mora) == 1:
            sole[mora] = saying[0]
    assert "ツァ" in sole and "モーツァルト" in sole["ツァ"]
    for mora, sentence in sole.items():
        rest = [reading for s, reading in readings.items() if s != sentence]
        assert mora in coverage_gaps(rest), (mora, sentence)


def test_each_sentence_fits_a_clip_at_any_reading_pace(readings: dict[str, str]) -> None:
    low, high = rs.SCRIPT_SECONDS
    assert MIN_CLIP_SECONDS <= low and high <= MAX_CLIP_SECONDS
    for sentence, reading in readings.items():
        morae, pauses = len(rs.split_morae(reading)), rs.inner_pauses(sentence)
        assert low <= rs.estimated_seconds(morae, pauses) <= high, sentence
        assert rs.estimated_seconds(morae, pauses, rs.SLOW_MORAE_PER_SECOND) <= MAX_CLIP_SECONDS, sentence
        assert rs.estimated_seconds(morae, pauses, rs.FAST_MORAE_PER_SECOND) >= MIN_CLIP_SECONDS, sentence


def test_open_jtalks_reading_falls_between_the_fast_and_the_slow_estimate(readings: dict[str, str]) -> None:
    """The paces are real: a synthesized reading of the shortest, the longest and a middle sentence (its speech as
    the clip check measures it) lies between the estimates at the quick and the slow pace, and passes the check."""
    by_length = sorted(readings, key=lambda s: len(rs.split_morae(readings[s])))
    for sentence in (by_length[0], by_length[len(by_length) // 2], by_length[-1]):
        samples, rate = pyopenjtalk.tts(sentence)
        check = check_clip((samples / 32768.0).astype(np.float32), rate)
        assert check.ok, (sentence, check.problems)
        morae, pauses = len(rs.split_morae(readings[sentence])), rs.inner_pauses(sentence)
        fast = rs.estimated_seconds(morae, pauses, rs.FAST_MORAE_PER_SECOND)
        slow = rs.estimated_seconds(morae, pauses, rs.SLOW_MORAE_PER_SECOND)
        assert fast <= check.speech_seconds <= slow, (sentence, fast, check.speech_seconds, slow)
