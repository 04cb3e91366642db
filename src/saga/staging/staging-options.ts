import type { Duration } from '../../time/duration.js';

/** When a staged row may be delivered: at once (the default), after a delay, or from an instant on. */
export interface StagingTime {
  /**
   * Deliver no sooner than this long after staging, by the runtime's clock: a {@link Duration} (validated like a timer's
   * delay: finite, not negative). Default: at once. Not with `notBefore`.
   */
  readonly delay?: Duration;
  /** Deliver no sooner than this instant (a Date from 1970 to 9999, UTC; an earlier one is due at once). Not with `delay`. */
  readonly notBefore?: Date;
}

/** Options of `SagaRuntime.stageDelivery()`. */
export interface StageDeliveryOptions extends StagingTime {
  /**
   * The message's id (a broker's message id, an HTTP idempotency key): recorded with the unit of work that delivers
   * it, so the same id staged again for the same saga instance is a `duplicate` and runs no second step, as with
   * `handle(..., { messageId })`. 1 to 200 characters. Default: none (every staged delivery runs its step).
   */
  readonly messageId?: string;
  /** Correlation id the message is handled under. Default (left out or undefined): the ambient one, else a new uuid. */
  readonly correlationId?: string;
}

/** Options of `SagaRuntime.stageMessage()`. */
export interface StageMessageOptions extends StagingTime {
  /**
   * Extra headers for the publisher, next to `correlation-id` and `ordering-key` (which win over an extra header of
   * the same name): a plain object whose values are strings. Default: none.
   */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * Messages staged with one ordering key are relayed as the messages of one saga are: in the order they were
   * staged (by `availableAt`, then id) within a pass, one publish at a time; sent as the `ordering-key` header.
   * Staging order is not commit order: a message whose transaction commits after a later-staged one of its key was
   * relayed goes out after it, and stagers in several processes order by their clocks. 1 to 200 characters. Default:
   * none (the message is ordered with no other).
   */
  readonly orderingKey?: string;
  /** The `correlation-id` header. Default (left out or undefined): the ambient correlation id, else a new uuid. */
  readonly correlationId?: string;
}

/** The row a staging call put in the application's EntityManager, inserted by its next flush. */
export interface StagedRow {
  /** The row's id: a staged delivery's id in the operator API, an outgoing message's envelope id. */
  readonly id: string;
  /** When the dispatcher may deliver it, by the runtime's clock. */
  readonly availableAt: Date;
}
