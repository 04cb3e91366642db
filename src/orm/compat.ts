import {
  ConnectionException,
  DeadlockException,
  DriverException,
  type EntityData,
  type EntityManager,
  type EntityMetadata,
  type EntityProperty,
  EventType,
  helper,
  InvalidFieldNameException,
  LockWaitTimeoutException,
  OptimisticLockError,
  ReferenceKind,
  ServerException,
  TableNotFoundException,
  type TransactionEventType,
  UniqueConstraintViolationException,
  Utils,
} from '@mikro-orm/core';
import { COMMIT_SQL, type HeldTransaction, heldContexts, TRANSACTION_ENDED, takeUnsent } from './held-transaction.js';
import { holdPgTransaction, holdsPgTransactions, type KyselyLike } from './pg-held-transaction.js';

/*
 * The one place that knows MikroORM comes in two majors (6.6 and 7). Everything the library does through the
 * ORM goes through these functions; they detect features and read the installed major once, for the few
 * choices no feature tells apart (the shape of `driverOptions`). No other file of the library checks versions.
 */

/** The major version of the installed `@mikro-orm/core`: 6 or 7. */
export const ORM_MAJOR: 6 | 7 = Number.parseInt(Utils.getORMVersion(), 10) >= 7 ? 7 : 6;

/** The slice of MikroORM's SqlEntityManager (`@mikro-orm/knex` on 6, `@mikro-orm/sql` on 7) the library uses. */
interface SqlExecutor {
  execute<T = unknown>(sql: string, params?: unknown[], method?: 'all' | 'get' | 'run'): Promise<T>;
}

/**
 * Runs one statement with `?` placeholders on `em`, inside its transaction when it has one. MikroORM formats
 * the parameters for the platform (Dates become epoch ms on SQLite) on both majors.
 */
export function executeSql<T>(em: EntityManager, sql: string, params: readonly unknown[], mode: 'all' | 'get' | 'run'): Promise<T> {
  return (em as unknown as SqlExecutor).execute<T>(sql, [...params], mode);
}

/** Runs one statement on `em` and returns the rows. */
export function queryRows<T>(em: EntityManager, sql: string, params: readonly unknown[]): Promise<T[]> {
  return executeSql<T[]>(em, sql, params, 'all');
}

/** Runs one INSERT, UPDATE or DELETE on `em` and returns the number of rows it affected (`affectedRows` on both majors). */
export async function runStatement(em: EntityManager, sql: string, params: readonly unknown[]): Promise<number> {
  return (await executeSql<{ affectedRows: number }>(em, sql, params, 'run')).affectedRows;
}

/**
 * Opens a transaction on `em` (the unit of work's fork). End it with {@link commitUnit}, or with
 * {@link rollbackUnit} after anything failed, a failed commit included. The transaction events MikroORM's own
 * `em.begin()`, `em.commit()` and `em.rollback()` fire reach `em`'s subscribers the same way.
 *
 * On MikroORM 7 with PostgreSQL the library takes the connection from MikroORM's pg pool and holds the transaction
 * itself, as on 6 (`holdPgTransaction`): BEGIN goes with the first statement, COMMIT with the only one when asked,
 * and several statements go as one string. Elsewhere on 7 (SQLite; PostgreSQL with `onCreateConnection`,
 * `onReserveConnection` or `sessionContext: 'connection'`, which run statements as kysely hands out a connection)
 * the transaction's connection is held through kysely's `connection().execute()`, which hands the
 * connection back to the pool however the transaction ends. MikroORM 7's own `em.begin()` opens a kysely
 * `ControlledTransaction` (kysely 0.29.6), which releases its connection only after a BEGIN, COMMIT or ROLLBACK
 * that succeeded: when the connection drops at BEGIN, or at COMMIT (then ROLLBACK fails too), the pool slot leaks
 * and `orm.close()` waits for it forever. pg's pool destroys a released client whose connection failed instead
 * of reusing it.
 *
 * On MikroORM 6 the connection is taken from knex's pool and the library sends BEGIN, COMMIT and ROLLBACK on it
 * itself ({@link heldTransaction}): a knex transaction builds a knex instance of its own for every transaction,
 * which cost about 13% of the CPU of a message at one caller. On PostgreSQL BEGIN goes with the transaction's first
 * statement, and COMMIT with its only one when asked ({@link commitWithNextStatement}). knex's pool does not hand
 * out a connection whose socket failed again (its validation drops it).
 */
export async function beginUnit(em: EntityManager): Promise<void> {
  const kysely = kyselyOf(em);
  const knex = kysely ? undefined : knexClientOf(em);
  // A transaction-scoped session context (MikroORM 7's `sessionContext: 'transaction'`) is applied by em.begin() only.
  if ((!kysely && !knex) || transactionSessionContextOf(em)) return em.begin();
  await dispatchTransactionEvent(em, EventType.beforeTransactionStart);
  connectionHolds.set(em, await (kysely ? holdKyselyTransaction(em, kysely) : holdKnexTransaction(em, knex!)));
  try {
    await dispatchTransactionEvent(em, EventType.afterTransactionStart);
  } catch (error) {
    await rollbackUnit(em).catch(() => undefined);
    throw error;
  }
}

/** MikroORM 7: a transaction the library holds on PostgreSQL ({@link holdPgTransaction}), kysely's elsewhere. */
async function holdKyselyTransaction(em: EntityManager, kysely: KyselyClient): Promise<(broken?: boolean) => void> {
  const client = kysely as unknown as KyselyLike;
  return (holdsPgTransactions(em, client) && (await holdPgTransaction(em, client))) || holdTransaction(em, kysely);
}

