import { type EntityManager, type EntityMetadata, type EntityProperty, ReferenceKind } from '@mikro-orm/core';
import { ORM_MAJOR } from './orm-major.js';

/**
 * The metadata MikroORM holds for the class `entity`, or undefined when it is not registered (or MikroORM knows
 * another class of that name, from another installed copy). 6 looks the class up by its name, 7 by the class.
 */
export function entityMetadata(em: EntityManager, entity: { name: string }): EntityMetadata | undefined {
  const meta: EntityMetadata | undefined = em.getMetadata().find(entity as never);
  return meta?.class === entity ? meta : undefined;
}

/** Whether `em` and `other` are EntityManagers of one MikroORM instance (forks and transactions share its metadata). */
export function sameOrm(em: EntityManager, other: EntityManager): boolean {
  return em.getMetadata() === other.getMetadata();
}

/** Every entity MikroORM knows, abstract ones included. */
export function allEntityMetadata(em: EntityManager): EntityMetadata[] {
  // A plain record keyed by class name on 6, a Map keyed by class on 7.
  const all: Record<string, EntityMetadata> | Map<unknown, EntityMetadata> = em.getMetadata().getAll();
  return all instanceof Map ? [...all.values()] : Object.values(all);
}

/** The name MikroORM's driver and entity factory take for an entity: its class name on 6, its class on 7. */
export function entityNameOf(meta: EntityMetadata): never {
  return (ORM_MAJOR === 6 ? meta.className : meta.class) as never;
}

/** Whether `meta` is part of a table-per-type inheritance tree (MikroORM 7's `inheritance: 'tpt'`). */
export function usesTablePerType(meta: EntityMetadata): boolean {
  const tpt = (m: EntityMetadata | undefined) => (m as { inheritanceType?: string } | undefined)?.inheritanceType === 'tpt';
  return tpt(meta) || tpt(meta.root) || (meta as { tptParent?: EntityMetadata }).tptParent !== undefined;
}

/** `name` quoted for the platform (backticks on SQLite, double quotes on PostgreSQL). */
export function quoteName(em: EntityManager, name: string): string {
  return em.getPlatform().quoteIdentifier(name);
}

/** The entity's table as its metadata names it, schema-qualified where it names a schema; unquoted. */
export function qualifiedTableName(meta: EntityMetadata): string {
  return meta.schema ? `${meta.schema}.${meta.tableName}` : meta.tableName;
}

/** The entity's table, quoted and schema-qualified. */
export function tableOf(em: EntityManager, meta: EntityMetadata): string {
  return quoteName(em, qualifiedTableName(meta));
}

/** The quoted column of `property`. */
export function columnOf(em: EntityManager, meta: EntityMetadata, property: string): string {
  return quoteName(em, meta.properties[property as never]!.fieldNames[0]!);
}

/**
 * The names of the unique keys that hold `property` alone, as MikroORM's schema generator names them on the
 * platform: the primary key, the property's own `unique`, and an entity-level unique on it alone. A database that
 * names the constraint a statement violated (PostgreSQL) names one of these when the statement duplicated `property`.
 */
export function uniqueKeyNamesOf(em: EntityManager, meta: EntityMetadata, property: string): string[] {
  const prop = meta.properties[property as never] as EntityProperty | undefined;
  if (!prop) return [];
  const platform = em.getPlatform();
  const named = (name: unknown) => (typeof name === 'string' ? name : platform.getIndexName(meta.tableName, prop.fieldNames, 'unique'));
  const names: string[] = [];
  if (prop.primary) names.push(platform.getDefaultPrimaryName(meta.tableName, prop.fieldNames));
  if (prop.unique) names.push(named(prop.unique));
  for (const unique of meta.uniques) {
    const properties = [unique.properties].flat();
    if (properties.length === 1 && properties[0] === property) names.push(named(unique.name));
  }
  return names;
}

/** Whether `property` is a plain column (not a relation or an embeddable). */
export function isScalarProperty(property: EntityProperty): boolean {
  return property.kind === ReferenceKind.SCALAR;
}

/** The properties stored in the entity's own table: scalars and owning references. */
export function storedProperties(meta: EntityMetadata): EntityProperty[] {
  return Object.values(meta.properties as Record<string, EntityProperty>).filter(
    (p) =>
      p.persist !== false &&
      (p.kind === ReferenceKind.SCALAR || p.kind === ReferenceKind.MANY_TO_ONE || (p.kind === ReferenceKind.ONE_TO_ONE && p.owner)),
  );
}

/** The table an index expression callback is given. */
export interface IndexTable {
  readonly name: string;
  readonly schema?: string;
}

/**
 * An index `expression` callback that works on both majors: MikroORM 6 calls it with `(table, columns, name)`,
 * 7 with `(columns, table, name)`. `fn` always gets `(table, columns, name)`. Both majors build the table
 * argument with its own `toString` function; a columns record maps property names to column-name strings.
 */
export function indexExpression<TProperty extends string>(
  fn: (table: IndexTable, columns: Record<TProperty, string>, indexName: string) => string,
): never {
  const isTable = (x: unknown) => typeof x === 'object' && x !== null && Object.hasOwn(x, 'toString') && typeof x.toString === 'function';
  const callback = (a: unknown, b: unknown, indexName: string) =>
    isTable(a)
      ? fn(a as IndexTable, b as Record<TProperty, string>, indexName)
      : fn(b as IndexTable, a as Record<TProperty, string>, indexName);
  return callback as never;
}
