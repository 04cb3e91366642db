import {
  ConnectionException,
  DeadlockException,
  DriverException,
  type EntityManager,
  InvalidFieldNameException,
  LockWaitTimeoutException,
  OptimisticLockError,
  ServerException,
  TableNotFoundException,
  UniqueConstraintViolationException,
} from '@mikro-orm/core';

/*
 * What a driver error is, asked of MikroORM's exception classes (and, where MikroORM keeps nothing else, of the
 * driver's code or message). No other file of the library tests for those classes itself.
 */

/** An error the database refused because of a unique constraint or index. */
export function isUniqueViolation(error: unknown): boolean {
  return error instanceof UniqueConstraintViolationException;
}

/** A conflict with a concurrent writer that a retry on fresh state resolves: optimistic lock, deadlock, lock wait. */
export function isConcurrencyConflict(error: unknown): boolean {
  return error instanceof OptimisticLockError || error instanceof DeadlockException || isLockWait(error);
}

/** What kind of conflict a retried {@link isConcurrencyConflict} error was, for the message that ends the retries. */
export function conflictKind(error: unknown): 'lock wait' | 'deadlock' | 'version' {
  if (isLockWait(error)) return 'lock wait';
  if (error instanceof DeadlockException) return 'deadlock';
  return 'version';
}

/** The connection failed, or the database stayed locked past the busy timeout. */
export function isConnectionOrLockError(error: unknown): boolean {
  return error instanceof ConnectionException || error instanceof DeadlockException || isLockWait(error);
}

/**
 * A lock was not granted in time: SQLite's file stayed locked past the busy timeout (MikroORM's
 * `LockWaitTimeoutException`), or a PostgreSQL row or table lock past `lock_timeout` (SQLSTATE 55P03
 * `lock_not_available`, which neither major's exception converter maps: a plain `DriverException`).
 */
export function isLockWait(error: unknown): boolean {
  return error instanceof LockWaitTimeoutException || (error instanceof DriverException && error.code === PG_LOCK_NOT_AVAILABLE);
}

const PG_LOCK_NOT_AVAILABLE = '55P03';

/** The connection to the database failed (refused, dropped, unknown host): MikroORM's `ConnectionException`. */
export function isConnectionError(error: unknown): boolean {
  return error instanceof ConnectionException;
}

/**
 * No pooled connection could be had in time: knex's `KnexTimeoutError` (MikroORM 6) or pg-pool's plain `Error`
 * (MikroORM 7). MikroORM wraps either in a `DriverException` with no code that keeps only the message, so the
 * message is all that tells them apart.
 */
export function isPoolTimeout(error: Error): boolean {
  if (error.name === 'KnexTimeoutError') return true;
  const cause = (error as { cause?: unknown }).cause;
  return [error, cause].some((e) => e instanceof Error && POOL_TIMEOUT_MESSAGES.some((start) => e.message.startsWith(start)));
}

/** How knex and pg-pool begin the message of an acquire timeout (every connection in use for the whole wait). */
const POOL_TIMEOUT_MESSAGES = ['Knex: Timeout acquiring a connection', 'timeout exceeded when trying to connect'];

/** The table a statement named does not exist. */
export function isTableNotFound(error: unknown): boolean {
  return error instanceof TableNotFoundException;
}

/** A column a statement named does not exist. */
export function isInvalidFieldName(error: unknown): boolean {
  return error instanceof InvalidFieldNameException;
}

/** Any error MikroORM raised for the driver (its `code` is the SQLSTATE, socket or SQLite code). */
export function isDriverException(error: unknown): error is DriverException {
  return error instanceof DriverException;
}

/**
 * The database server refused the statement with this error (a SQLSTATE, or an exception MikroORM classes as the
 * server's), so a COMMIT it refused was not applied. Not the codes that end a session or report the server's own
 * failure (08 connection exception, 57P01-57P05 shutdowns and session ends, 58 system error, XX internal error):
 * COMMIT may have been applied before those came, as when no answer came at all. A canceled statement (57014,
 * `statement_timeout` or a cancel request) is a refusal: PostgreSQL reports it only for what it did not commit.
 */
export function isRefusedByServer(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^(?:08|57P|58|XX)/.test(code)) return false;
  if (error instanceof ServerException) return true;
  // A PostgreSQL SQLSTATE (its classes start with a digit, or are F0, HV, P0), never a socket's E-code.
  return typeof code === 'string' && /^(?:[0-9][0-9A-Z]|F0|HV|P0)[0-9A-Z]{3}$/.test(code);
}

/**
 * pg refused to send the statement: its client's connection had already failed or was closed ("Client has
 * encountered a connection error and is not queryable", "Client was closed and is not queryable"). Nothing of the
 * statement, nor a COMMIT sent with it, reached the server. The message is all that tells it (no code), on the
 * error or on the driver error MikroORM wrapped it in.
 */
export function isNeverSent(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    if (NOT_QUERYABLE.test(e.message)) return true;
  }
  return false;
}

const NOT_QUERYABLE = /Client (?:has encountered a connection error|was closed) and is not queryable/;

/** A driver error the server answered with (a statement or row problem), as opposed to a connection failure. */
export function isServerException(error: unknown): boolean {
  return error instanceof ServerException;
}

/** An optimistic-lock failure MikroORM raised itself. */
export function isOptimisticLockError(error: unknown): boolean {
  return error instanceof OptimisticLockError;
}

/** Turns a raw driver error (BEGIN and COMMIT can surface unconverted) into MikroORM's exception class. */
export function convertDriverError(em: EntityManager, error: Error): unknown {
  return em.getDriver().convertException(error);
}
