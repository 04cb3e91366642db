/** The spans the library records, on the tracer `mikro-orm-saga` (docs/observability.md, "Spans"). */
export const SPAN_NAMES = {
  /** One per handled message: `runtime.handle()`, each saga of `route()`, a timer's step. */
  step: 'saga.step',
  /** One per timer delivery a dispatcher starts; the woken step is its child. */
  timeout: 'saga.timeout',
  /** One per outbox message handed to the publisher; the publisher runs inside it. */
  publish: 'saga.publish',
  /** One per staged delivery a dispatcher starts; the step it wakes is its child. */
  deliver: 'saga.deliver',
  /** One per dispatcher pass that claimed or stamped a row, or failed, with its counts. */
  dispatch: 'saga.dispatch',
} as const;

/**
 * The attributes of the library's spans and metrics: OpenTelemetry's `messaging.*` and `error.type` where one fits,
 * the library's `saga.*` namespace otherwise (docs/observability.md lists each with the spans that carry it).
 */
export const SPAN_ATTRIBUTES = {
  /** The saga definition's name. */
  sagaType: 'saga.type',
  /** The saga instance id. */
  sagaId: 'saga.id',
  /** A staged delivery's correlation value, as stored (its saga may not exist yet). */
  sagaKey: 'saga.key',
  /** The handled (or published) message's type. */
  messageType: 'saga.message.type',
  /** `started`, `handled`, `ignored`, `stale` or `duplicate` (the HandleResult's outcome). */
  stepOutcome: 'saga.step.outcome',
  /** `no-instance` or `completed`: why a message was ignored. */
  ignoreReason: 'saga.ignore.reason',
  /** The instance's version after the unit of work. */
  version: 'saga.version',
  /** Concurrency conflicts met and retried on fresh state. */
  conflicts: 'saga.step.conflicts',
  /** The timer's name. */
  timerName: 'saga.timeout.name',
  /** Seconds between the timer's due time and its delivery, by the dispatcher's clock. */
  lateness: 'saga.timeout.lateness',
  /** Which delivery of the row this is: 1 for the first. */
  deliveryAttempt: 'saga.delivery.attempt',
  /** What became of the delivery (see docs/observability.md). */
  deliveryOutcome: 'saga.delivery.outcome',
  /** Seconds between the outbox row's writing and its publisher resolving, by the dispatcher's clock. */
  outboxLatency: 'saga.outbox.latency',
  /** The correlation id (semantic conventions: "sometimes called Correlation ID"). */
  conversationId: 'messaging.message.conversation_id',
  /** The message id: `handle()`'s `messageId`, the timer id, the outbox row (envelope) id. */
  messageId: 'messaging.message.id',
  /** `process` for a timer delivery, `send` for a publish. */
  operationType: 'messaging.operation.type',
  /** The SagaError code, or the error's class name, of a failure. */
  errorType: 'error.type',
} as const;
