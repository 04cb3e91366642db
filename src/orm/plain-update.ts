import { type EntityManager, type EntityMetadata, type EntityProperty, EventType, helper, ReferenceKind } from '@mikro-orm/core';
import { entityMetadata, quoteName, usesTablePerType } from './metadata.js';

/** The events of an entity's UPDATE: a hook or subscriber listening to one of them needs MikroORM's flush. */
const UPDATE_EVENTS = [EventType.beforeUpdate, EventType.afterUpdate] as const;

/**
 * The flush's own events. They have no entity: MikroORM's flush calls them on every subscriber that has them,
 * whatever entities the subscriber names (`hasListeners` would count only those of one entity or of every entity).
 */
const FLUSH_EVENTS = [EventType.beforeFlush, EventType.onFlush, EventType.afterFlush] as const;

/** One column of a row UPDATE and the value to bind for it. */
export interface ColumnValue {
  /** Quoted for the platform. */
  readonly column: string;
  readonly value: unknown;
}

/**
 * The columns MikroORM's flush would write to update `entity`, a managed entity of `em` (read from its row and
 * changed in place), with the values its flush would bind: the change set's payload, which MikroORM has already
 * converted to database values (custom types included; Dates as the platform stores them). Undefined when only
 * MikroORM's own flush writes what it should: a hook or subscriber listens to the flush or the update, `em` holds
 * any other change, the entity is part of an inheritance tree or uses MikroORM's own `version` or other
 * concurrency columns, or a changed property is not one plain column with a plain value (a relation, embeddable,
 * formula, JSON value, a type written through SQL of its own, a raw SQL fragment).
 */
export function plainRowUpdate(em: EntityManager, meta: EntityMetadata, entity: object): ColumnValue[] | undefined {
  if (!mappedForPlainUpdates(meta)) return undefined;
  const events = em.getEventManager();
  if (UPDATE_EVENTS.some((event) => events.hasListeners(event, meta))) return undefined;
  const subscribers = [...events.getSubscribers()] as Record<string, unknown>[];
  if (subscribers.some((s) => FLUSH_EVENTS.some((event) => typeof s[event] === 'function'))) return undefined;
  const uow = em.getUnitOfWork();
  uow.computeChangeSets();
  const changeSets = uow.getChangeSets();
  const [changeSet] = changeSets;
  if (changeSets.length !== 1 || changeSet!.entity !== entity || changeSet!.type !== 'update') return undefined;
  const columns: ColumnValue[] = [];
  for (const [name, value] of Object.entries(changeSet!.payload as Record<string, unknown>)) {
    const property = meta.properties[name as never] as EntityProperty | undefined;
    if (!property || !isPlainColumn(property) || !isPlainValue(value)) return undefined;
    columns.push({ column: quoteName(em, property.fieldNames[0]!), value });
  }
  return columns.length > 0 ? columns : undefined;
}

/**
 * Records `entity` as written in `em`'s unit of work after its {@link plainRowUpdate} was written by other means:
 * its current values become what the next flush compares against, so committing `em` (which flushes it first)
 * writes nothing more.
 */
export function markWritten(em: EntityManager, entity: object): void {
  em.getUnitOfWork().merge(entity);
}

/**
 * After MikroORM's flush inserted `entity`: under the ORM-wide `forceUndefined`, MikroORM records each column it
 * inserted as null as `undefined` in the entity's snapshot (UnitOfWork.register normalizes the INSERT's payload),
 * while the entity still holds null, and its comparator counts null against undefined as a change: the next flush
 * (the one em.commit() runs first) would compute an UPDATE of those columns, which for a saga row (its `version`
 * a concurrency check, unchanged) MikroORM rejects with an OptimisticLockError before sending anything. Records
 * those columns as null, what was inserted; other columns, and everything under the default config, are left as
 * they are.
 */
export function recordInsertedNulls(em: EntityManager, entity: object): void {
  if (!em.config.get('forceUndefined')) return;
  const original = helper(entity).__originalEntityData as Record<string, unknown> | undefined;
  if (!original) return;
  const current = em.getComparator().prepareEntity(entity) as Record<string, unknown>;
  for (const key of Object.keys(original)) {
    if (original[key] === undefined && current[key] === null) original[key] = null;
  }
}

/** {@link mappedForPlainUpdates} of each entity: its metadata does not change once MikroORM is initialised. */
const plainMappings = new WeakMap<EntityMetadata, boolean>();

/**
 * Whether `meta`'s mapping lets {@link plainRowUpdate} write its rows: not MikroORM's own `version` property nor
 * other concurrency-check columns, no inheritance (a discriminator column, or MikroORM 7's table-per-type, whose
 * change set spans the tables of the entity and its parents), and no `onUpdate` callback (computing the change set
 * runs it; were MikroORM's flush to write the row after all, its own computation would run it once more).
 */
