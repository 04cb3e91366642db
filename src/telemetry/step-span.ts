import { performance } from 'node:perf_hooks';
import { type Attributes, type Context, type Span, SpanKind, type Tracer, trace } from '@opentelemetry/api';
import type { SagaMetrics } from './saga-metrics.js';
import { SPAN_ATTRIBUTES, SPAN_NAMES } from './span-attributes.js';
import { errorTypeOf, recordFailure } from './span-status.js';
import { storedTraceContext } from './trace-context.js';

/** What the span of one handled message knows when it starts. */
export interface StepFacts {
  readonly sagaType: string;
  readonly messageType: string;
  readonly correlationId: string;
  /** `handle()`'s `messageId`, or the id of the timer that delivers the message. */
  readonly messageId: string | undefined;
  /** Known before the unit of work for a timer's delivery (its own instance). */
  readonly sagaId: string | undefined;
}

/** How a handled message ended (a `HandleResult`'s fields), as its span and the step duration record it. */
export interface StepEnd {
  readonly outcome: string;
  readonly reason?: string | undefined;
  readonly sagaId: string | null;
  readonly version: number | null;
  readonly conflicts: number;
}

/**
 * The `saga.step` span of one handled message and its `saga.step.duration`. Its context is the one the unit of work
 * runs under (spans the step's own code starts are its children), and the one the rows it writes store
 * (`traceContext`). Duration is real elapsed time (`performance.now()`), never the runtime's clock: a FakeClock does
 * not move while a step runs.
 */
export class StepSpan {
  /** `parent` with this span set: the unit of work runs under it. */
  readonly context: Context;
  /** The stored text of this span's context (null without a valid one: no SDK and no trace going on). */
  readonly traceContext: string | null;
  private conflicts = 0;
  private readonly startedAt = performance.now();

  private constructor(
    private readonly span: Span,
    parent: Context,
    private readonly metrics: SagaMetrics,
    private readonly facts: StepFacts,
  ) {
    this.context = trace.setSpan(parent, span);
    this.traceContext = storedTraceContext(span.spanContext());
  }

  /** Starts the span of one handled message as a child of `parent`'s span (if any). */
  static start(tracer: Tracer, metrics: SagaMetrics, facts: StepFacts, parent: Context): StepSpan {
    const attributes: Attributes = {
      [SPAN_ATTRIBUTES.sagaType]: facts.sagaType,
      [SPAN_ATTRIBUTES.messageType]: facts.messageType,
      [SPAN_ATTRIBUTES.conversationId]: facts.correlationId,
    };
    if (facts.messageId !== undefined) attributes[SPAN_ATTRIBUTES.messageId] = facts.messageId;
    if (facts.sagaId !== undefined) attributes[SPAN_ATTRIBUTES.sagaId] = facts.sagaId;
    const span = tracer.startSpan(SPAN_NAMES.step, { kind: SpanKind.INTERNAL, attributes }, parent);
    return new StepSpan(span, parent, metrics, facts);
  }

  /** The unit of work read the existing instance `sagaId`: the span names it, also when the unit then fails. */
  found(sagaId: string): void {
    if (this.span.isRecording()) this.span.setAttribute(SPAN_ATTRIBUTES.sagaId, sagaId);
  }

  /** A concurrency conflict was met; the unit of work runs again on fresh state. */
  conflict(): void {
    this.conflicts++;
  }

  /** The unit of work ended with `end`. */
  ended(end: StepEnd): void {
    if (this.span.isRecording()) {
      const attributes: Attributes = {
        [SPAN_ATTRIBUTES.stepOutcome]: end.outcome,
        [SPAN_ATTRIBUTES.conflicts]: end.conflicts,
      };
      if (end.reason !== undefined) attributes[SPAN_ATTRIBUTES.ignoreReason] = end.reason;
      if (end.sagaId !== null) attributes[SPAN_ATTRIBUTES.sagaId] = end.sagaId;
      if (end.version !== null) attributes[SPAN_ATTRIBUTES.version] = end.version;
      this.span.setAttributes(attributes);
    }
    this.span.end();
    this.recordDuration({ [SPAN_ATTRIBUTES.stepOutcome]: end.outcome });
  }

  /** The unit of work failed with `error` (the step threw, a write failed, conflicts ran out). */
  failed(error: unknown): void {
    if (this.span.isRecording()) this.span.setAttribute(SPAN_ATTRIBUTES.conflicts, this.conflicts);
    recordFailure(this.span, error);
    this.span.end();
    this.recordDuration({ [SPAN_ATTRIBUTES.errorType]: errorTypeOf(error) });
  }

  private recordDuration(outcome: Attributes): void {
    const seconds = (performance.now() - this.startedAt) / 1000;
    this.metrics.record('stepDuration', seconds, {
      [SPAN_ATTRIBUTES.sagaType]: this.facts.sagaType,
      [SPAN_ATTRIBUTES.messageType]: this.facts.messageType,
      ...outcome,
    });
  }
}
