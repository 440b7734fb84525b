"""Official mel spectrogram, mel filterbank and x-vectors for a set of 24 kHz signals.

Usage: speaker.py CHECKPOINT WAVS.npz OUT.npz
"""

import sys

import numpy as np
import torch
from librosa.filters import mel as librosa_mel
from official import load_model
from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram


def main() -> None:
    folder, wavs_path, out_path = sys.argv[1:4]
    tts = load_model(folder)
    out = {"filterbank": librosa_mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)}
    for name, audio in np.load(wavs_path).items():
        mel = mel_spectrogram(torch.from_numpy(audio)[None], 1024, 128, 24000, 256, 1024, 0, 12000)
        out[f"mel_{name}"] = mel.transpose(1, 2)[0].numpy()
        out[f"xvec_{name}"] = tts.model.extract_speaker_embedding(audio, 24000).float().numpy()
    np.savez(out_path, **out)


if __name__ == "__main__":
    main()
