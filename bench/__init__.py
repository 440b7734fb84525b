"""Benchmarks, outside the runtime's import path: `service` (`voicewire bench`, at the socket; its
parts `load`, `session`, `level`, `lookahead`, `server_http` and `report`), `engine` (`voicewire
bench-engine`, in process), `parts` (`voicewire bench-parts`, the GPU pieces one at a time), and
`tokenizer` with its `corpus`, the realistic text tokenizer of the random real-size checkpoints."""
