// Drives Debian's headless chromium with playwright-core through the demo page and the player.
// Usage: node browser.mjs BASE_URL SCENARIO OUT_DIR; prints one JSON object with what it saw.
import { chromium } from 'playwright-core';

import { decode } from '../../web/msgpack.js';

const [base, scenario, outDir] = process.argv.slice(2);
// The clone scenario records from Chromium's fake microphone (a beep), its permission granted.
const microphone = ['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream'];
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--autoplay-policy=no-user-gesture-required', '--no-sandbox', ...(scenario === 'clone' ? microphone : [])],
});
const result = { scenario };

// Waits until every turn the player opened is done, then until the worklet has rendered every
// sample the server reported for them, or has stood still for three seconds with an empty buffer
// (a lost sample then shows in the test's played == samples). With one second, a fresh-clone CI
// run on 2 cores once ended 46 ms of audio short, not reproduced since: waiting longer costs a
// passing run nothing (it ends when every sample has played) and tells a late sample from a lost one. Typed text can make two turns: the
// server ends a turn at its max_frames while the typing goes on, and the words typed after that
// open the next one, as they would for a user.
async function playedOut(page) {
  await page.waitForFunction(() => window.seen.dones.length === window.voicewire.turns && !window.voicewire.context
    && !window.voicewire.flushing && !window.voicewire.next.length, // no turn held back for a flush
    null, { timeout: 60000, polling: 50 });
  await page.waitForFunction(() => {
    const { played, bufferMs } = window.voicewire.stats();
    const w = window.seen;
    if (played >= w.doneSamples) return true;
    if (bufferMs > 0 || played !== w.lastPlayed) { w.lastPlayed = played; w.stillSince = performance.now(); }
    return performance.now() - (w.stillSince ?? performance.now()) > 3000;
  }, null, { timeout: 30000, polling: 50 });
  await page.waitForTimeout(100);
}

// Waits for the page's session and records what its player does in window.seen; its codec.
async function watchPlayer(page) {
  await page.waitForFunction(() => window.voicewire?.ready === true, null, { timeout: 30000 });
  await page.evaluate((text) => { window.FIDELITY_TEXT = text; }, process.env.FIDELITY_TEXT || '');
  await page.evaluate(() => {
    const p = window.voicewire;
    window.seen = { firstAudioAt: null, rendered: [], done: null, dones: [], doneSamples: 0, errors: [], underruns: [], arrived: [], states: [] };
    setInterval(() => { // the demo's state line, each change
      const state = document.getElementById('state').textContent;
      if (window.seen.states.at(-1) !== state) window.seen.states.push(state);
    }, 20);
    p.addEventListener('error', (e) => { window.seen.errors.push(e.detail.code); });
    p.addEventListener('underrun', () => { window.seen.underruns.push([performance.now(), p.stats().played]); });
    p.addEventListener('audio', (e) => {
      window.seen.firstAudioAt ??= performance.now();
      window.seen.arrived.push([performance.now(), e.detail.pts + e.detail.samples]);
    });
    p.addEventListener('done', (e) => {
      window.seen.done = e.detail;
      window.seen.dones.push(e.detail.context_id);
      window.seen.doneSamples += e.detail.samples; // of every turn, as the worklet's played counts
    });
    p.addEventListener('rendered', (e) => { window.seen.rendered.push([performance.now(), e.detail.length]); });
  });
  return page.evaluate(() => window.voicewire.stats().codec);
}

