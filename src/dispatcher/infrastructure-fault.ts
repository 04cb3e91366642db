import type { DriverException } from '@mikro-orm/core';
import { SAGA_ERROR_CODES, SagaError, type SagaErrorCode } from '../errors.js';
import { isConnectionOrLockError, isDriverException, isPoolTimeout } from '../orm/index.js';

// SQLSTATE classes that describe the server or the connection, never the statement or the row:
// 08 connection exception, 53 insufficient resources, 57 operator intervention (57P01 "terminating
// connection due to administrator command", shutdown, cancel), 58 system error.
const SERVER_SQLSTATE_CLASSES = new Set(['08', '53', '57', '58']);
// Socket-level failures node reports as `code`.
const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
// SQLite result codes of a busy, locked, full or unreadable database file. node-sqlite3 reports these primary
// codes; better-sqlite3 reports extended ones (`SQLITE_IOERR_WRITE`, `SQLITE_BUSY_SNAPSHOT`), matched by their prefix.
const SQLITE_CODES = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_IOERR', 'SQLITE_CANTOPEN', 'SQLITE_FULL', 'SQLITE_NOMEM']);
// node-postgres raises these without a code when the socket closes under a query; MikroORM wraps them
// in a plain DriverException (its PostgreSQL converter maps no connection errors).
// knex's "Transaction query already complete": the transaction ended before our next statement, which in a
// unit of work (steps never get the EntityManager) only happens when its connection was lost at BEGIN.
const LOST_CONNECTION =
  /connection terminated|not queryable|connection ended|server closed the connection|transaction query already complete/i;
// The runtime's own verdicts on a database failure: the database could not be reached, or the connection
// was lost at COMMIT (if the commit did apply, the timer is stamped fired and giving it back finds nothing).
const DATABASE_FAULT_CODES: ReadonlySet<SagaErrorCode> = new Set([
  SAGA_ERROR_CODES.DATABASE_UNREACHABLE,
  SAGA_ERROR_CODES.COMMIT_OUTCOME_UNKNOWN,
]);

/**
 * Whether `error` is a database fault rather than the delivery's own failure: the connection failed or was
 * terminated, the server went away or refused work, the database file was locked past the busy timeout,
 * no pooled connection could be had in time. Only errors the ORM or the runtime raised count (a MikroORM
 * `DriverException`, knex's pool timeout, or a `SagaError` coded `DATABASE_UNREACHABLE` /
 * `COMMIT_OUTCOME_UNKNOWN`, anywhere in the `cause` chain): a step's own network error is the step's failure.
 */
export function isInfrastructureFault(error: unknown): boolean {
  const seen = new Set<unknown>();
  for (let current = error; current instanceof Error && !seen.has(current); current = current.cause) {
    seen.add(current);
    if (isPoolTimeout(current)) return true;
    if (current instanceof SagaError && DATABASE_FAULT_CODES.has(current.code)) return true;
    if (isDriverException(current)) return isServerSide(current);
  }
  return false;
}

function isServerSide(error: DriverException): boolean {
  if (isConnectionOrLockError(error)) return true;
  const code = typeof error.code === 'string' ? error.code : '';
  if (NETWORK_CODES.has(code) || SQLITE_CODES.has(sqlitePrimaryCode(code))) return true;
  if (/^[0-9A-Z]{5}$/.test(code) && SERVER_SQLSTATE_CLASSES.has(code.slice(0, 2))) return true;
  return LOST_CONNECTION.test(error.message);
}

/** The primary result code of a SQLite result code (`SQLITE_IOERR_WRITE` → `SQLITE_IOERR`); other codes unchanged. */
function sqlitePrimaryCode(code: string): string {
  return /^SQLITE_[A-Z]+/.exec(code)?.[0] ?? code;
}
