import type { TraceState } from '@opentelemetry/api';

/** Most list members a `tracestate` keeps (W3C Trace Context, "tracestate Limits"). */
const MAX_MEMBERS = 32;
/** Most characters of a `tracestate` the library keeps; a longer one is dropped whole, as the OpenTelemetry SDKs do. */
export const MAX_TRACE_STATE_LENGTH = 512;

// W3C Trace Context level 1: a key is a simple key or a multi-tenant `tenant@system` key; a value is printable ASCII
// without ',' and '=', not ending in a space.
const KEY = /^(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})$/;
const VALUE = /^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;

/**
 * A `tracestate` read from text the library stored: the W3C grammar, its list members newest first. Members that
 * do not fit the grammar are dropped; what is left is kept as read. The API's own implementation (`createTraceState`)
 * is deprecated in favour of `@opentelemetry/core`'s, which the library does not depend on at run time.
 */
export class W3cTraceState implements TraceState {
  private constructor(private readonly members: readonly (readonly [string, string])[]) {}

  /** The members of `header` that fit the grammar, at most 32; an empty state for a header over 512 characters. */
  static parse(header: string): W3cTraceState {
    if (header.length > MAX_TRACE_STATE_LENGTH) return new W3cTraceState([]);
    const members: [string, string][] = [];
    for (const part of header.split(',')) {
      const member = part.trim();
      const at = member.indexOf('=');
      if (at <= 0) continue;
      const key = member.slice(0, at);
      const value = member.slice(at + 1);
      if (!KEY.test(key) || !VALUE.test(value) || members.some(([k]) => k === key)) continue;
      members.push([key, value]);
      if (members.length === MAX_MEMBERS) break;
    }
    return new W3cTraceState(members);
  }

  set(key: string, value: string): TraceState {
    if (!KEY.test(key) || !VALUE.test(value)) return this;
    const members = [[key, value] as const, ...this.members.filter(([k]) => k !== key)].slice(0, MAX_MEMBERS);
    const next = new W3cTraceState(members);
    return next.serialize().length > MAX_TRACE_STATE_LENGTH ? this : next;
  }

  unset(key: string): TraceState {
    return new W3cTraceState(this.members.filter(([k]) => k !== key));
  }

  get(key: string): string | undefined {
    return this.members.find(([k]) => k === key)?.[1];
  }

  serialize(): string {
    return this.members.map(([key, value]) => `${key}=${value}`).join(',');
  }
}