/**
 * Takes a connection from the pool, opens a transaction on it as `em`'s transaction context, and keeps the
 * connection until the returned function is called; then kysely hands it back to the pool. Rejects (with the
 * connection already back) when no connection can be had or BEGIN fails.
 */
function holdTransaction(em: EntityManager, kysely: KyselyClient): Promise<() => void> {
  let endHold!: () => void;
  const held = new Promise<void>((resolve) => {
    endHold = resolve;
  });
  return new Promise((began, failed) => {
    kysely
      .connection()
      .execute(async (db) => {
        em.setTransactionContext(await db.startTransaction().execute());
        began(endHold);
        await held;
      })
      .catch(failed);
  });
}

/**
 * MikroORM 6: takes a connection from knex's pool and makes it `em`'s transaction context. On PostgreSQL, BEGIN goes
 * with the first statement sent in the transaction (one round trip less; see {@link heldTransaction}); on SQLite it
 * is sent here. The returned function closes the context and hands the connection back. Rejects (with the
 * connection already back) when no connection can be had or BEGIN fails.
 */
async function holdKnexTransaction(em: EntityManager, client: KnexClient): Promise<(broken?: boolean) => void> {
  const connection = await client.acquireConnection();
  const held = heldTransaction(client, connection, (sql) => logQuery(em, sql));
  const endHold = (broken = false) => {
    held.open = false;
    held.beginPending = false;
    em.resetTransactionContext();
    // knex's pool destroys a connection so marked (its drivers mark one whose socket failed) rather than reuse it.
    if (broken) (connection as { __knex__disposed?: unknown }).__knex__disposed ??= "the unit of work's transaction was not ended";
    void client.releaseConnection(connection);
  };
  em.setTransactionContext(held.context);
  if (held.foldsStatements || SQLITE_CLIENTS.has(client.dialect)) {
    // BEGIN goes with the first statement (PostgreSQL), or just before it (SQLite); it is logged when it is sent.
    held.beginPending = true;
    return endHold;
  }
  try {
    await executeSql(em, 'begin', [], 'run');
  } catch (error) {
    endHold();
    throw error;
  }
  return endHold;
}

/** Logs `sql` in MikroORM's query log (when enabled) as sent on `em`'s connection. */
function logQuery(em: EntityManager, sql: string): void {
  (em.getConnection('write') as unknown as { logQuery(sql: string): void }).logQuery(sql);
}

/**
 * Fires a transaction event for `em`'s subscribers the way MikroORM's own `em.begin()` does; `transaction` for the
 * events after the transaction's end, when `em` no longer holds it.
 */
async function dispatchTransactionEvent(
  em: EntityManager,
  event: TransactionEventType,
  transaction: unknown = em.getTransactionContext(),
): Promise<void> {
  await em.getEventManager().dispatchEvent(event, { em, uow: em.getUnitOfWork(false), transaction: transaction as never });
}

/**
 * Commits the transaction `beginUnit` opened on `em`. When this fails, call {@link rollbackUnit}. Flush `em`
 * first: COMMIT follows without another flush (where MikroORM's own `em.commit()` is used, its flush finds nothing).
 * The beforeTransactionCommit subscribers run first; when one throws, COMMIT is not sent and this rejects with
 * {@link CommitNotSent}. afterTransactionCommit runs once COMMIT was applied: what it throws passes on as is.
 */
export async function commitUnit(em: EntityManager): Promise<void> {
  const endHold = connectionHolds.get(em);
  if (!endHold) return em.commit();
  const context = em.getTransactionContext();
  try {
    await dispatchTransactionEvent(em, EventType.beforeTransactionCommit);
  } catch (error) {
    throw new CommitNotSent(error);
  }
  const held = heldContexts.get(context as object);
  if (held) {
    // A transaction that never sent a statement never sent BEGIN either: there is nothing to commit. One whose
    // statement carried COMMIT (commitWithNextStatement) is committed already.
    held.pending = [];
    if (!held.beginPending && !held.committed) {
      // Its answer is read by the transaction client, whatever text an `onQuery` hook made of the statement.
      held.commitSending = true;
      try {
        await executeSql(em, COMMIT_SQL, [], 'run');
      } finally {
        held.commitSending = false;
      }
    } else if (held.committed && held.foldsStatements) {
      // A COMMIT that went with the statement (PostgreSQL) is logged now, after it (SQLite sent none: autocommit).
      logQuery(em, COMMIT_SQL);
    }
    // PostgreSQL answers COMMIT of a transaction a failed statement aborted with ROLLBACK, not an error.
    if (held.committedAs === 'ROLLBACK') throw new CommitRolledBack();
  } else await (em.getConnection('write') as unknown as { commit(context: unknown): Promise<void> }).commit(context);
  endConnectionHold(em);
  await dispatchTransactionEvent(em, EventType.afterTransactionCommit, context);
}

/** A beforeTransactionCommit subscriber threw: COMMIT was not sent, and the transaction is still open. */
export class CommitNotSent extends Error {
  constructor(override readonly cause: unknown) {
    super('a beforeTransactionCommit subscriber threw; COMMIT was not sent');
  }
}

/**
 * The database ended the transaction with ROLLBACK when it was sent COMMIT (PostgreSQL, after a statement of it
 * failed and the error was caught, by a subscriber for instance): nothing of it was written.
 */
export class CommitRolledBack extends Error {
  constructor() {
    super('the database rolled the transaction back at COMMIT: a statement of it had failed');
  }
}

