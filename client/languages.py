"""Language names: other services and frameworks name a language by its BCP 47 code ("en",
"en-US", "zh-CN"); Qwen3-TTS by its English name ("english"). Shared by the agent plugins and the
server's ElevenLabs dialect (no dependencies)."""

from __future__ import annotations

LANGUAGE_NAMES = {
    "zh": "chinese",
    "en": "english",
    "de": "german",
    "it": "italian",
    "pt": "portuguese",
    "es": "spanish",
    "ja": "japanese",
    "ko": "korean",
    "fr": "french",
    "ru": "russian",
}


def language_name(language: str | None) -> str | None:
    """A framework's language as the server names it: a BCP 47 code by its primary subtag ("en-US"
    is "english"); anything else as given, lower-cased ("English", "auto"), for the server to check."""
    if not language:
        return None
    lowered = language.lower()
    return LANGUAGE_NAMES.get(lowered.replace("_", "-").split("-")[0], lowered)
