"""A LiveKit voice agent that speaks with voicewire (docs/integrations.md, "LiveKit Agents").

    pip install 'voicewire[livekit]'
    voicewire serve &                      # the TTS, on ws://127.0.0.1:8000
    export LIVEKIT_URL=... LIVEKIT_API_KEY=... LIVEKIT_API_SECRET=...
    python -m livekit.agents start examples/livekit_agent.py --dev

STT and the LLM come from LiveKit Inference (the model names below); any LiveKit plugin can take
their place. VOICEWIRE_URL, VOICEWIRE_VOICE and VOICEWIRE_API_KEY point the TTS elsewhere.
"""

import os

from livekit.agents import Agent, AgentServer, AgentSession, JobContext

from voicewire.integrations.livekit import TTS, Sampling

server = AgentServer()


@server.rtc_session()
async def entrypoint(ctx: JobContext) -> None:
    session = AgentSession(
        stt="deepgram/nova-3",
        llm="openai/gpt-4.1-mini",
        tts=TTS(
            url=os.environ.get("VOICEWIRE_URL", "ws://127.0.0.1:8000"),
            voice=os.environ.get("VOICEWIRE_VOICE", "vivian"),
            language="english",
            sampling=Sampling(temperature=0.8),
        ),
        use_tts_aligned_transcript=True,  # transcripts (and what an interruption keeps) by word
    )
    agent = Agent(instructions="You are a friendly voice assistant. Answer in a sentence or two.")
    await session.start(agent=agent, room=ctx.room)
    await session.generate_reply(instructions="Greet the user and offer your help.")
