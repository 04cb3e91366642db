import {
  type Context,
  context,
  isSpanContextValid,
  type Link,
  propagation,
  ROOT_CONTEXT,
  type SpanContext,
  type TextMapSetter,
  trace,
} from '@opentelemetry/api';
import { MAX_TRACE_STATE_LENGTH, W3cTraceState } from './w3c-trace-state.js';

// A row the runtime writes (a timer, an outbox row) keeps the trace context current when it was written, so that its
// delivery, seconds or days later, continues the same trace. The text is the library's own, always W3C Trace Context
// (`traceparent`, `tracestate`) as JSON, whatever propagator the application registered: the reader may run with
// another configuration, in another process, after an upgrade.

/** Most characters of a stored trace context that are read; longer text is ignored unread. */
const MAX_STORED_TRACE_CONTEXT_LENGTH = 1_024;

/** The header names of W3C Trace Context. */
const TRACE_HEADERS = { traceparent: 'traceparent', tracestate: 'tracestate' } as const;

/** `traceparent` version 00: trace id, parent (span) id, flags; lowercase hex only. */
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The `traceparent` header of `spanContext` (version 00). */
function traceparentOf(spanContext: SpanContext): string {
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  return `00-${spanContext.traceId.toLowerCase()}-${spanContext.spanId.toLowerCase()}-${flags}`;
}

/** The serialized `tracestate` of `spanContext`, or undefined when it has none or one longer than W3C allows. */
function tracestateOf(spanContext: SpanContext): string | undefined {
  let serialized: string | undefined;
  try {
    serialized = spanContext.traceState?.serialize();
  } catch {
    // A TraceState of the application's own making that cannot serialize: the trace continues without it.
    return undefined;
  }
  return serialized && serialized.length <= MAX_TRACE_STATE_LENGTH ? serialized : undefined;
}

/**
 * The text a row stores for `spanContext`: `{"traceparent":"00-...","tracestate":"..."}` (tracestate only when
 * there is one); null when there is no valid span context (no SDK registered and no trace going on).
 */
export function storedTraceContext(spanContext: SpanContext | undefined): string | null {
  if (!spanContext || !isSpanContextValid(spanContext)) return null;
  const traceparent = traceparentOf(spanContext);
  const tracestate = tracestateOf(spanContext);
  return JSON.stringify(tracestate ? { traceparent, tracestate } : { traceparent });
}

/** The stored text of the active context's span (see {@link storedTraceContext}): for rows written outside a step. */
export function activeTraceContext(): string | null {
  return storedTraceContext(trace.getSpanContext(context.active()));
}

/**
 * The span context a row's stored text holds, marked remote. Undefined for null, for text the library did not
 * write, and for anything garbled or hostile: too long, not JSON, no valid `traceparent` (version 00, lowercase hex,
 * ids not all zero). A `tracestate` that does not fit W3C's grammar is dropped member by member. Never throws: a
 * delivery never fails for its trace context.
 */
export function readStoredTraceContext(stored: unknown): SpanContext | undefined {
  if (typeof stored !== 'string' || stored.length === 0 || stored.length > MAX_STORED_TRACE_CONTEXT_LENGTH) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(stored);
  } catch {
    return undefined;
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return undefined;
  const { traceparent, tracestate } = parsed as Record<string, unknown>;
  const match = typeof traceparent === 'string' ? TRACEPARENT.exec(traceparent) : null;
  if (!match) return undefined;
  const spanContext: SpanContext = {
    traceId: match[1]!,
    spanId: match[2]!,
    traceFlags: Number.parseInt(match[3]!, 16),
    isRemote: true,
    ...(typeof tracestate === 'string' && tracestate !== '' ? { traceState: W3cTraceState.parse(tracestate) } : {}),
  };
  return isSpanContextValid(spanContext) ? spanContext : undefined;
}

/** A context whose span is `spanContext` (a stored, remote one), or the root context without one. */
export function contextOf(spanContext: SpanContext | undefined): Context {
  return spanContext ? trace.setSpanContext(ROOT_CONTEXT, spanContext) : ROOT_CONTEXT;
}

/** Sets string header values only: what a propagator writes goes into an envelope's headers, a record of strings. */
const stringSetter: TextMapSetter<Record<string, string>> = {
  set(carrier, key, value) {
    if (typeof key === 'string' && typeof value === 'string') carrier[key] = value;
  },
};

/**
 * The headers that carry `context`'s trace to a consumer: what the globally registered propagator writes when the
 * application registered one (`propagation.setGlobalPropagator`), else W3C `traceparent` (and `tracestate`) written
 * here. Empty when `context` holds no valid span context.
 */
export function traceHeaders(context: Context): Record<string, string> {
  const headers: Record<string, string> = {};
  if (propagation.fields().length > 0) {
    propagation.inject(context, headers, stringSetter);
    return headers;
  }
  const spanContext = trace.getSpanContext(context);
  if (!spanContext || !isSpanContextValid(spanContext)) return headers;
  headers[TRACE_HEADERS.traceparent] = traceparentOf(spanContext);
  const tracestate = tracestateOf(spanContext);
  if (tracestate) headers[TRACE_HEADERS.tracestate] = tracestate;
  return headers;
}

/**
 * `headers` (a step's, from `ctx.send`) with `trace` (the {@link traceHeaders} of the delivery) added. A header of
 * `headers` named as one of `trace`'s, in any case, gives way: W3C Trace Context lets a consumer read `Traceparent` as
 * `traceparent`, so the envelope must not carry a second one.
 */
export function withTraceHeaders(headers: Record<string, string>, trace: Record<string, string>): Record<string, string> {
  const replaced = new Set(Object.keys(trace).map((name) => name.toLowerCase()));
  if (replaced.size === 0) return headers;
  const kept = Object.entries(headers).filter(([name]) => !replaced.has(name.toLowerCase()));
  return { ...Object.fromEntries(kept), ...trace };
}

/** The link a delivery's span gets to the context its row stored (the messaging conventions' creation context). */
export function creationLinks(spanContext: SpanContext | undefined): Link[] {
  return spanContext ? [{ context: spanContext }] : [];
}
