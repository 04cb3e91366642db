import { type EntityData, type EntityManager, type EntityMetadata, type EntityProperty, ReferenceKind } from '@mikro-orm/core';
import { columnOf, entityNameOf, tableOf, usesTablePerType } from './metadata.js';
import { ORM_MAJOR } from './orm-major.js';
import { executeSql } from './sql-execution.js';

/**
 * Whether rows of `meta` read by {@link findRowsByPrimaryKey} are what `em.findOne` would find: no filter may apply
 * to the entity or to the target of one of its to-one relations, and no relation is `eager` (`findOne` applies
 * filters, joins a filtered to-one relation to null it when its row is hidden, and populates eager relations; the
 * driver does none of that), and the entity is not virtual. Filters include those registered on `em` itself
 * (`em.addFilter`, copied to its forks): MikroORM keeps them private, so `em.applyFilters` is asked whether any
 * filter would change an empty condition (a filter that cannot be evaluated without its parameters counts too).
 * Nor may `em.findOne` pick the schema ({@link readsAnotherSchema}).
 */
export async function readsRowsDirectly(em: EntityManager, meta: EntityMetadata): Promise<boolean> {
  const global = (em.config.get('filters') ?? {}) as Record<string, unknown>;
  const properties = Object.values(meta.properties as Record<string, EntityProperty>);
  const eager = properties.some((p) => p.eager === true);
  if (readsAnotherSchema(em, meta)) return false;
  if (meta.virtual || eager || Object.keys(meta.filters ?? {}).length > 0 || Object.keys(global).length > 0) return false;
  const toOne = properties.filter((p) => (p.kind === 'm:1' || p.kind === '1:1') && p.targetMeta).map((p) => p.targetMeta!);
  if (toOne.some((target) => Object.keys(target.filters ?? {}).length > 0)) return false;
  const where = {};
  const filtered = async (entity: EntityMetadata): Promise<boolean> =>
    (em as unknown as { applyFilters(entityName: never, where: object, options: object, type: 'read'): Promise<unknown> })
      .applyFilters(entityNameOf(entity), where, {}, 'read')
      .then(
        (applied) => applied !== where,
        () => true,
      );
  return !(await Promise.all([meta, ...toOne].map(filtered))).some(Boolean);
}

/**
 * Whether `em.findOne` would read `meta`'s rows from a schema other than the one its metadata names, or set the
 * entity's schema from `em`: a wildcard entity (`schema: '*'`), a schema on the EntityManager (`em.fork({ schema })`,
 * `em.schema = ...`, which em.findOne also gives the entity it creates) or in the config (`schema` option, other than
 * the platform's default). MikroORM's QueryBuilder picks that schema on every read; the library's own SELECT does not.
 */
function readsAnotherSchema(em: EntityManager, meta: EntityMetadata): boolean {
  return meta.schema === '*' || em.schema !== undefined || em.config.getSchema(true) !== undefined;
}

/**
 * Reads the rows of `meta` whose primary key is one of `ids` with one query, through MikroORM's driver (the
 * query `em.find` sends, without the identity map): each row is entity data as the driver maps it, ready for
 * {@link hydrateRow}. Check {@link readsRowsDirectly} first.
 */
export async function findRowsByPrimaryKey(em: EntityManager, meta: EntityMetadata, ids: readonly string[]): Promise<EntityData<object>[]> {
  const pk = meta.primaryKeys[0]!;
  const driver = em.getDriver() as unknown as {
    find(entityName: never, where: unknown, options: { ctx?: unknown; connectionType?: 'read' | 'write' }): Promise<EntityData<object>[]>;
  };
  // From the primary, never a read replica: a unit of work writes what it read, guarded by its version.
  return driver.find(entityNameOf(meta), { [pk]: { $in: [...ids] } }, { ctx: em.getTransactionContext(), connectionType: 'write' });
}

/**
 * Makes `row` (from {@link findRowsByPrimaryKey}) a managed entity of `em`, as `em.findOne` does with the row it
 * read: created by the entity factory with custom types converted, registered in the identity map with its
 * original data (what the next flush compares against), and `onLoad` hooks run. `row` must not be used again.
 */
