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
 * The one place that says what a database error is. Every rule about MikroORM's exception classes, PostgreSQL
 * SQLSTATEs, SQLite result codes and the messages of node-postgres, knex and pg-pool lives here; the runtime, the
 * dispatcher and the operator API only map the kind it returns to their own error codes.
 */

/** What a database error means, whatever driver, MikroORM major or database raised it. */
export type DriverErrorKind =
  /** MikroORM's optimistic lock: the row's version changed since it was read. A retry on fresh state resolves it. */
  | 'version conflict'
  /** The server aborted the transaction to break a deadlock (40P01) or a serialization failure (40001). */
  | 'deadlock'
  /** A lock was not granted in time: a SQLite file locked past the busy timeout, a PostgreSQL lock past `lock_timeout`. */
  | 'lock wait'
  /** A unique constraint or index refused the row. */
  | 'unique violation'
  /** The statement named a table that does not exist. */
  | 'missing table'
  /** The statement named a column that does not exist. */
  | 'missing column'
  /** The server refused the statement for what it is (a constraint, a value, its syntax, a trigger that raised). */
  | 'refused by the server'
  /** The server refused the statement for its own state: out of resources, or canceled (`statement_timeout`). */
  | 'canceled or out of resources'
  /** The connection could not be made, or was lost, or the server ended the session. */
  | 'connection failure'
  /** No pooled connection came free within the pool's acquire timeout. */
  | 'no free connection'
  /** The driver refused to send the statement: its connection had already failed. Nothing of it reached the server. */
  | 'never sent'
  /** The database failed under the statement without refusing it: an I/O error, a full disk, a busy file. */
  | 'database failure'
  /** COMMIT was sent and its answer was a failure of the connection or the server: it may have been applied. */
  | 'outcome unknown'
  /** A sent COMMIT failed with no driver code and no sign of a lost connection: a transaction subscriber threw. */
  | 'commit failed outside the database'
  /** None of the rules places it: not a database error, or one no rule knows. */
  | 'other';

/** What a rule needs to know beyond the error itself. */
export interface DriverErrorContext {
  /**
   * Set when the failed statement was a COMMIT the client sent, or a statement that carried its transaction's
   * COMMIT. `canFailAfterApplying`: the database can apply a COMMIT and lose its answer (PostgreSQL, over a socket),
   * unlike SQLite, which commits in-process.
   */
  readonly commit?: { readonly canFailAfterApplying: boolean };
}

/**
 * The kind of `error`: MikroORM's exception (convert a raw driver error with {@link convertDriverError} first) or a
 * raw driver error, which its code alone classifies. Anything else is `other`.
 */
export function classifyDriverError(error: unknown, context: DriverErrorContext = {}): DriverErrorKind {
  if (neverSent(error)) return 'never sent';
  const kind = byMikroOrmClass(error) ?? byCode(codeOf(error)) ?? byRefusal(error) ?? byMessage(error) ?? 'other';
  return context.commit ? atCommit(error, kind, context.commit.canFailAfterApplying) : kind;
}

/** Kinds that say the server refused the statement, so nothing of it (nor of a COMMIT it carried) was applied. */
const NOT_APPLIED: ReadonlySet<DriverErrorKind> = new Set([
  'deadlock',
  'lock wait',
  'unique violation',
  'missing table',
  'missing column',
  'refused by the server',
  'canceled or out of resources',
]);

/** Whether the server refused the statement (see {@link NOT_APPLIED}), so a COMMIT it carried was not applied. */
export function isRefusedByServer(error: unknown): boolean {
  return NOT_APPLIED.has(classifyDriverError(error));
}

/** Whether the driver refused to send the statement (kind `never sent`), so a COMMIT it carried was not applied. */
export function isNeverSent(error: unknown): boolean {
  return classifyDriverError(error) === 'never sent';
}

