import { type SagaErrorDetails, SagaValidationError } from '../errors.js';

/**
 * Checks that `value` survives `JSON.parse(JSON.stringify(value))` unchanged and returns its JSON text.
 * Rejects what JSON silently changes or cannot write: BigInt, functions, symbols, non-finite numbers,
 * Dates (they come back as strings), Maps, Sets and other class instances, `undefined` array items, cycles.
 *
 * @throws SagaValidationError `PAYLOAD_NOT_SERIALIZABLE` naming the offending path, or
 *   `PAYLOAD_TOO_LARGE` when the JSON text is longer than `maxBytes` UTF-8 bytes.
 */
export function toJsonPayload(value: unknown, what: string, maxBytes: number, details: SagaErrorDetails = {}): string {
  const problem = findProblem(value, what, new Set());
  if (problem) {
    throw new SagaValidationError(
      'PAYLOAD_NOT_SERIALIZABLE',
      `${problem}: ${what} must survive a JSON round trip unchanged. Use plain objects, arrays, strings, finite numbers, booleans and null (an ISO string for a date, a string for a BigInt).`,
      details,
    );
  }
  const json = JSON.stringify(value);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > maxBytes) {
    throw new SagaValidationError(
      'PAYLOAD_TOO_LARGE',
      `${what} is ${bytes} bytes of JSON, over the limit of ${maxBytes}: store large data elsewhere and send a reference, or raise maxPayloadBytes.`,
      { ...details, bytes, maxBytes },
    );
  }
  return json;
}

function findProblem(value: unknown, path: string, ancestors: Set<object>): string | undefined {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return undefined;
    case 'number':
      return Number.isFinite(value) ? undefined : `${path} is ${value}`;
    case 'bigint':
      return `${path} is a BigInt`;
    case 'function':
      return `${path} is a function`;
    case 'symbol':
      return `${path} is a symbol`;
    case 'undefined':
      return `${path} is undefined`;
  }
  if (value === null) return undefined;
  const object = value as object;
  if (ancestors.has(object)) return `${path} refers back to itself (a cycle)`;
  ancestors.add(object);
  try {
    if (Array.isArray(object)) {
      for (let i = 0; i < object.length; i++) {
        const problem = findProblem(object[i], `${path}[${i}]`, ancestors);
        if (problem) return problem;
      }
      return undefined;
    }
    const proto = Object.getPrototypeOf(object);
    if (proto !== Object.prototype && proto !== null) {
      return `${path} is a ${object.constructor?.name ?? 'class instance'}, not a plain object`;
    }
    for (const [key, item] of Object.entries(object)) {
      // An undefined property is dropped by JSON and reads back as undefined: it round-trips.
      if (item === undefined) continue;
      const problem = findProblem(item, `${path}.${key}`, ancestors);
      if (problem) return problem;
    }
    return undefined;
  } finally {
    ancestors.delete(object);
  }
}
