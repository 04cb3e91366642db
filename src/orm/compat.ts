import { type EntityManager, EventType, type TransactionEventType } from '@mikro-orm/core';
import { COMMIT_SQL, type HeldTransaction, heldContexts, TRANSACTION_ENDED, takeUnsent } from './held-transaction.js';
import { holdPgTransaction, holdsPgTransactions, type KyselyLike } from './pg-held-transaction.js';
import { executeSql, freshFork, logQuery, queryRows } from './sql-execution.js';

export * from './connection-info.js';
export * from './direct-reads.js';
export * from './driver-errors.js';
export * from './metadata.js';
export * from './orm-major.js';
export * from './plain-update.js';
export * from './sql-execution.js';

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
