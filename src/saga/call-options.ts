import { type SagaErrorDetails, SagaValidationError } from '../errors.js';
import { kindOf, labelOf } from './stored-text.js';

/**
 * The options argument of a call (`handle`, `route`, `ctx.send`, `ctx.schedule`): `undefined` (or omitted) is no
 * options; anything but an object (`null`, a string, an array) is refused instead of failing as a TypeError or
 * being read as no options.
 * @param what names the argument in the error, e.g. "The options of ctx.send()".
 * @throws SagaValidationError `OPTION_INVALID`.
 */
export function callOptions<T extends object>(value: T | undefined, what: string, details: SagaErrorDetails): Partial<T> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new SagaValidationError(
      'OPTION_INVALID',
      `${what} are ${kindOf(value)}: pass an object, or leave the argument out (undefined) for the defaults.`,
      details,
    );
  }
  return value;
}

/**
 * The extra headers of a sent message, copied: `undefined` is none; otherwise a plain object (prototype
 * `Object.prototype` or null) whose own enumerable string-keyed values are strings, each read once. A string,
 * an array, a Map, a class instance, `null` or a number is refused, never stored as index keys or dropped.
 * Symbol keys and non-enumerable properties are not headers (JSON writes neither).
 * @param what names the message in the error, e.g. "the 'OrderPlaced' message".
 * @throws SagaValidationError `PAYLOAD_NOT_SERIALIZABLE`.
 */
export function headerRecord(value: unknown, what: string, details: SagaErrorDetails): Record<string, string> {
  if (value === undefined) return {};
  const refuse = (problem: string) =>
    new SagaValidationError(
      'PAYLOAD_NOT_SERIALIZABLE',
      `${problem}: headers are strings, in a plain object ({ name: 'value' }); leave them out (undefined) for none.`,
      details,
    );
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw refuse(`The headers of ${what} are ${kindOf(value)}`);
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    throw refuse(`The headers of ${what} are a ${labelOf(value.constructor?.name)} object, not a plain object`);
  }
  const headers: Record<string, string> = {};
  for (const [index, key] of Object.keys(value).entries()) {
    const header: unknown = (value as Record<string, unknown>)[key];
    if (typeof header !== 'string') throw refuse(`Header #${index} of ${what} is ${kindOf(header)}, not a string`);
    // Assigning `__proto__` would set the copy's prototype instead of a header.
    Object.defineProperty(headers, key, { value: header, writable: true, enumerable: true, configurable: true });
  }
  return headers;
}
