import type { EntityManager } from '@mikro-orm/core';
import { COMMIT_SQL, type ConnectionHold, type EndHold, type HeldTransaction, TRANSACTION_ENDED, takeUnsent } from '../held-transaction.js';
import { executeSql, logQuery } from '../sql-execution.js';

/*
 * A unit's transaction on MikroORM 6, held by the library on a connection of knex's pool: the library sends BEGIN,
 * COMMIT and ROLLBACK on it itself. A knex transaction builds a knex instance of its own for every transaction,
 * which cost about 13% of the CPU of a message at one caller. On PostgreSQL BEGIN goes with the transaction's first
 * statement, and COMMIT with its only one when asked (`UnitTransaction.commitWithNextStatement`). knex's pool does
 * not hand out a connection whose socket failed again (its validation drops it).
 */

/** The slice of knex's client (MikroORM 6's SQL client) that a unit's transaction uses. */
export interface KnexClient {
  /** knex's name of the dialect: 'postgresql', 'sqlite3', 'better-sqlite3'. */
  readonly dialect: string;
  acquireConnection(): Promise<object>;
  releaseConnection(connection: object): Promise<unknown>;
  query(connection: object, query: unknown): Promise<unknown>;
  transaction(container: (transaction: unknown) => unknown, config?: object): Promise<unknown>;
}

/** `em`'s knex client on MikroORM 6; undefined on 7. */
export function knexClientOf(em: EntityManager): KnexClient | undefined {
  const connection = em.getConnection('write') as { getKnex?(): { client?: Partial<KnexClient> } };
  const client = connection.getKnex?.()?.client;
  return typeof client?.acquireConnection === 'function' && typeof client.query === 'function' ? (client as KnexClient) : undefined;
}

/**
 * MikroORM 6: takes a connection from knex's pool and makes it `em`'s transaction context. On PostgreSQL, BEGIN goes
 * with the first statement sent in the transaction (one round trip less; see {@link heldTransaction}); on SQLite it
 * is sent here. Its `end` closes the context and hands the connection back. Rejects (with the
 * connection already back) when no connection can be had or BEGIN fails.
 */
export async function holdKnexTransaction(em: EntityManager, client: KnexClient): Promise<ConnectionHold> {
  const connection = await client.acquireConnection();
  const held = heldTransaction(client, connection, (sql) => logQuery(em, sql));
  const endHold: EndHold = (broken = false) => {
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
    return { end: endHold, held };
  }
  try {
    await executeSql(em, 'begin', [], 'run');
  } catch (error) {
    endHold();
    throw error;
  }
  return { end: endHold, held };
}

/** knex's SQLite dialects: a unit's BEGIN waits for its first statement there too ({@link queryAfterDeferredBegin}). */
const SQLITE_CLIENTS = new Set(['sqlite3', 'better-sqlite3']);

/**
 * Each pooled connection's client (see {@link heldTransaction}), built the first time it carries a transaction. A
 * WeakMap: the connections are knex's pool's own objects, handed to the library again for later transactions.
 */
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
  const ended = () => Promise.reject(new Error(TRANSACTION_ENDED));
  const transactionClient = Object.create(connectionClientOf(client, connection)) as KnexClient;
  transactionClient.query = (target, query) => queryInHeld(client, transactionClient, held, target, query);
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
  return held;
}

/**
 * Sends `query` on the held transaction's connection (`transactionClient`): after BEGIN when it waited for the first
 * statement, with what waits to go with the next statement before it and, when asked, COMMIT after it; the answer
 * to a COMMIT the unit's commit sends is read into `held.committedAs`. Refused once the transaction has ended.
 */
function queryInHeld(
  client: KnexClient,
  transactionClient: KnexClient,
  held: HeldTransaction,
  target: object,
  query: unknown,
): Promise<unknown> {
  if (!held.open) return Promise.reject(new Error(TRANSACTION_ENDED));
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
}

/** The client of `connection` (see {@link heldTransaction}): like knex's transaction client, bound to it for good. */
function connectionClientOf(client: KnexClient, connection: object): KnexClient {
  let connectionClient = connectionClients.get(connection);
  if (!connectionClient) {
    connectionClient = Object.create(client) as KnexClient & { transacting: boolean };
    connectionClient.transacting = true;
    connectionClient.acquireConnection = async () => connection;
    connectionClient.releaseConnection = async () => undefined;
    connectionClients.set(connection, connectionClient);
  }
  return connectionClient;
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
 * Sends the first statement of a unit's transaction on SQLite (MikroORM 6), whose BEGIN has waited for it: the
 * transaction's only statement, with its COMMIT asked for (`commitWithNextStatement`), goes alone and commits
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
