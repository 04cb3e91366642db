import type { EntityProperty } from '@mikro-orm/core';
import { SagaCorrelationError, SagaDefinitionError, SagaValidationError } from '../errors.js';
import { exceedsCodePoints, kindOf, textProblem } from './stored-text.js';

/** Length limit, in code points, of a string correlation property declared without `length` (MikroORM's varchar default). */
export const DEFAULT_CORRELATION_LENGTH = 255;
/**
 * Length limit, in code points, of a correlation property of type `text` declared without `length`: 500 code
 * points are at most 2,000 UTF-8 bytes, under PostgreSQL's limit of 2,704 bytes for one unique-index entry.
 */
export const MAX_TEXT_CORRELATION_LENGTH = 500;

const INT16 = { min: -32_768, max: 32_767 } as const;
const INT32 = { min: -2_147_483_648, max: 2_147_483_647 } as const;
const INT64 = { min: -(2n ** 63n), max: 2n ** 63n - 1n } as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const SMALL_INTEGER_TYPES = new Set(['smallint', 'tinyint', 'smallinttype', 'tinyinttype']);
const INTEGER_TYPES = new Set(['integer', 'int', 'int4', 'mediumint', 'number', 'integertype', 'mediuminttype']);
const TEXT_TYPES = new Set(['text', 'texttype']);

/**
 * Checks one message's correlation value against the correlation property and returns the value to look
 * up (a uuid in lower case, anything else as given).
 * @throws SagaCorrelationError `CORRELATION_INVALID`.
 */
export type CorrelationCheck = (value: unknown, messageType: string) => unknown;

/** What a correlation value must be, read once from the property's metadata. */
type Accepted =
  | { readonly kind: 'string'; readonly maxLength: number }
  | { readonly kind: 'uuid' }
  | { readonly kind: 'integer'; readonly min: number; readonly max: number }
  | { readonly kind: 'number' }
  | { readonly kind: 'bigint' }
  | { readonly kind: 'enum'; readonly items: readonly unknown[] };

/**
 * Builds the correlation check of one saga from its correlation property's MikroORM metadata, once, when the
 * saga is registered. A correlation value must be a value of the property's own type, so that it can only
 * ever be compared for equality: an object or array would reach `em.findOne` as a query operator
 * (`{ $ne: 'x' }` finds another customer's saga).
 *
 * - string (`varchar(n)`, `text`): a string of at most `n` code points (default {@link DEFAULT_CORRELATION_LENGTH},
 *   `text` {@link MAX_TEXT_CORRELATION_LENGTH}), without U+0000 or lone surrogates;
 * - `uuid`: a uuid in its 36-character form, any case (looked up in lower case, as PostgreSQL stores it);
 * - integer columns: an integer number within the column's range (`smallint` 16 bits, `integer` 32 bits, a
 *   `bigint` mapped to number within `Number.MAX_SAFE_INTEGER`);
 * - other number columns (`double`, `float`): a finite number;
 * - `bigint` mapped to bigint: a BigInt within 64 bits; an enum: one of its items.
 *
 * @throws SagaDefinitionError `DEFINITION_INVALID` for a property of another type (boolean, date, json, decimal...).
 */
export function correlationCheckFor(sagaType: string, property: EntityProperty): CorrelationCheck {
  const accepted = acceptedBy(property);
  if (!accepted) {
    throw new SagaDefinitionError(
      'DEFINITION_INVALID',
      `Saga ${sagaType}: correlation property ${property.name} has type ${String(property.type)}; correlate on a string, uuid, integer, number or bigint property.`,
      { sagaType },
    );
  }
  const rule = describe(accepted);
  return (value, messageType) => {
    const problem = problemOf(value, accepted);
    if (problem === undefined) return accepted.kind === 'uuid' ? (value as string).toLowerCase() : value;
    throw new SagaCorrelationError(
      'CORRELATION_INVALID',
      `Message '${messageType}' gives saga ${sagaType} a correlation value for ${property.name} that ${problem}: it must be ${rule}. Correlation values are compared for equality only; fix the message or its correlation.from.`,
      { sagaType, messageType, property: property.name },
    );
  };
}

