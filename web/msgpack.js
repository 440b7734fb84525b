// The msgpack subset protocol v1 needs, written here so the player has no dependencies.
// Encodes: null, booleans, numbers (integers in the smallest form, others as float64), strings,
// Uint8Array (bin), arrays and plain objects (maps with string keys).
// Decodes: every type except ext and timestamps.

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder();

class Writer {
  constructor() {
    this.bytes = new Uint8Array(64);
    this.view = new DataView(this.bytes.buffer);
    this.length = 0;
  }
  reserve(n) {
    if (this.length + n <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < this.length + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
    this.view = new DataView(grown.buffer);
  }
  u8(v) { this.reserve(1); this.view.setUint8(this.length, v); this.length += 1; }
  u16(v) { this.reserve(2); this.view.setUint16(this.length, v); this.length += 2; }
  u32(v) { this.reserve(4); this.view.setUint32(this.length, v); this.length += 4; }
  f64(v) { this.reserve(8); this.view.setFloat64(this.length, v); this.length += 8; }
  raw(b) { this.reserve(b.length); this.bytes.set(b, this.length); this.length += b.length; }
}

function writeLength(w, n, fix, fixMax, base8, base16, base32) {
  if (fix !== null && n <= fixMax) w.u8(fix | n);
  else if (base8 !== null && n < 0x100) { w.u8(base8); w.u8(n); }
  else if (n < 0x10000) { w.u8(base16); w.u16(n); }
  else { w.u8(base32); w.u32(n); }
}

function writeValue(w, value) {
  if (value === null || value === undefined) w.u8(0xc0);
  else if (value === false) w.u8(0xc2);
  else if (value === true) w.u8(0xc3);
  else if (typeof value === 'number') {
    if (Number.isInteger(value) && value >= -0x80000000 && value <= 0xffffffff) {
      if (value >= 0 && value < 0x80) w.u8(value);
      else if (value < 0 && value >= -32) w.u8(value & 0xff);
      else if (value >= 0) {
        if (value < 0x100) { w.u8(0xcc); w.u8(value); }
        else if (value < 0x10000) { w.u8(0xcd); w.u16(value); }
        else { w.u8(0xce); w.u32(value); }
      } else if (value >= -0x80) { w.u8(0xd0); w.u8(value & 0xff); }
      else if (value >= -0x8000) { w.u8(0xd1); w.u16(value & 0xffff); }
      else { w.u8(0xd2); w.u32(value >>> 0); }
    } else { w.u8(0xcb); w.f64(value); }
  } else if (typeof value === 'string') {
    const bytes = textEncoder.encode(value);
    writeLength(w, bytes.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
    w.raw(bytes);
  } else if (value instanceof Uint8Array) {
    writeLength(w, value.length, null, 0, 0xc4, 0xc5, 0xc6);
    w.raw(value);
  } else if (Array.isArray(value)) {
    writeLength(w, value.length, 0x90, 15, null, 0xdc, 0xdd);
    for (const item of value) writeValue(w, item);
  } else if (typeof value === 'object') {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined);
    writeLength(w, keys.length, 0x80, 15, null, 0xde, 0xdf);
    for (const key of keys) { writeValue(w, key); writeValue(w, value[key]); }
  } else {
    throw new TypeError(`msgpack: cannot encode a ${typeof value}`);
  }
}

/** Encode a value as msgpack bytes. */
export function encode(value) {
  const w = new Writer();
  writeValue(w, value);
  return w.bytes.slice(0, w.length);
}

class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.pos = 0;
  }
  need(n) {
    if (this.pos + n > this.bytes.length) throw new RangeError('msgpack: truncated data');
  }
  u8() { this.need(1); return this.view.getUint8(this.pos++); }
  take(n, get) { this.need(n); const v = get(this.pos); this.pos += n; return v; }
  bytesOf(n) { this.need(n); const b = this.bytes.slice(this.pos, this.pos + n); this.pos += n; return b; }
}

function readValue(r) {
  const t = r.u8();
  const v = r.view;
  if (t < 0x80) return t;
  if (t >= 0xe0) return t - 0x100;
  if ((t & 0xe0) === 0xa0) return textDecoder.decode(r.bytesOf(t & 0x1f));
  if ((t & 0xf0) === 0x90) return readArray(r, t & 0x0f);
  if ((t & 0xf0) === 0x80) return readMap(r, t & 0x0f);
  switch (t) {
    case 0xc0: return null;
    case 0xc2: return false;
    case 0xc3: return true;
    case 0xc4: return r.bytesOf(r.u8());
    case 0xc5: return r.bytesOf(r.take(2, (p) => v.getUint16(p)));
    case 0xc6: return r.bytesOf(r.take(4, (p) => v.getUint32(p)));
    case 0xca: return r.take(4, (p) => v.getFloat32(p));
    case 0xcb: return r.take(8, (p) => v.getFloat64(p));
    case 0xcc: return r.u8();
    case 0xcd: return r.take(2, (p) => v.getUint16(p));
    case 0xce: return r.take(4, (p) => v.getUint32(p));
    case 0xcf: return Number(r.take(8, (p) => v.getBigUint64(p)));
    case 0xd0: return r.take(1, (p) => v.getInt8(p));
    case 0xd1: return r.take(2, (p) => v.getInt16(p));
    case 0xd2: return r.take(4, (p) => v.getInt32(p));
    case 0xd3: return Number(r.take(8, (p) => v.getBigInt64(p)));
    case 0xd9: return textDecoder.decode(r.bytesOf(r.u8()));
    case 0xda: return textDecoder.decode(r.bytesOf(r.take(2, (p) => v.getUint16(p))));
    case 0xdb: return textDecoder.decode(r.bytesOf(r.take(4, (p) => v.getUint32(p))));
    case 0xdc: return readArray(r, r.take(2, (p) => v.getUint16(p)));
    case 0xdd: return readArray(r, r.take(4, (p) => v.getUint32(p)));
    case 0xde: return readMap(r, r.take(2, (p) => v.getUint16(p)));
    case 0xdf: return readMap(r, r.take(4, (p) => v.getUint32(p)));
    default: throw new TypeError(`msgpack: unsupported type byte 0x${t.toString(16)}`);
  }
}

function readArray(r, n) {
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = readValue(r);
  return out;
}

function readMap(r, n) {
  const out = {};
  for (let i = 0; i < n; i++) {
    const key = readValue(r);
    out[String(key)] = readValue(r);
  }
  return out;
}

/** Decode one msgpack value; throws on truncated or trailing bytes. */
export function decode(bytes) {
  const r = new Reader(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes));
  const value = readValue(r);
  if (r.pos !== r.bytes.length) throw new RangeError('msgpack: trailing bytes');
  return value;
}
