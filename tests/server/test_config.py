"""server/config.py: the `server:` section of a profile, the environment and flags over it, and
the voice library's settings within it."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from voicewire.server.config import ServerConfig, VoiceLimits, user_data_dir

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _profile(tmp_path: Path, server: dict) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump({"server": server}))
    return path


def test_data_dir_from_the_profile_then_the_environment_then_the_flag(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("VOICEWIRE_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert ServerConfig.from_yaml(None).voice_folder == user_data_dir() == tmp_path / "xdg" / "voicewire"
    profile = _profile(tmp_path, {"data_dir": str(tmp_path / "profile")})
    assert ServerConfig.from_yaml(profile).voice_folder == tmp_path / "profile"
    monkeypatch.setenv("VOICEWIRE_DATA_DIR", str(tmp_path / "env"))
    assert ServerConfig.from_yaml(profile).voice_folder == tmp_path / "env"
    flagged = ServerConfig.from_yaml(profile, data_dir=tmp_path / "flag")
    assert flagged.voice_folder == tmp_path / "flag" and flagged.data_dir == str(tmp_path / "flag")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ServerConfig(data_dir="~/voices").voice_folder == tmp_path / "home" / "voices"


def test_voice_limits_from_the_profile(tmp_path: Path) -> None:
    profile = _profile(tmp_path, {"voices": {"max_seconds": 30, "max_voices_per_key": 7}})
    limits = ServerConfig.from_yaml(profile).voices
    assert limits == VoiceLimits(max_seconds=30, max_voices_per_key=7)
    assert limits.max_upload_bytes == 20_000_000 and limits.max_ref_text_chars == 1000  # defaults
    assert ServerConfig.from_yaml(_profile(tmp_path, {"voices": None})).voices == VoiceLimits()
    refused = [
        ({"voices": {"max_voices": 3}}, "unknown server.voices settings: max_voices"),
        ({"voices": {"max_seconds": 0}}, "voices.max_seconds must be > 0, got 0.0"),
        (
            {"voices": {"max_upload_bytes": "big"}},
            "voices.max_upload_bytes should be a valid integer, got 'big'",
        ),
        ({"voices": {"min_seconds": True}}, "voices.min_seconds should be a valid number, got True"),
        ({"voices": {"min_seconds": 5, "max_seconds": 2}}, "min_seconds is over voices.max_seconds"),
        ({"voices": [1]}, "voices must be a mapping"),
        ({"voice_dir": "x"}, "unknown server settings: voice_dir"),
    ]
    for server, message in refused:
        with pytest.raises(ValueError, match=message):
            ServerConfig.from_yaml(_profile(tmp_path, server))


def test_settings_of_the_wrong_type_are_named_at_load(tmp_path: Path) -> None:
    """A profile's "2" for 2, 8000.5 for a port or null for a count is one line naming the setting
    (the CLI prints it and exits 2), not a TypeError in a worker's start or a fractional port."""
    refused = [
        ({"workers": "2"}, "server setting workers should be a valid integer, got '2'"),
        ({"port": 8000.5}, "server setting port should be a valid integer, got 8000.5"),
        ({"max_sessions": True}, "server setting max_sessions should be a valid integer, got True"),
        ({"slot_queue": None}, "server setting slot_queue should be a valid integer, got None"),
        ({"slot_wait_s": "2s"}, "server setting slot_wait_s should be a valid number, got '2s'"),
        ({"host": 127}, "server setting host should be a valid string, got 127"),
    ]
    for server, message in refused:
        with pytest.raises(ValueError, match=message):
            ServerConfig.from_yaml(_profile(tmp_path, server))
    # A whole number where a float is due is that float; null where None is allowed is None.
    typed = ServerConfig.from_yaml(
        _profile(tmp_path, {"slot_wait_s": 3, "codec_threads": None, "token_secret": None})
    )
    assert typed.slot_wait_s == 3.0 and isinstance(typed.slot_wait_s, float)
    assert typed.codec_threads is None and typed.token_secret is None


def test_the_codec_horizon_from_the_profile_zero_for_arrival_order(tmp_path: Path) -> None:
    assert ServerConfig.from_yaml(None).codec_horizon_s == 1.0
    assert ServerConfig.from_yaml(_profile(tmp_path, {"codec_horizon_s": 0})).codec_horizon_s == 0
    assert ServerConfig.from_yaml(_profile(tmp_path, {"codec_horizon_s": 0.25})).codec_horizon_s == 0.25
    with pytest.raises(ValueError, match="codec_horizon_s must be >= 0, got -1"):
        ServerConfig.from_yaml(_profile(tmp_path, {"codec_horizon_s": -1}))


def test_the_codec_threads_nice_from_the_profile_0_to_19(tmp_path: Path) -> None:
    assert ServerConfig.from_yaml(None).codec_nice == 0
    assert ServerConfig.from_yaml(_profile(tmp_path, {"codec_nice": 19})).codec_nice == 19
    for bad, message in ((-1, "codec_nice must be >= 0, got -1"), (20, "codec_nice must be 0-19, got 20")):
        with pytest.raises(ValueError, match=message):
            ServerConfig.from_yaml(_profile(tmp_path, {"codec_nice": bad}))


def test_the_settings_travel_to_workers_as_json(tmp_path: Path) -> None:
    """serving.py sends the settings as JSON and reads them back with from_yaml."""
    config = ServerConfig(data_dir=str(tmp_path), voices=VoiceLimits(max_seconds=9), api_keys=("k",))
    again = ServerConfig.from_yaml(None, **json.loads(json.dumps(dataclasses.asdict(config))))
    assert again == config


@pytest.mark.parametrize("profile", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_profile_loads(profile: Path) -> None:
    assert ServerConfig.from_yaml(profile).voices.max_upload_bytes > 0
