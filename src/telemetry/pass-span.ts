import { type Attributes, SpanKind, type Tracer } from '@opentelemetry/api';
import type { DispatchPassResult } from '../contracts.js';
import { SPAN_NAMES } from './span-attributes.js';
import { recordFailure } from './span-status.js';

/** `deadLettered` -> `dead_lettered`: the attribute spelling of a count's name. */
const snakeCase = (name: string) => name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);

/** The attributes of a pass's counts: `saga.dispatch.timer.fired`, `saga.dispatch.outbox.published`, ... */
export function passAttributes(result: DispatchPassResult): Attributes {
  const attributes: Attributes = {};
  for (const [table, counts] of [
    ['timer', result.timers],
    ['outbox', result.outbox],
    ['inbox', result.inbox],
  ] as const) {
    for (const [name, count] of Object.entries(counts)) attributes[`saga.dispatch.${table}.${snakeCase(name)}`] = count;
  }
  return attributes;
}

/**
 * Records the `saga.dispatch` span of one dispatcher pass, from `startTime` (epoch ms) to now, with its counts: a
 * root span of its own (the deliveries continue the traces their rows stored). Only a pass that claimed or stamped a
 * row, or failed, records one: a dispatcher polls every few seconds, and an empty pass says nothing.
 */
export function recordPassSpan(tracer: Tracer, startTime: number, result: DispatchPassResult, error?: unknown): void {
  if (!passWasBusy(result) && error === undefined) return;
  const span = tracer.startSpan(SPAN_NAMES.dispatch, {
    kind: SpanKind.INTERNAL,
    root: true,
    startTime,
    attributes: passAttributes(result),
  });
  if (error !== undefined) recordFailure(span, error);
  span.end();
}

/** Whether a pass claimed or stamped a row. */
export function passWasBusy(result: DispatchPassResult): boolean {
  return result.timers.claimed + result.timers.missed + result.outbox.claimed + result.inbox.claimed > 0;
}