/** Which conflict a retried error was, for the message that ends the retries. */
export function conflictKind(error: unknown): 'lock wait' | 'deadlock' | 'version' {
  const kind = classifyDriverError(error);
  return kind === 'lock wait' || kind === 'deadlock' ? kind : 'version';
}

/**
 * A failed COMMIT. One the driver never sent keeps its kind (`never sent`: nothing was applied). A lost connection
 * is what was seen, with a code or without one (node-postgres' "Connection terminated unexpectedly", told by its
 * message). Any other failure with no driver code did not come from the database: a transaction subscriber threw
 * (MikroORM's commit runs them; `afterTransactionCommit` runs once COMMIT was applied): applied or not, no one can
 * say. One the server refused (it answered with its reason) was not applied: the refusal's kind. Any other
 * failure, where COMMIT can be applied and its answer lost, leaves the outcome unknown; SQLite's in-process COMMIT
 * cannot, so there it keeps its kind.
 */
function atCommit(error: unknown, kind: DriverErrorKind, canFailAfterApplying: boolean): DriverErrorKind {
  if (kind === 'never sent') return kind;
  if (codeOf(error) === undefined && kind !== 'connection failure') return 'commit failed outside the database';
  if (NOT_APPLIED.has(kind)) return kind;
  return canFailAfterApplying ? 'outcome unknown' : kind;
}

/**
 * MikroORM's exception classes: its converters map PostgreSQL's and SQLite's errors onto them, the same on both
 * majors. `LockWaitTimeoutException` is SQLite's "database is locked"; `ConnectionException` its unopenable file
 * (MikroORM's PostgreSQL converter maps no connection errors: those stay plain `DriverException`s, see
 * {@link byCode} and {@link byMessage}). Any other `ServerException` is a refusal, after {@link byCode}.
 */
function byMikroOrmClass(error: unknown): DriverErrorKind | undefined {
  if (error instanceof OptimisticLockError) return 'version conflict';
  if (error instanceof DeadlockException) return 'deadlock';
  if (error instanceof LockWaitTimeoutException) return 'lock wait';
  if (error instanceof UniqueConstraintViolationException) return 'unique violation';
  if (error instanceof TableNotFoundException) return 'missing table';
  if (error instanceof InvalidFieldNameException) return 'missing column';
  if (error instanceof ConnectionException) return 'connection failure';
  return undefined;
}

/** The driver's code of `error`: a SQLSTATE, a SQLite result code or a socket's `E...` code. */
function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code !== '' ? code : undefined;
}

/** Codes MikroORM's converters leave unmapped, and what they say. */
function byCode(code: string | undefined): DriverErrorKind | undefined {
  if (code === undefined) return undefined;
  // 55P03 lock_not_available: a row or table lock past `lock_timeout` (neither major's converter maps it).
  if (code === PG_LOCK_NOT_AVAILABLE) return 'lock wait';
  if (SQLSTATE.test(code)) return bySqlStateClass(code);
  if (SOCKET_CODES.has(code)) return 'connection failure';
  // Primary code of an extended one: node-sqlite3 reports `SQLITE_IOERR`, better-sqlite3 `SQLITE_IOERR_WRITE`.
  if (SQLITE_FAILURES.has(/^SQLITE_[A-Z]+/.exec(code)?.[0] ?? '')) return 'database failure';
  return undefined;
}

const PG_LOCK_NOT_AVAILABLE = '55P03';
/** A PostgreSQL SQLSTATE: its classes start with a digit, or are F0, HV, P0; never a socket's or SQLite's code. */
const SQLSTATE = /^(?:[0-9][0-9A-Z]|F0|HV|P0)[0-9A-Z]{3}$/;

/**
 * SQLSTATE classes that describe the connection or the server, never the statement. 08 connection exception and
 * 57P01-57P05 (shutdown, crash, cannot connect now, database dropped, idle session timeout) end the session: a
 * COMMIT may have been applied before they came. 53 insufficient resources and the rest of 57 (57014 query
 * canceled: `statement_timeout` or a cancel request) refuse the statement: PostgreSQL reports them only for what it
 * did not commit. 58 system error (I/O) may come after COMMIT was applied. XX internal error is left to `other`.
 */
