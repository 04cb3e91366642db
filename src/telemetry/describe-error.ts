import { SAGA_ERROR_CODES, SagaError } from '../errors.js';
import { isDriverException } from '../orm/index.js';

/**
 * An error as the library logs and records it: its class and message, and for a failed dispatcher pass the same
 * for its cause. A MikroORM driver error shows only its class and code (SQLSTATE, socket or SQLite code): its
 * message quotes the SQL statement with its parameters (tokens, stored error text).
 */
export function describeError(error: unknown): string {
  if (isDriverException(error)) {
    const code = typeof error.code === 'string' || typeof error.code === 'number' ? ` (${error.code})` : '';
    return `${error.name}${code}`;
  }
  if (!(error instanceof Error)) return String(error);
  const text = `${error.name}: ${error.message}`;
  return error instanceof SagaError && error.code === SAGA_ERROR_CODES.DISPATCH_PASS_FAILED
    ? `${text} Cause: ${describeError(error.cause)}`
    : text;
}
