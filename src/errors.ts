/**
 * Every error the library raises on purpose is a {@link SagaError} with a `code` from {@link SAGA_ERROR_CODES}.
 * Messages name the saga type, id, timer name or message type involved, then say what to do about it.
 */
export const SAGA_ERROR_CODES = {
  /** The saga definition itself is wrong (unknown entity, correlation property not unique, ...). */
  DEFINITION_INVALID: 'DEFINITION_INVALID',
  /** The message has no string `type`. */
  MESSAGE_TYPE_MISSING: 'MESSAGE_TYPE_MISSING',
  /** No step of the saga handles this message type. */
  MESSAGE_TYPE_UNKNOWN: 'MESSAGE_TYPE_UNKNOWN',
  /** The message carries no value for the saga's correlation property. */
  CORRELATION_MISSING: 'CORRELATION_MISSING',
  /** The definition does not say how this message type finds its instance. */
  CORRELATION_UNDEFINED: 'CORRELATION_UNDEFINED',
  /** A timer was scheduled with a calendar key no calendar is registered under. */
  CALENDAR_UNKNOWN: 'CALENDAR_UNKNOWN',
  /** A timer delay (or a staging call's `delay`) is negative, not a number, or not finite. */
  TIMER_DELAY_INVALID: 'TIMER_DELAY_INVALID',
  /** A timer due date (or a staging call's `notBefore`, or its delay's end) is not a valid Date, or out of range. */
  TIMER_DUE_INVALID: 'TIMER_DUE_INVALID',
  /** A timer name is empty or longer than the column allows. */
  TIMER_NAME_INVALID: 'TIMER_NAME_INVALID',
  /** A payload (timer message, outbox message, header) does not survive a JSON round trip. */
  PAYLOAD_NOT_SERIALIZABLE: 'PAYLOAD_NOT_SERIALIZABLE',
  /** A payload is larger than `maxPayloadBytes`. */
  PAYLOAD_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  /** A step context was used, or the state entity changed, after its step returned. */
  CONTEXT_CLOSED: 'CONTEXT_CLOSED',
  /** Optimistic-concurrency retries ran out. */
  CONCURRENCY_CONFLICT: 'CONCURRENCY_CONFLICT',
  /**
   * A unit of work joined to the application's transaction (`handle(..., { em })`) met a concurrency conflict:
   * another transaction changed or started the saga first. Rolled back to its savepoint, not retried (the library
   * cannot retry a transaction it does not own): run the application's transaction again.
   */
  CONFLICT_IN_APP_TRANSACTION: 'CONFLICT_IN_APP_TRANSACTION',
  /**
   * `handle(..., { em })` was given an EntityManager that is not inside an open transaction: pass the one
   * `em.transactional()` hands its callback (or one after `em.begin()`). Nothing was read or written.
   */
  TRANSACTION_REQUIRED: 'TRANSACTION_REQUIRED',
  /** Writing the unit of work failed for a reason other than a concurrency conflict. */
  PERSISTENCE_FAILED: 'PERSISTENCE_FAILED',
  /** The database is not supported by this library (only PostgreSQL and SQLite are). */
  DIALECT_UNSUPPORTED: 'DIALECT_UNSUPPORTED',
  /** A table or column the runtime needs (a library table or a saga's own) is missing; raised as `SagaSchemaError`. */
  SCHEMA_INVALID: 'SCHEMA_INVALID',
  /** An option passed to a library entry point is out of range. */
  OPTION_INVALID: 'OPTION_INVALID',
  /** A step changed a column the runtime owns (`id`, `version`, `createdAt`, `updatedAt`, `completedAt`). */
  STATE_COLUMN_READONLY: 'STATE_COLUMN_READONLY',
  /** A step of a completed saga scheduled a timer without reopening the saga (`ctx.reopen()`). */
  SAGA_COMPLETED: 'SAGA_COMPLETED',
  /** A write violates a unique constraint in a way no retry can fix (not a race); nothing was written. */
  UNIQUE_VIOLATION: 'UNIQUE_VIOLATION',
  /** The database could not be reached (refused, timed out, file cannot be opened); nothing was written. */
  DATABASE_UNREACHABLE: 'DATABASE_UNREACHABLE',
  /**
   * The connection failed while COMMIT was in flight: the effects may or may not have been written. For a unit joined
   * to your transaction: that transaction ended while the unit was writing in it, so its effects may be partial.
   */
  COMMIT_OUTCOME_UNKNOWN: 'COMMIT_OUTCOME_UNKNOWN',
  /**
   * The MikroORM instance was closed (`orm.close()`) before the unit of work committed: nothing of it was written.
   * Stop the dispatcher and let `handle()` calls settle before closing the ORM; handle the message again on an open one.
   */
  ORM_CLOSED: 'ORM_CLOSED',
  /** A message id is not a string of 1 to 200 characters the databases store as given. */
  MESSAGE_ID_INVALID: 'MESSAGE_ID_INVALID',
  /**
   * A message's correlation value is not a value of the correlation property's own type (an object, an
   * array, a number for a string column, NaN, text the column cannot store, too long): refused before any read.
   */
  CORRELATION_INVALID: 'CORRELATION_INVALID',
  /** The saga's step value (`stepProperty`) cannot be stored on a step-scoped timer (`saga_timer.step`). */
  STEP_INVALID: 'STEP_INVALID',
  /**
   * A step set a state property to a value its column does not store alike on both databases (U+0000, a lone
   * surrogate, longer than the column, a fraction in an integer column, an invalid Date...).
   */
  STATE_VALUE_INVALID: 'STATE_VALUE_INVALID',
  /** A dispatcher pass failed as a whole (database unreachable, a statement failed); `result` says what it did first. */
  DISPATCH_PASS_FAILED: 'DISPATCH_PASS_FAILED',
  /** An operator call named a saga type no registered definition has. */
  SAGA_TYPE_UNKNOWN: 'SAGA_TYPE_UNKNOWN',
  /** An operator call named a saga instance that does not exist. */
  SAGA_NOT_FOUND: 'SAGA_NOT_FOUND',
  /** An operator call found the saga in the wrong state (force-completing a completed saga, reopening an active one). */
  SAGA_STATE_CONFLICT: 'SAGA_STATE_CONFLICT',
  /** An operator call was guarded by a saga version that is no longer the saga's version; nothing was written. */
  VERSION_CONFLICT: 'VERSION_CONFLICT',
  /** A page cursor was not one this query returned (tampered, truncated, or from another query). */
  CURSOR_INVALID: 'CURSOR_INVALID',
  /**
   * A row holds a value the library cannot read as what it means (a timestamp outside years 1 to 9999 such as
   * PostgreSQL's `infinity`, text in a SQLite timestamp column, a version above 2^53 - 1, JSON nested too deep for
   * MikroORM); raised as `SagaPersistenceError` naming the row and the column. Nothing was written: correct the row.
   */
  STORED_VALUE_INVALID: 'STORED_VALUE_INVALID',
} as const;