function acceptedBy(property: EntityProperty): Accepted | undefined {
  if (property.enum && Array.isArray(property.items)) return { kind: 'enum', items: property.items };
  const type = String(property.type).toLowerCase();
  switch (property.runtimeType) {
    case 'string':
      if (type === 'uuid' || type === 'uuidtype') return { kind: 'uuid' };
      if (type === 'decimal' || type === 'decimaltype') return undefined;
      return {
        kind: 'string',
        maxLength: property.length ?? (TEXT_TYPES.has(type) ? MAX_TEXT_CORRELATION_LENGTH : DEFAULT_CORRELATION_LENGTH),
      };
    case 'number':
      if (SMALL_INTEGER_TYPES.has(type)) return { kind: 'integer', ...INT16 };
      if (INTEGER_TYPES.has(type)) return { kind: 'integer', ...INT32 };
      if (type === 'bigint' || type === 'biginttype')
        return { kind: 'integer', min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER };
      return { kind: 'number' };
    case 'bigint':
      return { kind: 'bigint' };
    default:
      return undefined;
  }
}

/** Why `value` is not accepted, phrased to follow "a correlation value that ...", or undefined. */
function problemOf(value: unknown, accepted: Accepted): string | undefined {
  switch (accepted.kind) {
    case 'string':
    case 'uuid': {
      if (typeof value !== 'string') return `is ${kindOf(value)}`;
      if (accepted.kind === 'uuid') return UUID.test(value.toLowerCase()) ? undefined : 'is not a uuid';
      if (exceedsCodePoints(value, accepted.maxLength)) return `is longer than ${accepted.maxLength} characters`;
      return textProblem(value);
    }
    case 'integer':
    case 'number':
      if (typeof value !== 'number') return `is ${kindOf(value)}`;
      if (!Number.isFinite(value)) return `is ${value}`;
      if (accepted.kind === 'number') return undefined;
      if (!Number.isInteger(value)) return 'is not an integer';
      return value < accepted.min || value > accepted.max ? 'is outside the column range' : undefined;
    case 'bigint':
      if (typeof value !== 'bigint') return `is ${kindOf(value)}`;
      return value < INT64.min || value > INT64.max ? 'is outside the 64-bit range' : undefined;
    case 'enum':
      return accepted.items.includes(value) ? undefined : 'is not one of its enum items';
  }
}

function describe(accepted: Accepted): string {
  switch (accepted.kind) {
    case 'string':
      return `a string of 1 to ${accepted.maxLength} characters without U+0000 or lone surrogates`;
    case 'uuid':
      return 'a uuid string (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)';
    case 'integer':
      return `an integer number from ${accepted.min} to ${accepted.max}`;
    case 'number':
      return 'a finite number';
    case 'bigint':
      return 'a BigInt within 64 bits';
    case 'enum':
      return `one of the ${accepted.items.length} items of its enum`;
  }
}

/**
 * Checks the correlation id a message is handled under (from `handle()` options or the ambient context): it is
 * stored on timers and outbox rows and sent as a header, so it must be text both databases store alike.
 * @throws SagaValidationError `OPTION_INVALID`.
 */
export function checkCorrelationId(correlationId: unknown, sagaType: string): string {
  const problem = typeof correlationId === 'string' ? textProblem(correlationId) : `is ${kindOf(correlationId)}`;
  if (problem === undefined) return correlationId as string;
  throw new SagaValidationError(
    'OPTION_INVALID',
    `The correlation id of a message for ${sagaType} ${problem}: pass a string without U+0000 or lone surrogates as correlationId, or none.`,
    { sagaType },
  );
}
