// The demo page: typing streams text as you type; "Simulate LLM" pushes a paragraph at a
// token-like pace; Stop is a barge-in. On a Base checkpoint, a voice cloned from a file or the
// microphone joins the voice picker and speaks the next session.
import { VoicewirePlayer } from './player.js';
import { Recorder, VoiceLibrary } from './voices.js';

const $ = (id) => document.getElementById(id);
const PARAGRAPH = 'Thanks for calling. I found your order, and it shipped this morning. It should arrive on Thursday between nine and noon. Is there anything else I can help you with today?';
const params = new URLSearchParams(location.search);
const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;
const library = new VoiceLibrary({ token: params.get('token') });
const VARIANTS = { base: 'Base', custom_voice: 'CustomVoice', voice_design: 'VoiceDesign' };
let player = null;
let variant = null; // the checkpoint's, from GET /v1/voices
let reference = null; // what Clone uploads: { file, filename }
let recorder = null; // the microphone take under way
let sent = 0; // characters of the text box already sent in this turn
let meterLevel = 0;
let simulation = 0; // the running "Simulate LLM", by number: Stop and New turn end it
let failure = null; // the last error, in words, until the next action

function fail(message) { failure = message; $('status').textContent = `error: ${message}`; }
function failed(error) { fail(error.message || String(error)); }
function act() { // any action of the user clears the last error
  if (failure === null) return;
  failure = null;
  $('status').textContent = settled();
}
function settled() { return player ? `connected (${player.stats().codec})` : 'no voice yet: clone one below'; }

async function connect() {
  const ready = await (await fetch('ready')).json();
  $('banner').hidden = !ready.random_weights;
  const voices = await library.list();
  variant = voices.variant;
  for (const voice of voices.voices) $('voice').add(new Option(voice.id + (voice.dialect ? ` (${voice.dialect})` : ''), voice.id));
  for (const voice of voices.stored) $('voice').add(storedOption(voice));
  for (const language of voices.languages) $('language').add(new Option(language, language));
  showClonePanel(voices.cloning);
  showDelete();
  await restart();
}

// The session's voice: a named speaker, or a stored voice by id; null where a Base checkpoint has
// no cloned voice yet (it has no speakers of its own, and a start without a voice is refused).
function chosenVoice() {
  const option = $('voice').selectedOptions[0];
  const language = $('language').value || 'auto';
  if (option?.dataset.stored) return { id: option.value, language };
  if (option) return { speaker: option.value, language };
  return variant === 'base' ? null : { language };
}

// A new session in the chosen voice, after the one before has closed (one at a time: the picker
// can change again while a session starts).
let restarting = Promise.resolve();
function restart() {
  restarting = restarting.catch(() => {}).then(reopen);
  return restarting;
}

async function reopen() {
  window.voicewire = null;
  if (player) { const old = player; player = null; await old.close(); }
  const voice = chosenVoice();
  for (const id of ['text', 'speak', 'simulate', 'stop', 'turn']) $(id).disabled = voice === null;
  if (voice === null) { $('status').textContent = settled(); return; }
  const me = new VoicewirePlayer({ targetMs: Number(params.get('target') || 300) });
  player = me;
  window.voicewire = player; // for the browser tests
  await player.connect(wsUrl, { format: params.get('format') || 'auto', token: params.get('token') });
  player.addEventListener('progress', ({ detail }) => { $('progress').textContent += detail.text; });
  player.addEventListener('cancelled', ({ detail }) => showHeard(detail));
  player.addEventListener('error', ({ detail }) => fail(detail.message || detail.code));
  player.addEventListener('close', ({ detail }) => {
    if (player === me) fail(`the server closed the connection (${detail.reason || `code ${detail.code}`})`);
  });
  player.addEventListener('rendered', ({ detail }) => {
    let peak = 0;
    for (const v of detail) peak = Math.max(peak, Math.abs(v));
    meterLevel = Math.max(meterLevel * 0.9, peak);
  });
  player.tap(true);
  // URL parameters for tests and debugging: greedy, maxFrames, bitrate.
  const options = {
    sampling: params.has('greedy') ? { greedy: true } : undefined,
    maxFrames: params.has('maxFrames') ? Number(params.get('maxFrames')) : undefined,
    bitrate: params.has('bitrate') ? Number(params.get('bitrate')) : undefined,
    timestamps: 'words', // for what the listener heard when they barge in
  };
  await player.start(voice, options);
  $('status').textContent = settled();
  newTurn();
}

function newTurn() { simulation++; sent = 0; $('text').value = ''; $('progress').textContent = ''; }

// A barge-in: what the listener heard of the cut turn, by the server's word timing and this
// player's playback reports (what an agent tells its LLM was said).
function showHeard({ heard_text: text, heard_samples: samples }) {
  if (text === null || text === undefined) return;
  const seconds = (samples / player.stats().rate).toFixed(1);
  $('heard').textContent = `Heard before the barge-in (${seconds} s): “${text}”`;
  $('heard').hidden = false;
}

