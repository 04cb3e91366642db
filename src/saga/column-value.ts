import type { EntityProperty } from '@mikro-orm/core';
import { exceedsCodePoints, kindOf, textProblem } from './stored-text.js';

// MikroORM's length of a `string` property declared without one (varchar(255) on PostgreSQL; SQLite has none).
export const DEFAULT_VARCHAR_LENGTH = 255;
const INT16 = { min: -32_768, max: 32_767 } as const;
const INT32 = { min: -2_147_483_648, max: 2_147_483_647 } as const;
// A `bigint` column mapped to BigInt: SQLite's driver reads it as a JavaScript number, so only safe integers
// read back as written on both databases (2^63 - 1 came back from SQLite as 9223372036854776000n).
const SAFE_BIGINT = { min: -(2n ** 53n - 1n), max: 2n ** 53n - 1n } as const;
// An integer as a `bigint` column mapped to string reads it back: no sign on zero, no leading zeros. Safe
// integers only: SQLite's driver reads a bigint column as a JavaScript number, so 2^63 - 1 came back as ...6000.
const INTEGER_TEXT = /^(0|-?[1-9]\d{0,15})$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/**
 * Largest magnitude of a 4-byte `real` (PostgreSQL refuses more; SQLite stores 8 bytes). Nonzero magnitudes below
 * {@link SMALLEST_FLOAT} underflow and are refused by PostgreSQL too.
 */
export const LARGEST_FLOAT = 3.4028235e38;
/** Smallest nonzero magnitude this library lets into a `float` column (PostgreSQL refuses 7e-46). */
export const SMALLEST_FLOAT = 1e-45;

const SMALL_INTEGER_TYPES = new Set(['smallint', 'tinyint', 'smallinttype', 'tinyinttype']);
const INTEGER_TYPES = new Set(['integer', 'int', 'int4', 'mediumint', 'number', 'integertype', 'mediuminttype']);
const TEXT_TYPES = new Set(['text', 'texttype']);
// A 4-byte float: PostgreSQL stores it rounded to 24 bits of mantissa, SQLite stores the 8-byte double as given.
const FLOAT_TYPES = new Set(['float', 'floattype', 'real', 'float4']);

/**
 * What a column accepts, read once from a property's MikroORM metadata, so that a value is checked the same way
 * on PostgreSQL and SQLite (SQLite would store a 1.5 in an integer column, a string longer than its varchar, or a
 * U+0000 that PostgreSQL refuses). `maxLength` is in code points; undefined for an unbounded `text`.
 */
export type Accepted =
  | { readonly kind: 'string'; readonly maxLength: number | undefined }
  | { readonly kind: 'uuid' }
  | { readonly kind: 'integer'; readonly min: number; readonly max: number }
  | { readonly kind: 'number' }
  | { readonly kind: 'float' }
  | { readonly kind: 'bigint' }
  | { readonly kind: 'bigintText' }
  | { readonly kind: 'enum'; readonly items: readonly unknown[] };

/**
 * What `property` accepts; `undefined` for a type this library does not check (boolean, date, json, decimal).
 * A `bigint` mapped to string takes only the text the database reads back, so that one number is one key.
 * `textLength` is the limit of a `text` column declared without `length`.
 */
