import { type Span, SpanStatusCode } from '@opentelemetry/api';
import { SagaError } from '../errors.js';
import { isDriverException } from '../orm/index.js';
import { errorText } from './error-text.js';
import { SPAN_ATTRIBUTES } from './span-attributes.js';

/**
 * The `error.type` of a failure: the SagaError's code (a closed set), else the error's name (`Error`, `TypeError`,
 * `DeliveryTimeout`), else the kind of value thrown. Low cardinality, as the semantic conventions ask.
 */
export function errorTypeOf(error: unknown): string {
  if (error instanceof SagaError) return error.code;
  if (error instanceof Error) return error.name || 'Error';
  return error === null ? 'null' : typeof error;
}

/**
 * Marks `span` failed with `error`: status ERROR with the error's text, `error.type`, and the exception recorded as
 * an event. The library's own errors never quote payload values; a driver error is recorded by class and code only
 * (its message quotes SQL parameters); an error a step or a publisher throws is recorded as it was thrown.
 */
export function recordFailure(span: Span, error: unknown): void {
  if (!span.isRecording()) return;
  span.setAttribute(SPAN_ATTRIBUTES.errorType, errorTypeOf(error));
  if (error instanceof Error && !isDriverException(error)) span.recordException(error);
  span.setStatus({ code: SpanStatusCode.ERROR, message: errorText(error) });
}
