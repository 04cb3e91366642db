import { isDriverException } from '../orm/index.js';

/**
 * An error as the library logs and records it: its class and message. A MikroORM driver error shows only its class
 * and code (SQLSTATE, socket or SQLite code): its message quotes the SQL statement with its parameters (tokens,
 * stored error text).
 */
export function errorText(error: unknown): string {
  if (isDriverException(error)) {
    const code = typeof error.code === 'string' || typeof error.code === 'number' ? ` (${error.code})` : '';
    return `${error.name}${code}`;
  }
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
