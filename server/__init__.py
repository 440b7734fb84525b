"""voicewire.server: the streaming server (Starlette app, protocol v1, HTTP speech API, sessions, audio
encoding, auth, metrics, worker processes), the `voicewire` CLI and `voicewire bench`."""