/** Union of every error code the library raises. */
export type SagaErrorCode = (typeof SAGA_ERROR_CODES)[keyof typeof SAGA_ERROR_CODES];

/** Structured facts about an error, for logs and for programmatic handling. */
export interface SagaErrorDetails {
  readonly sagaType?: string;
  readonly sagaId?: string;
  readonly messageType?: string;
  readonly timerName?: string;
  readonly [key: string]: unknown;
}

/** Base class of every error the library raises on purpose. */
export class SagaError extends Error {
  override readonly name: string = 'SagaError';
  readonly code: SagaErrorCode;
  readonly details: SagaErrorDetails;

  constructor(code: SagaErrorCode, message: string, details: SagaErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.details = details;
  }
}

/** Bad input: a message, timer or payload the library refuses before writing anything. */
export class SagaValidationError extends SagaError {
  override readonly name = 'SagaValidationError';
}

/** A message cannot be correlated with a saga instance. */
export class SagaCorrelationError extends SagaError {
  override readonly name = 'SagaCorrelationError';
}

/** A saga definition or runtime configuration is wrong; raised when the runtime is built. */
export class SagaDefinitionError extends SagaError {
  override readonly name = 'SagaDefinitionError';
}

/**
 * Another unit of work kept committing first: the runtime re-read the saga and re-ran the step
 * `attempts` times, then gave up (`CONCURRENCY_CONFLICT`). Nothing of the last attempt was written; the message can
 * be retried. A unit joined to the application's transaction is not retried: its first conflict is
 * `CONFLICT_IN_APP_TRANSACTION`.
 */
export class SagaConcurrencyError extends SagaError {
  override readonly name = 'SagaConcurrencyError';
}

/**
 * Reading or writing a unit of work failed for a reason other than a concurrency conflict. The message names
 * the operation, table and constraint, never values; the driver's error is the `cause`. Whether anything was
 * written depends on the `code`: `COMMIT_OUTCOME_UNKNOWN` means it may have been, every other code (`ORM_CLOSED`
 * among them) means nothing was.
 */
export class SagaPersistenceError extends SagaError {
  override readonly name = 'SagaPersistenceError';
}

/** The database schema does not match what the library expects. */
export class SagaSchemaError extends SagaError {
  override readonly name = 'SagaSchemaError';
}
