// The demo page: typing streams text as you type; "Simulate LLM" pushes a paragraph at a
// token-like pace; Stop is a barge-in.
import { VoicewirePlayer } from './player.js';

const $ = (id) => document.getElementById(id);
const PARAGRAPH = 'Thanks for calling. I found your order, and it shipped this morning. It should arrive on Thursday between nine and noon. Is there anything else I can help you with today?';
const params = new URLSearchParams(location.search);
const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;
let player = null;
let sent = 0; // characters of the text box already sent in this turn
let meterLevel = 0;
let simulation = 0; // the running "Simulate LLM", by number: Stop and New turn end it
let failure = null; // the last error, in words, until the next action

function fail(message) { failure = message; $('status').textContent = `error: ${message}`; }
function act() { // any action of the user clears the last error
  if (failure === null) return;
  failure = null;
  $('status').textContent = `connected (${player.stats().codec})`;
}

async function connect() {
  const ready = await (await fetch('ready')).json();
  $('banner').hidden = !ready.random_weights;
  const voices = await (await fetch('v1/voices')).json();
  for (const voice of voices.voices) $('voice').add(new Option(voice.id + (voice.dialect ? ` (${voice.dialect})` : ''), voice.id));
  for (const language of voices.languages) $('language').add(new Option(language, language));
  await restart();
}

async function restart() {
  if (player) { const old = player; player = null; await old.close(); }
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
  await player.start({ speaker: $('voice').value || undefined, language: $('language').value || 'auto' }, options);
  $('status').textContent = `connected (${player.stats().codec})`;
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
for (const id of ['voice', 'language']) $(id).addEventListener('change', restart);

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
connect().catch((error) => fail(error.message || String(error)));
