// The trace context a timer or outbox row stores: W3C traceparent (and tracestate) as JSON, written from a span
// context and read back as a remote one. What is read is validated: anything the library did not write, or that
// was garbled, reads as no context, never as an error. No database.
import { defaultTextMapGetter, propagation, ROOT_CONTEXT, type SpanContext, TraceFlags, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { readStoredTraceContext, storedTraceContext, traceHeaders } from '../../src/telemetry/trace-context.js';
import { W3cTraceState } from '../../src/telemetry/w3c-trace-state.js';

const traceId = '0af7651916cd43dd8448eb211c80319c';
const spanId = 'b7ad6b7169203331';
const sampled: SpanContext = { traceId, spanId, traceFlags: TraceFlags.SAMPLED };

describe('storedTraceContext / readStoredTraceContext', () => {
  it('stores traceparent (and tracestate when there is one) and reads them back as a remote span context', () => {
    expect(storedTraceContext(sampled)).toBe(`{"traceparent":"00-${traceId}-${spanId}-01"}`);
    const withState = {
      ...sampled,
      traceFlags: TraceFlags.NONE,
      traceState: W3cTraceState.parse('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7'),
    };
    const stored = storedTraceContext(withState)!;
    expect(JSON.parse(stored)).toEqual({
      traceparent: `00-${traceId}-${spanId}-00`,
      tracestate: 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7',
    });
    const read = readStoredTraceContext(stored)!;
    expect(read).toMatchObject({ traceId, spanId, traceFlags: 0, isRemote: true });
    expect(read.traceState?.get('rojo')).toBe('00f067aa0ba902b7');
    expect(read.traceState?.serialize()).toBe('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
  });

  it('stores nothing for no span context or an invalid one (no SDK registered, no trace going on)', () => {
    expect(storedTraceContext(undefined)).toBeNull();
    expect(
      storedTraceContext(trace.wrapSpanContext({ traceId: '0'.repeat(32), spanId: '0'.repeat(16), traceFlags: 0 }).spanContext()),
    ).toBeNull();
    expect(storedTraceContext({ traceId: 'xyz', spanId, traceFlags: 1 })).toBeNull();
  });

  it('reads hostile or garbled text as no context', () => {
    const hostile: unknown[] = [
      null,
      undefined,
      42,
      '',
      'not json',
      'null',
      '[]',
      '"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"',
      '{}',
      '{"traceparent":42}',
      `{"traceparent":"00-${'0'.repeat(32)}-${spanId}-01"}`,
      `{"traceparent":"00-${traceId}-${'0'.repeat(16)}-01"}`,
      `{"traceparent":"ff-${traceId}-${spanId}-01"}`,
      `{"traceparent":"01-${traceId}-${spanId}-01"}`,
      `{"traceparent":"00-${traceId.toUpperCase()}-${spanId}-01"}`,
      `{"traceparent":"00-${traceId}-${spanId}-01-extra"}`,
      `{"traceparent":" 00-${traceId}-${spanId}-01"}`,
      `{"traceparent":"00-${traceId}-${spanId}-zz"}`,
      `{"__proto__":{"traceparent":"00-${traceId}-${spanId}-01"}}`,
      `{"traceparent":"00-${traceId}-${spanId}-01","pad":"${'x'.repeat(1_100)}"}`,
    ];
    for (const text of hostile) expect(readStoredTraceContext(text), String(text)).toBeUndefined();
  });

  it('keeps the valid context when only its tracestate is garbled: the members that fit the grammar stay', () => {
    const read = readStoredTraceContext(
      JSON.stringify({ traceparent: `00-${traceId}-${spanId}-01`, tracestate: 'ok=1,BAD=2,=3,nokey,good@vendor=x y, trimmed=1 ,x=a=b' }),
    );
    expect(read).toMatchObject({ traceId, spanId });
    expect(read?.traceState?.serialize()).toBe('ok=1,good@vendor=x y,trimmed=1');
    const long = readStoredTraceContext(JSON.stringify({ traceparent: `00-${traceId}-${spanId}-01`, tracestate: `a=${'b'.repeat(600)}` }));
    expect(long?.traceState?.serialize()).toBe('');
  });

  it('never throws, whatever the text (property)', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.json(), fc.anything()), (value) => {
        const read = readStoredTraceContext(value);
        return read === undefined || (read.isRemote === true && /^[0-9a-f]{32}$/.test(read.traceId));
      }),
    );
  });

  it('round-trips any valid span context (property)', () => {
    const hex = (length: number) => fc.stringMatching(new RegExp(`^[0-9a-f]{${length}}$`));
    fc.assert(
      fc.property(hex(32), hex(16), fc.integer({ min: 0, max: 255 }), (t, s, flags) => {
        const context = { traceId: t, spanId: s, traceFlags: flags };
        const read = readStoredTraceContext(storedTraceContext(context));
        if (!trace.isSpanContextValid(context)) return read === undefined;
        return read?.traceId === t && read.spanId === s && read.traceFlags === flags;
      }),
    );
  });
});

describe('traceHeaders', () => {
  afterEach(() => propagation.disable());

  it('writes W3C traceparent and tracestate itself when no propagator is registered', () => {
    const context = trace.setSpanContext(ROOT_CONTEXT, { ...sampled, traceState: W3cTraceState.parse('congo=t61rcWkgMzE') });
    expect(traceHeaders(context)).toEqual({ traceparent: `00-${traceId}-${spanId}-01`, tracestate: 'congo=t61rcWkgMzE' });
    expect(traceHeaders(ROOT_CONTEXT)).toEqual({});
  });

  it('uses the registered propagator when there is one: what it writes, a consumer extracts', () => {
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    const headers = traceHeaders(trace.setSpanContext(ROOT_CONTEXT, sampled));
    expect(headers).toEqual({ traceparent: `00-${traceId}-${spanId}-01` });
    const extracted = new W3CTraceContextPropagator().extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
    expect(trace.getSpanContext(extracted)).toMatchObject({ traceId, spanId, isRemote: true });
  });
});

describe('W3cTraceState', () => {
  it('sets a member first, replaces one of the same key, and refuses what W3C refuses', () => {
    const state = W3cTraceState.parse('a=1,b=2');
    expect(state.set('b', '3').serialize()).toBe('b=3,a=1');
    expect(state.set('c', '4').serialize()).toBe('c=4,a=1,b=2');
    expect(state.unset('a').serialize()).toBe('b=2');
    expect(state.set('Bad', 'x')).toBe(state);
    expect(state.set('ok', 'x,y')).toBe(state);
    expect(
      W3cTraceState.parse(Array.from({ length: 40 }, (_, i) => `k${i}=v`).join(','))
        .serialize()
        .split(','),
    ).toHaveLength(32);
  });
});
