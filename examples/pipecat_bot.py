"""A reply streamed token by token, as an LLM writes it, spoken by voicewire through Pipecat into
pipecat_bot.wav. With `voicewire serve` running (README) and `pip install 'voicewire[pipecat]'`:
    python examples/pipecat_bot.py [ws://127.0.0.1:8000] [voice]
In a bot, the service goes between the LLM and the transport's output (docs/integrations.md).
"""

import asyncio
import sys
import wave

from pipecat.frames.frames import (
    EndFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.tts_service import TextAggregationMode
from pipecat.workers.runner import WorkerRunner

from voicewire.integrations.pipecat import VoicewireTTSService

REPLY = ["Hello", " from", " voice", "wire", ", speaking", " as the", " reply", " is", " written."]


class WavWriter(FrameProcessor):
    def __init__(self, path: str, rate: int) -> None:
        super().__init__()
        self.wav = wave.open(path, "wb")
        self.wav.setnchannels(1)
        self.wav.setsampwidth(2)
        self.wav.setframerate(rate)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.wav.writeframes(frame.audio)
        await self.push_frame(frame, direction)


async def main(url: str, voice: str) -> None:
    tts = VoicewireTTSService(url=url, voice=voice, text_aggregation_mode=TextAggregationMode.TOKEN)
    out = WavWriter("pipecat_bot.wav", 24000)
    worker = PipelineWorker(Pipeline([tts, out]), params=PipelineParams(audio_out_sample_rate=24000))
    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, REPLY), LLMFullResponseEndFrame()]
    await worker.queue_frames([*frames, EndFrame()])  # EndFrame: stop once the reply has played
    await WorkerRunner(handle_sigint=False).run(worker)
    out.wav.close()
    print("wrote pipecat_bot.wav")


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:8000"
    asyncio.run(main(url, sys.argv[2] if len(sys.argv) > 2 else "vivian"))
