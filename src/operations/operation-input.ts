import { SagaError, SagaValidationError } from '../errors.js';
import { RUNTIME_DEFAULTS } from '../saga/runtime-options.js';
import { kindOf, nameProblem } from '../saga/stored-text.js';
import { dueAtProblem } from '../time/due-date-range.js';

/** Most rows one listing page (or one detail list) returns. */
export const MAX_PAGE_LIMIT = 1_000;
/** The operator API's defaults (also `SagaOperations.defaults`). */
export const OPERATIONS_DEFAULTS = Object.freeze({
  /** Rows per list of a saga's detail: `getSaga({ recent })`. */
  recentLimit: 20,
  /** Rows per statement of `purge()`: the runtime's `purgeExpiredMessageIds()` default. */
  purgeBatchSize: RUNTIME_DEFAULTS.purgeBatchSize,
});
/** Longest reason of a force-complete or reopen, in characters. */
export const MAX_REASON_LENGTH = 500;
/** Most ids one requeue, cancel or reschedule call takes. */
export const MAX_IDS_PER_CALL = 1_000;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Refuses an operator input: `what` names the option, never its value. */
export function invalidInput(message: string, details: Record<string, unknown> = {}): SagaValidationError {
  return new SagaValidationError('OPTION_INVALID', message, details);
}

/**
 * Runs the input checks of the operator call `operation`. They are the only code that reads the caller's input,
 * so what else they throw (a getter or a Proxy trap of the input throwing) is the input's fault: `OPTION_INVALID`,
 * not a database failure. The checked values they return are plain: read once, they cannot change before use.
 */
export function checkedInput<T>(operation: string, check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (error instanceof SagaError) throw error;
    const name = error instanceof Error ? error.constructor.name : typeof error;
    throw new SagaValidationError(
      'OPTION_INVALID',
      `${operation}: reading its input threw ${name}; nothing was read or written. Pass plain data (objects, arrays, strings, numbers, Dates) whose properties read without throwing.`,
      { operation },
      { cause: error },
    );
  }
}

/** An integer in `1..max`. */
export function checkLimit(value: unknown, what: string, max = MAX_PAGE_LIMIT): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw invalidInput(
      `${what} must be an integer from 1 to ${max}; got ${typeof value === 'number' ? 'a number outside that range' : kindOf(value)}.`,
    );
  }
  return value;
}

/**
 * A valid Date within the range both databases store, or undefined when not given. Returns a copy: the caller's
 * Date (or a subclass of it) is read once, here, and never handed to the driver.
 */
export function checkDate(value: unknown, what: string): Date | undefined {
  if (value === undefined) return undefined;
  const ms = value instanceof Date ? Date.prototype.getTime.call(value) : Number.NaN;
  const problem = value instanceof Date ? dueAtProblem(ms) : `is ${kindOf(value)}, not a Date`;
  if (problem) throw invalidInput(`${what} ${problem}: pass a valid Date between 1970 and 9999.`);
  return new Date(ms);
}

/** A uuid in its 36-character form, returned in lower case. */
export function checkUuid(value: unknown, what: string): string {
  if (typeof value !== 'string' || !UUID.test(value)) {
    throw invalidInput(`${what} must be a uuid (36 characters, as the row's id is shown); got ${kindOf(value)}.`);
  }
  return value.toLowerCase();
}

/** A list of 0 to {@link MAX_IDS_PER_CALL} uuids, deduplicated in the order given; every index is checked (a hole too). */
export function checkIds(value: unknown, what: string): string[] {
  if (!Array.isArray(value) || value.length > MAX_IDS_PER_CALL) {
    throw invalidInput(`${what} must be an array of at most ${MAX_IDS_PER_CALL} ids.`);
  }
  // Array.from visits the holes of a sparse array, which map() skips.
  return [...new Set(Array.from(value as unknown[], (id, index) => checkUuid(id, `${what}[${index}]`)))];
}

/** A stored name (saga type, timer name, message type, step) of at most `maxLength` characters, or undefined. */
export function checkName(value: unknown, what: string, maxLength: number): string | undefined {
  if (value === undefined) return undefined;
  const problem = nameProblem(value, { maxLength });
  if (problem) throw invalidInput(`${what} ${problem}: pass a value of 1 to ${maxLength} characters.`);
  return value as string;
}

/** The reason of an operator change: 1 to {@link MAX_REASON_LENGTH} characters, not blank. */
export function checkReason(value: unknown): string {
  const problem = nameProblem(value, { maxLength: MAX_REASON_LENGTH, notBlank: true });
  if (problem) throw invalidInput(`The reason ${problem}: say why, in 1 to ${MAX_REASON_LENGTH} characters.`);
  return value as string;
}

/** One of `allowed`, or undefined when not given. */
export function checkOneOf<T extends string>(value: unknown, what: string, allowed: readonly T[]): T | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw invalidInput(`${what} must be one of ${allowed.join(', ')}.`);
  }
  return value as T;
}