/**
 * Rolls back the transaction `beginUnit` opened on `em`; its connection goes back to the pool even when this fails.
 * ROLLBACK is sent even when a beforeTransactionRollback subscriber throws (what it threw passes on afterwards):
 * the connection goes back to the pool and carries the next unit, which must not find this transaction still open.
 * On MikroORM 6, when ROLLBACK itself could not be sent or failed, the connection is marked broken and knex's pool
 * validation destroys it instead of handing it out again (closing it ends the transaction on the database).
 */
export async function rollbackUnit(em: EntityManager): Promise<void> {
  let ended = false;
  try {
    const context = em.getTransactionContext();
    const held = heldContexts.get(context as object);
    if (!held && !connectionHolds.has(em)) {
      // Opened by MikroORM's own em.begin() (see beginUnit).
      await em.rollback();
      ended = true;
      return;
    }
    let subscriberError: { readonly error: unknown } | undefined;
    try {
      await dispatchTransactionEvent(em, EventType.beforeTransactionRollback);
    } catch (error) {
      subscriberError = { error };
    }
    // A transaction that never sent a statement never sent BEGIN either: there is nothing to roll back.
    if (held) held.pending = [];
    if (held && !held.beginPending && !held.committed) await executeSql(em, 'rollback', [], 'run');
    // MikroORM 7 (the transaction kysely's connection hold opened): its connection sends ROLLBACK, without events.
    if (!held) await (em.getConnection('write') as unknown as { rollback(context: unknown): Promise<void> }).rollback(context);
    ended = true;
    em.getUnitOfWork(false).clearActionsQueue(); // as em.rollback() does
    // As after COMMIT: the connection goes back before the event, whose statements run outside the transaction.
    endConnectionHold(em);
    if (subscriberError) throw subscriberError.error;
    await dispatchTransactionEvent(em, EventType.afterTransactionRollback, context);
  } finally {
    endConnectionHold(em, !ended);
  }
}

/**
 * Makes `em` (a unit of work's fork) run its statements, its flush included, in the transaction `group` holds
 * open (opened by {@link beginUnit}): MikroORM's UnitOfWork opens no transaction of its own while its
 * EntityManager is in one (6 and 7). Undo with {@link leaveTransaction} before `group` commits or rolls back.
 */
export function joinTransaction(em: EntityManager, group: EntityManager): void {
  em.setTransactionContext(group.getTransactionContext());
}

/** Takes `em` out of the transaction {@link joinTransaction} put it in; the transaction itself goes on. */
export function leaveTransaction(em: EntityManager): void {
  em.resetTransactionContext();
}

/** The savepoint statements of one unit of work inside a group transaction (same SQL on PostgreSQL and SQLite). */
export const SAVEPOINT_SQL = {
  set: (name: string) => `savepoint ${name}`,
  rollbackTo: (name: string) => `rollback to savepoint ${name}`,
} as const;

/** Runs one savepoint statement (`SAVEPOINT_SQL`) in `em`'s transaction. `name` is the library's own, never input. */
export async function runSavepointStatement(em: EntityManager, sql: string): Promise<void> {
  await executeSql(em, sql, [], 'run');
}

/** The slice of kysely (MikroORM 7's SQL client) that {@link beginUnit} uses. */
interface KyselyClient {
  connection(): { execute<T>(callback: (db: KyselyClient) => Promise<T>): Promise<T> };
  startTransaction(): { execute(): Promise<object> };
  /** A transaction kysely begins, and commits when `callback` resolves or rolls back when it throws. */
  transaction(): { execute<T>(callback: (transaction: KyselyClient) => Promise<T>): Promise<T> };
}

/** `em`'s kysely client on MikroORM 7; undefined on 6 (knex). */
function kyselyOf(em: EntityManager): KyselyClient | undefined {
  const client = (em.getConnection('write') as { getClient?(): unknown }).getClient?.() as Partial<KyselyClient> | undefined;
  return typeof client?.startTransaction === 'function' && typeof client.connection === 'function' ? (client as KyselyClient) : undefined;
}

/**
 * For each EntityManager with a transaction `beginUnit` opened (on MikroORM 7 or through knex on 6): lets go of its
 * connection; `broken` (MikroORM 6) when the transaction may still be open on it, so the pool must not reuse it.
 */
const connectionHolds = new WeakMap<EntityManager, (broken?: boolean) => void>();

/**
 * Hands the connection of `em`'s transaction back to the pool; `em` is then outside any transaction. `broken`:
 * neither COMMIT nor ROLLBACK ended the transaction.
 */
function endConnectionHold(em: EntityManager, broken = false): void {
  const endHold = connectionHolds.get(em);
  if (!endHold) return;
  connectionHolds.delete(em);
  // After a failed ROLLBACK, MikroORM still holds the dead transaction: the fork must not run queries on it.
  em.resetTransactionContext();
  endHold(broken);
}

/** The slice of knex's client (MikroORM 6's SQL client) that {@link beginUnit} uses. */
interface KnexClient {
  /** knex's name of the dialect: 'postgresql', 'sqlite3', 'better-sqlite3'. */
  readonly dialect: string;
  acquireConnection(): Promise<object>;
  releaseConnection(connection: object): Promise<unknown>;
  query(connection: object, query: unknown): Promise<unknown>;
  transaction(container: (transaction: unknown) => unknown, config?: object): Promise<unknown>;
}

/** `em`'s knex client on MikroORM 6; undefined on 7. */
function knexClientOf(em: EntityManager): KnexClient | undefined {
  const connection = em.getConnection('write') as { getKnex?(): { client?: Partial<KnexClient> } };
  const client = connection.getKnex?.()?.client;
  return typeof client?.acquireConnection === 'function' && typeof client.query === 'function' ? (client as KnexClient) : undefined;
}

