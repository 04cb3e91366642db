import type { EntityProperty } from '@mikro-orm/core';
import { SagaCorrelationError, SagaDefinitionError, SagaValidationError } from '../errors.js';
import { type Accepted, acceptedBy, DEFAULT_VARCHAR_LENGTH, describe, isFixedLengthText, problemOf } from './column-value.js';
import { kindOf, textProblem } from './stored-text.js';

/** Length limit, in code points, of a string correlation property declared without `length` (MikroORM's varchar default). */
export const DEFAULT_CORRELATION_LENGTH = DEFAULT_VARCHAR_LENGTH;
/**
 * Length limit, in code points, of a correlation property of type `text` declared without `length`: 500 code
 * points are at most 2,000 UTF-8 bytes, under PostgreSQL's limit of 2,704 bytes for one unique-index entry.
 */
export const MAX_TEXT_CORRELATION_LENGTH = 500;
/**
 * Largest size, in UTF-8 bytes, of any string correlation value, whatever its column's length: PostgreSQL refuses
 * a unique-index entry over 2,704 bytes, and 700 emoji fit a `varchar(1000)` in code points but take 2,800 bytes.
 */
export const MAX_CORRELATION_BYTES = 2_000;

/**
 * Checks one message's correlation value against the correlation property and returns the value to look
 * up (a uuid in lower case, anything else as given).
 * @throws SagaCorrelationError `CORRELATION_INVALID`.
 */
export type CorrelationCheck = (value: unknown, messageType: string) => unknown;

/**
 * Builds the correlation check of one saga from its correlation property's MikroORM metadata, once, when the
 * saga is registered. A correlation value must be a value of the property's own type, so that it can only
 * ever be compared for equality: an object or array would reach `em.findOne` as a query operator
 * (`{ $ne: 'x' }` finds another customer's saga).
 *
 * - string (`varchar(n)`, `text`): a string of at most `n` code points (default {@link DEFAULT_CORRELATION_LENGTH},
 *   `text` {@link MAX_TEXT_CORRELATION_LENGTH}) and of at most {@link MAX_CORRELATION_BYTES} UTF-8 bytes, without
 *   U+0000 or lone surrogates;
 * - `uuid`: a uuid in its 36-character form, any case (looked up in lower case, as PostgreSQL stores it);
 * - integer columns: an integer number within the column's range (`smallint` 16 bits, `integer` 32 bits, a
 *   `bigint` mapped to number within `Number.MAX_SAFE_INTEGER`);
 * - `double` columns: a finite number (a 4-byte `float`/`real` is refused: PostgreSQL rounds what it stores);
 * - `bigint` mapped to bigint: a BigInt within `Number.MAX_SAFE_INTEGER` (SQLite reads larger ones back rounded);
 *   mapped to string: such an integer in plain decimal digits; an enum: one of its items.
 *
 * @throws SagaDefinitionError `DEFINITION_INVALID` for a property of another type (boolean, date, json, decimal,
 *   float, char(n)...).
 */
export function correlationCheckFor(sagaType: string, property: EntityProperty): CorrelationCheck {
  const accepted = acceptedBy(property, MAX_TEXT_CORRELATION_LENGTH);
  if (accepted?.kind === 'float') {
    throw new SagaDefinitionError(
      'DEFINITION_INVALID',
      `Saga ${sagaType}: correlation property ${property.name} is a 4-byte float, which PostgreSQL stores rounded and SQLite exactly, so a saga started with 0.1 would never be found again on PostgreSQL; correlate on a double, integer, string or uuid property.`,
      { sagaType },
    );
  }
  if (isFixedLengthText(property)) {
    throw new SagaDefinitionError(
      'DEFINITION_INVALID',
      `Saga ${sagaType}: correlation property ${property.name} is a fixed-length char(n), which PostgreSQL pads and compares ignoring trailing spaces and SQLite does not ('abc' and 'abc ' are one saga on one database, two on the other); declare it as a varchar ({ type: 'string', length: n }).`,
      { sagaType },
    );
  }
  if (!accepted) {
    throw new SagaDefinitionError(
      'DEFINITION_INVALID',
      `Saga ${sagaType}: correlation property ${property.name} has type ${String(property.type)}; correlate on a string, uuid, integer, number or bigint property.`,
      { sagaType },
    );
  }
  const rule = ruleOf(accepted);
  return (message, messageType) => {
    // A uuid is looked up in lower case, as PostgreSQL stores it; state values must already be lower case.
    const value = accepted.kind === 'uuid' && typeof message === 'string' ? message.toLowerCase() : message;
    const problem = problemOf(value, accepted) ?? bytesProblem(value, accepted);
    if (problem === undefined) return value;
    throw new SagaCorrelationError(
      'CORRELATION_INVALID',
      `Message '${messageType}' gives saga ${sagaType} a correlation value for ${property.name} that ${problem}: it must be ${rule}. Correlation values are compared for equality only; fix the message or its correlation.from.`,
      { sagaType, messageType, property: property.name },
    );
  };
}

/** What a correlation value must be, for error messages: a uuid in any case, a string within its bytes too. */
function ruleOf(accepted: Accepted): string {
  if (accepted.kind === 'uuid') return 'a uuid string (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) in any case';
  return accepted.kind === 'string' ? `${describe(accepted)}, of at most ${MAX_CORRELATION_BYTES} UTF-8 bytes` : describe(accepted);
}

function bytesProblem(value: unknown, accepted: Accepted): string | undefined {
  if (accepted.kind !== 'string' || Buffer.byteLength(value as string, 'utf8') <= MAX_CORRELATION_BYTES) return undefined;
  return `is longer than ${MAX_CORRELATION_BYTES} UTF-8 bytes (PostgreSQL's unique index takes at most 2,704)`;
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
