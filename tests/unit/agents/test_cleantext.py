"""The one rule for text that reaches a terminal (agents/cleantext.py): sequences go whole, words stay."""

from __future__ import annotations

from agents.cleantext import clean_text


def test_plain_text_is_returned_as_it_is() -> None:
    text = "Decode batch, #running-req: 32, accept len: 3.12 — ünïcode ✓"
    assert clean_text(text) is text


def test_every_kind_of_sequence_goes_and_the_words_stay() -> None:
    cases = {
        "a\x1b]52;c;ZXZpbA==\x07b": "ab",  # OSC ended by BEL
        "a\x1b]0;title\x1b\\b": "ab",  # OSC ended by ST
        "a\x1bPq#0;2;0;0;0\x1b\\b": "ab",  # DCS (sixel)
        "a\x1b_apc\x1b\\b\x1b^pm\x1b\\c\x1bXsos\x1b\\d": "abcd",
        "\x1b[1;31mred\x1b[0m \x1b[2K\x1b[1Aup": "red up",  # CSI: colour, erase, cursor
        "a\x9b2Jb\x9d8;;http://x\x9cc": "abc",  # 8-bit C1 forms
        "a\x1bcb\x1b7c\x1b(Bd": "abcd",  # ESC c, ESC 7, ESC ( B
        "bell\x07 back\x08space\x7f nul\x00": "bell backspace nul",
        "cut \x1b]0;never ended": "cut ",  # an unterminated OSC: a terminal would swallow the rest too
        "left\u202eright": "left\ufffdright",
    }
    for raw, clean in cases.items():
        assert clean_text(raw) == clean, raw


def test_tab_newline_and_chosen_controls_stay() -> None:
    assert clean_text("a\tb\nc\rd") == "a\tb\ncd"
    assert clean_text("bar 10%\rbar 20%", "\t\n\r") == "bar 10%\rbar 20%"