export async function hydrateRow<T extends object>(em: EntityManager, meta: EntityMetadata, row: EntityData<object>): Promise<T> {
  const entity = em.getEntityFactory().create(entityNameOf(meta), row as never, { merge: true, convertCustomTypes: true }) as T;
  await em.getUnitOfWork().dispatchOnLoadEvent();
  return entity;
}

/** {@link rowReadSql} of each entity and property: metadata does not change once MikroORM is initialised. */
const rowReads = new WeakMap<EntityMetadata, Map<string, string | null>>();

/**
 * The SELECT that reads the one row of `meta` whose `property` equals a value, as `em.findOne` reads it, for
 * {@link readRowBy}; undefined when only `em.findOne` reads such rows as it does. `em.findOne` selects `*` and maps
 * the row through the driver when every property of the entity is a plain scalar column: the SELECT is the same
 * then, built once per entity and property instead of by MikroORM's QueryBuilder on every read. Any other
 * mapping is left to `em.findOne`: a relation or embeddable (joins, auto-joined one-to-one owners), a formula, a
 * lazy property, a type read through SQL of its own (`convertToJSValueSQL`), inheritance (a discriminator
 * condition, MikroORM 7's table-per-type joins), a virtual entity; and filters, which {@link readsRowsDirectly}
 * checks on every read.
 */
export function rowReadSql(em: EntityManager, meta: EntityMetadata, property: string): string | undefined {
  let byProperty = rowReads.get(meta);
  if (!byProperty) {
    byProperty = new Map();
    rowReads.set(meta, byProperty);
  }
  let sql = byProperty.get(property);
  if (sql === undefined) {
    const props = Object.values(meta.properties as Record<string, EntityProperty>);
    const plain =
      !meta.virtual &&
      meta.schema !== '*' &&
      !meta.discriminatorColumn &&
      !meta.root?.discriminatorColumn &&
      !usesTablePerType(meta) &&
      meta.primaryKeys.length === 1 &&
      props.every(
        (p) =>
          p.kind === ReferenceKind.SCALAR &&
          !p.lazy &&
          !p.formula &&
          !p.embedded &&
          !p.object &&
          // MikroORM's flag: a type whose SQL conversion is empty on this platform (JSON here) is read as a column.
          !p.hasConvertToJSValueSQL,
      ) &&
      meta.properties[property as never]?.fieldNames?.length === 1;
    sql = plain ? `select * from ${tableOf(em, meta)} where ${columnOf(em, meta, property)} = ? limit 1` : null;
    byProperty.set(property, sql);
  }
  return sql ?? undefined;
}

/**
 * Reads the row of `meta` whose `property` equals `value` with `sql` (from {@link rowReadSql}), on `em` (in its
 * transaction when it has one): the value converted for the query as MikroORM converts a condition's value (its
 * type's `convertToDatabaseValue`), the row mapped by the driver as `em.findOne` maps it, ready for
 * {@link hydrateRow}. Null when there is no such row. Check {@link readsRowsDirectly} first.
 */
export async function readRowBy(
  em: EntityManager,
  meta: EntityMetadata,
  sql: string,
  property: string,
  value: unknown,
): Promise<EntityData<object> | null> {
  const prop = meta.properties[property as never] as EntityProperty;
  const bound = prop.customType
    ? prop.customType.convertToDatabaseValue(value, em.getPlatform(), { fromQuery: true, key: prop.name, mode: 'query' } as never)
    : value;
  // MikroORM 6's QueryBuilder creates the connection's knex client, which marks a SQLite connection connected; a
  // raw statement first would run its connect() instead, which creates the database file's directory. Opened the
  // QueryBuilder's way, a file that cannot be opened fails this read as it fails em.findOne (test/persistence-failures).
  if (ORM_MAJOR === 6) (em.getConnection() as unknown as { getKnex(): unknown }).getKnex();
  const row = await executeSql<Record<string, unknown> | undefined>(em, sql, [bound], 'get');
  if (!row) return null;
  const driver = em.getDriver() as unknown as { mapResult(result: object, meta: EntityMetadata): EntityData<object> | null };
  return driver.mapResult(row, meta);
}