try {
  const page = await browser.newPage({ viewport: { width: 390, height: 844 } }); // a phone
  const logs = [];
  page.on('console', (m) => logs.push(m.text()));
  page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
  // Each socket the page opens: the voice its start carried, the samples of audio it got per
  // context, and its done messages.
  const sockets = [];
  page.on('websocket', (ws) => {
    const socket = { voice: null, audio: {}, done: [] };
    sockets.push(socket);
    ws.on('framesent', ({ payload }) => {
      const message = decode(new Uint8Array(payload));
      if (message.type === 'start') socket.voice = message.voice;
    });
    ws.on('framereceived', ({ payload }) => {
      const message = decode(new Uint8Array(payload));
      if (message.type === 'audio') socket.audio[message.context_id] = (socket.audio[message.context_id] || 0) + message.samples;
      if (message.type === 'done') socket.done.push(message);
      if (message.type === 'ready') socket.ready = true;
    });
  });
  if (scenario === 'pcm') {
    // A browser whose WebCodecs has no Opus (some Safari versions): the player must notice alone.
    await page.addInitScript(() => { delete window.AudioDecoder; delete window.EncodedAudioChunk; });
  }
  const format = 'auto';
  // The tiny checkpoint on this 2-core CI machine runs at 1.0-1.7x real time alone and below real
  // time beside Chromium; random weights never say EOS, so a turn would run to its 20 s bound and
  // no start buffer could cover the deficit. The typing turn is cut at 30 frames (2.4 s of audio):
  // a 1 s start buffer then plays it gap-free down to 0.6x real time.
  const extra = {
    fidelity: '&greedy=1&maxFrames=24&bitrate=128000',
    typing: '&maxFrames=30',
    pcm: '&maxFrames=30',
    turns: '&maxFrames=12',
    'back-to-back': '&maxFrames=12',
    clone: '&maxFrames=12',
  }[scenario] || '';
  await page.goto(`${base}/?format=${format}&target=1000${extra}${process.env.PAGE_PARAMS || ''}`);
  // A Base checkpoint's page opens no session until a voice is cloned.
  if (scenario !== 'clone') result.codec = await watchPlayer(page);

  if (scenario === 'clone') {
    const demo = () => page.evaluate(() => {
      const $ = (id) => document.getElementById(id);
      return {
        status: $('status').textContent,
        voices: [...$('voice').options].map((o) => [o.value, o.text]),
        selected: $('voice').value,
        reference: $('reference').textContent,
        formHidden: $('clone-form').hidden,
        reasonHidden: $('clone-reason').hidden,
        deleteHidden: $('delete').hidden,
        speakDisabled: $('speak').disabled,
      };
    });
    const status = (prefix) => page.waitForFunction((p) => document.getElementById('status').textContent.startsWith(p), prefix, { timeout: 120000 });
    // Waits until the picker shows `name` and the page's session in it is ready.
    const selected = async (name) => {
      await page.waitForFunction((n) => document.getElementById('voice').selectedOptions[0]?.text === `${n} (cloned)`, name, { timeout: 120000 });
      const id = await page.evaluate(() => document.getElementById('voice').value);
      for (const until = Date.now() + 60000; !sockets.some((s) => s.voice?.id === id && s.ready);) {
        if (Date.now() > until) throw new Error(`no session started in voice ${id}`);
        await page.waitForTimeout(50);
      }
      await page.waitForFunction(() => window.voicewire?.ready === true, null, { timeout: 30000 });
    };
    await page.waitForFunction(() => !document.getElementById('clone').hidden, null, { timeout: 30000 });
    result.before = await demo();
    // Too short a file: the server's words, until the next action.
    await page.setInputFiles('#clone-file', process.env.SHORT_WAV);
    await page.fill('#clone-name', 'Shorty');
    await page.click('#clone-button');
    await status('error: ');
    result.tooShort = await demo();
    await page.setInputFiles('#clone-file', process.env.REFERENCE_WAV);
    result.picked = await demo();
    await page.fill('#clone-name', 'Ada');
    await page.fill('#clone-text', process.env.REFERENCE_TEXT);
    await page.click('#clone-button');
    await selected('Ada');
    await status('connected');
    result.cloned = await demo();
    // A turn in the cloned voice.
    await page.evaluate(() => {
      window.spoken = null;
      window.voicewire.addEventListener('done', (e) => { window.spoken = e.detail; });
    });
    await page.locator('#text').focus();
    await page.keyboard.insertText('Hello from a cloned voice.');
    await page.click('#speak');
    await page.waitForFunction(() => window.spoken !== null, null, { timeout: 60000 });
    result.spoken = await page.evaluate(() => window.spoken);
    // A take from the microphone: record, stop, clone.
    await page.click('#record');
    await page.waitForFunction(() => document.getElementById('reference').textContent.startsWith('Recording… '));
    result.recording = await demo();
    await page.waitForTimeout(1800);
    await page.click('#record');
    await page.waitForFunction(() => document.getElementById('reference').textContent.startsWith('Recorded '), null, { timeout: 30000 });
    result.recorded = await demo();
    await page.fill('#clone-name', 'Mic');
    await page.fill('#clone-text', '');
    await page.click('#clone-button');
    await selected('Mic');
    result.micCloned = await demo();
    // Delete the first voice from the picker.
    await page.selectOption('#voice', result.cloned.selected);
    await selected('Ada');
    await page.click('#delete');
    await page.waitForFunction((id) => ![...document.getElementById('voice').options].some((o) => o.value === id), result.cloned.selected, { timeout: 30000 });
    await page.waitForFunction(() => window.voicewire?.ready === true, null, { timeout: 30000 });
    result.deleted = await demo();
    await page.screenshot({ path: `${outDir}/demo-clone.png`, fullPage: true });
    result.sockets = sockets;
  } else if (scenario === 'typing' || scenario === 'pcm') {
    const text = 'Hello there, this is the voicewire demo page speaking as you type. It works on a phone too.';
    const typingStarted = await page.evaluate(() => performance.now());
    // A fast writer, as an LLM is: a word every 40 ms, about twice the rate speech uses text up
    // (12.5 tokens/s). Typed key by key instead, the machine's load set the pace, which came close
    // to the speech rate on two cores; the stream then rightly waited for text and the player ran dry.
    await page.locator('#text').focus();
    for (const word of text.split(/(?<= )/)) {
      await page.keyboard.insertText(word);
      await page.waitForTimeout(40);
    }
    result.typingEndedAt = (await page.evaluate(() => performance.now())) - typingStarted;
    await page.click('#speak');
    await playedOut(page);
    const seen = await page.evaluate(() => ({
      firstAudioAt: window.seen.firstAudioAt, done: window.seen.done, stats: window.voicewire.stats(),
      underruns: window.seen.underruns, arrived: window.seen.arrived, dones: window.seen.dones, doneSamples: window.seen.doneSamples,
    }));
    result.underrunsAt = seen.underruns.map(([t, played]) => [t - typingStarted, played]);
    result.arrivedAt = seen.arrived.map(([t, total]) => [t - typingStarted, total]);
    result.firstAudioAfterTypingStartMs = seen.firstAudioAt - typingStarted;
    result.done = seen.done;
    result.dones = seen.dones;
    result.doneSamples = seen.doneSamples;
    result.stats = seen.stats;
    await page.screenshot({ path: `${outDir}/demo-${scenario}.png`, fullPage: true });
  } else if (scenario === 'fidelity') {
    await page.evaluate(() => {
      window.seen.samples = [];
      window.voicewire.addEventListener('rendered', (e) => window.seen.samples.push(...e.detail));
      window.voicewire.push(window.FIDELITY_TEXT);
      window.voicewire.end();
    });
    await playedOut(page);
    const seen = await page.evaluate(() => ({
      samples: window.seen.samples, done: window.seen.done, voice: document.getElementById('voice').value,
    }));
    result.rendered = seen.samples;
    result.done = seen.done;
    result.voice = seen.voice;
  } else if (scenario === 'back-to-back') {
    // The next turn's text the moment the server says the last is done, as an agent's next
    // sentence often comes: the ended turn's decoder is still handing over its last packets.
    await page.evaluate(() => {
      const p = window.voicewire;
      p.addEventListener('done', () => { p.push('And the next one.'); p.end(); }, { once: true });
      p.push('The first turn.');
      p.end();
    });
    await playedOut(page);
    result.seen = await page.evaluate(() => ({
      dones: window.seen.dones, doneSamples: window.seen.doneSamples, stats: window.voicewire.stats(), errors: window.seen.errors,
    }));
  } else if (scenario === 'turns') {
    const status = () => page.evaluate(() => document.getElementById('status').textContent);
    result.favicon = await page.evaluate(async () => (await fetch('/favicon.ico')).status);
    result.banner = await page.evaluate(() => {
      const banner = document.getElementById('banner');
      return banner.hidden ? null : banner.textContent.replace(/\s+/g, ' ').trim();
    });
    result.clone = await page.evaluate(() => {
      const $ = (id) => document.getElementById(id);
      return { panelHidden: $('clone').hidden, formHidden: $('clone-form').hidden, reason: $('clone-reason').hidden ? null : $('clone-reason').textContent, deleteHidden: $('delete').hidden };
    });
    // Text typed after Speak, while the turn still plays, is the next turn, not an error.
    await page.locator('#text').focus();
    await page.keyboard.insertText('First turn. ');
    await page.click('#speak');
    await page.keyboard.insertText('Second turn.');
    await page.click('#speak');
    await page.waitForFunction(() => window.seen.dones.length >= 2, null, { timeout: 60000 });
    await page.waitForFunction(() => document.getElementById('state').textContent === 'idle', null, { timeout: 30000 });
    result.statusAfterTurns = await status();
    // An error says what happened, in words, until the next action.
    await page.evaluate(() => window.voicewire.send({ type: 'bogus' }));
    await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('error'));
    result.errorStatus = await status();
    result.errorsAfterTurns = await page.evaluate(() => [...window.seen.errors]);
    await page.click('#stop');
    result.statusAfterAction = await status();
    // Stop ends "Simulate LLM": no more words are written.
    await page.click('#simulate');
    await page.waitForTimeout(400);
    await page.click('#stop');
    const typed = await page.evaluate(() => document.getElementById('text').value.length);
    await page.waitForTimeout(600);
    result.simulated = [typed, await page.evaluate(() => document.getElementById('text').value.length)];
    // A late barge-in: the turn is done (12 frames come fast) and still playing when Stop is hit.
    await page.evaluate(() => {
      window.voicewire.addEventListener('cancelled', (e) => { window.seen.late = e.detail; });
    });
    await page.click('#turn');
    await page.locator('#text').focus();
    await page.keyboard.insertText('Third turn.');
    await page.click('#speak');
    const third = await page.evaluate(() => window.voicewire.stats().context);
    await page.waitForFunction((id) => window.seen.dones.includes(id)
      && window.voicewire.worklet.context === id && window.voicewire.worklet.contextPlayed > 48000 * 0.4,
    third, { timeout: 60000, polling: 10 });
    result.lateAt = await page.evaluate(() => window.voicewire.worklet.contextPlayed);
    await page.click('#stop');
    await page.waitForFunction(() => window.seen.late, null, { timeout: 30000 });
    result.late = await page.evaluate(() => ({ cancelled: window.seen.late, heard: document.getElementById('heard').textContent, bufferMs: window.voicewire.stats().bufferMs, done: window.seen.done }));
    result.third = third;
    result.seen = await page.evaluate(() => ({ dones: window.seen.dones, errors: window.seen.errors, states: window.seen.states }));
  } else if (scenario === 'barge-in') {
    await page.evaluate(() => {
      const p = window.voicewire;
      p.push('This turn goes on and on, long enough that it is still playing when we interrupt it. '.repeat(4));
      p.end();
    });
    await page.waitForFunction(() => window.voicewire.stats().played > 48000 * 0.5, null, { timeout: 60000 });
    await page.evaluate(() => {
      window.voicewire.addEventListener('cancelled', (e) => { window.seen.cancelled = e.detail; });
    });
    const [cancelAt, playedAtCancel] = await page.evaluate(() => {
      const played = window.voicewire.stats().played;
      window.voicewire.cancel();
      return [performance.now(), played];
    });
    await page.waitForTimeout(600);
    await page.waitForFunction(() => window.seen.cancelled, null, { timeout: 30000 });
    const seen = await page.evaluate(() => ({
      rendered: window.seen.rendered,
      stats: window.voicewire.stats(),
      cancelled: window.seen.cancelled,
      heard: document.getElementById('heard').hidden ? null : document.getElementById('heard').textContent,
    }));
    result.playedAtCancel = playedAtCancel;
    result.cancelled = seen.cancelled;
    result.heard = seen.heard;
    const after = seen.rendered.filter(([t]) => t > cancelAt);
    result.renderedAfterCancel = after.reduce((n, [, len]) => n + len, 0);
    result.lastRenderMsAfterCancel = after.length ? after.at(-1)[0] - cancelAt : 0;
    result.stats = seen.stats;
  }
  result.logs = logs;
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