export function acceptedBy(property: EntityProperty, textLength: number | undefined): Accepted | undefined {
  if (property.enum && Array.isArray(property.items)) return { kind: 'enum', items: property.items };
  // Before the runtime type: MikroORM leaves `real` and `FloatType` without one on SQLite.
  if (isFloat(property)) return { kind: 'float' };
  const type = String(property.type).toLowerCase();
  switch (property.runtimeType) {
    case 'string':
      if (type === 'uuid' || type === 'uuidtype') return { kind: 'uuid' };
      if (type === 'decimal' || type === 'decimaltype') return undefined;
      if (type === 'bigint' || type === 'biginttype') return { kind: 'bigintText' };
      // A `date` or `time` column holds its value as text ('2026-03-04', '13:45:10') but is no varchar: its
      // `length` (0 for `date` on PostgreSQL, the precision for `time`) is no limit on characters.
      if (TEMPORAL_TEXT_TYPES.has(type)) return undefined;
      return {
        kind: 'string',
        maxLength: property.length ?? (TEXT_TYPES.has(type) ? textLength : DEFAULT_VARCHAR_LENGTH),
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

/** Whether `property` is a 4-byte float column (`float`, `real`), by its type or its declared column type. */
export function isFloat(property: EntityProperty): boolean {
  const columnType = property.columnTypes?.[0]?.toLowerCase();
  return FLOAT_TYPES.has(String(property.type).toLowerCase()) || (columnType !== undefined && FLOAT_TYPES.has(columnType));
}

/** MikroORM's types of a date or time of day held as a string. */
const TEMPORAL_TEXT_TYPES = new Set(['date', 'datetype', 'time', 'timetype']);

const FIXED_LENGTH_TYPES = new Set(['char', 'character', 'chartype', 'charactertype', 'bpchar']);
const FIXED_LENGTH_COLUMN = /^(n?char|character|bpchar)\s*(\(\s*\d+\s*\))?$/i;

/**
 * Whether `property` is a fixed-length `char(n)` column: PostgreSQL pads it with spaces and ignores trailing
 * spaces when comparing, SQLite stores and compares the text as given.
 */
export function isFixedLengthText(property: EntityProperty): boolean {
  const columnType = property.columnTypes?.[0];
  return FIXED_LENGTH_TYPES.has(String(property.type).toLowerCase()) || (columnType !== undefined && FIXED_LENGTH_COLUMN.test(columnType));
}

/** Why `value` is not accepted, phrased to follow "a value that ...", or undefined. It quotes no value. */
export function problemOf(value: unknown, accepted: Accepted): string | undefined {
  switch (accepted.kind) {
    case 'string':
    case 'uuid': {
      if (typeof value !== 'string') return `is ${kindOf(value)}`;
      // Lower case only: PostgreSQL reads a uuid back in lower case, SQLite as it was written.
      if (accepted.kind === 'uuid') return UUID.test(value) ? undefined : uuidProblem(value);
      if (accepted.maxLength !== undefined && exceedsCodePoints(value, accepted.maxLength))
        return `is longer than ${accepted.maxLength} characters`;
      return textProblem(value);
    }
    case 'integer':
    case 'number':
    case 'float':
      if (typeof value !== 'number') return `is ${kindOf(value)}`;
      if (!Number.isFinite(value)) return `is ${value}`;
      if (accepted.kind === 'number') return undefined;
      if (accepted.kind === 'float') return floatProblem(value);
      if (!Number.isInteger(value)) return 'is not an integer';
      return value < accepted.min || value > accepted.max ? 'is outside the column range' : undefined;
    case 'bigint':
      if (typeof value !== 'bigint') return `is ${kindOf(value)}`;
      return value < SAFE_BIGINT.min || value > SAFE_BIGINT.max ? 'is outside the safe integer range' : undefined;
    case 'bigintText':
      if (typeof value !== 'string') return `is ${kindOf(value)}`;
      if (!INTEGER_TEXT.test(value)) return 'is not an integer in plain decimal digits';
      return Number.isSafeInteger(Number(value)) ? undefined : 'is outside the safe integer range';
    case 'enum':
      return accepted.items.includes(value) ? undefined : 'is not one of its enum items';
  }
}

function uuidProblem(value: string): string {
  return UUID.test(value.toLowerCase()) ? 'is a uuid not in lower case' : 'is not a uuid';
}

function floatProblem(value: number): string | undefined {
  const magnitude = Math.abs(value);
  if (magnitude > LARGEST_FLOAT) return 'is outside the range of a 4-byte float';
  return magnitude !== 0 && magnitude < SMALLEST_FLOAT ? 'is too close to zero for a 4-byte float' : undefined;
}

/** What `accepted` takes, for error messages. */
export function describe(accepted: Accepted): string {
  switch (accepted.kind) {
    case 'string':
      return `a string${accepted.maxLength === undefined ? '' : ` of at most ${accepted.maxLength} characters`} without U+0000 or lone surrogates`;
    case 'uuid':
      return 'a uuid string in lower case (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)';
    case 'integer':
      return `an integer number from ${accepted.min} to ${accepted.max}`;
    case 'number':
      return 'a finite number';
    case 'float':
      return `a finite number of magnitude 0 or from ${SMALLEST_FLOAT} to ${LARGEST_FLOAT}`;
    case 'bigint':
      return 'a BigInt within the safe integer range (Number.MAX_SAFE_INTEGER)';
    case 'bigintText':
      return 'a string of a safe integer (Number.MAX_SAFE_INTEGER) in decimal digits (no leading zeros, "+", "-0", spaces or exponent)';
    case 'enum':
      return `one of the ${accepted.items.length} items of its enum`;
  }
}
