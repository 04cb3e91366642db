// Hostile input for the property-based tests (fast-check): arbitraries of correlation values, messages, payloads,
// headers, timer names, delays and dates that both databases or JSON would change or refuse, a saga whose steps never
// read the message, and the checks those tests share.
import fc from 'fast-check';
import { expect } from 'vitest';
import { defineSaga, SAGA_ERROR_CODES, SagaError } from '../../src/index.js';
import { textProblem } from '../../src/saga/stored-text.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';

// ---- arbitraries -------------------------------------------------------------------------------------------

export const nastyUnit = fc.oneof(
  fc.constantFrom('\u0000', '\uD800', '\uDBFF', '\uDC00', '\uDFFF', '😀', 'é', '$', '%', '"', '\\', '\uFFFF', ' '),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
);
export const nastyString = fc.string({ unit: nastyUnit, maxLength: 24 });
/** Strings around the 100- and 200-character column limits, in one- and two-unit characters. */
export const longString = fc.tuple(fc.integer({ min: 95, max: 205 }), fc.constantFrom('x', '😀')).map(([n, c]) => c.repeat(n));
export const number = fc.oneof(
  fc.double(),
  fc.integer(),
  fc.constantFrom(Number.MAX_VALUE, Number.MIN_VALUE, -0, 1e21, 2 ** 53 + 2, Number.NaN, Number.NEGATIVE_INFINITY),
);
export const scalar = fc.oneof(nastyString, longString, number, fc.bigInt(), fc.boolean(), fc.constant(null), fc.constant(undefined));
export const operatorKey = fc.constantFrom(
  '$ne',
  '$like',
  '$in',
  '$gt',
  '$eq',
  '$or',
  '$and',
  '$not',
  '__proto__',
  'toString',
  'constructor',
);
export const queryOperator = fc.dictionary(operatorKey, fc.oneof(fc.jsonValue({ maxDepth: 2 }), scalar), { minKeys: 1, maxKeys: 3 });
/** A correlation value of every JSON type and then some. */
export const correlationValue = fc.oneof(scalar, queryOperator, fc.array(scalar, { maxLength: 3 }), fc.jsonValue({ maxDepth: 2 }));

/** A value nested `depth` levels deep, in objects or arrays. */
export const deep = fc.tuple(fc.integer({ min: 1, max: 300 }), fc.boolean()).map(([depth, inArrays]) => {
  let value: unknown = 'leaf';
  for (let i = 0; i < depth; i++) value = inArrays ? [value] : { d: value };
  return value;
});
export const nastyObject = fc.dictionary(nastyString, fc.oneof(scalar, fc.jsonValue({ maxDepth: 2 })), { maxKeys: 4 });
export const payload = fc.oneof(fc.jsonValue({ maxDepth: 4 }), scalar, deep, nastyObject, fc.array(scalar, { maxLength: 4 }));
export const headers = fc.option(
  fc.dictionary(fc.oneof(nastyString, fc.constantFrom('trace', 'tenant')), fc.oneof(nastyString, longString, fc.integer())),
  {
    nil: undefined,
  },
);
export const timerName = fc.oneof(nastyString, longString, fc.constantFrom('t', 'reminder', ' ', ''));

export const durationKey = fc.constantFrom('days', 'hours', 'minutes', 'seconds', 'milliseconds', 'weeks', '__proto__', 'toString');
export const delay = fc.oneof(
  number,
  fc.integer({ min: 0, max: 2 ** 48 }),
  fc.bigInt(),
  fc.constantFrom({}, Object.create({ days: 1 }), [], '5s', null),
  fc.dictionary(durationKey, fc.oneof(number, fc.bigInt(), fc.string({ maxLength: 3 }), fc.integer({ min: 0, max: 10_000 })), {
    maxKeys: 3,
  }),
);
export const dueDate = fc.date({ noInvalidDate: false });

// ---- a saga whose steps never look at the message, so that every failure is the runtime's ----------------

export type ProbeMessage = { readonly type: 'Start' | 'Do'; readonly key: unknown };
export const probeSaga = defineSaga<ScriptedSaga, ProbeMessage>({
  name: 'probe',
  state: ScriptedSaga,
  correlation: { property: 'key', from: (m) => m.key },
  startedBy: ['Start'],
  steps: {
    Start(saga) {
      saga.counter++;
    },
    Do(saga) {
      saga.counter++;
    },
  },
});

/** Whether a string is a correlation value the scripted saga's `key` column (varchar(100)) accepts. */
export function isAcceptedKey(value: unknown): value is string {
  return typeof value === 'string' && value !== '' && [...value].length <= 100 && textProblem(value) === undefined;
}

/** A typed error of the library, with a code it declares, or a failure of the test. */
export function expectTyped(error: unknown, codes: readonly string[]): void {
  expect(error, String(error)).toBeInstanceOf(SagaError);
  expect(Object.values(SAGA_ERROR_CODES)).toContain((error as SagaError).code);
  expect(codes, (error as Error).message).toContain((error as SagaError).code);
}

export async function outcomeOf<T>(call: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  try {
    return { ok: true, value: await call };
  } catch (error) {
    return { ok: false, error };
  }
}
