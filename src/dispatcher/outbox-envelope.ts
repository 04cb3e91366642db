/** One outbox message as handed to the application's publisher. */
export interface OutboxEnvelope {
  /** The outbox row id (a UUIDv7): the same on every redelivery, so consumers deduplicate on it. */
  readonly id: string;
  /** The message type. */
  readonly type: string;
  /** The message as the step sent it (JSON round-tripped). */
  readonly payload: Record<string, unknown>;
  /** `correlation-id`, `saga-type`, `saga-id` and the headers the step added. */
  readonly headers: Readonly<Record<string, string>>;
  readonly sagaType: string;
  readonly sagaId: string;
  readonly correlationId: string | null;
  /** Failed publishes before this one. */
  readonly attempts: number;
  readonly createdAt: Date;
}
