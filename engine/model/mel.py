"""Log-mel spectrogram of 24 kHz audio, as the speaker encoder was trained on it."""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

N_FFT = 1024
HOP = 256
N_MELS = 128
SAMPLE_RATE = 24000
F_MAX = 12000.0


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    # Slaney's scale: linear below 1 kHz, logarithmic above.
    hz = np.asarray(hz, dtype=np.float64)
    mel = hz / (200.0 / 3)
    log_region = hz >= 1000.0
    return np.where(log_region, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    hz = mel * (200.0 / 3)
    return np.where(mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)), hz)


@functools.cache
def mel_filterbank(
    sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS, f_max: float = F_MAX
):
    """Slaney-normalised triangular filters [n_mels, n_fft // 2 + 1] (float32, as librosa's default)."""
    fft_hz = np.linspace(0, sample_rate / 2, 1 + n_fft // 2)
    mel_hz = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(f_max), n_mels + 2))
    widths = np.diff(mel_hz)
    ramps = mel_hz[:, None] - fft_hz[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_hz[2:] - mel_hz[:-2]))[:, None]
    return torch.from_numpy(weights.astype(np.float32))


def log_mel(audio: Tensor) -> Tensor:
    """audio [B, samples] in [-1, 1] at 24 kHz -> log-mel [B, frames, 128] (reflect-padded, uncentred)."""
    pad = (N_FFT - HOP) // 2
    audio = F.pad(audio[:, None], (pad, pad), mode="reflect")[:, 0]
    window = torch.hann_window(N_FFT, device=audio.device, dtype=audio.dtype)
    spec = torch.stft(
        audio, N_FFT, hop_length=HOP, win_length=N_FFT, window=window, center=False, return_complex=True
    )
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.matmul(mel_filterbank().to(audio.device, audio.dtype), magnitude)
    return torch.log(mel.clamp(min=1e-5)).transpose(1, 2)
