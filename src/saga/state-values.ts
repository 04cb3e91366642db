import { type ChangeSet, type EntityMetadata, type EntityProperty, types } from '@mikro-orm/core';
import { SagaValidationError } from '../errors.js';
import { type Accepted, acceptedBy, describe, problemOf } from './column-value.js';
import { kindOf } from './stored-text.js';

/** Earliest Date a state column takes: 0001-01-01T00:00:00.000Z (four-digit years, as for due dates). */
// Date.UTC maps years 0 to 99 to 1900 to 1999, so the first instant of year 1 is written out.
export const EARLIEST_STATE_DATE_MS = -62_135_596_800_000;
/** Latest Date a state column takes: 9999-12-31T23:59:59.999Z. */
export const LATEST_STATE_DATE_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/**
 * Checks the state properties a step changed, before anything is written.
 * @throws SagaValidationError `STATE_VALUE_INVALID` naming the property (never its value).
 */
export type StateValuesCheck = (state: object, changeSets: readonly ChangeSet<object>[], sagaType: string, sagaId: string) => void;

type ColumnRule = Accepted | { readonly kind: 'date' };

/**
 * Builds the state check of one saga from its entity metadata, once, at registration. It covers the scalar
 * columns whose type the library knows (strings, uuids, numbers, bigints, enums, Dates), the entity's own and
 * those of an `@Embedded` embeddable stored in the entity's columns; others (json, boolean, custom types, an
 * embeddable stored as one JSON column) are left to MikroORM and the database. A step copying message text into its state is the usual
 * way a U+0000 or an over-long string gets there: PostgreSQL would refuse it at COMMIT time, SQLite would store it.
 */
export function stateValuesCheckFor(meta: EntityMetadata): StateValuesCheck {
  const columns = new Map<string, Column>();
  for (const property of meta.props) {
    // Properties of an embeddable stored as one JSON column (`object: true`) are left to that column.
    if (property.kind !== 'scalar' || property.object) continue;
    // A user-defined type holds whatever JavaScript value it converts (a list stored as text, say): its column
    // type says nothing about that value, so the type and the database judge it.
    if (hasUserDefinedType(property)) continue;
    const rule: ColumnRule | undefined = property.runtimeType === 'Date' ? { kind: 'date' } : acceptedBy(property, undefined);
    if (rule) columns.set(property.name, { rule, path: pathOf(meta, property) });
  }
  return (state, changeSets, sagaType, sagaId) => {
    for (const changeSet of changeSets) {
      for (const name of Object.keys(changeSet.payload ?? {})) {
        const column = columns.get(name);
        if (!column) continue;
        const value = column.path.reduce<unknown>((owner, key) => (owner as Record<string, unknown> | null | undefined)?.[key], state);
        if (value === null || value === undefined) continue;
        const { rule } = column;
        const problem = rule.kind === 'date' ? dateProblem(value) : problemOf(value, rule);
        if (problem === undefined) continue;
        const property = column.path.join('.');
        throw new SagaValidationError(
          'STATE_VALUE_INVALID',
          `A step of saga ${sagaType}/${sagaId} set ${property} to a value that ${problem}: it must be ${rule.kind === 'date' ? 'a valid Date from year 1 to 9999' : describe(rule)}. Nothing was written; check what the step copies from its message.`,
          { sagaType, sagaId, property },
        );
      }
    }
  };
}

/** MikroORM's own mapped types (`types.string`, `types.bigint`, ...): a property of one holds what the column does. */
const BUILT_IN_TYPES = new Set<unknown>(Object.values(types));

function hasUserDefinedType(property: EntityProperty): boolean {
  const custom = property.customType as object | undefined;
  return custom !== undefined && !BUILT_IN_TYPES.has(custom.constructor);
}

/** A checked column: its rule, and where the state holds its value (`['address', 'street']` for an embeddable). */
type Column = { readonly rule: ColumnRule; readonly path: readonly string[] };

/**
 * Where the state holds `property`'s value. A property of an embeddable stored in the entity's own columns is
 * named `address_street` in a change set's payload; `embedded` names its owning property and its own name.
 */
function pathOf(meta: EntityMetadata, property: EntityProperty): string[] {
  if (!property.embedded) return [property.name];
  const [owner, name] = property.embedded;
  const ownerProperty = meta.properties[owner as keyof typeof meta.properties] as EntityProperty | undefined;
  return [...(ownerProperty ? pathOf(meta, ownerProperty) : [owner]), name];
}

function dateProblem(value: unknown): string | undefined {
  if (!(value instanceof Date)) return `is ${kindOf(value)}, not a Date`;
  const ms = value.getTime();
  if (Number.isNaN(ms)) return 'is an invalid Date';
  return ms < EARLIEST_STATE_DATE_MS || ms > LATEST_STATE_DATE_MS ? 'is outside years 1 to 9999' : undefined;
}
