"""voicewire.integrations: plugins that put voicewire into voice-agent frameworks.

- `voicewire.integrations.pipecat.VoicewireTTSService` (extra `voicewire[pipecat]`)
- `voicewire.integrations.livekit.TTS` (extra `voicewire[livekit]`)

Both speak protocol v1 to a running `voicewire serve` and take the same keyword arguments where
they mean the same thing (docs/integrations.md).
"""