/** The events of a transaction's end: while a subscriber listens to one, COMMIT is never sent with a statement. */
const END_EVENTS = [
  EventType.beforeTransactionCommit,
  EventType.afterTransactionCommit,
  EventType.beforeTransactionRollback,
  EventType.afterTransactionRollback,
] as const;

/**
 * Asks for COMMIT to go with the next statement `em` sends in the transaction `beginUnit` opened, in the same round
 * trip: true when it will. Only where that statement is the transaction's first and its last: MikroORM 6 on
 * PostgreSQL, BEGIN not sent yet (so BEGIN, the statement and COMMIT go as one string), and no subscriber
 * listening to the transaction's end. The caller must send nothing after it but {@link commitUnit} (which then
 * sends nothing), or {@link rollbackUnit} when the statement's result refuses the unit: the statement was all the
 * transaction wrote, so committing a statement that changed no row writes nothing. What the statement throws
 * without a server's error may have come after COMMIT was applied: its outcome is unknown.
 */
export function commitWithNextStatement(em: EntityManager): boolean {
  const held = heldContexts.get(em.getTransactionContext() as object);
  if (!held?.beginPending || held.commitPending) return false;
  const subscribers = [...em.getEventManager().getSubscribers()] as Record<string, unknown>[];
  if (subscribers.some((s) => END_EVENTS.some((event) => typeof s[event] === 'function'))) return false;
  held.commitPending = true;
  return true;
}

/**
 * Whether several statements can go to the database in one round trip as one string ({@link runStatementsTogether})
 * in a transaction {@link beginUnit} opens on `em`: PostgreSQL, whose simple query protocol runs them in order and
 * answers each, on MikroORM 6 (knex) and on MikroORM 7 where the library holds the transaction itself
 * (`holdsPgTransactions`).
 */
export function runsStatementsTogether(em: EntityManager): boolean {
  if (knexClientOf(em)?.dialect === 'postgresql') return true;
  // MikroORM 7: where beginUnit holds the transaction itself (not under a transaction-scoped session context).
  return !transactionSessionContextOf(em) && holdsPgTransactions(em, kyselyOf(em) as KyselyLike | undefined);
}

/** MikroORM 7's transaction-scoped session context of `em` (applied by `em.begin()` only); undefined on 6. */
function transactionSessionContextOf(em: EntityManager): unknown {
  return (em as { getTransactionSessionContext?(): unknown }).getTransactionSessionContext?.();
}

/**
 * Sends `statements` to the database in one round trip, in `em`'s transaction (with what waits to go with the next
 * statement), and answers each with its row count and rows. Only where {@link runsStatementsTogether}. The database
 * runs them in order and stops at the first that fails, whose error this throws: the statements before it ran, so
 * the transaction must be rolled back (or back to a savepoint set before them).
 */
export async function runStatementsTogether(
  em: EntityManager,
  statements: readonly { readonly sql: string; readonly params: readonly unknown[] }[],
): Promise<readonly { readonly affectedRows: number; readonly rows: unknown[] }[]> {
  // MikroORM formats parameters into the text it sends (`Platform.formatQuery`), after the config's `onQuery` hook
  // saw the SQL with its `?` placeholders: the statements go joined with all their parameters, so each value is
  // quoted as it would be sent alone and the string carries no parameters (one simple query), while a hook that
  // rewrites SQL text never sees (nor rewrites) a value, as for any statement sent alone.
  const sql = statements.map((statement) => statement.sql).join(';\n');
  const params = statements.flatMap((statement) => statement.params);
  const held = heldContexts.get(em.getTransactionContext() as object);
  if (held) held.answers = undefined;
  const answers = await executeSql<{ affectedRows: number; rows: unknown[] }[] | { affectedRows: number; rows: unknown[] }>(
    em,
    sql,
    params,
    'run',
  );
  // MikroORM 7's result carries one answer; the held transaction kept them all.
  const list = held?.answers ?? (Array.isArray(answers) ? answers : [answers]);
  if (list.length !== statements.length) {
    throw new Error(`${statements.length} statements sent together were answered with ${list.length} results`);
  }
  return list;
}

/**
 * Runs one statement on `em` (outside any transaction: a fork of its own) with `settings` (statements without
 * parameters or results, such as `set local ...`) in force for it alone, and returns its rows. MikroORM 6 on
 * PostgreSQL sends them and the statement as one string, which PostgreSQL runs as one implicit transaction (one round
 * trip, as the statement alone). MikroORM 7 sends BEGIN, the settings, the statement and COMMIT as one string on a
 * connection the library holds ({@link queryRowsHeld}), or, where kysely must hand out the connection
 * (`holdsPgTransactions`), runs them in a transaction of kysely's (its client), four round trips. Neither fires
 * MikroORM's transaction events. Settings are for PostgreSQL (`DialectAdapter.claimSettings`): with none the
 * statement is sent alone.
 */
