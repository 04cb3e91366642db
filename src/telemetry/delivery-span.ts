import {
  type Attributes,
  type AttributeValue,
  type Context,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { SPAN_ATTRIBUTES, SPAN_NAMES } from './span-attributes.js';
import { recordFailure } from './span-status.js';
import { contextOf, creationLinks } from './trace-context.js';

/** What became of a delivery, as its span's `saga.delivery.outcome` says. */
export const DELIVERY_OUTCOMES = {
  /** The timer's step committed with its `fired` stamp. */
  FIRED: 'fired',
  /** The timer was cancelled, replaced or fired meanwhile: nothing was written. */
  STALE: 'stale',
  /** The timer's saga is gone or completed: the timer was stamped `discarded`. */
  DISCARDED: 'discarded',
  /** The staged delivery's step committed with its `delivered` stamp. */
  DELIVERED: 'delivered',
  /** The staged delivery's message id was handled before: stamped `duplicate`, no step ran. */
  DUPLICATE: 'duplicate',
  /** No saga instance takes the staged delivery: stamped `ignored`, no step ran. */
  IGNORED: 'ignored',
  /** The publisher resolved. */
  PUBLISHED: 'published',
  /** The step or publisher threw, or timed out: the row backs off. */
  FAILED: 'failed',
  /** It failed for the last allowed time: the row is dead-lettered. */
  DEAD_LETTERED: 'dead_lettered',
  /** The database failed under it: given back, not charged. */
  INTERRUPTED: 'interrupted',
  /** The timer's saga stayed busy (concurrency conflicts): given back, not charged. */
  CONTENDED: 'contended',
} as const;
/** What became of a delivery. */
export type DeliveryOutcome = (typeof DELIVERY_OUTCOMES)[keyof typeof DELIVERY_OUTCOMES];

/** The facts of a delivery every delivery span carries. */
interface DeliveryFacts {
  readonly sagaType: string;
  readonly sagaId: string;
  readonly correlationId: string | null;
  /** Failed deliveries before this one. */
  readonly attempts: number;
}

/**
 * The span of one delivery a dispatcher starts: `saga.timeout` around a timer's step, `saga.publish` around the
 * publisher. Its parent is the trace context stored with the row, so the delivery (days later, in another process)
 * continues the trace of the step that wrote it; it also links to that context, as the messaging conventions ask of
 * a consumer. A row without a stored context starts a trace of its own.
 */
export class DeliverySpan {
  /** The context the delivery runs under: its step's `saga.step`, or the publisher's own spans, are children. */
  readonly context: Context;

  private constructor(private readonly span: Span) {
    this.context = trace.setSpan(ROOT_CONTEXT, span);
  }

  /** Starts the `saga.timeout` span of a timer delivery, `lateness` seconds after the timer's due time. */
  static timeout(
    tracer: Tracer,
    timer: DeliveryFacts & { readonly id: string; readonly name: string },
    stored: SpanContext | undefined,
    lateness: number,
  ): DeliverySpan {
    return DeliverySpan.start(tracer, SPAN_NAMES.timeout, SpanKind.CONSUMER, timer, stored, {
      [SPAN_ATTRIBUTES.messageId]: timer.id,
      [SPAN_ATTRIBUTES.operationType]: 'process',
      [SPAN_ATTRIBUTES.timerName]: timer.name,
      [SPAN_ATTRIBUTES.lateness]: lateness,
    });
  }

  /** Starts the `saga.deliver` span of a staged delivery; its step's `saga.step` is a child. */
  static staged(
    tracer: Tracer,
    delivery: Omit<DeliveryFacts, 'sagaId'> & { readonly id: string; readonly sagaKey: string; readonly messageType: string },
    stored: SpanContext | undefined,
  ): DeliverySpan {
    return DeliverySpan.start(tracer, SPAN_NAMES.deliver, SpanKind.CONSUMER, delivery, stored, {
      [SPAN_ATTRIBUTES.messageId]: delivery.id,
      [SPAN_ATTRIBUTES.operationType]: 'process',
      [SPAN_ATTRIBUTES.messageType]: delivery.messageType,
      [SPAN_ATTRIBUTES.sagaKey]: delivery.sagaKey,
    });
  }

  /** Starts the `saga.publish` span of an outbox message handed to the publisher. */
  static publish(
    tracer: Tracer,
    message: DeliveryFacts & { readonly id: string; readonly type: string },
    stored: SpanContext | undefined,
  ): DeliverySpan {
    return DeliverySpan.start(tracer, SPAN_NAMES.publish, SpanKind.PRODUCER, message, stored, {
      [SPAN_ATTRIBUTES.messageId]: message.id,
      [SPAN_ATTRIBUTES.operationType]: 'send',
      [SPAN_ATTRIBUTES.messageType]: message.type,
    });
  }

  private static start(
    tracer: Tracer,
    name: string,
    kind: SpanKind,
    facts: Omit<DeliveryFacts, 'sagaId'> & { readonly sagaId?: string },
    stored: SpanContext | undefined,
    own: Attributes,
  ): DeliverySpan {
    const attributes: Attributes = {
      [SPAN_ATTRIBUTES.sagaType]: facts.sagaType,
      ...(facts.sagaId === undefined ? {} : { [SPAN_ATTRIBUTES.sagaId]: facts.sagaId }),
      [SPAN_ATTRIBUTES.deliveryAttempt]: facts.attempts + 1,
      ...own,
    };
    if (facts.correlationId !== null) attributes[SPAN_ATTRIBUTES.conversationId] = facts.correlationId;
    // The stored context is the parent: a dispatcher's own context (a span active where it was started) is not.
    const span = tracer.startSpan(name, { kind, attributes, links: creationLinks(stored) }, contextOf(stored));
    return new DeliverySpan(span);
  }

  /** Sets one attribute known once the delivery ran. */
  setAttribute(key: string, value: AttributeValue): void {
    this.span.setAttribute(key, value);
  }

  /** The delivery ended with `outcome`. */
  ended(outcome: DeliveryOutcome): void {
    this.span.setAttribute(SPAN_ATTRIBUTES.deliveryOutcome, outcome);
    this.span.end();
  }

  /** The delivery failed with `error`; `outcome` says what became of the row. */
  failed(outcome: DeliveryOutcome, error: unknown): void {
    this.span.setAttribute(SPAN_ATTRIBUTES.deliveryOutcome, outcome);
    recordFailure(this.span, error);
    this.span.end();
  }
}