function bySqlStateClass(code: string): DriverErrorKind | undefined {
  if (code.startsWith('08') || code.startsWith('57P')) return 'connection failure';
  if (code.startsWith('53') || code.startsWith('57')) return 'canceled or out of resources';
  if (code.startsWith('58')) return 'database failure';
  return undefined;
}

/** Socket-level failures node reports as `code` (refused, reset, unreachable, unknown host). */
const SOCKET_CODES: ReadonlySet<string> = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * SQLite result codes of a busy, locked, full or unreadable database file (MikroORM's converter makes only "database
 * is locked" a `LockWaitTimeoutException` and "unable to open database file" a `ConnectionException`).
 */
const SQLITE_FAILURES: ReadonlySet<string> = new Set([
  'SQLITE_BUSY',
  'SQLITE_LOCKED',
  'SQLITE_IOERR',
  'SQLITE_CANTOPEN',
  'SQLITE_FULL',
  'SQLITE_NOMEM',
]);

/**
 * The server answered the statement with an error no rule above names: a `ServerException` MikroORM classed (a
 * constraint, a syntax error, a read-only database), or any other SQLSTATE (a value too long, a trigger's RAISE).
 */
function byRefusal(error: unknown): DriverErrorKind | undefined {
  if (error instanceof ServerException) return 'refused by the server';
  const code = codeOf(error);
  return code !== undefined && SQLSTATE.test(code) && !code.startsWith('XX') ? 'refused by the server' : undefined;
}

/**
 * Errors without a code, told apart by their message (MikroORM wraps them in a plain `DriverException` that keeps
 * only the message). No pooled connection in time: knex's `KnexTimeoutError` (MikroORM 6), pg-pool's plain `Error`
 * (MikroORM 7), either one or its cause. A lost connection: node-postgres' "Connection terminated unexpectedly" and
 * the like when the socket closes under a query, and knex's "Transaction query already complete" (the transaction
 * ended before the next statement: its connection was lost at BEGIN; steps never get the EntityManager).
 */
function byMessage(error: unknown): DriverErrorKind | undefined {
  if (!(error instanceof Error)) return undefined;
  if (error.name === 'KnexTimeoutError') return 'no free connection';
  const cause = (error as { cause?: unknown }).cause;
  if ([error, cause].some((e) => e instanceof Error && POOL_TIMEOUT.some((start) => e.message.startsWith(start)))) {
    return 'no free connection';
  }
  if (error instanceof DriverException && LOST_CONNECTION.test(error.message)) return 'connection failure';
  return undefined;
}

/** How knex and pg-pool begin the message of an acquire timeout (every connection in use for the whole wait). */
const POOL_TIMEOUT = ['Knex: Timeout acquiring a connection', 'timeout exceeded when trying to connect'];
const LOST_CONNECTION = /connection terminated|connection ended|server closed the connection|transaction query already complete/i;

/**
 * node-postgres refused to send the statement: its client's connection had already failed or was closed ("Client
 * has encountered a connection error and is not queryable", "Client was closed and is not queryable"). The
 * message is all that tells it (no code), on the error or on an error it is the cause of.
 */
function neverSent(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    if (NOT_QUERYABLE.test(e.message)) return true;
  }
  return false;
}

const NOT_QUERYABLE = /Client (?:has encountered a connection error|was closed) and is not queryable/;

/** Any error MikroORM raised for the driver (its `code` is the SQLSTATE, socket or SQLite code). */
export function isDriverException(error: unknown): error is DriverException {
  return error instanceof DriverException;
}

/** Turns a raw driver error (BEGIN and COMMIT can surface unconverted) into MikroORM's exception class. */
export function convertDriverError(em: EntityManager, error: Error): unknown {
  return em.getDriver().convertException(error);
}