export async function queryRowsUnder<T>(
  em: EntityManager,
  settings: readonly string[],
  sql: string,
  params: readonly unknown[],
): Promise<T[]> {
  if (settings.length === 0) return queryRows<T>(em, sql, params);
  if (knexClientOf(em)?.dialect === 'postgresql') {
    const answers = await runStatementsTogether(em, [...settings.map((setting) => ({ sql: setting, params: [] })), { sql, params }]);
    return answers.at(-1)!.rows as T[];
  }
  // Settings are PostgreSQL's, and MikroORM 6 on PostgreSQL sent them above: this is MikroORM 7.
  const kysely = kyselyOf(em)!;
  if (holdsPgTransactions(em, kysely as unknown as KyselyLike)) return queryRowsHeld<T>(em, kysely, settings, sql, params);
  // kysely's own transaction: BEGIN, then COMMIT (ROLLBACK after a failure) sent by its driver, never through
  // MikroORM's `onQuery` hook, so the connection never goes back to the pool inside the transaction (a hook that
  // threw on a COMMIT or ROLLBACK of the library's own did that: break16).
  return kysely.transaction().execute(async (transaction) => {
    // A fork whose statements go to the transaction's connection: MikroORM 7 runs a statement on its transaction context.
    const fork = freshFork(em);
    fork.setTransactionContext(transaction as never);
    try {
      await executeSql(fork, settings.join('; '), [], 'run');
      return await queryRows<T>(fork, sql, params);
    } finally {
      fork.resetTransactionContext();
    }
  });
}

/**
 * {@link queryRowsUnder} on MikroORM 7 with PostgreSQL: BEGIN, `settings`, the statement and COMMIT in one string, on
 * a connection of MikroORM's pg pool the library holds, without transaction events. After a failure ROLLBACK is sent;
 * when that fails too (a hook refused it, the connection dropped) the pool closes the connection instead of handing
 * it out inside the transaction.
 */
async function queryRowsHeld<T>(
  em: EntityManager,
  kysely: KyselyClient,
  settings: readonly string[],
  sql: string,
  params: readonly unknown[],
): Promise<T[]> {
  const fork = freshFork(em);
  const endHold = await holdPgTransaction(fork, kysely as unknown as KyselyLike);
  if (!endHold) return queryRowsUnder(em, settings, sql, params);
  const held = heldContexts.get(fork.getTransactionContext() as object)!;
  let ended = false;
  try {
    held.commitPending = true;
    // As on MikroORM 6: the settings and the statement reach MikroORM (and its `onQuery` hook) as one string.
    const answers = await runStatementsTogether(fork, [...settings.map((setting) => ({ sql: setting, params: [] })), { sql, params }]);
    const rows = answers.at(-1)!.rows as T[];
    // Not folded (a statement with parameters of its own goes alone): COMMIT on its own.
    if (!held.committed) await executeSql(fork, COMMIT_SQL, [], 'run');
    ended = true;
    if (held.committed && held.committedAs !== 'COMMIT') throw new CommitRolledBack();
    return rows;
  } catch (error) {
    if (!ended) ended = await rolledBack(fork);
    throw error;
  } finally {
    endHold(!ended);
  }
}

/** Sends ROLLBACK in `em`'s transaction: whether it was answered. */
function rolledBack(em: EntityManager): Promise<boolean> {
  return executeSql(em, 'rollback', [], 'run').then(
    () => true,
    () => false,
  );
}

/** Whether `em`'s transaction ended with the statement that carried its COMMIT ({@link commitWithNextStatement}). */
export function committedWithStatement(em: EntityManager): boolean {
  return heldContexts.get(em.getTransactionContext() as object)?.committed === true;
}

/** A statement as knex hands it to its client: SQL and, when the statement was not formatted by MikroORM, bindings. */
interface KnexQuery {
  readonly sql: string;
  readonly bindings?: readonly unknown[];
  response?: unknown;
}

/**
 * Sends `query` with `prefix` (BEGIN, SAVEPOINT, statements without parameters or results the caller needs) before
 * it in one round trip (PostgreSQL's simple query protocol runs several statements of one string in order, and
 * stops at the first that fails), and COMMIT after it when `commit`. MikroORM formats parameters into the SQL it
 * sends; a statement with bindings (the extended protocol, one statement only) gets the prefix on its own first,
 * and no COMMIT. The response knex passes on is the statement's own, as if sent alone; `committedAs` is COMMIT's
 * command tag when COMMIT went with it.
 */
async function queryAfterPrefix(
  client: KnexClient,
  transactionClient: KnexClient,
  target: object,
  query: unknown,
  prefix: readonly string[],
  commit: boolean,
): Promise<{ readonly sent: unknown; readonly committedAs?: string }> {
  const statement: KnexQuery = typeof query === 'string' ? { sql: query } : (query as KnexQuery);
  if (statement.bindings && statement.bindings.length > 0) {
    if (prefix.length > 0) await client.query.call(transactionClient, target, prefix.join('; '));
    return { sent: await client.query.call(transactionClient, target, query) };
  }
  // COMMIT starts a line of its own: a statement ending in a line comment (an `onQuery` hook's tag) would otherwise
  // turn it into part of the comment, and the transaction would stay open on the pooled connection.
  const sql = [...prefix, statement.sql].join('; ') + (commit ? `\n; ${COMMIT_SQL}` : '');
  const sent = (await client.query.call(transactionClient, target, { ...statement, sql })) as KnexQuery;
  // pg answers a string of several statements with one result each: the prefix's first, COMMIT's last.
  const responses = sent.response as { command?: string }[];
  const committedAs = commit ? responses.at(-1)?.command : undefined;
  if (commit && committedAs !== 'COMMIT' && committedAs !== 'ROLLBACK') {
    // The last statement run was not COMMIT: the transaction's state is unknown; it is not taken for ended.
    throw new Error(`the statement sent with COMMIT was answered with ${committedAs ?? 'nothing'} last, not COMMIT`);
  }
  const own = responses.slice(prefix.length, commit ? -1 : undefined);
  sent.response = own.length === 1 ? own[0] : own;
  return { sent, committedAs };
}

