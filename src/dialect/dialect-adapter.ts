import type { EntityManager } from '@mikro-orm/core';
import { SagaError } from '../errors.js';
import { platformNames } from '../orm/index.js';

/**
 * What the library needs to know about the database. The runtime and the dispatcher ask these
 * capability questions; they never ask which database they are on.
 */
export interface DialectAdapter {
  /** For messages and logs only. */
  readonly name: 'postgresql' | 'sqlite';
  /**
   * Whether the due-row subquery of a claim can say `FOR UPDATE SKIP LOCKED`, so concurrent dispatchers take
   * disjoint batches without waiting. Without it the claim is still one UPDATE statement, which takes the
   * database's write lock before it reads (SQLite), so concurrent claims run one after the other.
   */
  readonly supportsSkipLocked: boolean;
  /**
   * Whether a COMMIT that fails on the client's side may still have been applied: true over a network (the
   * connection can drop after COMMIT was sent); false for SQLite, where COMMIT runs in-process and either
   * returns or leaves the transaction uncommitted.
   */
  readonly commitCanFailAfterApplying: boolean;
  /**
   * Whether a WITH query can be an UPDATE (PostgreSQL's data-modifying statements in WITH): a unit of work then
   * writes its saga row and stamps the timer it delivers in one statement, one round trip.
   */
  readonly updatesInWith: boolean;
  /**
   * Default of `groupCommit.maxGroups`: how many group transactions are worth writing at once. SQLite has one
   * writer at a time (and MikroORM one connection): a second group would only wait for the first, holding units
   * back that could have joined the next group.
   */
  readonly groupsAtOnce: number;
  /**
   * Whether a session can wake others that listen on a channel (PostgreSQL's LISTEN/NOTIFY): a runtime then wakes
   * the dispatchers of other processes when it commits rows due at once.
   */
  readonly notifiesListeners: boolean;
  /**
   * Whether a transaction can take a lock it holds until it ends, on any key (PostgreSQL's transaction-scoped advisory
   * locks). A transaction staging a delivery takes its saga's before its row takes an order key (`saga_inbox`), so
   * the deliveries of one saga are numbered in commit order. Without it (SQLite) one transaction writes at a time,
   * which numbers them in commit order already.
   */
  readonly locksSagaKeys: boolean;
  /** A SQL expression that yields a new random uuid for each row it is evaluated for. */
  readonly newTokenSql: string;
  /**
   * "Still pending" (`column` is null) for a statement that finds its dispatch rows by id. On PostgreSQL it is
   * said in a form the planner cannot match with the claim indexes' predicate (`dispatched_at is null`): matched,
   * and with statistics that say few rows are pending (a table just filled, or a burst since the last ANALYZE),
   * PostgreSQL scanned every pending row's entry of that index, on `(available_at, id)`, to find a few ids,
   * instead of looking them up by primary key (a published stamp of 100 rows took 30-50 ms against 2 with 2,000
   * rows pending, growing with the backlog).
   */
  pendingById(column: string): string;
  /**
   * Planner settings a claim is planned and run under (statements without parameters or results, each in force for
   * the claim's own transaction only). PostgreSQL: no sort. A claim takes the oldest due rows (`order by
   * available_at, id limit n for update skip locked`), which the claim index gives in that order; but with statistics
   * that say few rows are pending (a table just filled, or a burst since the last ANALYZE: the recovery after an
   * outage), PostgreSQL read every pending row and sorted them all under the lock, on every claim: 54 ms for a
   * batch of 100 out of 50,000 pending, against 0.7 ms in index order. With sorting off the claim index is read in
   * order and the claim stops after its batch. Sorting off makes PostgreSQL reckon the claim's few unavoidable sorts
   * (100 rows each) as very costly, which would start JIT compilation (0.5 s per claim): JIT is off too.
   */
  readonly claimSettings: readonly string[];
  /**
   * Reads a JSON column value returned by a native query.
   * @throws SyntaxError when the stored text is not JSON (a column that holds text, as on SQLite).
   */
  readJson(value: unknown): unknown;
  /** Reads a timestamp column value returned by a native query. */
  readDate(value: unknown): Date | null;
}

/** PostgreSQL's {@link DialectAdapter.pendingById}: `num_nulls()` is opaque to partial-index matching. */
export function postgresPendingById(column: string): string {
  return `num_nulls(${column}) = 1`;
}

const postgresql: DialectAdapter = {
  name: 'postgresql',
  supportsSkipLocked: true,
  commitCanFailAfterApplying: true,
  updatesInWith: true,
  groupsAtOnce: 2,
  notifiesListeners: true,
  locksSagaKeys: true,
  newTokenSql: 'gen_random_uuid()',
  pendingById: postgresPendingById,
  claimSettings: ['set local enable_sort = off', 'set local jit = off'],
  // The pg driver already parses json and jsonb columns: a string here is a JSON string value, not JSON text.
  readJson: (value) => value,
  readDate: (value) => (value == null ? null : value instanceof Date ? value : new Date(value as string)),
};

// MikroORM stores SQLite dates as epoch milliseconds.
const sqlite: DialectAdapter = {
  name: 'sqlite',
  supportsSkipLocked: false,
  commitCanFailAfterApplying: false,
  updatesInWith: false,
  groupsAtOnce: 1,
  notifiesListeners: false,
  locksSagaKeys: false,
  // A version 4 uuid from random pieces; randomblob() is evaluated again for every row an UPDATE touches.
  newTokenSql:
    "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' || substr('89ab', 1 + (random() & 3), 1) || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))",
  pendingById: (column) => `${column} is null`,
  // SQLite's planner reads the claim index in order whatever it knows of the rows.
  claimSettings: [],
  readJson: (value) => (typeof value === 'string' ? JSON.parse(value) : value),
  readDate: (value) =>
    value == null ? null : new Date(typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : (value as number)),
};

/**
 * The adapter for the database behind `em`, recognised by MikroORM's platform class.
 * @throws SagaError `DIALECT_UNSUPPORTED` for any database other than PostgreSQL and SQLite.
 */
export function dialectOf(em: EntityManager): DialectAdapter {
  const names = platformNames(em);
  if (names.includes('PostgreSqlPlatform')) return postgresql;
  if (names.some((name) => /Sqlite|LibSql/i.test(name))) return sqlite;
  throw new SagaError(
    'DIALECT_UNSUPPORTED',
    `mikro-orm-saga supports PostgreSQL and SQLite; this EntityManager runs on ${names[0] ?? 'an unknown platform'}.`,
  );
}