$('text').addEventListener('input', () => {
  act();
  $('heard').hidden = true;
  const text = $('text').value;
  if (text.length < sent) { sent = text.length; return; } // edits behind the cursor are not unsaid
  // Text typed after Speak is the next turn: the player holds it until this one is done.
  if (text.length > sent) { player.push(text.slice(sent)); sent = text.length; }
});
$('speak').addEventListener('click', () => { act(); player.end(); });
$('stop').addEventListener('click', () => { act(); simulation++; player.cancel(); });
$('turn').addEventListener('click', () => { act(); player.cancel(); newTurn(); });
$('simulate').addEventListener('click', async () => {
  act();
  player.cancel();
  newTurn();
  $('heard').hidden = true;
  const mine = simulation;
  for (const word of PARAGRAPH.split(/(?<= )/)) {
    if (mine !== simulation) return; // stopped
    $('text').value += word;
    sent = $('text').value.length;
    player.push(word);
    await new Promise((r) => setTimeout(r, 60));
  }
  if (mine === simulation) player.end();
});
for (const id of ['voice', 'language']) {
  $(id).addEventListener('change', () => { act(); showDelete(); restart().catch(failed); });
}

// --- the voice library (cloning needs a Base checkpoint) ----------------------------------------

function storedOption(voice) {
  const option = new Option(`${voice.name} (cloned)`, voice.id);
  option.dataset.stored = 'true';
  return option;
}

function showDelete() { $('delete').hidden = !$('voice').selectedOptions[0]?.dataset.stored; }

function showClonePanel(cloning) {
  $('clone').hidden = false;
  $('clone-form').hidden = !cloning;
  $('clone-reason').hidden = cloning;
  // What POST /v1/voices would answer (cloning_unsupported), said before anyone tries.
  $('clone-reason').textContent = `Cloning needs a Base checkpoint; this server runs a ${VARIANTS[variant] || variant} one.`;
  // Browsers offer the microphone to secure pages only (https, or http on loopback).
  $('record').hidden = !navigator.mediaDevices?.getUserMedia || typeof MediaRecorder === 'undefined';
}

function showReference(text) { $('reference').textContent = text; }

$('clone-file').addEventListener('change', () => {
  act();
  const file = $('clone-file').files[0];
  if (!file) return;
  reference = { file, filename: file.name };
  showReference(`${file.name} (${Math.ceil(file.size / 1024)} kB)`);
  if (!$('clone-name').value) $('clone-name').value = file.name.replace(/\.[^.]*$/, '');
});

$('record').addEventListener('click', async () => {
  act();
  const button = $('record');
  if (recorder) {
    const take = recorder;
    recorder = null;
    clearInterval(take.clock);
    button.textContent = 'Record';
    try {
      const { file, seconds } = await take.stop();
      reference = { file, filename: 'recording.wav' };
      showReference(`Recorded ${seconds.toFixed(1)} s.`);
    } catch (error) {
      fail(`the recording could not be read: ${error.message}`);
    }
    return;
  }
  const take = new Recorder();
  button.disabled = true;
  try {
    await take.start();
  } catch (error) {
    fail(`no microphone: ${error.message}`);
    return;
  } finally {
    button.disabled = false;
  }
  recorder = take;
  reference = null;
  $('clone-file').value = '';
  button.textContent = 'Stop recording';
  take.clock = setInterval(() => showReference(`Recording… ${take.elapsed().toFixed(1)} s`), 100);
});

$('clone-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  act();
  if (recorder) { fail('stop the recording first'); return; }
  if (!reference) { fail('pick a reference file or record one first'); return; }
  const button = $('clone-button');
  button.disabled = true;
  button.textContent = 'Cloning…';
  try {
    const name = $('clone-name').value.trim() || $('clone-name').placeholder;
    const voice = await library.clone(reference.file, { name, refText: $('clone-text').value.trim(), filename: reference.filename });
    $('voice').add(storedOption(voice));
    $('voice').value = voice.id;
    showDelete();
    showReference(`Cloned “${voice.name}” from ${voice.duration.toFixed(1)} s of audio${voice.in_context ? ' and its text' : ''}.`);
    await restart();
  } catch (error) {
    failed(error);
  } finally {
    button.disabled = false;
    button.textContent = 'Clone';
  }
});

$('delete').addEventListener('click', async () => {
  act();
  const option = $('voice').selectedOptions[0];
  if (!option?.dataset.stored) return;
  try {
    await library.remove(option.value);
    option.remove();
    showDelete();
    await restart();
  } catch (error) {
    failed(error);
  }
});

function draw() {
  const canvas = $('meter');
  const g = canvas.getContext('2d');
  g.fillStyle = '#ffffff';
  g.fillRect(0, 0, canvas.width, canvas.height);
  g.fillStyle = '#2f6fed';
  g.fillRect(0, 0, canvas.width * Math.min(1, meterLevel), canvas.height);
  meterLevel *= 0.95;
  if (player) {
    const s = player.stats();
    $('latency').textContent = s.latencyMs === null ? '–' : `${Math.round(s.latencyMs)} ms`;
    $('buffer').textContent = `${Math.round(s.bufferMs)} ms`;
    $('underruns').textContent = s.underruns;
    $('bitrate').textContent = `${s.bitrateKbps.toFixed(0)} kbps`;
    $('codec').textContent = s.codec;
    // idle: no turn; listening: a turn is open, its audio not here yet; speaking: audio playing.
    const state = s.bufferMs > 0 ? 'speaking' : s.context ? 'listening' : 'idle';
    if ($('state').textContent !== state) { $('state').textContent = state; $('state').dataset.state = state; }
  }
  requestAnimationFrame(draw);
}
requestAnimationFrame(draw);
connect().catch(failed);