/**
 * Sends `sql` (a statement of the library's own without parameters, whose result is not needed: SAVEPOINT, a lock
 * bound) in `em`'s transaction: on MikroORM 6 with PostgreSQL, with the next statement sent in it, in the same round
 * trip; elsewhere now. Failing there, it fails that statement. A statement still waiting to go can be taken back
 * ({@link withdrawUnsent}); one still waiting at COMMIT or ROLLBACK is dropped.
 */
export async function sendWithNextStatement(em: EntityManager, sql: string): Promise<void> {
  const held = heldContexts.get(em.getTransactionContext() as object);
  if (!held?.foldsStatements) return void (await executeSql(em, sql, [], 'run'));
  // MikroORM's query log shows it as if sent on its own, when it is sent (`takeUnsent`).
  held.pending.push(sql);
}

/** Whether a statement given to {@link sendWithNextStatement} in `em`'s transaction waits for the next one. */
export function foldsStatements(em: EntityManager): boolean {
  return heldContexts.get(em.getTransactionContext() as object)?.foldsStatements === true;
}

/** Takes back `sql` if {@link sendWithNextStatement} still holds it unsent; true when it did (it never ran). */
export function withdrawUnsent(em: EntityManager, sql: string): boolean {
  const held = heldContexts.get(em.getTransactionContext() as object);
  const index = held?.pending.lastIndexOf(sql) ?? -1;
  if (index < 0) return false;
  held!.pending.splice(index, 1);
  return true;
}

/** knex's SQLite dialects: a unit's BEGIN waits for its first statement there too ({@link queryAfterDeferredBegin}). */
const SQLITE_CLIENTS = new Set(['sqlite3', 'better-sqlite3']);

/**
 * Sends the first statement of a unit's transaction on SQLite (MikroORM 6), whose BEGIN has waited for it: the
 * transaction's only statement, with its COMMIT asked for ({@link commitWithNextStatement}), goes alone and commits
 * itself (SQLite runs a statement outside a transaction as one of its own: all of it or nothing), two statements
 * less; a SAVEPOINT opens the transaction itself (SQLite begins one for a SAVEPOINT outside a transaction, as
 * BEGIN DEFERRED does); any other statement goes after BEGIN. SQLite's drivers run one statement per call.
 * A statement that went alone and failed began nothing: BEGIN stays pending, so no ROLLBACK is sent for it.
 */
async function queryAfterDeferredBegin(
  client: KnexClient,
  transactionClient: KnexClient,
  target: object,
  query: unknown,
  held: HeldTransaction,
): Promise<unknown> {
  const send = () => client.query.call(transactionClient, target, query);
  if (held.commitPending) {
    held.commitPending = false;
    const answer = await send();
    held.beginPending = false;
    held.committed = true;
    held.committedAs = 'COMMIT';
    return answer;
  }
  const sql = typeof query === 'string' ? query : (query as KnexQuery).sql;
  const opens = /^\s*savepoint\s/i.test(sql);
  held.beginPending = false;
  try {
    if (opens) return await send();
    held.log('begin');
    await client.query.call(transactionClient, target, 'begin');
  } catch (error) {
    held.beginPending = true;
    throw error;
  }
  return send();
}

/** Each pooled connection's client (see {@link heldTransaction}), built the first time it carries a transaction. */
const connectionClients = new WeakMap<object, KnexClient & { transacting: boolean }>();

/**
 * A transaction context for a unit's transaction on `connection` (MikroORM 6). knex runs a statement on the
 * connection of the client a query is given with `transacting(context)`: here a client like knex's own transaction
 * client, which hands out only `connection` and never releases it, made once per connection instead of once per
 * transaction; each transaction gets a thin client of its own on top of it, which refuses statements once that
 * transaction has ended. The connection goes back to the pool and carries other units' transactions later: a
 * fork that kept an ended transaction's context must not write outside it, nor into the transaction of another
 * unit that now holds the connection (as knex's own transaction refuses them once completed). A nested
 * `em.transactional()` (a subscriber's) opens a savepoint on it, as under knex's own transaction, while the
 * transaction is open.
 */
function heldTransaction(client: KnexClient, connection: object, log: (sql: string) => void): HeldTransaction {
  let connectionClient = connectionClients.get(connection);
  if (!connectionClient) {
    connectionClient = Object.create(client) as KnexClient & { transacting: boolean };
    connectionClient.transacting = true;
    connectionClient.acquireConnection = async () => connection;
    connectionClient.releaseConnection = async () => undefined;
    connectionClients.set(connection, connectionClient);
  }
  const ended = () => Promise.reject(new Error(TRANSACTION_ENDED));
  const transactionClient = Object.create(connectionClient) as KnexClient;
  transactionClient.query = (target, query) => {
    if (!held.open) return ended();
    if (held.beginPending && !held.foldsStatements) return queryAfterDeferredBegin(client, transactionClient, target, query, held);
    let sent: Promise<unknown>;
    const prefix = takeUnsent(held);
    if (prefix.length > 0) {
      const commit = held.commitPending;
      held.commitPending = false;
      sent = queryAfterPrefix(client, transactionClient, target, query, prefix, commit).then(({ sent, committedAs }) => {
        if (committedAs !== undefined) {
          held.committed = true;
          held.committedAs = committedAs;
        }
        return sent;
      });
    } else sent = client.query.call(transactionClient, target, query);
    if (!held.commitSending) return sent;
    held.commitSending = false;
    return sent.then((answer) => {
      // A single result, or one per statement when a hook added some: COMMIT's is the last.
      const response = (answer as { response?: { command?: string } | { command?: string }[] } | null)?.response;
      held.committedAs = (Array.isArray(response) ? response.at(-1) : response)?.command;
      return answer;
    });
  };
  const context = {
    client: transactionClient,
    // What knex's own `trx.transaction(container?, config?)` does (MikroORM calls it with no container).
    transaction: (container: ((transaction: unknown) => unknown) | null | undefined, config?: object) => {
      if (!held.open) return ended();
      const open = () =>
        container
          ? transactionClient.transaction(container, config)
          : new Promise((resolve, reject) => {
              transactionClient.transaction(resolve, config).catch(reject);
            });
      // knex's nested transaction sends SAVEPOINT and its statements through a client of its own, not `query`
      // above: BEGIN (and what waits to go with the next statement) must be in force first (a SAVEPOINT outside a
      // transaction block fails, and its statements would be committed on their own).
      const prefix = takeUnsent(held);
      if (prefix.length === 0) return open();
      return client.query.call(transactionClient, connection, prefix.join('; ')).then(open);
    },
  };
  const held: HeldTransaction = {
    context,
    open: true,
    foldsStatements: client.dialect === 'postgresql',
    log,
    beginPending: false,
    pending: [],
    commitPending: false,
    committed: false,
    commitSending: false,
  };
  heldContexts.set(context, held);
  return held;
}