function mappedForPlainUpdates(meta: EntityMetadata): boolean {
  let plain = plainMappings.get(meta);
  if (plain === undefined) {
    const concurrency = [...(meta.concurrencyCheckKeys ?? [])];
    plain =
      !meta.versionProperty &&
      !meta.discriminatorColumn &&
      concurrency.every((key) => key === 'version') &&
      !usesTablePerType(meta) &&
      !hasOnUpdate(meta);
    plainMappings.set(meta, plain);
  }
  return plain;
}

/** Whether a property of `meta`, or of an embeddable it embeds, has an `onUpdate` callback. */
function hasOnUpdate(meta: EntityMetadata, seen = new Set<EntityMetadata>()): boolean {
  if (seen.has(meta)) return false;
  seen.add(meta);
  return Object.values(meta.properties as Record<string, EntityProperty>).some(
    (p) => typeof p.onUpdate === 'function' || (p.kind === ReferenceKind.EMBEDDED && !!p.targetMeta && hasOnUpdate(p.targetMeta, seen)),
  );
}

/**
 * Computes the change sets of `em`'s unit of work to see what a step changed, without calling the `onUpdate`
 * callbacks of `entity` (and of the embeddables it embeds): MikroORM's flush, which writes the row, computes the
 * change set again and calls them then, once per unit of work, as a plain MikroORM flush does. The callbacks are
 * taken off the metadata for the computation only, which runs synchronously: no other code sees them missing.
 * An `onUpdate` value is only computed when something else changed, so what changed is the same without them.
 * @returns the change sets computed (without the callbacks' values).
 */
export function computeChangeSetsOnce(
  em: EntityManager,
  entity: object,
): ReturnType<ReturnType<EntityManager['getUnitOfWork']>['getChangeSets']> {
  const meta = entityMetadata(em, entity.constructor as { name: string });
  const callbacks = meta ? onUpdateCallbacks(meta) : [];
  for (const [property] of callbacks) property.onUpdate = undefined;
  const uow = em.getUnitOfWork();
  try {
    uow.computeChangeSets();
  } finally {
    for (const [property, onUpdate] of callbacks) property.onUpdate = onUpdate;
  }
  return uow.getChangeSets();
}

type OnUpdate = EntityProperty['onUpdate'];

/** The properties of each entity with an `onUpdate` callback, and their callbacks, read once (see {@link onUpdateCallbacks}). */
const onUpdateProperties = new WeakMap<EntityMetadata, [EntityProperty, OnUpdate][]>();

/**
 * Every property with an `onUpdate` callback that MikroORM calls when it computes a change set of `meta`'s entity:
 * its own (the properties of an inline embeddable listed flattened on it included) and those of the embeddables it
 * embeds, with their callbacks. Metadata does not change once MikroORM is initialised.
 */
function onUpdateCallbacks(meta: EntityMetadata): [EntityProperty, OnUpdate][] {
  let found = onUpdateProperties.get(meta);
  if (found === undefined) {
    const properties = new Set<EntityProperty>();
    const walk = (m: EntityMetadata, seen: Set<EntityMetadata>) => {
      if (seen.has(m)) return;
      seen.add(m);
      for (const property of [...Object.values(m.properties as Record<string, EntityProperty>), ...(m.hydrateProps ?? [])]) {
        if (typeof property.onUpdate === 'function') properties.add(property);
        if (property.kind === ReferenceKind.EMBEDDED && property.targetMeta) walk(property.targetMeta, seen);
      }
    };
    walk(meta, new Set());
    found = [...properties].map((property) => [property, property.onUpdate]);
    onUpdateProperties.set(meta, found);
  }
  return found;
}

/** A property stored as one column whose value MikroORM binds as it is. */
function isPlainColumn(property: EntityProperty): boolean {
  const type = String((property as { type?: unknown }).type ?? '').toLowerCase();
  const custom = property.customType as { convertToDatabaseValueSQL?: unknown; constructor?: { name?: string } } | undefined;
  return (
    property.kind === ReferenceKind.SCALAR &&
    property.fieldNames?.length === 1 &&
    !property.formula &&
    property.persist !== false &&
    !property.embedded &&
    !property.object &&
    !type.includes('json') &&
    custom?.constructor?.name !== 'JsonType' &&
    typeof custom?.convertToDatabaseValueSQL !== 'function'
  );
}

/** A value bound as it is: a string, number, boolean, bigint, Date or null (not an object, array or raw SQL). */
function isPlainValue(value: unknown): boolean {
  return value === null || value instanceof Date || ['string', 'number', 'boolean', 'bigint'].includes(typeof value);
}
