"""The language of the fixed labels dpnb shows in a notebook (table headers, the progress
bar's label), so that a Japanese notebook shows Japanese headers beside its Japanese text.

Values, messages and plot labels stay English: matplotlib's default fonts have no
Japanese glyphs, and messages are what people search for."""
from __future__ import annotations

import re
import unicodedata

from ..errors import DpnbError

JAPANESE = {
    "rank": "ランク", "engine id": "エンジン ID", "host": "ホスト", "pid": "PID",
    "local rank": "ホスト内ランク", "device": "デバイス", "name": "名前", "value": "値",
    "stage": "段階", "parameter": "パラメータ", "parameters": "パラメータ数",
    "ranks": "ランク数", "identical": "一致", "max |diff|": "最大 |差|",
    "ranks agree": "ランク間で一致", "on resume": "再開時", "cell": "セル", "state": "状態",
    "main thread, innermost first": "メインスレッド（内側から）", "engines": "エンジン",
    "step": "ステップ", "norm rank {}": "ノルム（ランク {}）",
}
LANGUAGES = {"en": {}, "ja": JAPANESE}
_labels: dict[str, str] = LANGUAGES["en"]


def set_language(language: str) -> None:
    """Show table headers and the progress bar's label in ``language`` ("en" or "ja")."""
    global _labels
    if language not in LANGUAGES:
        raise DpnbError(f"set_language: no labels for {language!r}; choose one of "
                        f"{', '.join(map(repr, LANGUAGES))}")
    _labels = LANGUAGES[language]


def label(text: str) -> str:
    """``text`` in the chosen language; a number in it ("norm rank 1") is kept."""
    if text in _labels:
        return _labels[text]
    template = re.sub(r"\d+", "{}", text)
    if template != text and template in _labels:
        return _labels[template].format(*re.findall(r"\d+", text))
    return text


def width(text: str) -> int:
    """Columns ``text`` takes in a terminal: wide (Japanese) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