/** A fresh fork of `em` with an empty identity map, outside any transaction `em` may have open. */
export function freshFork(em: EntityManager): EntityManager {
  return em.fork({ clear: true });
}

/**
 * Runs `work` in one transaction on a fresh fork of `em` (MikroORM's `em.transactional`): committed when `work`
 * resolves, rolled back when it throws (the error passes on).
 */
export function inFreshTransaction<T>(em: EntityManager, work: (tx: EntityManager) => Promise<T>): Promise<T> {
  return freshFork(em).transactional(work);
}

/** An error the database refused because of a unique constraint or index. */
export function isUniqueViolation(error: unknown): boolean {
  return error instanceof UniqueConstraintViolationException;
}

/** A conflict with a concurrent writer that a retry on fresh state resolves: optimistic lock, deadlock, lock wait. */
export function isConcurrencyConflict(error: unknown): boolean {
  return error instanceof OptimisticLockError || error instanceof DeadlockException || isLockWait(error);
}

/** What kind of conflict a retried {@link isConcurrencyConflict} error was, for the message that ends the retries. */
export function conflictKind(error: unknown): 'lock wait' | 'deadlock' | 'version' {
  if (isLockWait(error)) return 'lock wait';
  if (error instanceof DeadlockException) return 'deadlock';
  return 'version';
}

/** The connection failed, or the database stayed locked past the busy timeout. */
export function isConnectionOrLockError(error: unknown): boolean {
  return error instanceof ConnectionException || error instanceof DeadlockException || isLockWait(error);
}

/**
 * A lock was not granted in time: SQLite's file stayed locked past the busy timeout (MikroORM's
 * `LockWaitTimeoutException`), or a PostgreSQL row or table lock past `lock_timeout` (SQLSTATE 55P03
 * `lock_not_available`, which neither major's exception converter maps: a plain `DriverException`).
 */
export function isLockWait(error: unknown): boolean {
  return error instanceof LockWaitTimeoutException || (error instanceof DriverException && error.code === PG_LOCK_NOT_AVAILABLE);
}

const PG_LOCK_NOT_AVAILABLE = '55P03';

/** The connection to the database failed (refused, dropped, unknown host): MikroORM's `ConnectionException`. */
export function isConnectionError(error: unknown): boolean {
  return error instanceof ConnectionException;
}

/**
 * No pooled connection could be had in time: knex's `KnexTimeoutError` (MikroORM 6) or pg-pool's plain `Error`
 * (MikroORM 7). MikroORM wraps either in a `DriverException` with no code that keeps only the message, so the
 * message is all that tells them apart.
 */
export function isPoolTimeout(error: Error): boolean {
  if (error.name === 'KnexTimeoutError') return true;
  const cause = (error as { cause?: unknown }).cause;
  return [error, cause].some((e) => e instanceof Error && POOL_TIMEOUT_MESSAGES.some((start) => e.message.startsWith(start)));
}

/** How knex and pg-pool begin the message of an acquire timeout (every connection in use for the whole wait). */
const POOL_TIMEOUT_MESSAGES = ['Knex: Timeout acquiring a connection', 'timeout exceeded when trying to connect'];

/** The table a statement named does not exist. */
export function isTableNotFound(error: unknown): boolean {
  return error instanceof TableNotFoundException;
}

/** A column a statement named does not exist. */
export function isInvalidFieldName(error: unknown): boolean {
  return error instanceof InvalidFieldNameException;
}

/** Any error MikroORM raised for the driver (its `code` is the SQLSTATE, socket or SQLite code). */
export function isDriverException(error: unknown): error is DriverException {
  return error instanceof DriverException;
}

/** A driver error the server answered with (a statement or row problem), as opposed to a connection failure. */
/**
 * The database server refused the statement with this error (a SQLSTATE, or an exception MikroORM classes as the
 * server's), so a COMMIT it refused was not applied. Not the codes that end a session or report the server's own
 * failure (08 connection exception, 57P01-57P05 shutdowns and session ends, 58 system error, XX internal error):
 * COMMIT may have been applied before those came, as when no answer came at all. A canceled statement (57014,
 * `statement_timeout` or a cancel request) is a refusal: PostgreSQL reports it only for what it did not commit.
 */
