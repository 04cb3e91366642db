import { type SagaErrorDetails, SagaValidationError } from '../errors.js';
import { textProblem } from './stored-text.js';

/**
 * Deepest nesting of objects and arrays a payload may have (the top-level message is level 1). Deeper
 * payloads are refused with `PAYLOAD_NOT_SERIALIZABLE` instead of overflowing a stack in the check, in
 * `JSON.stringify` or in the database's JSON parser.
 */
export const MAX_PAYLOAD_DEPTH = 100;

/**
 * Checks that `value` survives `JSON.parse(JSON.stringify(value))` unchanged and stores alike on PostgreSQL
 * (`jsonb`) and SQLite, and returns its JSON text. Rejects what JSON silently changes or cannot write: BigInt,
 * functions, symbols, non-finite numbers, Dates (they come back as strings), Maps, Sets and other class
 * instances, `undefined` array items, cycles; strings or keys with U+0000 or lone surrogates (PostgreSQL
 * refuses them); nesting deeper than {@link MAX_PAYLOAD_DEPTH}. The check is iterative: no input overflows
 * the stack. `JSON.stringify` runs once, and the text it wrote is checked again as parsed back, so what is
 * returned (and stored) is what was checked, whatever a getter or `toJSON` answers on a second read.
 *
 * @throws SagaValidationError `PAYLOAD_NOT_SERIALIZABLE` naming the offending path (never its value), or
 *   `PAYLOAD_TOO_LARGE` when the JSON text is longer than `maxBytes` UTF-8 bytes.
 */
export function toJsonPayload(value: unknown, what: string, maxBytes: number, details: SagaErrorDetails = {}): string {
  const problem = findProblem(value, what, maxBytes);
  if (problem === TOO_LARGE) throw tooLarge(what, undefined, maxBytes, details);
  if (problem !== undefined) throw notSerializable(problem, what, details);
  const json = stringifyOnce(value, what, details);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > maxBytes) throw tooLarge(what, bytes, maxBytes, details);
  // What is stored is this text, not `value`: a getter, a Proxy or a toJSON may have answered JSON.stringify
  // differently than the check above (a U+0000 the check never saw). So the text is checked as parsed back.
  const stored = findProblem(JSON.parse(json), what, Number.POSITIVE_INFINITY);
  if (stored !== undefined && stored !== TOO_LARGE) throw notSerializable(`once written as JSON, ${stored}`, what, details);
  return json;
}

/**
 * Checks that an outgoing message's JSON and its headers' JSON, stored side by side in `saga_outbox`, stay together
 * within `maxBytes`.
 * @throws SagaValidationError `PAYLOAD_TOO_LARGE`.
 */
export function checkMessageWithHeaders(
  payloadJson: string,
  headersJson: string,
  what: string,
  maxBytes: number,
  details: SagaErrorDetails,
): void {
  const payloadBytes = Buffer.byteLength(payloadJson, 'utf8');
  const headerBytes = Buffer.byteLength(headersJson, 'utf8');
  if (payloadBytes + headerBytes <= maxBytes) return;
  throw new SagaValidationError(
    'PAYLOAD_TOO_LARGE',
    `${what} is ${payloadBytes} bytes of JSON and its headers ${headerBytes}, together over the limit of ${maxBytes}: store large data elsewhere and send a reference, or raise maxPayloadBytes.`,
    { ...details, bytes: payloadBytes + headerBytes, maxBytes },
  );
}

/** `JSON.stringify(value)`, called once; what it throws (a BigInt, a cycle, a throwing toJSON, a stack overflow) is typed. */
function stringifyOnce(value: unknown, what: string, details: SagaErrorDetails): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw notSerializable(`${what} could not be written as JSON`, what, details, error);
  }
  if (json === undefined) throw notSerializable(`${what} writes no JSON text`, what, details);
  return json;
}

function notSerializable(problem: string, what: string, details: SagaErrorDetails, cause?: unknown): SagaValidationError {
  return new SagaValidationError(
    'PAYLOAD_NOT_SERIALIZABLE',
    `${problem}: ${what} must survive a JSON round trip unchanged. Use plain objects, arrays, strings, finite numbers, booleans and null (an ISO string for a date, a string for a BigInt).`,
    details,
    cause === undefined ? undefined : { cause },
  );
}