export function isRefusedByServer(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^(?:08|57P|58|XX)/.test(code)) return false;
  if (error instanceof ServerException) return true;
  // A PostgreSQL SQLSTATE (its classes start with a digit, or are F0, HV, P0), never a socket's E-code.
  return typeof code === 'string' && /^(?:[0-9][0-9A-Z]|F0|HV|P0)[0-9A-Z]{3}$/.test(code);
}

/**
 * pg refused to send the statement: its client's connection had already failed or was closed ("Client has
 * encountered a connection error and is not queryable", "Client was closed and is not queryable"). Nothing of the
 * statement, nor a COMMIT sent with it, reached the server. The message is all that tells it (no code), on the
 * error or on the driver error MikroORM wrapped it in.
 */
export function isNeverSent(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    if (NOT_QUERYABLE.test(e.message)) return true;
  }
  return false;
}

const NOT_QUERYABLE = /Client (?:has encountered a connection error|was closed) and is not queryable/;

export function isServerException(error: unknown): boolean {
  return error instanceof ServerException;
}

/** An optimistic-lock failure MikroORM raised itself. */
export function isOptimisticLockError(error: unknown): boolean {
  return error instanceof OptimisticLockError;
}

/** Turns a raw driver error (BEGIN and COMMIT can surface unconverted) into MikroORM's exception class. */
export function convertDriverError(em: EntityManager, error: Error): unknown {
  return em.getDriver().convertException(error);
}

/** Whether the database answers a trivial query. */
export async function isReachable(em: EntityManager): Promise<boolean> {
  return (await em.getConnection().checkConnection()).ok;
}

/** The configured database file (SQLite) or name. */
export function configuredDbName(em: EntityManager): string | undefined {
  return em.config.get('dbName');
}

/** Host, port and database name of a server connection, from the ORM config: never the user or the password. */
export function serverAddress(em: EntityManager): { host?: string; port?: number; database?: string } {
  const { host, port, database } = em.getConnection().getConnectionOptions();
  return { host, port, database };
}

/** Class names along the prototype chain of `em`'s platform, most specific first. */
export function platformNames(em: EntityManager): string[] {
  const names: string[] = [];
  for (let proto = Object.getPrototypeOf(em.getPlatform()); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    names.push(proto.constructor.name);
  }
  return names;
}

/**
 * The metadata MikroORM holds for the class `entity`, or undefined when it is not registered (or MikroORM knows
 * another class of that name, from another installed copy). 6 looks the class up by its name, 7 by the class.
 */
export function entityMetadata(em: EntityManager, entity: { name: string }): EntityMetadata | undefined {
  const meta: EntityMetadata | undefined = em.getMetadata().find(entity as never);
  return meta?.class === entity ? meta : undefined;
}

/** Every entity MikroORM knows, abstract ones included. */
export function allEntityMetadata(em: EntityManager): EntityMetadata[] {
  // A plain record keyed by class name on 6, a Map keyed by class on 7.
  const all: Record<string, EntityMetadata> | Map<unknown, EntityMetadata> = em.getMetadata().getAll();
  return all instanceof Map ? [...all.values()] : Object.values(all);
}

/** The name MikroORM's driver and entity factory take for an entity: its class name on 6, its class on 7. */
function entityNameOf(meta: EntityMetadata): never {
  return (ORM_MAJOR === 6 ? meta.className : meta.class) as never;
}

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

/** Whether `meta` is part of a table-per-type inheritance tree (MikroORM 7's `inheritance: 'tpt'`). */
function usesTablePerType(meta: EntityMetadata): boolean {
  const tpt = (m: EntityMetadata | undefined) => (m as { inheritanceType?: string } | undefined)?.inheritanceType === 'tpt';
  return tpt(meta) || tpt(meta.root) || (meta as { tptParent?: EntityMetadata }).tptParent !== undefined;
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

/** `name` quoted for the platform (backticks on SQLite, double quotes on PostgreSQL). */
export function quoteName(em: EntityManager, name: string): string {
  return em.getPlatform().quoteIdentifier(name);
}

/** The entity's table, quoted and schema-qualified. */
export function tableOf(em: EntityManager, meta: EntityMetadata): string {
  return quoteName(em, meta.schema ? `${meta.schema}.${meta.tableName}` : meta.tableName);
}

/** The quoted column of `property`. */
export function columnOf(em: EntityManager, meta: EntityMetadata, property: string): string {
  return quoteName(em, meta.properties[property as never]!.fieldNames[0]!);
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

/** Settings of node-postgres connections that {@link pgConnectionOptions} passes through. */
export interface PgConnectionSettings {
  /** `application_name`, shown in `pg_stat_activity`. */
  readonly applicationName?: string;
  /** How long a new connection may take before it fails, ms (pg's `connectionTimeoutMillis`; default: no limit). */
  readonly connectionTimeoutMs?: number;
  /** Server settings sent at connect, e.g. `-c lock_timeout=50` (pg's `options`). */
  readonly serverOptions?: string;
}

/**
 * MikroORM `driverOptions` that give node-postgres connections these settings. MikroORM 6 hands
 * `driverOptions.connection` to knex; 7 spreads `driverOptions` into pg's Pool options. The other major's shape
 * is ignored by 6 and breaks connecting on 7, so no feature tells them apart before use.
 */
export function pgConnectionOptions(settings: PgConnectionSettings): Record<string, unknown> {
  const connection: Record<string, unknown> = {};
  if (settings.applicationName !== undefined) connection.application_name = settings.applicationName;
  if (settings.connectionTimeoutMs !== undefined) connection.connectionTimeoutMillis = settings.connectionTimeoutMs;
  if (settings.serverOptions !== undefined) connection.options = settings.serverOptions;
  return ORM_MAJOR === 6 ? { connection } : connection;
}