function tooLarge(what: string, bytes: number | undefined, maxBytes: number, details: SagaErrorDetails): SagaValidationError {
  return new SagaValidationError(
    'PAYLOAD_TOO_LARGE',
    `${what} is ${bytes === undefined ? 'more than ' : ''}${bytes ?? maxBytes} bytes of JSON, over the limit of ${maxBytes}: store large data elsewhere and send a reference, or raise maxPayloadBytes.`,
    { ...details, bytes, maxBytes },
  );
}

/** Returned by findProblem when the JSON text is certainly over the limit, found before writing it. */
const TOO_LARGE = Symbol('too large');

type Frame = { readonly value: unknown; readonly path: string; readonly depth: number } | { readonly leave: object };

// A key shown in a path as `.key`; any other key is shown by position, so a path never quotes odd text.
const PLAIN_KEY = /^[A-Za-z_$][\w$-]{0,63}$/;

/**
 * Depth-first, with an explicit stack. Also keeps a lower bound of the JSON text's size (every value takes at
 * least one byte, a string at least its UTF-16 length) to stop early on data far over `maxBytes`.
 */
function findProblem(root: unknown, rootPath: string, maxBytes: number): string | typeof TOO_LARGE | undefined {
  const ancestors = new Set<object>();
  const stack: Frame[] = [{ value: root, path: rootPath, depth: 0 }];
  let minBytes = 0;
  while (stack.length > 0) {
    const frame = stack.pop()!;
    if ('leave' in frame) {
      ancestors.delete(frame.leave);
      continue;
    }
    const { value, path, depth } = frame;
    minBytes += typeof value === 'string' ? value.length + 2 : 1;
    if (minBytes > maxBytes) return TOO_LARGE;
    if (value === null || typeof value !== 'object') {
      const problem = scalarProblem(value, path);
      if (problem !== undefined) return problem;
      continue;
    }
    if (ancestors.has(value)) return `${path} refers back to itself (a cycle)`;
    if (depth >= MAX_PAYLOAD_DEPTH) return `${path} is nested deeper than ${MAX_PAYLOAD_DEPTH} levels`;
    const isArray = Array.isArray(value);
    if (!isArray) {
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null)
        return `${path} is a ${value.constructor?.name ?? 'class instance'}, not a plain object`;
    }
    // A sparse array of a billion items must not become a billion frames first.
    if (isArray && minBytes + (value as unknown[]).length > maxBytes) return TOO_LARGE;
    ancestors.add(value);
    stack.push({ leave: value });
    const children = isArray ? arrayChildren(value as unknown[], path) : objectChildren(value, path);
    if (typeof children === 'string') return children;
    minBytes += children.length;
    if (minBytes > maxBytes) return TOO_LARGE;
    // Pushed in reverse so that the first problem in document order is the one reported.
    for (let i = children.length - 1; i >= 0; i--) stack.push({ ...children[i]!, depth: depth + 1 });
  }
  return undefined;
}

function scalarProblem(value: unknown, path: string): string | undefined {
  switch (typeof value) {
    case 'string': {
      const problem = textProblem(value);
      return problem && `${path} ${problem}`;
    }
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
    default:
      return undefined;
  }
}

function arrayChildren(array: readonly unknown[], path: string): { value: unknown; path: string }[] {
  const children: { value: unknown; path: string }[] = [];
  for (let i = 0; i < array.length; i++) children.push({ value: array[i], path: `${path}[${i}]` });
  return children;
}

function objectChildren(object: object, path: string): { value: unknown; path: string }[] | string {
  const children: { value: unknown; path: string }[] = [];
  let index = 0;
  for (const [key, item] of Object.entries(object)) {
    const keyPath = PLAIN_KEY.test(key) ? `${path}.${key}` : `${path}[key #${index}]`;
    index++;
    const problem = textProblem(key);
    if (problem) return `${keyPath}: the key ${problem}`;
    // An undefined property is dropped by JSON and reads back as undefined: it round-trips.
    if (item !== undefined) children.push({ value: item, path: keyPath });
  }
  return children;
}
